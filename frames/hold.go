package frames

import "github.com/gobwas/ws"

// What a relay holds back rather than forwards (session continuity: the
// upstream's session_expired error and the close frames a fresh upstream
// repairs). The scanner waits for a small text frame to be whole before it
// forwards any of it only while a Holder is set, so a relay without one
// streams every frame as before.

// Holder holds back upstream frames the relay must not pass on: a few
// events and close frames the gateway acts on itself (session continuity).
// Only unfragmented, unmasked text frames of at most MaxHold bytes are
// offered, whole (the scanner waits for the whole frame before forwarding
// any of it), and every close frame.
type Holder interface {
	// HoldText sees a small text frame's payload and says whether to
	// consume it instead of forwarding it. It must not keep p.
	HoldText(p []byte) bool
	// HoldClose says whether to consume a close frame rather than forward
	// it; Forward still returns it, and HeldClose then reports true.
	HoldClose(c Close) bool
}

// MaxHold bounds the text frames a Holder is offered: a frame held whole
// before it is forwarded costs its size in the stash and a little latency,
// so only small events are; audio deltas are larger and stream through.
const MaxHold = 1024

// SetHolder makes the scanner offer small text frames and close frames to
// h, which may hold them back.
func (s *Scanner) SetHolder(h Holder) { s.hold = h }

// Holding reports whether a Holder is set.
func (s *Scanner) Holding() bool { return s.hold != nil }

// HeldClose reports whether the close frame Forward just returned was held
// back rather than forwarded, and forgets it.
func (s *Scanner) HeldClose() bool {
	held := s.heldClose
	s.heldClose = false
	return held
}

// holdLen is the whole length of a frame whose header b holds, when a
// Holder is to see it whole (a small unfragmented unmasked text frame),
// else 0.
func (s *Scanner) holdLen(b []byte) int {
	h, hlen, err := parseHeader(b)
	if err != nil || h.OpCode != ws.OpText || !h.Fin || h.Masked || h.Length > MaxHold {
		return 0
	}
	return hlen + int(h.Length)
}
