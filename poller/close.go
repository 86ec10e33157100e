package poller

import (
	"time"

	"github.com/gobwas/ws"

	"rtgate/frames"
)

// Each socket of a session runs its own close handshake (RFC 6455 5.5.1,
// 7.1): a close frame goes to it and one comes from it, in either order, and
// then its TCP connection ends. The states and what moves between them are
// the table below; every change of a side's close state goes through step.

// closeState is where a socket's close handshake stands.
type closeState uint8

const (
	// closeOpen: frames pass both ways.
	closeOpen closeState = iota
	// closeSent: our close frame went to the socket; its answer is awaited
	// for CloseTimeout.
	closeSent
	// closeRecv: the socket sent its close frame; ours has not gone yet.
	closeRecv
	// closeDone: both close frames passed. A client socket is closed now
	// (the gateway is its server and closes TCP first). An upstream socket
	// waits for the upstream to close TCP first, as RFC 6455 7.1.1 has the
	// server do, so that TIME_WAIT lands on the upstream's side and not on
	// the gateway's ephemeral ports; CloseTimeout bounds the wait.
	closeDone
	// closeGone: the socket ended (its close callback ran).
	closeGone
)

var closeStateNames = [...]string{"open", "close-sent", "close-received", "closing", "gone"}

func (c closeState) String() string { return closeStateNames[c] }

// closeEvent is what happens to a socket.
type closeEvent uint8

const (
	evSend    closeEvent = iota // a close frame went to the socket
	evRecv                      // a close frame came from the socket
	evHangup                    // the socket ended: a FIN, a reset, or our own close
	evTimeout                   // CloseTimeout passed in a waiting state
)

var closeEventNames = [...]string{"send", "receive", "hang-up", "timeout"}

func (e closeEvent) String() string { return closeEventNames[e] }

// closeAction is what a transition makes the session do.
type closeAction uint8

const (
	actNone       closeAction = iota
	actStartTimer             // start the clock on the socket's answer
	actFinish                 // both close frames passed: close the client socket, or wait for the upstream's FIN
	actDrop                   // stop waiting: close the socket now
	actTellOther              // the socket is gone: the other side learns of it
	actAnswer                 // the peer sent its close and hung up (a half-close): answer its close on the way out, then tell the other side
)

// closeTable is every transition; a (state, event) pair not listed changes
// nothing (a second close frame, a timeout that lost the race with an
// answer, anything after closeGone).
var closeTable = [...]struct {
	from closeState
	on   closeEvent
	to   closeState
	act  closeAction
}{
	{closeOpen, evSend, closeSent, actStartTimer},
	{closeOpen, evRecv, closeRecv, actNone},
	{closeOpen, evHangup, closeGone, actTellOther},
	{closeSent, evRecv, closeDone, actFinish},
	{closeSent, evTimeout, closeSent, actDrop},
	{closeSent, evHangup, closeGone, actTellOther},
	{closeRecv, evSend, closeDone, actFinish},
	{closeRecv, evHangup, closeGone, actAnswer},
	{closeDone, evTimeout, closeDone, actDrop},
	{closeDone, evHangup, closeGone, actTellOther},
}

// transition looks up the table.
func transition(from closeState, on closeEvent) (closeState, closeAction) {
	for _, t := range closeTable {
		if t.from == from && t.on == on {
			return t.to, t.act
		}
	}
	return from, actNone
}

// step applies event on to side sd and returns what the caller must do once
// it has released sd.mu (closing a socket runs netpoll's close callbacks,
// which take the side's lock). Starting the timer needs no such care and
// happens here. Callers hold sd.mu.
func (s *Session) step(sd *side, on closeEvent) closeAction {
	to, act := transition(sd.state, on)
	sd.state = to
	if act == actStartTimer {
		if s.cfg.CloseTimeout > 0 && sd.timer == nil {
			sd.timer = time.AfterFunc(s.cfg.CloseTimeout, func() { s.closeTimeout(sd) })
		}
		return actNone
	}
	if to == closeGone && sd.timer != nil {
		sd.timer.Stop()
	}
	return act
}

// run carries out actFinish and actDrop for sd; callers do not hold sd.mu.
func (s *Session) run(sd *side, act closeAction) {
	switch act {
	case actFinish:
		if sd.which == frames.ClientSide || s.cfg.CloseTimeout <= 0 {
			sd.ep.Close()
			return
		}
		sd.mu.Lock()
		if sd.state == closeDone {
			if sd.timer != nil {
				sd.timer.Stop()
			}
			sd.timer = time.AfterFunc(s.cfg.CloseTimeout, func() { s.closeTimeout(sd) })
		}
		sd.mu.Unlock()
	case actDrop:
		sd.ep.Drop()
	}
}

// closeTimeout is a side's timer: its answer (or its FIN) did not come.
func (s *Session) closeTimeout(sd *side) {
	sd.mu.Lock()
	act := s.step(sd, evTimeout)
	sd.mu.Unlock()
	s.run(sd, act)
}

// closeRecv records a close frame c from sd.
func (s *Session) closeReceived(sd *side, c frames.Close) {
	sd.mu.Lock()
	sd.got = c
	act := s.step(sd, evRecv)
	sd.mu.Unlock()
	s.run(sd, act)
}

