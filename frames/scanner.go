// Package frames scans a WebSocket byte stream frame by frame and forwards it
// verbatim: header and payload bytes exactly as they arrived, masks included.
//
// The gateway never re-frames a message. Client frames are masked on both hops
// (client to gateway, gateway to upstream) and server frames are unmasked on both
// hops, so the bytes that arrive are valid on the other socket as they are. What
// the scanner adds is the knowledge of where frames begin and end, so that the
// relay can validate each header before a byte of the frame leaves, see close
// frames as they pass, and stream a multi-megabyte audio append without waiting
// for the whole frame.
//
// A Scanner never leaves input unconsumed. netpoll calls its OnRequest handler
// again at once while input remains, so a handler that waited for the rest of a
// frame would spin. Instead, a frame's payload is forwarded as it arrives, and the
// only bytes the scanner ever holds back are a partial header or a partial
// control frame (at most 14+125 bytes), kept in a pooled buffer that exists only
// while such a fragment is pending.
package frames

import (
	"encoding/binary"
	"errors"
	"unicode/utf8"

	"github.com/gobwas/ws"
	"github.com/valyala/bytebufferpool"
)

// Side names the two ends of a relayed WebSocket, the client and the
// upstream (the server): which one a frame comes from fixes the masking
// rule, and a session names its sockets by it.
type Side uint8

const (
	// ClientSide frames must be masked (RFC 6455 section 5.1).
	ClientSide Side = iota
	// UpstreamSide frames must not be masked.
	UpstreamSide
)

func (s Side) String() string {
	if s == ClientSide {
		return "client"
	}
	return "upstream"
}

// Source is the part of netpoll.Reader the scanner reads from. Bytes returned
// by Next stay valid until the caller releases the source, which it must do only
// after the sink has flushed them.
type Source interface {
	Len() int
	Peek(n int) ([]byte, error)
	Next(n int) ([]byte, error)
	Skip(n int) error
}

// Sink is the part of netpoll.Writer the scanner writes to. WriteBinary may
// keep a reference to p until the caller flushes the sink, except for
// pieces of at most 139 bytes (the longest frame start: a header and a
// control payload), which it must copy: the scanner writes its own
// reused memory only in such pieces.
type Sink interface {
	WriteBinary(p []byte) (int, error)
}

// ProtocolError is a frame the scanner refused. Code is the close code the
// sending side should get (1002, 1007 or 1009); Reason is safe to send in a
// close frame and to log.
type ProtocolError struct {
	Code   ws.StatusCode
	Reason string
}

func (e *ProtocolError) Error() string { return e.Reason }

// Close describes a close frame that passed through the scanner.
type Close struct {
	// Code is the status code; ws.StatusNoStatusRcvd (1005) when the frame had
	// no payload.
	Code   ws.StatusCode
	Reason string
}

// capture states
const (
	captureNone   = iota
	capturePrefix // collecting the prefix for Wants
	captureWhole  // Wants said yes: collecting the payload for Inspect
)

// maxFrameStart is the most bytes the scanner ever needs before it can act on
// a frame: the longest header plus the longest control payload.
const maxFrameStart = ws.MaxHeaderSize + ws.MaxControlFramePayloadSize

