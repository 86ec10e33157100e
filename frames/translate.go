package frames

import (
	"github.com/gobwas/ws"
	"github.com/valyala/bytebufferpool"
)

// Translation: a session whose upstream speaks another provider's protocol
// (Gemini Live behind the OpenAI Realtime API, xAI's dialect of it) cannot
// forward frames verbatim. With a Translator set, the scanner collects each
// data message whole (unmasked, fragments joined), hands it to the
// Translator, and writes what the Translator emits instead: zero or more
// whole messages, framed by the scanner (masked towards an upstream, as a
// client's frames must be). Control frames still pass verbatim, so pings and
// the close handshake are the relay's as before.
//
// Only translated sessions pay for this: a scanner without a Translator
// streams frames as they arrive, byte for byte. A translated message costs
// its collection (one copy), the Translator's work, and the framing of what
// it emits (one more copy), with no allocation once the pooled buffers have
// grown (frames' BenchmarkTranslate).

// Translator turns whole messages from one side into what the other side
// gets. It must not keep p or the Output beyond the call.
type Translator interface {
	// Translate gets one whole data message: its opcode (ws.OpText or
	// ws.OpBinary) and unmasked payload. It writes what replaces it to
	// out: nothing (the message is dropped), the message itself
	// (out.Text(p)), or any number of messages of its own; and, through
	// out.Reply, any messages the sending side is to get back (an error
	// event for a client event the upstream has no counterpart of).
	Translate(op ws.OpCode, p []byte, out *Output)
}

// CloseTranslator is a Translator that also speaks for a close frame: what
// it emits goes out just before the close frame itself, which passes as it
// came. A provider that closes without an error event of its own (Gemini's
// 1007) is explained to the client in the client's protocol this way.
type CloseTranslator interface {
	TranslateClose(c Close, out *Output)
}

// MaxTranslated bounds a message a translating scanner collects when the
// scanner itself sets no bound (an upstream's): past it the message is
// refused with 1009.
const MaxTranslated = 16 << 20

// translation is a translating scanner's state; nil on every other scanner,
// so that the zero-copy path carries one pointer for it.
type translation struct {
	t Translator
	// msg collects the data message in progress, unmasked; nil between
	// messages.
	msg     *bytebufferpool.ByteBuffer
	op      ws.OpCode // the message's opcode (its first frame's)
	mask    [4]byte   // the current frame's mask, when masked
	masked  bool
	maskOff int  // how much of the current frame has been unmasked
	fin     bool // the current frame ends the message
	out     Output
}

// SetTranslator makes the scanner translate data messages with t. The
// Output's frames are written to the sink and stay referenced by it until
// the caller flushes; they are reused at the next Forward, so a caller must
// flush the sink (or have it copy, as a queue does) before it calls Forward
// again. Call it before the first Forward.
//
// What an Inspector sees: a scanner of client frames offers the client's
// messages as they came; a scanner of upstream frames offers what the
// Translator emitted for the client. Either way the Inspector sees the
// client's protocol, so usage accounting reads the same events whatever the
// provider. A Holder sees the emitted messages too.
func (s *Scanner) SetTranslator(t Translator) {
	s.tr = &translation{t: t}
	s.tr.out.mask = s.from == ClientSide
}

// Translating reports whether a Translator is set.
func (s *Scanner) Translating() bool { return s.tr != nil }

// TakeReplies hands over the frames the Translator sent back towards the
// side the scanner reads (Output.Reply) during the last Forward, framed for
// that side, or nil. The caller owns the buffer (bytebufferpool) and sends
// it after it has released whatever lock it forwarded under.
func (s *Scanner) TakeReplies() *bytebufferpool.ByteBuffer {
	if s.tr == nil || s.tr.out.reply == nil {
		return nil
	}
	r := s.tr.out.reply
	s.tr.out.reply = nil
	return r
}

// Output collects what a Translator emits for one message.
type Output struct {
	buf   *bytebufferpool.ByteBuffer // framed messages for the other side
	reply *bytebufferpool.ByteBuffer // framed messages back to the sender
	texts []span                     // the text messages in buf, for the Inspector and Holder
	mask  bool                       // frames for the other side are masked (it is an upstream)
}

