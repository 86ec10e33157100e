package upstream

import (
	"slices"
	"time"
)

// Dialing ahead: the upstream dial of a connect that will miss starts when
// its client's TCP connection is accepted, not once its request head has
// been read and decided. In a first burst the head of a connection arrives
// tens of milliseconds after its accept (200 clients connecting at once on
// two cores: 29 ms at the median, 63 ms at p95), and a client going direct
// pays its upstream's handshake only once, while one through the gateway
// paid the gateway's upgrade and then the upstream's in turn. Dialing at
// accept overlaps the two.
//
// Two rules make it work without extra dials:
//
//   - Expect (at accept) starts a warm-up dial of the likely key (the key of
//     the most recent connect) when what the pool holds and is dialing, less
//     what waiting misses already claimed, is short of the connections
//     accepted and not yet decided. Settle (once decided, or gone) ends the
//     expectation. Such a dial is the pool's own: it lands in the pool and
//     is bounded by the pool's caps (the key's maximum, its in-flight limit,
//     MaxTotal, the spare descriptors; a key backing off dials nothing), so
//     connections that never send a head (held until HANDSHAKE_TIMEOUT, and
//     within MAX_CONNECTIONS) can at most fill the pool, as a burst of real
//     connects would, and are not dialed for again while the pool holds a
//     socket for each.
//   - A claim: a miss that finds one of its key's dials in flight that no
//     other miss has claimed (an anticipated dial, or the refill's) waits
//     for a socket to land instead of dialing its own at once
//     (Miss.DialNow stays open). It dials its own, and the hedge goes on as
//     before, as soon as the pool cannot serve it in time: a pool dial of
//     its key failed and fewer are in flight than misses claim them, a new
//     connect took the socket it was waiting for, or no socket of its key
//     landed for one and a half of the key's refill times (since its
//     claim), and in any case after four refill times (at most a third of
//     the dial timeout). A key whose refill time is not yet measured (no
//     dial of it has completed) is never claimed.
//
// The pool can still only make a connect faster, never fail it: a claimed
// miss at worst starts its own dial late, by the claim's bound, and only
// when its key's dials have stopped landing.

// claimWait is how long a claimed miss waits for a pool dial of a key with
// refill time r, without any socket of the key landing, before dialing its
// own.
func claimWait(r time.Duration) time.Duration { return r * 3 / 2 }

// claimLimit is the longest a claimed miss waits in all, landings or not:
// four refill times, and never more than a third of a dial's timeout, so
// that its own dial, when it comes to that, still has the rest of the
// connect's budget (the client's whole attempt is bounded by the same
// timeout, and a wait may not use it up).
func claimLimit(r, dialTimeout time.Duration) time.Duration { return min(4*r, dialTimeout/3) }

// Expect tells the pool a client connection was accepted whose request has
// not been read: it may start a dial of the likely key ahead of it. Each
// Expect must be followed by one Settle. Safe on a nil pool.
func (p *Pool) Expect() {
	if p == nil || !p.cfg.Enabled() {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.expected++
	kp := p.likely
	if kp == nil || p.closed || kp.backoff > 0 || p.now().Before(kp.retryAt) {
		return
	}
	room := p.roomLocked(kp)
	if p.cfg.Spare != nil {
		room = min(room, p.cfg.Spare()-p.total)
	}
	room = min(room, kp.inflight-kp.warming) // the key's in-flight limit (inflightLimit)
	if !dialAhead(len(kp.warm)+kp.warming, kp.claimed, p.expected, p.keyCap(), room) {
		return
	}
	p.startWarmLocked(kp)
	if m := p.metrics; m != nil {
		m.Anticipated.WithLabelValues(kp.model, kp.id).Inc()
	}
}

// dialAhead says whether an accept dials ahead: have sockets of the likely
// key are ready or in flight, claimed of them promised to waiting misses,
// expected connections accepted and not decided (this one included); the
// key may hold keyCap, and the pool's caps leave room for more sockets.
func dialAhead(have, claimed, expected, keyCap, room int) bool {
	return have-claimed < expected && have < keyCap && room > 0
}

// Settle ends one Expect: the connection's request was decided, or it went
// away. Safe on a nil pool.
func (p *Pool) Settle() {
	if p == nil || !p.cfg.Enabled() {
		return
	}
	p.mu.Lock()
	p.expected--
	p.mu.Unlock()
}

// keyCap is the most sockets one key may hold and dial ahead of demand:
// auto's maximum, or the fixed size.
func (p *Pool) keyCap() int {
	if p.cfg.Auto {
		return p.cfg.Max
	}
	return p.cfg.Size
}

// claimLocked lets the new miss m of kp wait on a dial of kp in flight that
// no other miss claimed, rather than dial its own at once; otherwise m
// dials at once. Callers hold Pool.mu.
func (p *Pool) claimLocked(kp *keyPool, m *Miss) {
	m.dialNow = make(chan struct{})
	if kp.refillTime <= 0 || kp.warming-kp.claimed <= 0 {
		close(m.dialNow)
		return
	}
	m.claimed = true
	kp.claimed++
	m.claimEnd = p.now().Add(claimLimit(kp.refillTime, p.awaitWait()))
	p.armClaimLocked(m, claimWait(kp.refillTime))
}

// armClaimLocked checks on the claimed miss m after d: a claim lapses when
// no socket of its key has landed for claimWait, since landings are
// progress, or at its claimLimit whatever lands. Under load every dial
// takes longer than the refill time measured at rest, the miss's own would
// too, and starting it would only add a handshake to the load (over TLS,
// lapses at a fixed bound doubled a cold burst's handshakes); a key whose
// dials have stalled lands nothing. Callers hold Pool.mu.
func (p *Pool) armClaimLocked(m *Miss, d time.Duration) {
	m.late = p.clock.AfterFunc(d, func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		if !m.claimed {
			return
		}
		now := p.now()
		wait := claimWait(m.kp.refillTime)
		if quiet := now.Sub(m.kp.lastLanded); quiet < wait && now.Before(m.claimEnd) {
			p.armClaimLocked(m, min(wait-quiet, m.claimEnd.Sub(now)))
			return
		}
		p.unclaimLocked(m)
	})
}

// unclaimLocked sends the claimed miss m to dial its own. Callers hold
// Pool.mu.
func (p *Pool) unclaimLocked(m *Miss) {
	if m.dropClaimLocked() {
		close(m.dialNow)
	}
}

// dropClaimLocked ends m's claim, if it has one, and says whether it had.
// Callers hold Pool.mu.
func (m *Miss) dropClaimLocked() bool {
	if !m.claimed {
		return false
	}
	m.claimed = false
	m.kp.claimed--
	m.late.Stop()
	return true
}

// releaseClaimsLocked sends the most recent claimed misses of kp to dial
// their own while kp cannot serve them all: fewer sockets ready and in
// flight than claims. Callers hold Pool.mu.
func (p *Pool) releaseClaimsLocked(kp *keyPool) {
	for i := len(kp.waiters) - 1; i >= 0 && kp.claimed > len(kp.warm)+kp.warming; i-- {
		p.unclaimLocked(kp.waiters[i])
	}
}

// nextWaiterLocked is the miss of kp a landed socket goes to: the claimed
// miss that waited longest (it has no dial of its own), else the miss that
// waited longest. Callers hold Pool.mu; kp.waiters is not empty.
func nextWaiterLocked(kp *keyPool) int {
	if i := slices.IndexFunc(kp.waiters, func(m *Miss) bool { return m.claimed }); i >= 0 {
		return i
	}
	return 0
}
