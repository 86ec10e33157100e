package upstream

import (
	"encoding/json"
	"sync"
	"time"

	"github.com/gobwas/ws"

	"rtgate/frames"
	"rtgate/poller"
)

// warm socket states. A socket moves waiting → ready → taken (the session
// owns it from then on), or from waiting or ready to retiring (the gateway
// sent its close frame and waits for the upstream to close TCP first) or
// dead (closed, failed, or sent something unexpected); retiring ends dead.
const (
	warmWaiting  = iota // dialed, session.created not complete yet
	warmReady           // holding session.created
	warmTaken           // handed to a session
	warmRetiring        // our close frame went; waiting for the upstream's FIN
	warmDead            // closed, failed, or sent something unexpected
)

// defaultRetireWait bounds a retiring socket's wait for the upstream's FIN
// when the dialer sets no CloseTimeout.
const defaultRetireWait = 2 * time.Second

type poolError string

func (e poolError) Error() string { return string(e) }

const (
	errNoSessionCreated = poolError("no session.created from the upstream in time")
	errUnexpectedFrame  = poolError("the upstream sent more than session.created before a client existed")
)

// warmConn is one socket in the pool. Its OnRequest and close callback reach
// it through its Handle while it waits; at handoff the Handle's owner becomes
// the session, under the Handle's read lock, so that a read of the pool and
// the session's first frames never interleave.
type warmConn struct {
	h      *poller.Handle
	pool   *Pool
	kp     *keyPool
	born   time.Time
	expiry Timer // guarded by Pool.mu

	mu    sync.Mutex
	state int
	err   error         // why it went dead before it was ready
	held  []byte        // the session.created frame, verbatim
	ready chan struct{} // closed when it leaves warmWaiting
	stop  *time.Timer   // bounds warmRetiring
	live  liveState     // pings while ready (checkLiveness)
}

// start hands the socket to the reactor with the pool as its owner. The
// bytes that came with the 101 are accepted first, then whatever crypto/tls
// already decrypted, before any read event can run: a read cannot append the
// tail of session.created before its head.
func (w *warmConn) start(preface []byte) {
	w.h.Start(w, func() { w.accept(preface) })
}

// UpstreamReadable runs when the upstream sent bytes, under the Handle's
// read lock: a Take cannot hand the socket over while it runs.
func (w *warmConn) UpstreamReadable() {
	w.mu.Lock()
	state := w.state
	w.mu.Unlock()
	ep := w.h.Endpoint()
	switch state {
	case warmWaiting:
		var buf []byte
		_ = ep.Read(func(src frames.Source) error {
			p, err := src.Next(src.Len())
			buf = append(buf, p...)
			return err
		})
		w.accept(buf)
		return
	case warmRetiring:
		// The upstream's answer to our close frame: drop it, and wait
		// for its FIN.
		_ = ep.Read(func(src frames.Source) error { return src.Skip(src.Len()) })
		return
	}
	// Ready: only the pong to a liveness ping may arrive (checkLiveness);
	// anything else and the socket is no good to hand out. (A read with
	// nothing to read, such as a read event for a hang-up, is fine.)
	if state == warmReady {
		if !w.readIdle() {
			w.fail(errUnexpectedFrame)
		}
		return
	}
	// Dead (or taken, which a read through the pool cannot be now that the
	// Handle changes owners under its read lock): the bytes must still be
	// consumed.
	_ = ep.Read(func(src frames.Source) error { return src.Skip(src.Len()) })
}

// accept adds bytes read while waiting for session.created.
func (w *warmConn) accept(b []byte) {
	if len(b) == 0 {
		return
	}
	w.mu.Lock()
	if w.state != warmWaiting {
		w.mu.Unlock()
		w.fail(errUnexpectedFrame)
		return
	}
	w.held = append(w.held, b...)
	h, hlen, ok, err := frames.ParseHeader(w.held)
	if err == nil && (!ok || int64(len(w.held)) < int64(hlen)+h.Length) {
		w.mu.Unlock()
		return // the rest of the frame is still on its way
	}
	if err == nil {
		err = checkSessionCreated(h, w.held[hlen:])
	}
	if err != nil {
		w.mu.Unlock()
		w.fail(err)
		return
	}
	w.state = warmReady
	close(w.ready)
	w.mu.Unlock()
}

