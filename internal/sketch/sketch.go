// Package sketch summarises durations in a fixed size, so that a count of
// them costs the same memory whatever the traffic. A turns.Tracker keeps one
// per session for its times to first audio, the balance.Balancer one per
// deployment and minute for the status page: it sits below both, so that
// the balancer need not import the turn clock for it.
package sketch

import (
	"math"
	"time"
)

// Durations summarises durations (times to first audio) in a fixed size: a
// histogram of 64 logarithmic buckets, four per doubling from 1 ms (the
// last one open-ended, from 32.8 s), with the exact smallest and largest
// value. A session keeps one instead of a list of its turns, so an hour of
// turns costs what one turn does (136 bytes); the status page keeps one per
// deployment and minute.
//
// A percentile is the geometric middle of its bucket, clamped to the exact
// extremes: within 9 % of the true value, and exact when every value is the
// same (a session of one turn).
type Durations struct {
	counts   [sketchBuckets]uint16 // saturate at 65,535 per bucket
	n        uint32
	min, max time.Duration
}

const (
	sketchBuckets = 64
	perDoubling   = 4
)

// bucket is the index of d's bucket.
func bucket(d time.Duration) int {
	ms := float64(d) / float64(time.Millisecond)
	if ms < 1 {
		return 0
	}
	return min(int(math.Log2(ms)*perDoubling), sketchBuckets-1)
}

// Add counts d.
func (s *Durations) Add(d time.Duration) {
	d = max(d, 0)
	if s.n == 0 || d < s.min {
		s.min = d
	}
	if s.n == 0 || d > s.max {
		s.max = d
	}
	s.n++
	if i := bucket(d); s.counts[i] < math.MaxUint16 {
		s.counts[i]++
	}
}

// Merge adds o's counts to s.
func (s *Durations) Merge(o *Durations) {
	if o.n == 0 {
		return
	}
	if s.n == 0 || o.min < s.min {
		s.min = o.min
	}
	if s.n == 0 || o.max > s.max {
		s.max = o.max
	}
	s.n += o.n
	for i, c := range o.counts {
		s.counts[i] = uint16(min(int(s.counts[i])+int(c), math.MaxUint16))
	}
}

// Count is how many durations were added.
func (s *Durations) Count() int { return int(s.n) }

// Quantile is the q-quantile (0 < q ≤ 1) of what was added; 0 when nothing
// was.
func (s *Durations) Quantile(q float64) time.Duration {
	if s.n == 0 {
		return 0
	}
	total := 0
	for _, c := range s.counts {
		total += int(c)
	}
	rank := max(int(math.Ceil(q*float64(total))), 1)
	if rank >= total {
		return s.max
	}
	seen := 0
	for i, c := range s.counts {
		if seen += int(c); seen >= rank {
			mid := math.Exp2((float64(i) + 0.5) / perDoubling) // ms
			if i == 0 {
				mid = 1
			}
			d := time.Duration(mid * float64(time.Millisecond))
			return min(max(d, s.min), s.max)
		}
	}
	return s.max
}