// Scanner tracks one direction of one WebSocket connection. The zero value is
// not usable; make one with NewScanner. A Scanner is not safe for concurrent
// use: netpoll runs at most one OnRequest per connection at a time, which is
// the only place a scanner is driven from.
type Scanner struct {
	maxMessage uint64 // payload bytes per message; 0 means no limit

	remaining  uint64 // bytes of the current frame still to pass through
	message    uint64 // payload bytes of the current message so far
	from       Side
	fragmented bool // a fragmented data message is in progress
	failed     bool // a frame was refused: the stream can no longer be parsed
	holdClose  bool // close frames are returned, not written (HoldCloses)
	// captureState sits with the flags above: one word for all four
	// (a scanner is embedded twice in every session).
	captureState uint8

	// stash holds the start of a frame that arrived in pieces: a partial
	// header, or a control frame not yet complete. Nil almost always.
	stash *bytebufferpool.ByteBuffer

	// Frames and Bytes count what passed through, for usage records.
	Frames uint64
	Bytes  uint64

	insp       Inspector
	captureLen uint64 // payload length of the frame being captured
	capture    *bytebufferpool.ByteBuffer
	mask       [4]byte // the captured frame's mask, when masked
	masked     bool
	heldClose  bool // the last close frame was held back (Holder)
	dropRest   bool // DropRest: the current frame's rest is written nowhere
	hold       Holder

	// KeepCut: the part forwarded so far of a frame that a read ended in
	// the middle of, while the frame is at most keepMax bytes long. Nil
	// almost always: a frame forwarded within one read keeps nothing.
	keepMax uint32
	cut     *bytebufferpool.ByteBuffer

	tr *translation // SetTranslator; nil on a verbatim relay
}

// Remaining is how many bytes of the current frame are still to pass: the
// rest of a frame cut in two (MidFrame).
func (s *Scanner) Remaining() uint64 { return s.remaining }

// SetInspector makes the scanner offer text frames to insp.
func (s *Scanner) SetInspector(insp Inspector) { s.insp = insp }

// NewScanner returns a scanner for frames coming from side from.
// maxMessage bounds the payload of one (possibly fragmented) message; 0 means
// no limit.
func NewScanner(from Side, maxMessage int64) *Scanner {
	s := &Scanner{}
	s.Init(from, maxMessage)
	return s
}

// Init prepares a scanner embedded in a larger struct, saving an allocation
// per session.
func (s *Scanner) Init(from Side, maxMessage int64) {
	*s = Scanner{from: from}
	if maxMessage > 0 {
		s.maxMessage = uint64(maxMessage)
	}
}

// HoldCloses makes Forward return close frames without writing them to
// dst (they are still validated and counted): for a relay that answers a
// close on the protocol's terms first (GPT-Live: session.close, then
// session.closed carrying the final usage) and sends the close frame itself.
// Call it before the first Forward.
func (s *Scanner) HoldCloses() { s.holdClose = true }

// HoldsCloses reports whether HoldCloses was called.
func (s *Scanner) HoldsCloses() bool { return s.holdClose }

// MidFrame reports whether part of a frame has been forwarded and the rest has
// not. A relay must not inject a frame of its own into the stream then. A
// frame start held in the stash has not been forwarded, so it does not count.
func (s *Scanner) MidFrame() bool {
	return s.remaining > 0 && s.tr == nil // a translating scanner writes whole messages only
}

// Failed reports whether the scanner refused a frame; it discards all input
// since.
func (s *Scanner) Failed() bool { return s.failed }

// Reset drops any partial frame the scanner holds.
func (s *Scanner) Reset() {
	if s.stash != nil {
		bytebufferpool.Put(s.stash)
		s.stash = nil
	}
	s.endCapture()
	s.endCut()
	if s.tr != nil {
		s.tr.reset()
	}
}

func (s *Scanner) endCapture() {
	if s.capture != nil {
		bytebufferpool.Put(s.capture)
		s.capture = nil
	}
	s.captureState = captureNone
}

// Forward consumes everything src holds, writing complete frame headers and
// payload bytes to dst as they become available. A nil dst discards the frames
// (they are still validated and counted). Forward returns early, with the rest
// of src unread, right after a close frame, so the caller can act on it; it
// returns a *ProtocolError for a frame that must not be forwarded, before any
// byte of that frame reached dst.
func (s *Scanner) Forward(src Source, dst Sink) (*Close, error) {
	if s.failed {
		// After a refused frame there is no telling where the next frame
		// starts: drop everything until the connection closes.
		return nil, src.Skip(src.Len())
	}
	if s.tr != nil {
		s.tr.out.release() // the caller flushed it (SetTranslator)
	}
	cl, err := s.forward(src, dst)
	if err != nil {
		// A type assertion, not errors.As: taking the address of a local
		// to hand to errors.As would move it to the heap on every call.
		if _, refused := err.(*ProtocolError); refused {
			s.failed = true
			s.Reset()
		}
	}
	return cl, err
}

