package frames

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/gobwas/ws"
)

// splitter is a Translator for the tests: "drop" is dropped, "two:X" becomes
// X twice, "reply:X" answers X to the sender and forwards nothing, "bin:X"
// becomes binary X, anything else is upper-cased. It records what it got.
type splitter struct{ got []string }

func (sp *splitter) Translate(op ws.OpCode, p []byte, out *Output) {
	sp.got = append(sp.got, string(p))
	switch s := string(p); {
	case s == "drop":
	case strings.HasPrefix(s, "two:"):
		out.Text(p[4:])
		out.Text(p[4:])
	case strings.HasPrefix(s, "reply:"):
		out.Reply(p[6:])
	case strings.HasPrefix(s, "bin:"):
		out.Binary(p[4:])
	default:
		out.Text(bytes.ToUpper(p))
	}
}

// message is one frame read back from a stream.
type message struct {
	op      ws.OpCode
	masked  bool
	payload string
}

// readFrames parses a stream of whole frames, unmasking payloads.
func readFrames(t *testing.T, b []byte) []message {
	t.Helper()
	var out []message
	for len(b) > 0 {
		h, hlen, ok, err := ParseHeader(b)
		if !ok || err != nil || len(b) < hlen+int(h.Length) {
			t.Fatalf("stream ends in a partial frame (%d bytes left, err %v)", len(b), err)
		}
		p := append([]byte(nil), b[hlen:hlen+int(h.Length)]...)
		if h.Masked {
			ws.Cipher(p, h.Mask, 0)
		}
		out = append(out, message{h.OpCode, h.Masked, string(p)})
		b = b[hlen+int(h.Length):]
	}
	return out
}

// fragments frames payload as a message cut into pieces of n bytes.
func fragments(payload string, n int, mask bool) []byte {
	var b []byte
	for off := 0; off < len(payload); off += n {
		end := min(off+n, len(payload))
		op := ws.OpText
		if off > 0 {
			op = ws.OpContinuation
		}
		h := ws.Header{Fin: end == len(payload), OpCode: op, Length: int64(end - off), Masked: mask}
		if mask {
			h.Mask = [4]byte{1, 2, 3, byte(off)}
		}
		b = append(b, frameWith(h, []byte(payload[off:end]))...)
	}
	return b
}

