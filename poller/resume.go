package poller

import (
	"errors"

	"github.com/gobwas/ws"

	"rtgate/frames"
)

// Session continuity, the relay's part: when the upstream is lost in a way
// the server may repair (its connection ends without a close frame, or it
// sends a close frame the server's Holder held back), the session lets go
// of the upstream socket and goes back to connecting, as a redial does:
// client frames queue in order (bounded by MaxPending), and the server
// dials, rebuilds the conversation on the fresh upstream (which it owns
// until the replay is acknowledged, so the new session.created and the
// acknowledgements never reach the client) and hands it over with
// AdoptResumed. What the old upstream's loss means to the client (a
// response that will never finish, the gateway's own event saying the
// session continued) the server sends with SendClient.
//
// Never resumed: a loss while a frame towards the client is half sent (the
// client holds part of a frame that cannot be completed: the session ends
// as before, and MidFrameLost counts it), a loss after either side started
// a close, a client that left. A client frame half sent to the lost
// upstream is sent whole to the fresh one, first of the queued frames: the
// client scanner keeps what it forwarded of a frame that a read ended in
// the middle of (frames.Scanner.KeepCut), up to MaxCutKept bytes; a frame
// forwarded within one read, the common case, costs nothing. A longer one
// cannot be re-sent: its rest is discarded and Loss.ClientCut says so.
//
// Swaps follow the inline rule (the package doc): the old socket is let go with
// Drop, a hang-up, never netpoll's Close.

// Loss is how a session lost its upstream.
type Loss struct {
	// Close is the upstream's close frame, held back from the client; nil
	// when its connection ended without one, or for a rollover.
	Close *frames.Close
	// Rollover: the gateway let go of a healthy upstream itself.
	Rollover bool
	// ClientCut: part of a client frame longer than MaxCutKept had gone
	// to the lost upstream; its rest is discarded.
	ClientCut bool
}

// MaxCutKept bounds the client frame a resume re-sends whole after it was
// half sent to the lost upstream (header included): 64 KiB holds a 1 s
// input_audio_buffer.append of 24 kHz PCM16 (64,000 base64 characters) and
// any control event, and a session copies it only while such a frame is
// in the middle of arriving.
const MaxCutKept = 64 << 10

// errResumed ends a read of an upstream the session let go of.
var errResumed = errors.New("poller: the session resumed on another upstream")

// resume lets go of l's socket and asks the server for a fresh upstream.
// It reports false, changing nothing, when the loss cannot be resumed; the
// caller then ends the session as before. For a rollover, quiet (nil: any
// moment) is asked with the upstream's reads and the client's forwarding
// held off, and a client frame half forwarded also refuses it.
func (s *Session) resume(l *upLink, loss Loss, quiet func() bool) bool {
	// Only a session the server keeps for continuity (HoldUpstream) is
	// resumed; any other ends exactly as it did before continuity.
	if s.cfg.Resume == nil || !s.resumable || !s.clientOpen() {
		return false
	}
	up := &s.up
	up.mu.Lock()
	ok := s.upState == upReady && s.cur == l && !s.queuedStop && !s.terminating.Load() &&
		(up.state == closeOpen || (loss.Close != nil && up.state == closeRecv))
	if ok && s.u2c.MidFrame() {
		up.mu.Unlock()
		if s.cfg.MidFrameLost != nil {
			s.cfg.MidFrameLost(s)
		}
		return false
	}
	if ok && loss.Rollover && (s.c2u.MidFrame() || (quiet != nil && !quiet())) {
		ok = false // not a quiet moment after all: the server tries again
	}
	if !ok {
		up.mu.Unlock()
		return false
	}
	s.detachLocked()
	if s.c2u.MidFrame() {
		if cut := s.c2u.TakeCut(); cut != nil {
			s.pending = cut // first to the fresh upstream; the frame's rest queues behind it
		} else {
			loss.ClientCut = true
			s.c2u.DropRest() // wherever it would go: it cannot be completed
		}
	}
	up.mu.Unlock()
	// The upstream's stash may hold the start of a frame of the lost
	// socket; no read of it runs any more (it is not current).
	s.u2c.Reset()
	if loss.Close != nil || loss.Rollover {
		// Answer or send the close, then hang up: nothing more is wanted
		// from it.
		code, reason := ws.StatusNormalClosure, "rollover"
		if loss.Close != nil {
			code, reason = loss.Close.Code, loss.Close.Reason
		}
		_ = l.h.ep.Send(frames.AppendClose(nil, code, reason, true))
		l.h.ep.Drop()
	}
	if !s.cfg.Resume(s, loss) {
		s.lostForGood(loss)
	}
	return true
}

// detachLocked puts the session back to connecting, without an upstream.
// Callers hold up.mu.
func (s *Session) detachLocked() {
	up := &s.up
	s.upState = upConnecting
	up.ep, s.handle, s.cur = nil, nil, nil
	s.upEP.Store(nil)
	up.state, up.got = closeOpen, frames.Close{}
	if up.timer != nil {
		up.timer.Stop()
		up.timer = nil
	}
	s.warm, s.wroteUp = false, false
	s.farewellResumed()
	s.resumes++
}

// lostForGood ends a session whose loss the server would not resume: the
// client gets what it would have got without continuity.
func (s *Session) lostForGood(loss Loss) {
	code, reason := ws.StatusInternalServerError, "upstream connection lost"
	if loss.Close != nil {
		code, reason = loss.Close.Code, loss.Close.Reason
	}
	s.failUpstream(nil, code, reason)
}

