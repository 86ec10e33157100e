package upstream

import (
	"encoding/json"
	"sync"
	"time"

	"github.com/gobwas/ws"

	"rtgate/frames"
	"rtgate/poller"
)

// warm socket states
const (
	warmWaiting = iota // dialed, session.created not complete yet
	warmReady          // holding session.created
	warmTaken          // handed to a session
	warmDead           // closed, failed, or sent something unexpected
)

type poolError string

func (e poolError) Error() string { return string(e) }

const (
	errNoSessionCreated = poolError("no session.created from the upstream in time")
	errUnexpectedFrame  = poolError("the upstream sent more than session.created before a client existed")
)

// warmConn is one socket in the pool. Its OnRequest and close callback reach
// it through its Handle while it waits; at handoff the Handle's owner becomes
// the session.
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
	live  liveState     // pings while ready (liveness.go)
}

// UpstreamReadable runs when the upstream sent bytes.
func (w *warmConn) UpstreamReadable() {
	w.mu.Lock()
	state := w.state
	w.mu.Unlock()
	switch state {
	case warmTaken:
		// Handed over while this call was on its way: the new owner reads.
		w.h.Owner().UpstreamReadable()
		return
	case warmWaiting:
		var buf []byte
		_ = w.h.Endpoint().Read(func(src frames.Source) error {
			p, err := src.Next(src.Len())
			buf = append(buf, p...)
			return err
		})
		w.accept(buf)
		return
	}
	// Ready: only the pong to a liveness ping may arrive (liveness.go).
	if state == warmReady && w.readIdle() {
		return
	}
	// Anything else before a client exists: drop the bytes (they must be
	// consumed) and the socket.
	_ = w.h.Endpoint().Read(func(src frames.Source) error {
		_, err := src.Next(src.Len())
		return err
	})
	w.fail(errUnexpectedFrame)
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
	case warmTaken:
		w.h.Owner().UpstreamGone()
	case warmReady:
		w.pool.lost(w)
	}
}

// fail marks the socket dead and closes it.
func (w *warmConn) fail(err error) {
	w.mu.Lock()
	state := w.state
	if state == warmTaken || state == warmDead {
		w.mu.Unlock()
		return
	}
	w.state, w.err = warmDead, err
	if state == warmWaiting {
		close(w.ready)
	}
	w.mu.Unlock()
	w.h.Endpoint().Close()
	if state == warmReady {
		w.pool.lost(w)
	}
}

// take hands the socket to owner if it is ready and alive.
func (w *warmConn) take(owner poller.Owner) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.state != warmReady || !w.h.Endpoint().Conn().IsActive() {
		return false
	}
	w.state = warmTaken
	w.h.SetOwner(owner)
	if w.expiry != nil {
		w.expiry.Stop() // callers hold Pool.mu
	}
	return true
}

// retire closes a socket that never reached a client, cleanly.
func (w *warmConn) retire(code ws.StatusCode, reason string) {
	w.mu.Lock()
	if w.state == warmTaken {
		w.mu.Unlock()
		return
	}
	w.state = warmDead
	w.mu.Unlock()
	ep := w.h.Endpoint()
	_ = ep.Send(frames.AppendClose(nil, code, reason, true))
	ep.Close()
}
