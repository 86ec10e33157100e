package poller

import (
	"time"

	"github.com/gobwas/ws"
	"github.com/valyala/bytebufferpool"

	"rtgate/frames"
)

// ClientReadable forwards what the client sent. The server calls it from the
// client connection's OnRequest.
func (s *Session) ClientReadable() {
	s.lastActivity.Store(time.Now().UnixNano())
	ep := s.client.ep
	ep.handlerBegin(ep.onPoller.Load())
	if err := ep.ReadFrames(s.fromClientFn, &s.c2u); err != nil {
		ep.Drop()
	}
	ep.handlerEnd()
}

// ClientBytes forwards bytes the client sent that the server already holds:
// frames that arrived in the same read as the HTTP upgrade request.
func (s *Session) ClientBytes(b []byte) {
	if err := s.fromClient(frames.NewByteSource(b)); err != nil {
		s.client.ep.Drop()
	}
}

// ClientGone is the client socket's close callback.
func (s *Session) ClientGone() {
	s.clientGone.Store(true)
	s.gone(&s.client)
}

// fromClient forwards client frames upstream, or queues them while the
// upstream connects. The upstream side's lock is held from the decision
// where the bytes go until they are written or queued, so attaching (which
// sends the queue and then publishes upReady under the same lock) can never
// be overtaken, and a frame is never split between queue and socket.
func (s *Session) fromClient(src frames.Source) error {
	up := &s.up
	for src.Len() > 0 {
		up.mu.Lock()
		var dst frames.Sink
		queued := false
		switch {
		case s.upState == upFailed || s.queuedStop:
			// nowhere to go: the frames are still scanned, for the
			// client's close frame
		case s.upState == upConnecting:
			dst, queued = pendingSink{s}, true
		case up.mayWrite():
			dst = up.ep.sink()
			s.wroteUp = true
		}
		cl, err := s.c2u.Forward(src, dst)
		var werr error
		if dst != nil && !queued {
			werr = up.ep.flushBatch()
		}
		act := actNone
		held := cl != nil && s.c2u.HoldsCloses() // not written: clientClosed decides
		if cl != nil && dst != nil && !held {
			if queued {
				s.queuedStop = true // its clock starts at attach
			} else {
				act = s.step(up, evSend)
			}
		}
		var first []byte
		take := s.hold
		if queued && err == nil {
			if first = s.takeHeld(); first != nil {
				s.hold = nil
			}
		}
		overflow := queued && s.pending != nil && len(s.pending.B) > s.cfg.MaxPending+s.holdAllowance()
		if overflow && err == nil {
			err = &frames.ProtocolError{Code: ws.StatusMessageTooBig, Reason: "too much data before the upstream connected"}
			s.c2u.Reset()
		}
		ep := up.ep
		replies := s.c2u.TakeReplies()
		up.mu.Unlock()

		if replies != nil {
			s.SendClient(replies.B) // the translator's answer to the client's event
			bytebufferpool.Put(replies)
		}
		s.run(up, act)
		if werr != nil {
			ep.Drop()
		}
		if first != nil {
			take(first)
		}
		if pe, ok := err.(*frames.ProtocolError); ok { // not errors.As: no allocation per read
			s.clientProtocolError(pe)
			continue // the scanner now discards the rest
		}
		if err != nil {
			return err
		}
		if cl != nil {
			s.noteClose(*cl, frames.ClientSide)
			s.closeReceived(&s.client, *cl)
			if held {
				s.clientClosed(*cl)
			}
		}
	}
	return nil
}

// fromUpstream forwards upstream frames to the client. It runs under the
// upstream Handle's read lock.
func (s *Session) fromUpstream(src frames.Source) error {
	c := &s.client
	for src.Len() > 0 {
		if s.skipFirst {
			if err := s.skipFirstFrame(src); err != nil {
				return err
			}
			continue
		}
		c.mu.Lock()
		var dst frames.Sink
		if c.mayWrite() {
			dst = c.ep.sink()
		}
		cl, err := s.u2c.Forward(src, dst)
		var werr error
		if dst != nil {
			werr = c.ep.flushBatch()
		}
		act := actNone
		// A close the continuity Holder held back is the resume's to
		// decide (below). A close held for a farewell goes no further: the
		// client gets the end's own close (finishFarewell), which is the
		// one noted.
		held := cl != nil && s.u2c.HeldClose()
		swallowed := cl != nil && !held && s.u2c.HoldsCloses() && s.farewellPending()
		if cl != nil && dst != nil && !held {
			switch {
			case !s.u2c.HoldsCloses():
				act = s.step(c, evSend)
			case !s.farewellPending():
				// Held only for a farewell: forwarded as it came.
				if werr == nil {
					werr = c.ep.Send(closeFrame(*cl, false))
				}
				act = s.step(c, evSend)
			}
		}
		replies := s.u2c.TakeReplies()
		c.mu.Unlock()

		if replies != nil {
			s.SendUpstreamRaw(replies.B) // the translator's answer, already in the upstream's protocol
			bytebufferpool.Put(replies)
		}
		s.run(c, act)
		if werr != nil {
			c.ep.Drop()
		}
		if pe, ok := err.(*frames.ProtocolError); ok {
			s.upstreamProtocolError(pe)
			continue
		}
		if held && err == nil {
			if s.resumeHeld(*cl) {
				return errResumed
			}
			// Not resumed after all: the client gets the close frame.
			s.noteClose(*cl, frames.UpstreamSide)
			s.passHeldClose(*cl)
			s.closeReceived(&s.up, *cl)
			continue
		}
		if err != nil {
			return err
		}
		if cl != nil {
			if !swallowed {
				s.noteClose(*cl, frames.UpstreamSide)
			}
			s.closeReceived(&s.up, *cl)
			if swallowed {
				s.finishFarewell() // the upstream ended: nothing more to wait for
			}
		}
	}
	s.afterUpstreamRead()
	return nil
}

// pendingSink queues client frames while the upstream connects. It copies:
// the client's input buffer is released as soon as the read returns.
// Callers hold the upstream side's lock.
type pendingSink struct{ s *Session }

func (p pendingSink) WriteBinary(b []byte) (int, error) {
	s := p.s
	n := len(b)
	if s.pending == nil {
		s.pending = bytebufferpoolGet()
	}
	s.pending.B = append(s.pending.B, b...)
	return n, nil
}

// trimPendingToFrame drops a partial frame from the end of the queue, so
// that a close frame queued behind it is not read as its payload. Callers
// hold the upstream side's lock.
func (s *Session) trimPendingToFrame() {
	if s.pending == nil {
		return
	}
	b := s.pending.B
	off := 0
	for {
		h, hlen, ok, err := frames.ParseHeader(b[off:])
		if !ok || err != nil || int64(len(b)-off-hlen) < h.Length {
			break
		}
		off += hlen + int(h.Length)
	}
	s.pending.B = b[:off]
}
