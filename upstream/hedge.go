package upstream

import (
	"slices"
	"time"

	"github.com/gobwas/ws"

	"rtgate/poller"
)

// The hedge: a miss takes whichever lands first, its own dial or a warm
// socket of its key. A client whose connect missed the pool dials fresh,
// and while it waits the pool's own warm-up dials (started earlier, by the
// first misses of a burst) may land before it; without the hedge such a
// socket waited in the pool for the next client while this one waited on
// its slower dial. With it, a socket that lands while misses wait goes to
// the one waiting longest, and that miss's own dial, when it completes,
// goes into the pool in its place: never wasted, never closed while a
// client could use it. The total number of dials is the same either way;
// the pool can only make a connect faster, never fail it (the own dial
// keeps running until a warm socket is actually taken).

// Miss is a client's connect that missed the pool and dials its own
// upstream: at once, or once its claim on a pool dial in flight lapses
// (Pool.claimLocked, DialNow). Landed signals when a warm socket of its key
// may be there to Take; Give hands the own dial's socket to the pool when
// a warm one was taken instead; Done, called once the client no longer
// waits on the pool (its own dial ended, or it took a warm socket), ends
// the client dial the yield rule counts (ClientDialing). All methods are safe
// on a nil Miss.
type Miss struct {
	p      *Pool
	kp     *keyPool
	landed chan struct{} // 1-buffered: one pending signal is enough
	done   bool          // guarded by Pool.mu

	// A claim (Pool.claimLocked), guarded by Pool.mu: claimed while the miss
	// waits on a pool dial in flight; dialNow is closed when it should
	// dial its own (at once when it claimed nothing); late is the timer
	// that checks on the claim.
	claimed  bool
	dialNow  chan struct{}
	late     Timer
	claimEnd time.Time // claimLimit: the claim lapses then at the latest
}

// newMissLocked registers a miss of kp as waiting. Callers hold Pool.mu.
func (p *Pool) newMissLocked(kp *keyPool) *Miss {
	m := &Miss{p: p, kp: kp, landed: make(chan struct{}, 1)}
	kp.waiters = append(kp.waiters, m)
	return m
}

// Landed is signalled when a warm socket of the miss's key became ready
// while it waited (another waiter or a new connect may still take it
// first: Take tells). Nil for a nil Miss, which never signals.
func (m *Miss) Landed() <-chan struct{} {
	if m == nil {
		return nil
	}
	return m.landed
}

// DialNow is closed when the miss should start its own dial: at once,
// unless it claimed a pool dial in flight (Pool.claimLocked), then when that
// claim lapses. It is never closed for a miss that is Done while still
// claiming: its own dial is not needed. Nil for a nil Miss.
func (m *Miss) DialNow() <-chan struct{} {
	if m == nil {
		return nil
	}
	return m.dialNow
}

// Take hands the miss a ready socket of its key, making owner its owner in
// the same step, as Pool.Take does; nil if none is ready (the miss keeps
// waiting, and Landed signals again when one lands). The connect was
// counted as a miss already: Take counts no demand.
func (m *Miss) Take(owner poller.Owner) (*poller.Handle, []byte) {
	if m == nil {
		return nil, nil
	}
	p, kp := m.p, m.kp
	p.mu.Lock()
	if m.done || p.closed {
		p.unclaimLocked(m) // a closed pool lands nothing more
		p.mu.Unlock()
		return nil, nil
	}
	got, dead := p.takeReadyLocked(kp, owner)
	if got == nil && !slices.Contains(kp.waiters, m) {
		kp.waiters = append(kp.waiters, m) // still waiting
		p.releaseClaimsLocked(kp)          // the socket it was told of went to another
	}
	if got == nil && len(kp.warm) > 0 {
		// What is there is mid-read (busy: a read handler holds it this
		// instant, as right after it landed); nothing else would tell the
		// miss again, and a claimed miss has no dial of its own to fall
		// back on: look again in a moment.
		p.clock.AfterFunc(busyRetry, func() {
			p.mu.Lock()
			if len(kp.warm) > 0 {
				p.signalWaiterLocked(kp)
			}
			p.mu.Unlock()
		})
	}
	warm := len(kp.warm)
	p.mu.Unlock()
	if mt := p.metrics; mt != nil {
		mt.DeadOnTake.WithLabelValues(kp.model, kp.id).Add(float64(dead))
		mt.Warm.WithLabelValues(kp.model, kp.id).Set(float64(warm))
	}
	p.refill(kp)
	if got == nil {
		return nil, nil
	}
	if mt := p.metrics; mt != nil {
		mt.WarmAge.WithLabelValues(kp.model).Observe(p.now().Sub(got.born).Seconds())
	}
	return got.h, got.held
}