// TestTranslatingScannerRewritesWholeMessages: whatever pieces a message
// arrives in (fragments, reads of any size, masked or not), the Translator
// gets it whole and unmasked, and the other side gets only what it emitted,
// framed for that side (masked towards an upstream); control frames pass
// verbatim between translated messages.
func TestTranslatingScannerRewritesWholeMessages(t *testing.T) {
	ping := frameWith(ws.Header{Fin: true, OpCode: ws.OpPing, Length: 2}, []byte("hi"))
	tests := []struct {
		name   string
		from   Side
		stream []byte
		want   []message // the output's frames, payloads unmasked
		got    []string  // what the Translator was given
	}{
		{"upstream text upper-cased", UpstreamSide, text("hello", false),
			[]message{{ws.OpText, false, "HELLO"}}, []string{"hello"}},
		{"one message becomes two", UpstreamSide, text("two:ab", false),
			[]message{{ws.OpText, false, "ab"}, {ws.OpText, false, "ab"}}, []string{"two:ab"}},
		{"a message dropped, the next kept", UpstreamSide, append(text("drop", false), text("x", false)...),
			[]message{{ws.OpText, false, "X"}}, []string{"drop", "x"}},
		{"binary in, text out", UpstreamSide,
			AppendFrame(nil, ws.OpBinary, []byte(`{"setupComplete":{}}`), false),
			[]message{{ws.OpText, false, `{"SETUPCOMPLETE":{}}`}}, []string{`{"setupComplete":{}}`}},
		{"fragments joined, a ping between them passes first", UpstreamSide,
			func() []byte {
				f := fragments("abcdef", 2, false)
				// after the first fragment (2+2 bytes), a ping
				return append(append(append([]byte(nil), f[:4]...), ping...), f[4:]...)
			}(),
			[]message{{ws.OpPing, false, "hi"}, {ws.OpText, false, "ABCDEF"}}, []string{"abcdef"}},
		{"client frames unmasked for the translator, masked out", ClientSide,
			fragments("masked text", 4, true),
			[]message{{ws.OpText, true, "MASKED TEXT"}}, []string{"masked text"}},
		{"client binary out masked", ClientSide, text("bin:raw", true),
			[]message{{ws.OpBinary, true, "raw"}}, []string{"bin:raw"}},
		{"an empty message", UpstreamSide, text("", false),
			[]message{{ws.OpText, false, ""}}, []string{""}},
	}
	for _, tt := range tests {
		for _, chunk := range []int{1, 3, 7, 1 << 20} {
			sp := &splitter{}
			s := NewScanner(tt.from, 0)
			s.SetTranslator(sp)
			sink := &sliceSink{}
			for off := 0; off < len(tt.stream); off += chunk {
				src := NewByteSource(tt.stream[off:min(off+chunk, len(tt.stream))])
				for src.Len() > 0 {
					if _, err := s.Forward(src, sink); err != nil {
						t.Fatalf("%s (reads of %d): %v", tt.name, chunk, err)
					}
				}
			}
			if got := readFrames(t, sink.b); !equalMessages(got, tt.want) {
				t.Errorf("%s (reads of %d): out %+v, want %+v", tt.name, chunk, got, tt.want)
			}
			if strings.Join(sp.got, "|") != strings.Join(tt.got, "|") {
				t.Errorf("%s (reads of %d): translator got %q, want %q", tt.name, chunk, sp.got, tt.got)
			}
			if s.Bytes != uint64(len(tt.stream)) {
				t.Errorf("%s (reads of %d): counted %d bytes in, want %d", tt.name, chunk, s.Bytes, len(tt.stream))
			}
			if s.MidFrame() {
				t.Errorf("%s: a translating scanner reports MidFrame: a relay would never inject", tt.name)
			}
		}
	}
}

func equalMessages(a, b []message) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestTranslatorRepliesGoBackToTheSender: a reply is framed for the side the
// message came from (unmasked to a client) and handed to the relay, not
// written to the other side.
func TestTranslatorRepliesGoBackToTheSender(t *testing.T) {
	s := NewScanner(ClientSide, 0)
	s.SetTranslator(&splitter{})
	sink := &sliceSink{}
	if _, err := s.Forward(NewByteSource(text("reply:no such event", true)), sink); err != nil {
		t.Fatal(err)
	}
	if len(sink.b) != 0 {
		t.Fatalf("the upstream got %q; a reply is for the client only", sink.b)
	}
	r := s.TakeReplies()
	if r == nil {
		t.Fatal("no reply to take")
	}
	if got := readFrames(t, r.B); !equalMessages(got, []message{{ws.OpText, false, "no such event"}}) {
		t.Fatalf("reply %+v, want one unmasked text frame", got)
	}
	if s.TakeReplies() != nil {
		t.Fatal("a reply was handed over twice")
	}
}

// TestTranslatingScannerBoundsMessages: a message over the bound (the
// scanner's own, or MaxTranslated for an upstream's) is refused with 1009
// before it is collected whole.
func TestTranslatingScannerBoundsMessages(t *testing.T) {
	tests := []struct {
		name   string
		from   Side
		max    int64
		stream []byte
	}{
		{"a client message over the session's bound", ClientSide, 8, text("123456789", true)},
		{"fragments adding up over the bound", ClientSide, 8, fragments("123456789", 3, true)},
		{"an upstream message over MaxTranslated", UpstreamSide, 0,
			appendHeader(nil, ws.Header{Fin: true, OpCode: ws.OpText, Length: MaxTranslated + 1})},
	}
	for _, tt := range tests {
		s := NewScanner(tt.from, tt.max)
		s.SetTranslator(&splitter{})
		sink := &sliceSink{}
		_, err := s.Forward(NewByteSource(tt.stream), sink)
		var pe *ProtocolError
		if !errors.As(err, &pe) || pe.Code != ws.StatusMessageTooBig {
			t.Errorf("%s: err %v, want a 1009 ProtocolError", tt.name, err)
		}
		if len(sink.b) != 0 {
			t.Errorf("%s: %d bytes went out", tt.name, len(sink.b))
		}
	}
}

