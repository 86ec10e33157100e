package poller

import (
	"sync/atomic"
	"time"

	"github.com/gobwas/ws"

	"rtgate/frames"
)

// Two things a protocol may ask of the relay that the Realtime API does not
// (GPT-Live asks both; the server sets them per session):
//
// A held first message (HoldFirst). The client's first data message says
// where the session goes (session.start names the model), so it is cut out
// of the queue of client frames that waits for the upstream and handed to
// the server, which dials and sends its own version first.
//
// A farewell (SetFarewell). A close frame ends a Live upstream session
// without its final usage; the protocol's own end event does not. So when
// the client leaves (its close frame, or its socket dropping), or the
// gateway ends the session (Terminate), the upstream gets the farewell event
// instead of a close frame, and the close follows once the upstream's final
// event came (Farewelled), the upstream closed, or the wait ran out:
//
//	state     event                                   next
//	idle      client close / client gone / Terminate  waiting (farewell sent upstream; a client close is answered at once)
//	waiting   Farewelled, upstream close, wait over   done    (client closed with the end's code unless gone; upstream closed)
//	waiting   upstream gone                           done    (client closed with the end's code, not 1011)
//
// Close frames in both directions are held by the scanners (HoldCloses) and
// sent by the session itself: a client's close must not reach the upstream
// before the farewell, nor the upstream's close reach a client that is to
// get the gateway's own code.
type farewell struct {
	// frame makes the end event, a masked client frame, when the end
	// comes; nil from it means nothing is owed (a Realtime session with
	// no response in flight): the close goes as without a farewell.
	frame   func() []byte
	wait    time.Duration
	started atomic.Bool // the event went upstream
	done    atomic.Bool // the close followed
	final   atomic.Bool // the upstream's final event came (Farewelled)
	// Set before started, read after: the close the client gets (if not
	// gone) and the upstream gets.
	code   ws.StatusCode
	reason string
	timer  *time.Timer // guarded by up.mu
}

// SetFarewell makes the session end its upstream with frame (the protocol's
// end event, masked), waiting up to wait for the upstream's final event.
// Call it before the upstream is attached and before any client frame.
func (s *Session) SetFarewell(frame []byte, wait time.Duration) {
	s.SetFarewellFunc(func() []byte { return frame }, wait)
}

// SetFarewellFunc is SetFarewell for an end event that depends on the
// session's state when it ends (the Realtime API's response.cancel for each
// response in flight): frame is called once, under the upstream side's
// lock, when the end comes, and must not block; nil means none is owed.
func (s *Session) SetFarewellFunc(frame func() []byte, wait time.Duration) {
	s.fw = &farewell{frame: frame, wait: wait}
	s.c2u.HoldCloses()
	s.u2c.HoldCloses()
}

// SendUpstream sends frames the gateway built (masked client events of its
// own, in the client's protocol: a translating session translates them) to
// the upstream, unless it is not open, a close went to it, or a
// client frame is half sent; false when it could not.
func (s *Session) SendUpstream(frame []byte) bool {
	up := &s.up
	up.mu.Lock()
	defer up.mu.Unlock()
	if s.upState != upReady || !up.mayWrite() || up.state != closeOpen || s.c2u.MidFrame() {
		return false
	}
	if s.c2u.Translating() {
		frame = s.c2u.TranslateOwn(frame) // the gateway's events in the upstream's protocol
	}
	if up.ep.Send(frame) != nil {
		return false
	}
	s.wroteUp = true
	return true
}

// SendUpstreamRaw sends frames already in the upstream's protocol (masked):
// a translated session's own messages to its provider (an upstream
// translator's replies, a Gemini session's deferred request for an answer),
// on the terms SendUpstream keeps, without translating them.
func (s *Session) SendUpstreamRaw(frame []byte) bool {
	up := &s.up
	up.mu.Lock()
	defer up.mu.Unlock()
	if s.upState != upReady || !up.mayWrite() || up.state != closeOpen || s.c2u.MidFrame() {
		return false
	}
	if up.ep.Send(frame) != nil {
		return false
	}
	s.wroteUp = true
	return true
}