// Done ends the miss's wait: it no longer takes a warm socket, and its
// client dial no longer holds the pool's warm-up dials back. Only the
// first call counts.
func (m *Miss) Done() {
	if m == nil {
		return
	}
	p := m.p
	p.mu.Lock()
	if m.done {
		p.mu.Unlock()
		return
	}
	m.done = true
	m.dropClaimLocked() // it took a socket, or its client left: no own dial
	if i := slices.Index(m.kp.waiters, m); i >= 0 {
		m.kp.waiters = slices.Delete(m.kp.waiters, i, i+1)
	}
	select {
	case <-m.landed: // a signal it will not act on
	default:
	}
	// It may have been told of a socket it will not take (its own dial
	// won, or its client left): the next miss waiting is told instead, or
	// the socket would wait in the pool while that one waits on its dial.
	// A miss told in vain finds nothing and keeps waiting.
	if len(m.kp.warm) > 0 {
		p.signalWaiterLocked(m.kp)
	}
	p.mu.Unlock()
	p.clientDialDone()
}

// Give puts c, the miss's own dial to t that lost to a warm socket, into
// t's pool: it waits there for its session.created like a warm-up dial, and
// serves the next connect (or a waiting miss). A closed pool, one at its
// socket caps, or no pool for t's shape (the miss failed over to a
// deployment the pool does not warm) closes it with 1000 instead.
func (m *Miss) Give(t Target, c *Upgraded) {
	if m == nil || c == nil {
		return
	}
	p := m.p
	p.mu.Lock()
	var kp *keyPool
	if !p.closed && Poolable(t) {
		kp = p.keys[Key(t)] // its connect missed a pool of this shape
	}
	if kp != nil && (p.roomLocked(kp) <= 0 || p.cfg.Spare != nil && p.cfg.Spare() <= p.total) {
		kp = nil
	}
	if kp == nil {
		p.mu.Unlock()
		w := p.newWarm(m.kp, c)
		w.retire(ws.StatusNormalClosure, "warm pool full")
		return
	}
	kp.warming++
	p.total++
	p.wg.Add(1)
	p.mu.Unlock()
	go func() {
		defer p.wg.Done()
		w, err := p.awaitReady(p.newWarm(kp, c))
		p.landed(kp, w, err, 0)
	}()
}

// busyRetry is how soon a miss that found only busy sockets is told to try
// again: a read handler holds a socket for microseconds.
const busyRetry = time.Millisecond

// signalWaiterLocked tells the miss of kp that has waited longest that a
// socket is ready. Callers hold Pool.mu.
func (p *Pool) signalWaiterLocked(kp *keyPool) {
	if len(kp.waiters) == 0 {
		return
	}
	i := nextWaiterLocked(kp)
	m := kp.waiters[i]
	kp.waiters = slices.Delete(kp.waiters, i, i+1)
	select {
	case m.landed <- struct{}{}:
	default: // it has a signal pending already
	}
}

// awaitWait is how long a dialed socket may take to send session.created.
func (p *Pool) awaitWait() time.Duration {
	if p.dialer.Timeout <= 0 {
		return 10 * time.Second
	}
	return p.dialer.Timeout
}