// span locates one emitted message in Output.buf: the frame from start,
// its payload from payload to end.
type span struct{ start, payload, end int }

// Text emits a text message with payload p (copied).
func (o *Output) Text(p []byte) { o.emit(ws.OpText, p) }

// Binary emits a binary message with payload p (copied).
func (o *Output) Binary(p []byte) { o.emit(ws.OpBinary, p) }

func (o *Output) emit(op ws.OpCode, p []byte) {
	if o.buf == nil {
		o.buf = bytebufferpool.Get()
		o.buf.B = o.buf.B[:0]
	}
	start := len(o.buf.B)
	o.buf.B = AppendFrame(o.buf.B, op, p, o.mask)
	if op == ws.OpText && !o.mask {
		o.texts = append(o.texts, span{start, len(o.buf.B) - len(p), len(o.buf.B)})
	}
}

// Reply sends a text message with payload p (copied) back to the side the
// translated message came from.
func (o *Output) Reply(p []byte) {
	if o.reply == nil {
		o.reply = bytebufferpool.Get()
		o.reply.B = o.reply.B[:0]
	}
	o.reply.B = AppendFrame(o.reply.B, ws.OpText, p, !o.mask)
}

// Take returns a copy of the frames emitted for the other side (nil when
// none) and empties the output: for events a translator's owner builds
// outside a scanner, as when a translated session's upstream is lost.
func (o *Output) Take() []byte {
	if o.buf == nil {
		return nil
	}
	b := append([]byte(nil), o.buf.B...)
	o.texts = o.texts[:0]
	o.release()
	return b
}

// TakeReplies returns a copy of the frames sent back (Reply; nil when
// none) and empties them: for a translator's owner that runs it outside a
// scanner, as Take is.
func (o *Output) TakeReplies() []byte {
	if o.reply == nil {
		return nil
	}
	b := append([]byte(nil), o.reply.B...)
	bytebufferpool.Put(o.reply)
	o.reply = nil
	return b
}

// release returns the output's buffer, which the sink has flushed.
func (o *Output) release() {
	if o.buf != nil {
		bytebufferpool.Put(o.buf)
		o.buf = nil
	}
	o.texts = o.texts[:0]
}

// translateClose lets a CloseTranslator speak before close frame c goes to
// dst.
func (s *Scanner) translateClose(c Close, dst Sink) error {
	ct, ok := s.tr.t.(CloseTranslator)
	if !ok {
		return nil
	}
	o := &s.tr.out
	from := 0
	if o.buf != nil {
		from = len(o.buf.B)
	}
	ct.TranslateClose(c, o)
	if o.buf == nil || len(o.buf.B) == from {
		return nil
	}
	return write(dst, o.buf.B[from:])
}

// collectFrame starts a data frame of a translating scanner: the frame is
// not forwarded, its payload is collected into the message, and a message
// complete with it is translated.
func (s *Scanner) collectFrame(h ws.Header, hlen int, start []byte, src Source, fromStash bool, dst Sink) error {
	tr := s.tr
	limit := s.maxMessage
	if limit == 0 {
		limit = MaxTranslated
	}
	if tr.msg != nil && uint64(len(tr.msg.B))+uint64(h.Length) > limit ||
		tr.msg == nil && uint64(h.Length) > limit {
		return &ProtocolError{Code: ws.StatusMessageTooBig, Reason: "message too big"}
	}
	if tr.msg == nil {
		tr.msg = bytebufferpool.Get()
		tr.msg.B = tr.msg.B[:0]
		tr.op = h.OpCode
	}
	tr.masked, tr.mask, tr.maskOff = h.Masked, h.Mask, 0
	total := uint64(hlen) + uint64(h.Length)
	if fromStash {
		payload := start[hlen:]
		s.Bytes += uint64(len(start))
		s.remaining = total - uint64(len(start))
		tr.add(payload) // copied: the stash goes back to the pool
		bytebufferpool.Put(s.stash)
		s.stash = nil
	} else {
		n := min(uint64(src.Len()), total)
		p, err := src.Next(int(n))
		if err != nil {
			return err
		}
		s.Bytes += n
		s.remaining = total - n
		tr.add(p[hlen:])
	}
	tr.fin = h.Fin
	if s.remaining == 0 && h.Fin {
		return s.translate(dst)
	}
	return nil
}

