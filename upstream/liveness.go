package upstream

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"time"

	"github.com/gobwas/ws"

	"rtgate/frames"
)

// Liveness: a warm socket can die without the reactor hearing of it (a
// middlebox that forgets the flow, a peer that vanished without a FIN, a FIN
// not processed yet). Handed out, such a socket would give the client
// session.created and then 1011, which is worse than a miss. So the pool
// checks each ready socket that sat idle for PingInterval with a WebSocket
// ping, and retires and replaces one whose pong does not come within
// PongTimeout (rtgate_pool_missed_pongs_total counts them).
//
// The checks cost no goroutine and no timer per socket: ready sockets sit in
// one timer wheel, which the pool's janitor turns every tick. Each socket's
// first check falls at a random point of 50-100% of PingInterval after it
// became ready, and later ones 90-100% of PingInterval after its last pong,
// so a pool warmed at once is not pinged at once.
//
// The pong never reaches a client: Take passes over a socket whose ping is
// unanswered, and the socket's own read path (readIdle, reached from
// warmConn.UpstreamReadable) consumes the pong before the socket can be
// taken. A ping only goes out under Pool.mu, which Take holds while it
// looks, so a socket cannot be taken between the decision to ping it and
// the ping.

const (
	defaultPingInterval = 5 * time.Second
	defaultPongTimeout  = 2 * time.Second
	// pingPayload is the size of a ping's payload: a per-socket sequence
	// number, so that a late pong to an earlier ping does not pass for the
	// answer to the current one.
	pingPayload = 8
)

// liveState is a ready socket's liveness. Guarded by warmConn.mu; pingOut is
// only set with Pool.mu held as well (see the file comment).
type liveState struct {
	pingOut  bool      // a ping was sent and its pong has not arrived
	seq      uint64    // the payload of the last ping sent
	pingSent time.Time // when it was sent
	nextPing time.Time // when the socket is due for its next check
	partial  []byte    // a pong that arrived in part
}

// janitorTick is how often the janitor turns: fine enough to time pongs
// against PongTimeout, coarse enough to cost nothing.
func janitorTick(cfg PoolConfig) time.Duration {
	if cfg.PingInterval < 0 {
		return 250 * time.Millisecond
	}
	return min(max(min(cfg.PingInterval, cfg.PongTimeout)/8, 10*time.Millisecond), 250*time.Millisecond)
}

// pingsOn reports whether idle sockets are checked at all.
func (p *Pool) pingsOn() bool { return p.cfg.PingInterval > 0 }

// jittered returns a point between lo and 100% of d.
func jittered(d time.Duration, lo float64) time.Duration {
	return d - time.Duration(rand.Float64()*(1-lo)*float64(d))
}

// watchLocked puts a socket that just became ready on the wheel. Callers
// hold Pool.mu.
func (p *Pool) watchLocked(w *warmConn, now time.Time) {
	if !p.pingsOn() {
		return
	}
	w.mu.Lock()
	w.live.nextPing = now.Add(jittered(p.cfg.PingInterval, 0.5))
	at := w.live.nextPing
	w.mu.Unlock()
	p.live.add(w, at)
}

// awaitingPong reports whether w has a ping unanswered. Take calls it with
// Pool.mu held.
func (w *warmConn) awaitingPong() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.live.pingOut
}

// checkLiveness pings the ready sockets that are due, and retires those
// whose pong is overdue.
func (p *Pool) checkLiveness(now time.Time) {
	if !p.pingsOn() {
		return
	}
	type ping struct {
		w   *warmConn
		seq uint64
	}
	var pings []ping
	var overdue []*warmConn
	p.mu.Lock()
	for _, w := range p.live.due(now) {
		w.mu.Lock()
		if w.state != warmReady {
			w.mu.Unlock()
			continue // taken, expired or lost: off the wheel
		}
		ls := &w.live
		var next time.Time
		switch {
		case ls.pingOut && !now.Before(ls.pingSent.Add(p.cfg.PongTimeout)):
			overdue = append(overdue, w)
		case ls.pingOut:
			next = ls.pingSent.Add(p.cfg.PongTimeout)
		case !now.Before(ls.nextPing):
			ls.pingOut, ls.pingSent = true, now
			ls.seq++
			pings = append(pings, ping{w, ls.seq})
			next = now.Add(p.cfg.PongTimeout)
		default:
			next = ls.nextPing
		}
		w.mu.Unlock()
		if !next.IsZero() {
			p.live.add(w, next)
		}
	}
	p.mu.Unlock()

	// Writes happen outside Pool.mu: a ping is one small frame on a socket
	// nothing else writes to, but a write can still block.
	for _, pg := range pings {
		var payload [pingPayload]byte
		binary.BigEndian.PutUint64(payload[:], pg.seq)
		// A failed write means the socket is closing; its close callback
		// takes it out of the pool.
		_ = pg.w.h.Endpoint().Send(frames.AppendFrame(nil, ws.OpPing, payload[:], true))
		if m := p.metrics; m != nil {
			m.Pings.WithLabelValues(pg.w.kp.model, pg.w.kp.id).Inc()
		}
	}
	for _, w := range overdue {
		p.retireUnanswered(w)
	}
}

