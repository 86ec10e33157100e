package cluster

import (
	"math"
	"slices"
)

// The arithmetic of an outage: how a key's limit is split between the
// instances while none of them can ask Redis.
//
// Each instance takes a part by its rank in the set of live instances it
// last learned from Redis (ids sorted): limit ÷ n each, and the first
// limit mod n ranks one more, so the parts sum to the limit exactly, an
// instance may get 0 (limit 2 over 3 instances: 1, 1, 0), and an instance
// that counts more instances than there are (a dead one whose lease had not
// yet run out, a CLUSTER_INSTANCES above the live count) only ever gets
// less: Share never grows with n or with rank. That is what keeps the sum
// at or under the limit when the instances' views differ, as long as every
// view holds every instance that admits (see Limiter: an instance admits
// alone only once every other instance has seen it in Redis).

// Share is the part of limit that the instance of the given rank among n
// takes: 0 when rank is outside 0..n-1 (the instance is not in the set it
// learned) or there is nothing to split.
func Share(limit, n, rank int) int {
	if limit <= 0 || n <= 0 || rank < 0 || rank >= n {
		return 0
	}
	s := limit / n
	if rank < limit%n {
		s++
	}
	return s
}

// RateShare is the part of a connect rate (a second) that the instance of
// the given rank takes. The bucket of a rate holds max(rate, 1) tokens,
// so a rate is split as its burst is: the whole tokens B = max(floor(rate),
// 1) by Share, each instance getting rate × its tokens ÷ B. The parts sum
// to the rate and their buckets to the whole bucket (rate 2 over 3
// instances: 1, 1 and 0 a second, not 0.67 each with a bucket of 1 each,
// which would let 3 through at once).
func RateShare(rate float64, n, rank int) float64 {
	if rate <= 0 {
		return 0
	}
	b := max(int(math.Min(math.Floor(rate), math.MaxInt32)), 1)
	return rate * float64(Share(b, n, rank)) / float64(b)
}

// view is what an instance last learned from Redis about who shares it:
// the live instances (lease not run out), sorted, with this instance's rank
// among them, each one's lease end and last sync (Redis-clock ms), and
// Redis's clock when it was read.
type view struct {
	members  []string
	rank     int // -1: this instance is not among them
	leaseEnd map[string]int64
	synced   map[string]int64
	now      int64
}

// newView sorts the members and finds self among them.
func newView(self string, now int64, leaseEnd, synced map[string]int64) *view {
	v := &view{leaseEnd: leaseEnd, synced: synced, now: now}
	for id := range leaseEnd {
		v.members = append(v.members, id)
	}
	slices.Sort(v.members)
	v.rank = slices.Index(v.members, self)
	return v
}

// seenSince reports whether every other live instance has synced since
// t (Redis ms), and so has read a lease set that holds every instance
// that had joined by t.
func (v *view) seenSince(self string, t int64) bool {
	for _, id := range v.members {
		if id != self && v.synced[id] < t {
			return false
		}
	}
	return true
}

// backSince reports whether every instance of before (the view an outage
// froze) is either back in v, synced since t, or gone for good: its lease
// as before knew it has run out by v's clock (a Redis restarted empty holds
// no lease of an instance that is still alone, deciding by its share).
func (v *view) backSince(before *view, self string, t int64) bool {
	if !v.seenSince(self, t) {
		return false
	}
	if before == nil {
		return true
	}
	for _, id := range before.members {
		if _, live := v.leaseEnd[id]; !live && id != self && before.leaseEnd[id] >= v.now {
			return false
		}
	}
	return true
}

// outageShare is the view an outage decides with: the instances counted
// (at least floor, CLUSTER_INSTANCES) and this instance's rank, or ok false
// when this instance may take no part (it never learned a view, or not
// every other instance had seen it yet).
type outageShare struct {
	n, rank int
	ok      bool
}

func (s outageShare) sessions(limit int) int { return Share(limit, s.n, s.rank) }
func (s outageShare) rate(r float64) float64 { return RateShare(r, s.n, s.rank) }

// sessionsCap is how many of a key's sessions this instance may hold while
// it decides alone: its share of the limit, and no more than the sessions
// it held at its last word with Redis about the key plus its share of
// what was free then (so that an instance holding more than its share when
// Redis went away does not let the others fill theirs on top: its own
// sessions count against its share). own and total are from that last
// word; known false when there was none.
func (s outageShare) sessionsCap(limit int, own, total int64, known bool) int {
	if !s.ok {
		return 0
	}
	c := s.sessions(limit)
	if known {
		free := max(int64(limit)-total, 0)
		c = min(c, int(own)+s.sessions(int(free)))
	}
	return c
}