// BytesToClient returns the bytes relayed to the client so far. Only the
// upstream's read path (an Inspector, a resume) or the session's end may
// call it: the counter is that path's own.
func (s *Session) BytesToClient() uint64 { return s.u2c.Bytes }

// BytesFromClient returns the bytes the client sent so far (its relay
// counter, read under the lock its forwarding holds: up.mu). An upstream
// Inspector may call it, under client.mu: that is the lock order (the package doc);
// a client Inspector may not (it runs under up.mu).
func (s *Session) BytesFromClient() uint64 {
	s.up.mu.Lock()
	defer s.up.mu.Unlock()
	return s.c2u.Bytes
}

// Farewelled tells the session the upstream's final event (the answer to
// the farewell) came. It takes no lock, so an inspector may call it from
// the read path; the close follows once that read is done.
func (s *Session) Farewelled() {
	if s.fw != nil {
		s.fw.final.Store(true)
	}
}

// farewellResumed forgets the lost upstream's final event (a session.closed
// at its cap, say): the fresh upstream's is yet to come (Session.resume).
func (s *Session) farewellResumed() {
	if s.fw != nil {
		s.fw.final.Store(false)
	}
}

// HoldFirst makes the session hand the client's first data message (its
// frames, masked as they came) to take instead of queuing it, while the
// upstream is connecting; control frames before it stay queued. take gets
// nil if the client sends a close frame first. It runs on the client's read
// path, outside the session's locks, and must not block. While the message
// is held, up to MaxMessage bytes more than MaxPending may wait.
func (s *Session) HoldFirst(take func(msg []byte)) {
	s.up.mu.Lock()
	s.hold = take
	s.up.mu.Unlock()
}

// takeHeld cuts the first whole data message out of the queue for the
// hold, and reports it (nil while it is not whole). Callers hold up.mu.
func (s *Session) takeHeld() []byte {
	if s.hold == nil || s.pending == nil {
		return nil
	}
	b := s.pending.B
	off, start := 0, -1
	for {
		h, hlen, ok, err := frames.ParseHeader(b[off:])
		if !ok || err != nil || int64(len(b)-off-hlen) < h.Length {
			return nil
		}
		end := off + hlen + int(h.Length)
		if start < 0 && h.OpCode.IsControl() {
			off = end
			continue
		}
		if start < 0 {
			start = off
		}
		off = end
		if h.Fin && !h.OpCode.IsControl() {
			msg := append([]byte(nil), b[start:off]...)
			s.pending.B = append(b[:start], b[off:]...)
			return msg
		}
	}
}

// holdAllowance is how far the queue may grow past MaxPending while the
// first message is held. Callers hold up.mu.
func (s *Session) holdAllowance() int {
	if s.hold == nil {
		return 0
	}
	return int(s.cfg.MaxMessage) + ws.MaxHeaderSize
}

// clientClosed acts on a close frame from the client the scanner held
// (SetFarewell): before the first message, the hold hears of it; while
// connecting, it is queued as it would have been; on an open upstream, the
// farewell starts and the client's close is answered at once.
func (s *Session) clientClosed(cl frames.Close) {
	up := &s.up
	up.mu.Lock()
	switch {
	case s.hold != nil && s.upState == upConnecting:
		take := s.hold
		s.hold = nil
		up.mu.Unlock()
		take(nil)
		return
	case s.upState == upConnecting && !s.queuedStop:
		s.trimPendingToFrame()
		_, _ = pendingSink{s}.WriteBinary(closeFrame(cl, true))
		s.queuedStop = true
		up.mu.Unlock()
		return
	}
	started := s.fw.started.Load() || s.startFarewellLocked(endCode(cl), cl.Reason)
	up.mu.Unlock()
	if started {
		s.sendClientNotice(nil, endCode(cl), cl.Reason) // answered: the client need not wait
		return
	}
	// No farewell (the upstream is not open): the close goes as it would
	// have without one.
	s.closeUpstream(endCode(cl), cl.Reason)
}

