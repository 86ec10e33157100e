package limit

import "time"

// Refusal says why a key's connect was refused: Full (Limit is the session
// cap that held) or Throttled (its connect rate); Retry-After in seconds.
// Note, when set, says more to the client (why an instance deciding alone
// admitted no more).
type Refusal struct {
	Verdict    Verdict
	Limit      int
	RetryAfter int
	Note       string
}

// Admitter applies the per-key limits (max_sessions, connect_rate): Local
// on one instance, cluster.Limiter across the instances sharing a Redis.
// maxSessions or rate 0 means no such limit; rate is connects a second.
type Admitter interface {
	// Admit reserves a session for the key named name, or refuses it.
	// When Waits says so it may wait on I/O, and is then called off the
	// poller (a goroutine of its own).
	Admit(name string, maxSessions int, rate float64) *Refusal
	// Waits reports whether Admit with these limits may wait on I/O.
	Waits(maxSessions int, rate float64) bool
	// Release gives back a session Admit reserved; it never waits.
	Release(name string)
	// Close lets go of what the Admitter holds (its Redis lease).
	Close()
}

// Local is the Admitter of a gateway on its own.
type Local struct {
	uses Uses
	now  func() time.Time
}

// NewLocal is a Local Admitter on the clock now (time.Now when nil).
func NewLocal(now func() time.Time) *Local {
	if now == nil {
		now = time.Now
	}
	return &Local{now: now}
}

// Admit implements Admitter.
func (l *Local) Admit(name string, maxSessions int, rate float64) *Refusal {
	v, wait := l.uses.Reserve(name, maxSessions, rate, l.now())
	return Reserved(v, wait, maxSessions)
}

// Reserved words a reservation's outcome as an Admitter's refusal (nil when
// admitted).
func Reserved(v Verdict, wait time.Duration, maxSessions int) *Refusal {
	switch v {
	case Full:
		return &Refusal{Verdict: Full, Limit: maxSessions, RetryAfter: 1}
	case Throttled:
		return &Refusal{Verdict: Throttled, RetryAfter: RetryAfter(wait)}
	}
	return nil
}

// Waits implements Admitter: a Local Admitter never waits.
func (*Local) Waits(int, float64) bool { return false }

// Release implements Admitter.
func (l *Local) Release(name string) { l.uses.Release(name) }

// Close implements Admitter.
func (*Local) Close() {}