// heldWord holds back emitted text messages equal to word, and inspects
// those containing "usage".
type heldWord struct {
	word      string
	inspected []string
}

func (h *heldWord) HoldText(p []byte) bool   { return string(p) == h.word }
func (h *heldWord) HoldClose(Close) bool     { return false }
func (h *heldWord) Wants(prefix []byte) bool { return bytes.Contains(prefix, []byte("USAGE")) }
func (h *heldWord) Inspect(p []byte)         { h.inspected = append(h.inspected, string(p)) }
func (h *heldWord) wantInspected(t *testing.T, w ...string) {
	t.Helper()
	if strings.Join(h.inspected, "|") != strings.Join(w, "|") {
		t.Errorf("inspected %q, want %q", h.inspected, w)
	}
}

// TestUpstreamInspectorAndHolderSeeTheTranslation: on the upstream side the
// Inspector and Holder see the client's protocol, that is the Translator's
// output, never the provider's message.
func TestUpstreamInspectorAndHolderSeeTheTranslation(t *testing.T) {
	h := &heldWord{word: "HOLD"}
	s := NewScanner(UpstreamSide, 0)
	s.SetTranslator(&splitter{})
	s.SetInspector(h)
	s.SetHolder(h)
	sink := &sliceSink{}
	stream := append(append(text("a", false), text("hold", false)...), text("usage", false)...)
	for src := NewByteSource(stream); src.Len() > 0; {
		if _, err := s.Forward(src, sink); err != nil {
			t.Fatal(err)
		}
	}
	want := []message{{ws.OpText, false, "A"}, {ws.OpText, false, "USAGE"}}
	if got := readFrames(t, sink.b); !equalMessages(got, want) {
		t.Fatalf("out %+v, want %+v (HOLD held back)", got, want)
	}
	h.wantInspected(t, "USAGE")
}

// TestClientInspectorSeesTheClientsMessage: on the client side the
// Inspector sees the client's message as it came (unmasked), not the
// translation.
func TestClientInspectorSeesTheClientsMessage(t *testing.T) {
	h := &heldWord{}
	s := NewScanner(ClientSide, 0)
	s.SetTranslator(&splitter{})
	s.SetInspector(h)
	if _, err := s.Forward(NewByteSource(fragments("USAGE in", 3, true)), &sliceSink{}); err != nil {
		t.Fatal(err)
	}
	h.wantInspected(t, "USAGE in")
}

// closeExplainer speaks before every close that is not a normal one.
type closeExplainer struct{ splitter }

func (c *closeExplainer) TranslateClose(cl Close, out *Output) {
	if cl.Code != ws.StatusNormalClosure {
		out.Text([]byte("closed: " + cl.Reason))
	}
}

// TestCloseTranslatorSpeaksBeforeTheClose: a provider's close is preceded
// by what the translator says about it, and the close frame passes as it
// came (its code and reason reach the client).
func TestCloseTranslatorSpeaksBeforeTheClose(t *testing.T) {
	for _, code := range []ws.StatusCode{ws.StatusNormalClosure, ws.StatusInvalidFramePayloadData} {
		s := NewScanner(UpstreamSide, 0)
		s.SetTranslator(&closeExplainer{})
		sink := &sliceSink{}
		cl, err := s.Forward(NewByteSource(AppendClose(nil, code, "bad setup", false)), sink)
		if err != nil || cl == nil || cl.Code != code {
			t.Fatalf("close %v err %v", cl, err)
		}
		got := readFrames(t, sink.b)
		want := []message{{ws.OpClose, false, string(AppendClose(nil, code, "bad setup", false)[2:])}}
		if code != ws.StatusNormalClosure {
			want = append([]message{{ws.OpText, false, "closed: bad setup"}}, want...)
		}
		if !equalMessages(got, want) {
			t.Errorf("close %d: out %+v, want %+v", code, got, want)
		}
	}
}
