package frames

import (
	"github.com/gobwas/ws"
	"github.com/valyala/bytebufferpool"
)

// Inspector looks inside selected text frames as they pass, without holding
// them up: usage accounting reads response.done this way. Only unfragmented
// text frames of at most MaxInspect bytes are offered; a masked (client)
// frame's payload is unmasked in a copy, never in the stream.
type Inspector interface {
	// Wants sees the first InspectPrefix bytes of a frame's payload (all
	// of a shorter one) and says whether to see the whole payload.
	Wants(prefix []byte) bool
	// Inspect gets the whole payload of a frame Wants chose, once the
	// frame has been forwarded. It must not keep p.
	Inspect(p []byte)
}

const (
	// InspectPrefix is how much of a frame Inspector.Wants sees.
	InspectPrefix = 256
	// MaxInspect bounds the frames an Inspector is offered: only they are
	// ever copied aside.
	MaxInspect = 1 << 20
)

// startInspect offers a text frame whose first payload bytes are p (perhaps
// not all of them yet) to the inspector, copying aside only what it must.
func (s *Scanner) startInspect(h ws.Header, p []byte) {
	if s.insp == nil || h.OpCode != ws.OpText || !h.Fin || h.Length > MaxInspect {
		return
	}
	s.captureLen = uint64(h.Length)
	s.masked, s.mask = h.Masked, h.Mask
	prefix := min(int(h.Length), InspectPrefix)
	if h.Masked {
		// A client frame: look at an unmasked copy, from the first byte.
		s.captureState = capturePrefix
		s.capture = bytebufferpool.Get()
		s.capture.B = s.capture.B[:0]
		s.continueInspect(p, uint64(len(p)) == s.captureLen)
		return
	}
	if len(p) >= prefix {
		// The common case: the prefix is at hand, no copy needed.
		if !s.insp.Wants(p[:prefix]) {
			return
		}
		if uint64(len(p)) == s.captureLen {
			s.insp.Inspect(p)
			return
		}
		s.captureState = captureWhole
	} else {
		s.captureState = capturePrefix
	}
	s.capture = bytebufferpool.Get()
	s.capture.B = append(s.capture.B[:0], p...)
}

// continueInspect adds payload bytes of the frame being captured; last says
// they end the frame.
func (s *Scanner) continueInspect(p []byte, last bool) {
	if s.captureState == capturePrefix {
		// Only the prefix is copied until Wants has said yes: a client's
		// audio frame is never copied whole.
		prefix := min(int(s.captureLen), InspectPrefix)
		n := min(len(p), prefix-len(s.capture.B))
		s.appendCapture(p[:n])
		p = p[n:]
		if len(s.capture.B) < prefix {
			if last {
				s.endCapture()
			}
			return
		}
		if !s.insp.Wants(s.capture.B[:prefix]) {
			s.endCapture()
			return
		}
		s.captureState = captureWhole
	}
	s.appendCapture(p)
	if last {
		s.insp.Inspect(s.capture.B)
		s.endCapture()
	}
}

// appendCapture adds payload bytes to the capture, unmasked.
func (s *Scanner) appendCapture(p []byte) {
	off := len(s.capture.B)
	s.capture.B = append(s.capture.B, p...)
	if s.masked {
		ws.Cipher(s.capture.B[off:], s.mask, off)
	}
}

// Offer shows the Inspector a whole text message that reaches the other
// side outside Forward: one a Translator held back and the relay releases
// later (a guardrail's check), which the accounting must read as if it had
// passed when it came.
func (s *Scanner) Offer(p []byte) {
	if s.insp != nil && len(p) <= MaxInspect && s.insp.Wants(p[:min(len(p), InspectPrefix)]) {
		s.insp.Inspect(p)
	}
}
