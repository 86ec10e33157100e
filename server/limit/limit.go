// Package limit is the gateway's one token bucket and the session count kept
// beside it: what a client key (max_sessions, connect_rate), a deployment
// (max_parallel_requests, rpm) and the per-instance fallback of the Redis
// limits all hold. It decides and counts; the callers word the refusal.
//
// A bucket holds up to one second's worth of tokens (at least one), so that
// a limit of N a second lets N connects through at once and no more.
package limit

import (
	"sync"
	"time"
)

// Bucket is a token bucket; its rate comes with each Take, since limits
// change on a reload and a key or deployment keeps its bucket across one.
type Bucket struct {
	tokens float64
	at     time.Time
}

// NewBucket is a full bucket for rate tokens a second.
func NewBucket(rate float64, now time.Time) Bucket { return Bucket{tokens: max(rate, 1), at: now} }

// Take takes one token, refilled at rate a second since the last Take, or
// says how long until one is there. A rate of 0 or less is no limit.
func (b *Bucket) Take(rate float64, now time.Time) (ok bool, wait time.Duration) {
	if rate <= 0 {
		return true, 0
	}
	b.tokens = min(b.tokens+now.Sub(b.at).Seconds()*rate, max(rate, 1))
	b.at = now
	if b.tokens < 1 {
		return false, time.Duration((1 - b.tokens) / rate * float64(time.Second))
	}
	b.tokens--
	return true, 0
}

// RetryAfter is a wait as a Retry-After value: whole seconds, rounded up
// past the wait (at least 1).
func RetryAfter(wait time.Duration) int { return int(wait/time.Second) + 1 }

// Verdict is the outcome of a reservation.
type Verdict int

const (
	Admitted  Verdict = iota
	Full              // the session cap is reached
	Throttled         // the bucket is empty: Wait says for how long
)

// Use is what one holder (a key, a deployment) has reserved: its live
// sessions and its connect bucket.
type Use struct {
	Sessions int
	Bucket
}

// NewUse is an unused holder whose bucket is full for rate.
func NewUse(rate float64, now time.Time) *Use { return &Use{Bucket: NewBucket(rate, now)} }

// Reserve takes a session slot and a token: the cap is checked first (a
// full holder spends no token), then the bucket. maxSessions 0 is no cap.
func (u *Use) Reserve(maxSessions int, rate float64, now time.Time) (Verdict, time.Duration) {
	if maxSessions > 0 && u.Sessions >= maxSessions {
		return Full, 0
	}
	if ok, wait := u.Take(rate, now); !ok {
		return Throttled, wait
	}
	u.Sessions++
	return Admitted, 0
}

// Release gives back a session slot.
func (u *Use) Release() {
	if u.Sessions > 0 {
		u.Sessions--
	}
}

// Uses are holders by name under one lock. Entries stay once made: there is
// one per configured name, and dropping one would refill its bucket early.
type Uses struct {
	mu sync.Mutex
	m  map[string]*Use
}

// Reserve reserves a session for name (see Use.Reserve).
func (t *Uses) Reserve(name string, maxSessions int, rate float64, now time.Time) (Verdict, time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.get(name, rate, now).Reserve(maxSessions, rate, now)
}

// Take takes a token from name's bucket only, counting no session.
func (t *Uses) Take(name string, rate float64, now time.Time) (bool, time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.get(name, rate, now).Take(rate, now)
}

// Release gives back a session of name.
func (t *Uses) Release(name string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if u := t.m[name]; u != nil {
		u.Release()
	}
}

func (t *Uses) get(name string, rate float64, now time.Time) *Use {
	if t.m == nil {
		t.m = map[string]*Use{}
	}
	u := t.m[name]
	if u == nil {
		u = NewUse(rate, now)
		t.m[name] = u
	}
	return u
}