func (s *Scanner) forward(src Source, dst Sink) (*Close, error) {
	for {
		if s.remaining > 0 {
			n := src.Len()
			if n == 0 {
				return nil, nil
			}
			if uint64(n) > s.remaining {
				n = int(s.remaining)
			}
			p, err := src.Next(n)
			if err != nil {
				return nil, err
			}
			if s.tr != nil && s.tr.msg != nil {
				s.remaining -= uint64(n)
				s.Bytes += uint64(n)
				if err := s.more(p, dst); err != nil {
					return nil, err
				}
				continue
			}
			to := dst
			if s.dropRest {
				to = nil
			}
			if err := write(to, p); err != nil {
				return nil, err
			}
			s.remaining -= uint64(n)
			if s.remaining == 0 {
				s.dropRest = false
			}
			if s.cut != nil {
				s.cut.B = append(s.cut.B, p...)
				if s.remaining == 0 {
					s.endCut()
				}
			}
			if s.captureState != captureNone {
				s.continueInspect(p, s.remaining == 0)
			}
			s.Bytes += uint64(n)
			continue
		}
		start, fromStash, err := s.frameStart(src)
		if err != nil || start == nil {
			return nil, err
		}
		cl, err := s.frame(start, src, fromStash, dst)
		if err != nil || cl != nil {
			return cl, err
		}
	}
}

// frameStart returns the first bytes of the next frame: its whole header, and
// for a control frame its whole payload too. It returns nil when src runs out
// first, after moving what there was into the stash.
func (s *Scanner) frameStart(src Source) (start []byte, fromStash bool, err error) {
	avail := src.Len()
	if s.stash == nil {
		if avail == 0 {
			return nil, false, nil
		}
		if avail >= 2 {
			p, err := src.Peek(2)
			if err != nil {
				return nil, false, err
			}
			need, err := s.need(p)
			if err != nil {
				return nil, false, err
			}
			if avail >= need {
				p, err := src.Peek(need)
				if err != nil || s.hold == nil {
					return p, false, err
				}
				// A small text frame a Holder sees is taken whole.
				if whole := s.holdLen(p); whole > need {
					if avail < whole {
						goto stash
					}
					p, err = src.Peek(whole)
				}
				return p, false, err
			}
		}
	stash:
		s.stash = bytebufferpool.Get()
		s.stash.B = s.stash.B[:0]
	}
	// Top the stash up: first to the two bytes that say how long the frame
	// start is, then to that length.
	for avail > 0 {
		want := 2
		if len(s.stash.B) >= 2 {
			if want, err = s.need(s.stash.B); err != nil {
				return nil, false, err
			}
			if len(s.stash.B) >= want && s.hold != nil {
				want = max(want, s.holdLen(s.stash.B))
			}
		}
		if len(s.stash.B) >= want {
			return s.stash.B, true, nil
		}
		n := min(want-len(s.stash.B), avail)
		p, err := src.Next(n)
		if err != nil {
			return nil, false, err
		}
		s.stash.B = append(s.stash.B, p...)
		avail -= n
	}
	if len(s.stash.B) >= 2 {
		want, err := s.need(s.stash.B)
		if err == nil && len(s.stash.B) >= want && s.hold != nil {
			want = max(want, s.holdLen(s.stash.B))
		}
		if err != nil || len(s.stash.B) >= want {
			return s.stash.B, true, err
		}
	}
	return nil, false, nil
}