// mayWrite reports whether frames may still go to sd: no close frame went to
// it and it is not gone. Callers hold sd.mu.
func (sd *side) mayWrite() bool {
	return sd.ep != nil && (sd.state == closeOpen || sd.state == closeRecv)
}

// gone is the close callback of either socket: nothing more will come from
// it. The other side learns of it, and the session ends when both are gone.
func (s *Session) gone(sd *side) {
	sd.mu.Lock()
	if sd.state == closeGone {
		sd.mu.Unlock()
		return
	}
	act := s.step(sd, evHangup)
	if act == actAnswer {
		s.answerHalfClose(sd)
	}
	sd.mu.Unlock()
	if sd.which == frames.ClientSide {
		s.tellGone(&s.up, frames.ClientSide)
	} else {
		s.tellGone(&s.client, frames.UpstreamSide)
	}
	s.maybeEnd()
}

// answerHalfClose answers the close frame of a peer that then shut down its
// sending side. netpoll reports that (EPOLLRDHUP) as a hang-up and closes the
// socket right after the close callbacks, so the answer cannot wait for the
// other side's: the gateway answers with the peer's own code, as an echoing
// endpoint would, by a raw non-blocking write on the descriptor, which is
// still open while the close callbacks run. Over TLS the answer is one
// record written the same way; what TLS cannot do is wait for the kernel to
// take a record it did not take at once (the socket is gone right after), and
// a peer that already sent a TLS close_notify may reset instead of reading.
// Callers hold sd.mu.
func (s *Session) answerHalfClose(sd *side) {
	mid := s.u2c.MidFrame()
	if sd.which == frames.UpstreamSide {
		mid = s.c2u.MidFrame()
	}
	if sd.ep == nil || mid {
		return
	}
	mask := sd.which == frames.UpstreamSide
	var frame []byte
	if sd.got.Code == ws.StatusNoStatusRcvd {
		frame = frames.AppendFrame(nil, ws.OpClose, nil, mask)
	} else {
		frame = frames.AppendClose(nil, sd.got.Code, sd.got.Reason, mask)
	}
	sd.ep.lastWords(frame)
}

// tellGone tells socket o that the socket on side lost went away: a close
// frame of the gateway's own if o has not had one yet (1001 for the upstream,
// 1011 for the client, or the client's own close echoed when the client had
// started the close), then o closes once it answers.
func (s *Session) tellGone(o *side, lost frames.Side) {
	o.mu.Lock()
	if o.ep == nil || o.state == closeGone {
		o.mu.Unlock()
		return // an upstream still connecting: attaching sees clientGone
	}
	// Noted before o can answer, so that its answer is not taken for the
	// session's first close.
	if lost == frames.UpstreamSide {
		s.noteClose(frames.Close{Code: ws.StatusAbnormalClosure, Reason: "upstream connection lost"}, frames.UpstreamSide)
	} else {
		s.noteClose(frames.Close{Code: ws.StatusAbnormalClosure, Reason: "client connection lost"}, frames.ClientSide)
	}
	if lost == frames.ClientSide && (s.farewellPending() || s.startFarewellLocked(ws.StatusGoingAway, "client went away")) {
		o.mu.Unlock() // the upstream closes once the farewell is answered
		return
	}
	var frame []byte
	drop := false
	fwEnds := lost == frames.UpstreamSide && s.farewellPending() && s.fw.done.CompareAndSwap(false, true)
	if o.mayWrite() {
		switch {
		case fwEnds && !s.u2c.MidFrame():
			// The upstream went while the farewell waited: the client
			// gets the end's own code.
			frame = frames.AppendClose(nil, s.fw.code, s.fw.reason, false)
		case lost == frames.ClientSide && s.c2u.MidFrame(), lost == frames.UpstreamSide && s.u2c.MidFrame():
			drop = true // a close frame now would be read as the rest of a frame
		case lost == frames.ClientSide:
			frame = frames.AppendClose(nil, ws.StatusGoingAway, "client went away", true)
		case o.state == closeRecv:
			// The client started the close; answer it as the upstream
			// would have.
			if o.got.Code == ws.StatusNoStatusRcvd {
				frame = frames.AppendFrame(nil, ws.OpClose, nil, false)
			} else {
				frame = frames.AppendClose(nil, o.got.Code, o.got.Reason, false)
			}
		default:
			frame = frames.AppendClose(nil, ws.StatusInternalServerError, "upstream connection lost", false)
		}
	}
	s.sendOwnClose(o, frame, drop)
}

// sendOwnClose ends a close of the gateway's own on sd, whose lock the caller
// holds and which it releases: it sends frame (none when nil) and steps the
// close state, or with drop drops the socket instead (a close frame now would
// be read as the rest of a half-sent frame).
func (s *Session) sendOwnClose(sd *side, frame []byte, drop bool) {
	act := actNone
	if frame != nil && !drop {
		_ = sd.ep.Send(frame)
		act = s.step(sd, evSend)
	}
	ep := sd.ep
	sd.mu.Unlock()
	if drop {
		ep.Drop()
		return
	}
	s.run(sd, act)
}