// ResumeFailed ends a session whose resume found no upstream: the client
// gets notice (the server's error event, may be nil) and close 1011.
func (s *Session) ResumeFailed(notice []byte) {
	s.failUpstream(notice, ws.StatusInternalServerError, "upstream connection lost")
}

// Rollover lets go of a healthy upstream at the server's request (its cap
// is near): the upstream gets close 1000 and the server is asked for a
// fresh one, as for a loss. It reports false when the session is not at a
// point where it can (a frame half relayed either way, a close under way,
// connecting already, quiet saying no); the server tries again later.
// quiet, unless nil (a rollover forced at its deadline), is asked while no
// upstream read runs and no client frame is being forwarded, so that what
// it answers still holds when the upstream is let go of: a request the
// client sent an instant before is either seen by it or queued for the
// fresh upstream. It must not run on a poller: it waits for the upstream's
// read lock.
func (s *Session) Rollover(quiet func() bool) bool {
	s.up.mu.Lock()
	l := s.cur
	ready := s.upState == upReady && l != nil && !s.c2u.MidFrame()
	s.up.mu.Unlock()
	if !ready {
		return false
	}
	l.h.readMu.Lock()
	defer l.h.readMu.Unlock()
	if s.u2c.MidFrame() {
		return false
	}
	return s.resume(l, Loss{Rollover: true}, quiet)
}

// AdoptResumed takes the fresh upstream a resume found, as AdoptWarm takes
// a warm socket: take hands the socket to the session's owner and returns
// it with what the session must forward first (the upstream's frames that
// followed the replay's acknowledgements). Queued client frames go up
// first.
func (s *Session) AdoptResumed(take func(Owner) (*Handle, []byte)) bool {
	return s.adopt(take, false)
}

// SendClient sends frames the gateway built (an event of its own) to the
// client, unless a close went to it already; false when it could not.
// The upstream must be detached (resuming) so that no upstream frame is
// being relayed at the same time.
func (s *Session) SendClient(frame []byte) bool {
	c := &s.client
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.mayWrite() || s.u2c.MidFrame() {
		return false
	}
	return c.ep.Send(frame) == nil
}

// ReleaseToClient sends the client text messages (payloads, unframed) that
// the upstream's Translator held back and lets go of later, from outside
// the relay (a guardrail's check that finished on its own goroutine). take
// says which, and runs under the client's lock, as the Translator does: so
// what is released and what the relay forwards meanwhile keep their order.
// Each message is offered to the upstream's Inspector first, as a relayed
// frame is, so the accounting reads what the client gets whenever it gets
// it. False when a close went to the client already (take is not called).
func (s *Session) ReleaseToClient(take func() [][]byte) bool {
	c := &s.client
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.mayWrite() || s.u2c.MidFrame() {
		return false
	}
	var b []byte
	for _, p := range take() {
		s.u2c.Offer(p)
		b = frames.AppendFrame(b, ws.OpText, p, false)
	}
	return len(b) == 0 || c.ep.Send(b) == nil
}

// Resumes returns how many times the session let go of its upstream to
// resume.
func (s *Session) Resumes() int {
	s.up.mu.Lock()
	defer s.up.mu.Unlock()
	return s.resumes
}

// HoldUpstream lets h hold back upstream frames (the server's continuity
// Holder), and keeps a client frame cut by a loss so that it can be re-sent
// whole (MaxCutKept); call it before an upstream is attached. Only a
// session held so is resumed.
func (s *Session) HoldUpstream(h frames.Holder) {
	s.resumable = true
	s.u2c.SetHolder(h)
	keep := MaxCutKept
	if s.cfg.MaxPending > 0 {
		keep = min(keep, s.cfg.MaxPending) // it is queued like any client frame
	}
	s.c2u.KeepCut(keep)
}

// FilterUpstream lets h hold back upstream frames the client must not get
// (the upstream's errors answering the gateway's own events) in a session
// that is not resumed: as HoldUpstream, without continuity. A close h
// holds passes to the client after all. Call it before an upstream is
// attached.
func (s *Session) FilterUpstream(h frames.Holder) { s.u2c.SetHolder(h) }

// ClientQueued reports whether the client frame being forwarded goes to
// the queue for an upstream still to come (connecting, or a resume under
// way) rather than to an upstream. Only the client's Inspector may call
// it: it runs while the session holds the lock that guards this.
func (s *Session) ClientQueued() bool { return s.upState == upConnecting }

// InspectClient offers the client's text frames to insp (unmasked copies);
// call it before the session relays.
func (s *Session) InspectClient(insp frames.Inspector) { s.c2u.SetInspector(insp) }

// resumeHeld resumes after a close frame the Holder held back; it runs in
// the upstream's read.
func (s *Session) resumeHeld(cl frames.Close) bool {
	s.up.mu.Lock()
	l := s.cur
	s.up.mu.Unlock()
	return l != nil && s.resume(l, Loss{Close: &cl}, nil)
}

// passHeldClose sends the client a close frame the Holder held back, when
// the session was not resumed after all: as if it had passed.
func (s *Session) passHeldClose(cl frames.Close) {
	c := &s.client
	c.mu.Lock()
	act := actNone
	if c.mayWrite() {
		var frame []byte
		if cl.Code == ws.StatusNoStatusRcvd {
			frame = frames.AppendFrame(nil, ws.OpClose, nil, false)
		} else {
			frame = frames.AppendClose(nil, cl.Code, cl.Reason, false)
		}
		_ = c.ep.Send(frame)
		act = s.step(c, evSend)
	}
	c.mu.Unlock()
	s.run(c, act)
}