// need says how many bytes of a frame must be at hand before the scanner acts
// on it, given its first two bytes. Control frames are taken whole so that a
// close frame can be read; data frames need only their header.
func (s *Scanner) need(b []byte) (int, error) {
	op := ws.OpCode(b[0] & 0x0f)
	masked := b[1]&0x80 != 0
	length := int(b[1] & 0x7f)
	n := 2
	switch length {
	case 126:
		n += 2
	case 127:
		n += 8
	}
	if masked {
		n += 4
	}
	if op.IsControl() {
		if length > ws.MaxControlFramePayloadSize {
			return 0, &ProtocolError{Code: ws.StatusProtocolError, Reason: "control frame payload over 125 bytes"}
		}
		n += length
	}
	return n, nil
}

// frame acts on a frame whose start (as frameStart returned it) is at hand:
// it validates the header and forwards the frame start. Payload bytes of a
// data frame beyond the header follow through the streaming path in Forward.
func (s *Scanner) frame(start []byte, src Source, fromStash bool, dst Sink) (*Close, error) {
	h, hlen, err := parseHeader(start)
	if err != nil {
		return nil, err
	}
	if err := s.check(h); err != nil {
		return nil, err
	}
	var cl *Close
	if h.OpCode == ws.OpClose {
		c, err := readClose(h, start[hlen:hlen+int(h.Length)])
		if err != nil {
			return nil, err
		}
		cl = &c
		if s.hold != nil && s.hold.HoldClose(c) {
			s.heldClose = true
			dst = nil
		}
		if s.tr != nil { // before the close, however the relay sends it
			if err := s.translateClose(c, dst); err != nil {
				return nil, err
			}
		}
	}
	if s.hold != nil && s.tr == nil && h.OpCode == ws.OpText && len(start) == hlen+int(h.Length) && s.holdLen(start) > 0 &&
		s.hold.HoldText(start[hlen:]) {
		dst = nil // consumed: the client never sees it
	}

	// The header passed: update message state, then forward.
	if h.OpCode.IsData() || h.OpCode == ws.OpContinuation {
		s.message += uint64(h.Length)
		if s.maxMessage > 0 && s.message > s.maxMessage {
			return nil, &ProtocolError{Code: ws.StatusMessageTooBig, Reason: "message too big"}
		}
		s.fragmented = !h.Fin
		if h.Fin {
			s.message = 0
		}
	}
	s.Frames++
	if s.tr != nil && h.OpCode != ws.OpClose && !h.OpCode.IsControl() {
		return nil, s.collectFrame(h, hlen, start, src, fromStash, dst)
	}
	total := uint64(hlen) + uint64(h.Length)
	if cl != nil && s.holdClose {
		dst = nil // a whole control frame: nothing of it is written
	}
	if fromStash {
		// The stash holds the frame start (or, for a Holder, a whole
		// small frame). It goes back to the pool at once, so it is
		// written in pieces of at most maxFrameStart bytes, which sinks
		// copy rather than reference (Sink).
		for off := 0; off < len(start); off += maxFrameStart {
			if err := write(dst, start[off:min(off+maxFrameStart, len(start))]); err != nil {
				return nil, err
			}
		}
		s.Bytes += uint64(len(start))
		s.remaining = total - uint64(len(start))
		s.startCut(total, start, dst)
		if h.Length > 0 {
			s.startInspect(h, start[hlen:]) // copies what it keeps
		}
		if s.stash != nil {
			bytebufferpool.Put(s.stash)
			s.stash = nil
		}
		return cl, nil
	}
	n := uint64(src.Len())
	if n > total {
		n = total
	}
	p, err := src.Next(int(n))
	if err != nil {
		return nil, err
	}
	if err := write(dst, p); err != nil {
		return nil, err
	}
	s.Bytes += n
	s.remaining = total - n
	s.startCut(total, p, dst)
	s.startInspect(h, p[hlen:])
	return cl, nil
}