// startFarewellLocked sends the farewell upstream and starts its clock;
// false when there is none or the upstream cannot take it. Callers hold
// up.mu.
func (s *Session) startFarewellLocked(code ws.StatusCode, reason string) bool {
	if !s.canFarewellLocked() {
		return false
	}
	fw := s.fw
	frame := fw.frame()
	if frame == nil {
		return false // nothing owed: the close goes as without a farewell
	}
	fw.code, fw.reason = code, reason
	if s.c2u.Translating() {
		frame = s.c2u.TranslateOwn(frame)
	}
	// Published before the frame goes: the upstream may answer at once (its
	// final event, then its close frame), and the upstream's read path,
	// which holds the client side's lock and not this one, must then see
	// the farewell pending and hold that close back (fromUpstream), or the
	// client gets the upstream's close (1000) instead of the end's code.
	fw.started.Store(true)
	if err := s.up.ep.Send(frame); err != nil {
		fw.started.Store(false)
		return false
	}
	s.wroteUp = true
	fw.timer = time.AfterFunc(fw.wait, s.finishFarewell)
	if fw.final.Load() {
		go s.finishFarewell() // the upstream had already ended (expired, say)
	}
	return true
}

// canFarewellLocked reports whether the farewell can go upstream now.
// Callers hold up.mu.
func (s *Session) canFarewellLocked() bool {
	return s.fw != nil && !s.fw.started.Load() && s.upState == upReady && s.up.ep != nil &&
		s.up.state == closeOpen && !s.c2u.MidFrame()
}

// farewellPending reports whether a farewell is waiting for its answer.
func (s *Session) farewellPending() bool {
	return s.fw != nil && s.fw.started.Load() && !s.fw.done.Load()
}

// finishFarewell closes the session once the farewell was answered (or its
// wait ran out): the client with the end's code (unless it is gone), the
// upstream with a close frame.
func (s *Session) finishFarewell() {
	fw := s.fw
	if !fw.done.CompareAndSwap(false, true) {
		return
	}
	s.up.mu.Lock()
	t := fw.timer // guarded by up.mu: the timer may fire before it is stored
	s.up.mu.Unlock()
	if t != nil {
		t.Stop()
	}
	s.sendClientNotice(nil, fw.code, fw.reason)
	s.closeUpstream(fw.code, fw.reason)
}

// afterUpstreamRead finishes a farewell whose answer the read just
// forwarded.
func (s *Session) afterUpstreamRead() {
	if fw := s.fw; fw != nil && fw.final.Load() && fw.started.Load() && !fw.done.Load() {
		s.finishFarewell()
	}
}

// endCode is the close code to pass on for a client's close: a code that
// may not be sent (1005, no code given) becomes 1000.
func endCode(cl frames.Close) ws.StatusCode {
	if cl.Code == ws.StatusNoStatusRcvd {
		return ws.StatusNormalClosure
	}
	return cl.Code
}

// closeFrame rebuilds a held close frame (mask: for the upstream).
func closeFrame(cl frames.Close, mask bool) []byte {
	if cl.Code == ws.StatusNoStatusRcvd {
		return frames.AppendFrame(nil, ws.OpClose, nil, mask)
	}
	return frames.AppendClose(nil, cl.Code, cl.Reason, mask)
}

// terminateGracefully is Terminate for a session with a farewell: notice
// goes to the client now, then the farewell upstream, and the close (code,
// reason) to both once it is answered. False when the upstream cannot take
// a farewell (not open yet, or gone): Terminate closes at once then.
func (s *Session) terminateGracefully(code ws.StatusCode, reason string, notice []byte) bool {
	if s.fw == nil {
		return false
	}
	if s.fw.started.Load() {
		return true // already ending the Live way
	}
	s.up.mu.Lock()
	can := s.canFarewellLocked()
	s.up.mu.Unlock()
	if !can {
		return false
	}
	// The notice goes first: the farewell's answer must not overtake it.
	c := &s.client
	c.mu.Lock()
	if notice != nil && c.mayWrite() && !s.u2c.MidFrame() {
		_ = c.ep.Send(notice)
	}
	c.mu.Unlock()
	s.up.mu.Lock()
	started := s.startFarewellLocked(code, reason)
	s.up.mu.Unlock()
	if !started && !s.fw.started.Load() {
		// The upstream went meanwhile: close as Terminate would.
		s.sendClientNotice(nil, code, reason)
		s.closeUpstream(code, reason)
	}
	return true
}