// more takes the next payload bytes of the frame being collected.
func (s *Scanner) more(p []byte, dst Sink) error {
	s.tr.add(p)
	if s.remaining == 0 && s.tr.fin {
		return s.translate(dst)
	}
	return nil
}

// reset drops a message in progress and the replies not taken. The output
// stays: the sink may still reference it until the caller flushes (a
// refused frame resets the scanner in the middle of a Forward whose
// earlier messages are in the batch); the next Forward releases it.
func (tr *translation) reset() {
	if tr.msg != nil {
		bytebufferpool.Put(tr.msg)
		tr.msg = nil
	}
	if tr.out.reply != nil {
		bytebufferpool.Put(tr.out.reply)
		tr.out.reply = nil
	}
}

// add appends payload bytes of the current frame to the message, unmasked.
func (tr *translation) add(p []byte) {
	off := len(tr.msg.B)
	tr.msg.B = append(tr.msg.B, p...)
	if tr.masked {
		ws.Cipher(tr.msg.B[off:], tr.mask, tr.maskOff)
		tr.maskOff += len(p)
	}
}

// translate hands the whole message to the Translator and writes what it
// emitted to dst, offering the emitted text messages to the Holder and the
// Inspector of an upstream scanner.
func (s *Scanner) translate(dst Sink) error {
	tr := s.tr
	msg, op := tr.msg, tr.op
	tr.msg = nil
	if s.insp != nil && s.from == ClientSide && op == ws.OpText && len(msg.B) <= MaxInspect &&
		s.insp.Wants(msg.B[:min(len(msg.B), InspectPrefix)]) {
		s.insp.Inspect(msg.B)
	}
	o := &tr.out
	// Earlier messages of this Forward stay in o.buf (the sink may
	// reference them until the caller flushes): this one's output starts
	// after them.
	from := 0
	if o.buf != nil {
		from = len(o.buf.B)
	}
	o.texts = o.texts[:0]
	tr.t.Translate(op, msg.B, o)
	bytebufferpool.Put(msg)
	if o.buf == nil || len(o.buf.B) == from {
		return nil
	}
	if len(o.texts) == 0 || (s.insp == nil && s.hold == nil) {
		return write(dst, o.buf.B[from:])
	}
	// Each text message may be held back or inspected; what is not held
	// goes out in runs.
	for _, m := range o.texts {
		p := o.buf.B[m.payload:m.end]
		if s.hold != nil && len(p) <= MaxHold && s.hold.HoldText(p) {
			if err := write(dst, o.buf.B[from:m.start]); err != nil {
				return err
			}
			from = m.end
			continue
		}
		if s.insp != nil && len(p) <= MaxInspect && s.insp.Wants(p[:min(len(p), InspectPrefix)]) {
			s.insp.Inspect(p)
		}
	}
	return write(dst, o.buf.B[from:])
}

// TranslateOwn runs frames the relay built itself (whole frames, framed as
// the scanner's side sends them: the gateway's own events to an upstream)
// through the scanner's Translator, and returns what it emitted for the
// other side, which the caller owns. The relay speaks the client's protocol
// to a translated upstream this way (a farewell's response.cancel, say).
// Replies are dropped: the gateway's own events want no answer. Only for a
// translating scanner; it leaves the scanner's own state as it was.
func (s *Scanner) TranslateOwn(b []byte) []byte {
	own := Scanner{from: s.from, tr: &translation{t: s.tr.t}}
	own.tr.out.mask = s.tr.out.mask
	var sink appendSink
	src := NewByteSource(b)
	for src.Len() > 0 {
		if _, err := own.Forward(src, &sink); err != nil {
			break
		}
	}
	own.Reset()
	return sink.b
}

// appendSink keeps a copy of everything written to it.
type appendSink struct{ b []byte }

func (a *appendSink) WriteBinary(p []byte) (int, error) {
	a.b = append(a.b, p...)
	return len(p), nil
}