// checkSessionCreated accepts exactly one frame, an unfragmented text
// session.created. An error event (a bad key, say) is reported as such.
func checkSessionCreated(h ws.Header, rest []byte) error {
	if !h.Fin || h.OpCode != ws.OpText || h.Masked || int64(len(rest)) != h.Length {
		return errUnexpectedFrame
	}
	var ev struct {
		Type  string `json:"type"`
		Error struct {
			Code string `json:"code"`
		} `json:"error"`
	}
	if err := json.Unmarshal(rest, &ev); err != nil {
		return errUnexpectedFrame
	}
	switch ev.Type {
	case "session.created":
		return nil
	case "error":
		return poolError("the upstream answered with an error event: " + ev.Error.Code)
	}
	return errUnexpectedFrame
}

// UpstreamGone runs when the socket closed.
func (w *warmConn) UpstreamGone() {
	w.mu.Lock()
	state := w.state
	if state == warmWaiting || state == warmReady {
		w.state = warmDead
		if w.err == nil {
			w.err = poolError("the upstream closed the socket")
		}
		if state == warmWaiting {
			close(w.ready)
		}
	}
	w.mu.Unlock()
	switch state {
	case warmReady:
		w.pool.lost(w)
	case warmRetiring:
		w.mu.Lock()
		w.state = warmDead
		if w.stop != nil {
			w.stop.Stop()
		}
		w.mu.Unlock()
	}
}

// fail marks the socket dead and closes it.
func (w *warmConn) fail(err error) {
	w.mu.Lock()
	state := w.state
	if state == warmTaken || state == warmDead || state == warmRetiring {
		w.mu.Unlock()
		return
	}
	w.state, w.err = warmDead, err
	if state == warmWaiting {
		close(w.ready)
	}
	w.mu.Unlock()
	w.h.Endpoint().Drop()
	if state == warmReady {
		w.pool.lost(w)
	}
}

// alive reports whether w still holds session.created and nothing else has
// happened to it: not closed, failed, retiring or taken. Callers may hold
// Pool.mu (the lock order is Pool.mu, then w.mu).
func (w *warmConn) alive() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.state == warmReady
}

// take hands the socket to owner if it is ready and alive: no read in
// progress (a ready socket being read is receiving what it should not) and
// no hang-up seen. On success the Handle's read lock stays held until the
// session has forwarded the held frame and calls FinishHandOver. Callers hold
// Pool.mu; nothing here blocks.
func (w *warmConn) take(owner poller.Owner) takeResult {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.state != warmReady {
		return takeDead
	}
	if !w.h.TryHandOver(owner) {
		// A read is in progress (a pong being consumed, say): the socket
		// is fine, just not free this instant.
		return takeBusy
	}
	w.state = warmTaken
	if w.expiry != nil {
		w.expiry.Stop() // callers hold Pool.mu
	}
	return takeOK
}

// takeResult is what take made of a socket.
type takeResult uint8

const (
	takeOK   takeResult = iota // handed to the owner
	takeBusy                   // alive but mid-read: leave it in the pool
	takeDead                   // not ready (closed, failed, retiring): drop it from the pool
)

// retire closes a socket that never reached a client, cleanly: our close
// frame goes, and the upstream, as the WebSocket server, closes TCP first
// (RFC 6455 7.1.1), so that TIME_WAIT lands on its side, not on the
// gateway's ephemeral ports. The dialer's CloseTimeout bounds the wait.
func (w *warmConn) retire(code ws.StatusCode, reason string) {
	w.mu.Lock()
	if st := w.state; st == warmTaken || st == warmRetiring || st == warmDead {
		w.mu.Unlock()
		if st == warmDead {
			w.h.Endpoint().Drop()
		}
		return
	}
	if w.state == warmWaiting {
		close(w.ready)
	}
	w.state = warmRetiring
	ep := w.h.Endpoint()
	wait := w.pool.dialer.CloseTimeout
	if wait <= 0 {
		wait = defaultRetireWait
	}
	w.stop = time.AfterFunc(wait, ep.Drop)
	w.mu.Unlock()
	if err := ep.Send(frames.AppendClose(nil, code, reason, true)); err != nil || !ep.Conn().IsActive() {
		ep.Drop()
	}
}
