package poller

import (
	"github.com/gobwas/ws"

	"rtgate/frames"
)

// Ending a session on the gateway's initiative: a frame one side must not
// have sent, the server's timers (idle, maximum duration), shutdown, and the
// watchdog dropping a side that stopped reading.

// clientProtocolError answers a frame the client must not have sent: close
// with the scanner's code to the client, and 1001 to the upstream.
func (s *Session) clientProtocolError(pe *frames.ProtocolError) {
	c := &s.client
	c.mu.Lock()
	act := actNone
	if c.mayWrite() {
		_ = c.ep.Send(frames.AppendClose(nil, pe.Code, pe.Reason, false))
		act = s.step(c, evSend)
	}
	c.mu.Unlock()
	s.run(c, act)
	s.noteClose(frames.Close{Code: pe.Code, Reason: pe.Reason}, frames.ClientSide)
	s.closeUpstream(ws.StatusGoingAway, "client protocol error")
}

// upstreamProtocolError handles a frame the upstream must not have sent: the
// client hears about it (the server's notice, then 1011).
func (s *Session) upstreamProtocolError(pe *frames.ProtocolError) {
	var notice []byte
	if s.cfg.UpstreamInvalid != nil {
		notice = s.cfg.UpstreamInvalid(pe.Reason)
	}
	s.sendClientNotice(notice, ws.StatusInternalServerError, "upstream protocol error")
	s.noteClose(frames.Close{Code: pe.Code, Reason: pe.Reason}, frames.UpstreamSide)
	s.closeUpstream(pe.Code, pe.Reason)
}

// closeUpstream sends the upstream a close frame of the gateway's own, or
// queues it if the upstream is still connecting.
func (s *Session) closeUpstream(code ws.StatusCode, reason string) {
	up := &s.up
	up.mu.Lock()
	if s.upState == upFailed || s.queuedStop || (s.upState == upReady && !up.mayWrite()) {
		up.mu.Unlock()
		return
	}
	frame := frames.AppendClose(nil, code, reason, true)
	var send []byte
	drop := false
	switch {
	case s.upState == upConnecting:
		// Never behind half a frame: the upstream would read the close
		// frame as the rest of it. The partial frame cannot complete
		// now (nothing more of the client's goes up), so it goes.
		s.trimPendingToFrame()
		_, _ = pendingSink{s}.WriteBinary(frame)
		s.queuedStop = true
	case s.c2u.MidFrame():
		// Half a client frame went upstream; a close frame now would be
		// read as its payload.
		drop = true
	default:
		send = frame
	}
	s.sendOwnClose(up, send, drop)
}

// sendClientNotice sends the client notice (may be nil) and a close frame,
// unless a close frame already went to it or an upstream frame is half
// sent.
func (s *Session) sendClientNotice(notice []byte, closeCode ws.StatusCode, closeReason string) {
	frame := append(append([]byte(nil), notice...), frames.AppendClose(nil, closeCode, closeReason, false)...)
	c := &s.client
	c.mu.Lock()
	sent := false
	act := actNone
	if c.mayWrite() && !s.u2c.MidFrame() {
		_ = c.ep.Send(frame)
		act = s.step(c, evSend)
		sent = true
	}
	c.mu.Unlock()
	if sent {
		s.noteClose(frames.Close{Code: closeCode, Reason: closeReason}, frames.UpstreamSide)
	}
	s.run(c, act)
}

// Terminate ends the session on the gateway's initiative (idle timeout,
// maximum duration, shutdown): the client gets notice (the server's error
// event; may be nil) and a close frame with code and reason, the upstream a
// close frame too; each socket closes once it answers, or after
// CloseTimeout.
//
// With a farewell (SetFarewell) the upstream gets the farewell instead, and
// both close frames wait for its answer (Farewelled).
func (s *Session) Terminate(code ws.StatusCode, reason string, notice []byte) {
	s.terminating.Store(true)
	if s.terminateGracefully(code, reason, notice) {
		return
	}
	s.sendClientNotice(notice, code, reason)
	s.closeUpstream(code, reason)
}

// Abort drops the socket on side at once, closing it under whatever write
// waits for it (no close frame could get through a side that stopped
// reading). The other side gets a close frame as if the socket had dropped.
func (s *Session) Abort(side frames.Side, reason string) {
	s.terminating.Store(true)
	s.noteClose(frames.Close{Code: ws.StatusPolicyViolation, Reason: reason}, side)
	if side == frames.ClientSide {
		s.client.ep.Drop()
		s.closeUpstream(ws.StatusGoingAway, reason)
		return
	}
	if ep := s.upEP.Load(); ep != nil {
		ep.Drop()
	}
}
