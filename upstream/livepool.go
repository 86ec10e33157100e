package upstream

// The warm pool for GPT-Live (opt-in: LIVE_POOL_SIZE). A Live session
// cannot start before the client's session.start, which names the model
// and carries the whole configuration; but its dial phase (TCP, TLS, the
// WebSocket upgrade: 276 ms at the median going direct to OpenAI in the
// seed's benchmark) can be done ahead. So the Live pool holds upgraded,
// unstarted sockets: nothing was sent on them and the upstream has sent
// nothing, which is the state of a fresh dial just after its 101.
//
// It is the same Pool as Realtime's (one per protocol, each with its own
// size, idle limit and metrics), in its Unstarted mode:
//
//   - a socket is ready as soon as it is upgraded (no session.created to
//     wait for) and holds no frame; the bytes that came with the 101 must
//     be none, and any frame but a pong makes it unusable (warmConn.accept,
//     readIdle), as for Realtime's warm sockets;
//   - pooled sockets are keyed by URL and headers (Key), so deployments
//     that share a base and a key share them;
//   - idle sockets are pinged (checkLiveness) and replaced after MaxIdle,
//     which should be short: how long OpenAI keeps an upgraded socket that
//     never sent session.start is not documented.
//
// Whoever takes a socket writes session.start on it first (TakeLive); a
// socket that is found dead when taken, or on which that write fails, is
// dropped and the next one (or a fresh dial) used instead, so the client
// never sees it.

import (
	"encoding/json"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/gobwas/ws"

	"rtgate/frames"
	"rtgate/poller"
)

// LivePoolConfig sizes the Live pool.
type LivePoolConfig struct {
	// Size is the number of unstarted sockets kept per upstream URL and
	// header set; 0 turns the pool off.
	Size int
	// MaxIdle is how long an unstarted socket may wait before it is
	// replaced (each gets 75-100% of it); 0 means 30 s.
	MaxIdle time.Duration
	// PingInterval and PongTimeout are as PoolConfig's.
	PingInterval, PongTimeout time.Duration
	// MaxTotal caps the Live pool's sockets across keys; 0 means 2048.
	MaxTotal int
	// Spare is as PoolConfig's.
	Spare func() int
	// Clock is as PoolConfig's (tests).
	Clock Clock
}

// NewLivePool returns the warm pool for GPT-Live: a Pool in its Unstarted
// mode. metrics may be nil (NewPoolMetricsNamed makes its own series).
func NewLivePool(d *Dialer, cfg LivePoolConfig, log *slog.Logger, metrics *PoolMetrics) *Pool {
	maxIdle := cfg.MaxIdle
	if maxIdle <= 0 {
		maxIdle = 30 * time.Second
	}
	return NewPool(d, PoolConfig{Size: cfg.Size, MaxIdle: maxIdle, MaxTotal: cfg.MaxTotal, Spare: cfg.Spare,
		PingInterval: cfg.PingInterval, PongTimeout: cfg.PongTimeout, Clock: cfg.Clock, Unstarted: true}, log, metrics)
}

// markUnstarted makes a freshly dialed socket ready at once (Unstarted
// pools): it has nothing to wait for. Any byte the upstream sent with its
// 101 then arrives through accept, which refuses it.
func (w *warmConn) markUnstarted() {
	w.state = warmReady
	close(w.ready)
}

// ErrNoLiveSocket is TakeLive's miss: no socket could be started from the
// pool, and the caller dials fresh.
var ErrNoLiveSocket = errors.New("no warm Live socket could be started")

// TakeLive takes an unstarted socket for t from the pool and writes first
// on it (the client's session.start, a masked frame). A socket that hung
// up while pooled, or on which the write fails, is dropped and the next one
// tried, up to tries sockets; the caller then gets ErrNoLiveSocket and
// dials fresh, so a socket found dead before session.start was written
// never reaches a client. The socket is held (LiveHold) until a session
// adopts it; what the upstream answers meanwhile (session.started) is kept
// for the session.
func (p *Pool) TakeLive(t Target, model string, first []byte, tries int) (*LiveHold, error) {
	for range max(tries, 1) {
		hold := &LiveHold{answered: make(chan struct{})}
		h, _ := p.Take(t, model, hold)
		if h == nil {
			return nil, ErrNoLiveSocket
		}
		hold.h = h
		ep := h.Endpoint()
		err := ErrNoLiveSocket
		if ep.Conn().IsActive() {
			err = ep.Send(first)
		}
		h.FinishHandOver() // reads what came meanwhile (for the hold), then events flow to it
		if err == nil {
			return hold, nil
		}
		// Dead before session.start went: nobody saw it.
		ep.Drop()
		if m := p.metrics; m != nil {
			m.DeadOnTake.WithLabelValues(model, Key(t)[:8]).Inc()
		}
	}
	return nil, ErrNoLiveSocket
}