// retireUnanswered closes a ready socket that missed its pong and refills
// its key.
func (p *Pool) retireUnanswered(w *warmConn) {
	if !p.remove(w.kp, w) {
		return // taken (it cannot be, while pinged), expired or lost meanwhile
	}
	p.mu.Lock()
	if w.expiry != nil {
		w.expiry.Stop()
	}
	p.mu.Unlock()
	if m := p.metrics; m != nil {
		m.MissedPongs.WithLabelValues(w.kp.model, w.kp.id).Inc()
	}
	p.log.Debug("warm socket missed its pong; replacing it", "model", w.kp.model, "key", w.kp.id)
	w.retire(ws.StatusGoingAway, "warm socket did not answer a ping")
	p.refill(w.kp)
}

// readIdle consumes what arrived on a ready socket. Pongs are the only
// frames a ready socket may receive; a pong that answers the outstanding
// ping clears it. It reports false when anything else arrived, and the
// caller then drops the socket. If the socket was handed to a session
// meanwhile, the session reads instead.
func (w *warmConn) readIdle() bool {
	w.mu.Lock()
	switch w.state {
	case warmTaken:
		w.mu.Unlock()
		w.h.Owner().UpstreamReadable()
		return true
	case warmReady:
	default:
		w.mu.Unlock()
		return false
	}
	// w.mu is held across the read so that Take, which checks the ping
	// under w.mu, sees it answered only once the pong's bytes are gone.
	buf := w.live.partial
	err := w.h.Endpoint().Read(func(src frames.Source) error {
		p, err := src.Next(src.Len())
		buf = append(buf, p...)
		return err
	})
	ok := err == nil
	answered := false
	for ok && len(buf) > 0 {
		h, hlen, complete, perr := frames.ParseHeader(buf)
		if perr != nil || (complete && (h.OpCode != ws.OpPong || !h.Fin || h.Masked || h.Length > ws.MaxControlFramePayloadSize)) {
			ok = false
			break
		}
		if !complete || int64(len(buf)) < int64(hlen)+h.Length {
			break // the rest is on its way
		}
		payload := buf[hlen : hlen+int(h.Length)]
		var want [pingPayload]byte
		binary.BigEndian.PutUint64(want[:], w.live.seq)
		if w.live.pingOut && bytes.Equal(payload, want[:]) {
			w.live.pingOut, answered = false, true
			w.live.nextPing = w.pool.now().Add(jittered(w.pool.cfg.PingInterval, 0.9))
		}
		// Any other pong is unsolicited (RFC 6455 allows them) and ignored.
		buf = buf[hlen+int(h.Length):]
	}
	if ok && len(buf) > 0 {
		w.live.partial = append(w.live.partial[:0], buf...)
	} else {
		w.live.partial = nil
	}
	w.mu.Unlock()
	if m := w.pool.metrics; answered && m != nil {
		m.Pongs.WithLabelValues(w.kp.model, w.kp.id).Inc()
	}
	return ok
}

// wheelSlots is the number of slots in the liveness wheel; a socket due
// further ahead than wheelSlots ticks waits in its slot for later turns.
const wheelSlots = 64

// wheel is a hashed timer wheel of ready sockets, keyed by the tick at which
// each is next due. Guarded by Pool.mu.
type wheel struct {
	tick  time.Duration
	start time.Time
	pos   int64 // the next tick to process
	slots [wheelSlots][]wheelEntry
}

type wheelEntry struct {
	w   *warmConn
	due int64
}

func (wh *wheel) init(tick time.Duration, now time.Time) {
	wh.tick, wh.start = tick, now
}

// tickOf is the tick that contains t.
func (wh *wheel) tickOf(t time.Time) int64 { return int64(t.Sub(wh.start) / wh.tick) }

// add schedules w for at (or the next tick, if at has passed).
func (wh *wheel) add(w *warmConn, at time.Time) {
	due := max(wh.tickOf(at), wh.pos)
	s := &wh.slots[due%wheelSlots]
	*s = append(*s, wheelEntry{w, due})
}

// due removes and returns every socket due at or before now.
func (wh *wheel) due(now time.Time) []*warmConn {
	end := wh.tickOf(now)
	if end < wh.pos {
		return nil
	}
	var out []*warmConn
	// Each slot at most once, even when the janitor was late by more than
	// a turn of the wheel.
	for t := wh.pos; t <= end && t < wh.pos+wheelSlots; t++ {
		s := &wh.slots[t%wheelSlots]
		kept := (*s)[:0]
		for _, e := range *s {
			if e.due <= end {
				out = append(out, e.w)
			} else {
				kept = append(kept, e)
			}
		}
		clear((*s)[len(kept):])
		*s = kept
	}
	wh.pos = end + 1
	return out
}