// check applies RFC 6455's rules for a frame travelling in the scanner's
// direction, with no extensions negotiated.
func (s *Scanner) check(h ws.Header) error {
	state := ws.StateServerSide
	if s.from == UpstreamSide {
		state = ws.StateClientSide
	}
	if s.fragmented {
		state = state.Set(ws.StateFragmented)
	}
	if err := ws.CheckHeader(h, state); err != nil {
		var pe ws.ProtocolError
		if errors.As(err, &pe) {
			return &ProtocolError{Code: ws.StatusProtocolError, Reason: string(pe)}
		}
		return &ProtocolError{Code: ws.StatusProtocolError, Reason: err.Error()}
	}
	return nil
}

// parseHeader decodes a frame header from b, which holds at least the whole
// header. It does not allocate.
func parseHeader(b []byte) (h ws.Header, n int, err error) {
	h.Fin = b[0]&0x80 != 0
	h.Rsv = (b[0] & 0x70) >> 4
	h.OpCode = ws.OpCode(b[0] & 0x0f)
	h.Masked = b[1]&0x80 != 0
	n = 2
	switch l := b[1] & 0x7f; l {
	case 126:
		h.Length = int64(binary.BigEndian.Uint16(b[2:4]))
		n = 4
	case 127:
		l64 := binary.BigEndian.Uint64(b[2:10])
		if l64>>63 != 0 {
			return h, 0, &ProtocolError{Code: ws.StatusProtocolError, Reason: "frame length has the most significant bit set"}
		}
		h.Length = int64(l64)
		n = 10
	default:
		h.Length = int64(l)
	}
	if h.Masked {
		copy(h.Mask[:], b[n:n+4])
		n += 4
	}
	return h, n, nil
}

// readClose decodes and checks a close frame's payload, unmasking a copy.
func readClose(h ws.Header, payload []byte) (Close, error) {
	switch len(payload) {
	case 0:
		return Close{Code: ws.StatusNoStatusRcvd}, nil
	case 1:
		return Close{}, &ProtocolError{Code: ws.StatusProtocolError, Reason: "close frame payload of one byte"}
	}
	var buf [ws.MaxControlFramePayloadSize]byte
	p := buf[:len(payload)]
	copy(p, payload)
	if h.Masked {
		ws.Cipher(p, h.Mask, 0)
	}
	code := ws.StatusCode(binary.BigEndian.Uint16(p))
	reason := p[2:]
	if !validCloseCode(code) {
		return Close{}, &ProtocolError{Code: ws.StatusProtocolError, Reason: "invalid close code"}
	}
	if !utf8.Valid(reason) {
		return Close{}, &ProtocolError{Code: ws.StatusInvalidFramePayloadData, Reason: "close reason is not valid UTF-8"}
	}
	return Close{Code: code, Reason: string(reason)}, nil
}

// validCloseCode says whether code may appear in a close frame (RFC 6455
// section 7.4): the defined codes that are not reserved for local use
// (1005, 1006 and 1015 never go on the wire), and 3000-4999 for libraries
// and applications.
func validCloseCode(code ws.StatusCode) bool {
	switch {
	case code >= 1000 && code <= 1003, code >= 1007 && code <= 1014:
		return true
	case code >= 3000 && code <= 4999:
		return true
	}
	return false
}

func write(dst Sink, p []byte) error {
	if dst == nil {
		return nil
	}
	_, err := dst.WriteBinary(p)
	return err
}

// ParseHeader decodes the header of the frame that starts at b[0]. ok is
// false while b does not hold the whole header yet.
func ParseHeader(b []byte) (h ws.Header, hlen int, ok bool, err error) {
	if len(b) < 2 {
		return h, 0, false, nil
	}
	n := 2
	switch b[1] & 0x7f {
	case 126:
		n = 4
	case 127:
		n = 10
	}
	if b[1]&0x80 != 0 {
		n += 4
	}
	if len(b) < n {
		return h, 0, false, nil
	}
	h, hlen, err = parseHeader(b)
	return h, hlen, err == nil, err
}