// LiveHold owns a taken Live socket from TakeLive until a session adopts it
// (Adopt), keeping what the upstream sends meanwhile.
type LiveHold struct {
	h        *poller.Handle
	mu       sync.Mutex
	buf      []byte
	gone     bool
	answered chan struct{} // closed once buf holds a whole first frame, or the socket is gone
	told     bool          // answered is closed
}

// UpstreamReadable implements poller.Owner: it keeps the bytes.
func (l *LiveHold) UpstreamReadable() {
	l.mu.Lock()
	defer l.mu.Unlock()
	_ = l.h.Endpoint().Read(func(src frames.Source) error {
		b, err := src.Next(src.Len())
		l.buf = append(l.buf, b...)
		return err
	})
	if wholeFrame(l.buf) {
		l.tell()
	}
}

// UpstreamGone implements poller.Owner.
func (l *LiveHold) UpstreamGone() {
	l.mu.Lock()
	l.gone = true
	l.tell()
	l.mu.Unlock()
}

// tell closes answered once (under mu).
func (l *LiveHold) tell() {
	if !l.told {
		l.told = true
		close(l.answered)
	}
}

// wholeFrame reports whether b starts with a whole WebSocket frame.
func wholeFrame(b []byte) bool {
	h, hlen, ok, err := frames.ParseHeader(b)
	return err == nil && ok && int64(len(b)-hlen) >= h.Length
}

// answerWait bounds how long Adopt waits for the upstream's answer to
// session.start before handing the socket over without it.
const answerWait = time.Second

// Handle is the held socket.
func (l *LiveHold) Handle() *poller.Handle { return l.h }

// Adopt makes o the socket's owner and returns the socket with the bytes
// the upstream sent since session.start, in the shape poller.Session's
// AdoptWarm takes (the caller then calls FinishHandOver); nil when the
// socket died meanwhile, or the upstream gave up on it (gaveUp): the
// caller drops it and dials fresh.
//
// It first waits for the upstream's answer to session.start (at most
// answerWait). An upstream that drops unstarted sockets after a while
// (mockai's StartTimeout; OpenAI's wait is not documented) may have given
// up on this one just as session.start went: its error then comes after
// the write, and handing the socket over before it came gave the client
// that error (TestLivePoolUpstreamDropsUnstarted failed so in CI). The
// wait costs the client nothing: it waits for that answer anyway, and the
// answer goes to it at once with the socket. A read of the hold may have
// the lock for a moment, so it retries briefly: call it from a session's
// start goroutine, never on a poller.
func (l *LiveHold) Adopt(o poller.Owner) (*poller.Handle, []byte) {
	wait := time.NewTimer(answerWait)
	select {
	case <-l.answered:
	case <-wait.C:
	}
	wait.Stop()
	for range 1000 {
		l.mu.Lock()
		refused := gaveUp(l.buf)
		l.mu.Unlock()
		if refused {
			return nil, nil // it gave up on the socket before session.start reached it
		}
		if l.h.TryHandOver(o) {
			l.mu.Lock()
			b := l.buf
			l.buf = nil
			l.mu.Unlock()
			return l.h, b
		}
		l.mu.Lock()
		gone := l.gone
		l.mu.Unlock()
		if gone || !l.h.Endpoint().Conn().IsActive() {
			return nil, nil
		}
		time.Sleep(time.Millisecond)
	}
	return nil, nil
}

// gaveUp reports whether what an unstarted socket sent before the answer to
// session.start shows the upstream gave up on it: a close frame, or an
// error event (say session_start_timeout) as its first frame. Handing such a
// socket over would give the client that error; a fresh dial (with a fresh
// session.start) answers a genuine refusal of the session.start the same
// way, so nothing is hidden.
func gaveUp(b []byte) bool {
	h, hlen, ok, err := frames.ParseHeader(b)
	if err != nil || !ok {
		return false
	}
	if h.OpCode == ws.OpClose {
		return true
	}
	if h.OpCode != ws.OpText || int64(len(b)-hlen) < h.Length {
		return false
	}
	var ev struct{ Type string }
	return json.Unmarshal(b[hlen:hlen+int(h.Length)], &ev) == nil && ev.Type == "error"
}
