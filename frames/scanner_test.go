package frames

import (
	"bytes"
	"errors"
	"testing"

	"github.com/gobwas/ws"
)

// sliceSink collects what the scanner forwards, copying as netpoll's writer
// would before the source is released.
type sliceSink struct{ b []byte }

func (s *sliceSink) WriteBinary(p []byte) (int, error) {
	s.b = append(s.b, p...)
	return len(p), nil
}

// feed runs the stream through a scanner in chunks of the given size, as the
// reactor would see it arrive, and returns the forwarded bytes, the close
// frames seen and the first error.
func feed(t *testing.T, dir Side, maxMsg int64, stream []byte, chunk int) ([]byte, []Close, error) {
	t.Helper()
	s := NewScanner(dir, maxMsg)
	sink := &sliceSink{}
	var closes []Close
	for off := 0; off < len(stream); off += chunk {
		end := min(off+chunk, len(stream))
		src := NewByteSource(stream[off:end])
		for src.Len() > 0 {
			cl, err := s.Forward(src, sink)
			if err != nil {
				return sink.b, closes, err
			}
			if cl != nil {
				closes = append(closes, *cl)
			}
		}
	}
	return sink.b, closes, nil
}

func text(payload string, mask bool) []byte {
	return AppendFrame(nil, ws.OpText, []byte(payload), mask)
}

func frameWith(h ws.Header, payload []byte) []byte {
	b := appendHeader(nil, h)
	p := append([]byte(nil), payload...)
	if h.Masked {
		ws.Cipher(p, h.Mask, 0)
	}
	return append(b, p...)
}

func TestScannerForwardsVerbatim(t *testing.T) {
	big := bytes.Repeat([]byte("a"), 70000) // 64-bit length form
	mid := bytes.Repeat([]byte("b"), 300)   // 16-bit length form
	mask := [4]byte{1, 2, 3, 4}
	cases := []struct {
		name   string
		dir    Side
		stream []byte
		closes []Close
	}{
		{"masked text", ClientSide, text(`{"type":"session.update"}`, true), nil},
		{"unmasked text", UpstreamSide, text(`{"type":"session.created"}`, false), nil},
		{"16-bit length", ClientSide, AppendFrame(nil, ws.OpBinary, mid, true), nil},
		{"64-bit length", UpstreamSide, AppendFrame(nil, ws.OpBinary, big, false), nil},
		{"empty frame", ClientSide, AppendFrame(nil, ws.OpText, nil, true), nil},
		{"ping and pong", ClientSide, append(AppendFrame(nil, ws.OpPing, []byte("hi"), true), AppendFrame(nil, ws.OpPong, nil, true)...), nil},
		{"fragmented with control in the middle", ClientSide, bytes.Join([][]byte{
			frameWith(ws.Header{OpCode: ws.OpText, Masked: true, Mask: mask, Length: 3}, []byte("abc")),
			AppendFrame(nil, ws.OpPing, nil, true),
			frameWith(ws.Header{OpCode: ws.OpContinuation, Masked: true, Mask: mask, Length: 3}, []byte("def")),
			frameWith(ws.Header{Fin: true, OpCode: ws.OpContinuation, Masked: true, Mask: mask, Length: 3}, []byte("ghi")),
		}, nil), nil},
		{"close with reason", ClientSide, AppendClose(nil, 4000, "bye now", true), []Close{{Code: 4000, Reason: "bye now"}}},
		{"close without payload", UpstreamSide, AppendFrame(nil, ws.OpClose, nil, false), []Close{{Code: ws.StatusNoStatusRcvd}}},
		{"frames then close", UpstreamSide, bytes.Join([][]byte{text("one", false), text("two", false), AppendClose(nil, 1000, "", false)}, nil), []Close{{Code: 1000}}},
	}
	for _, tc := range cases {
		for _, chunk := range []int{1, 2, 3, 7, 13, 100, 4096, 1 << 20} {
			got, closes, err := feed(t, tc.dir, 0, tc.stream, chunk)
			if err != nil {
				t.Fatalf("%s/chunk %d: unexpected error %v", tc.name, chunk, err)
			}
			if !bytes.Equal(got, tc.stream) {
				t.Fatalf("%s/chunk %d: forwarded %d bytes that differ from the %d that arrived", tc.name, chunk, len(got), len(tc.stream))
			}
			if len(closes) != len(tc.closes) || (len(closes) > 0 && closes[0] != tc.closes[0]) {
				t.Fatalf("%s/chunk %d: closes %+v, want %+v", tc.name, chunk, closes, tc.closes)
			}
		}
	}
}

func TestScannerRejects(t *testing.T) {
	mask := [4]byte{9, 8, 7, 6}
	hugeLen := []byte{0x82, 0x80 | 127, 0x80, 0, 0, 0, 0, 0, 0, 1, 1, 2, 3, 4}
	cases := []struct {
		name   string
		dir    Side
		maxMsg int64
		stream []byte
		code   ws.StatusCode
	}{
		{"unmasked client frame", ClientSide, 0, text("x", false), ws.StatusProtocolError},
		{"masked server frame", UpstreamSide, 0, text("x", true), ws.StatusProtocolError},
		{"reserved bits", ClientSide, 0, frameWith(ws.Header{Fin: true, Rsv: 4, OpCode: ws.OpText, Masked: true, Mask: mask, Length: 1}, []byte("x")), ws.StatusProtocolError},
		{"unknown data opcode", ClientSide, 0, frameWith(ws.Header{Fin: true, OpCode: 3, Masked: true, Mask: mask, Length: 1}, []byte("x")), ws.StatusProtocolError},
		{"unknown control opcode", ClientSide, 0, frameWith(ws.Header{Fin: true, OpCode: 0xb, Masked: true, Mask: mask}, nil), ws.StatusProtocolError},
		{"control over 125 bytes", ClientSide, 0, frameWith(ws.Header{Fin: true, OpCode: ws.OpPing, Masked: true, Mask: mask, Length: 126}, make([]byte, 126)), ws.StatusProtocolError},
		{"fragmented control", ClientSide, 0, frameWith(ws.Header{OpCode: ws.OpPing, Masked: true, Mask: mask}, nil), ws.StatusProtocolError},
		{"continuation without start", ClientSide, 0, frameWith(ws.Header{Fin: true, OpCode: ws.OpContinuation, Masked: true, Mask: mask, Length: 1}, []byte("x")), ws.StatusProtocolError},
		{"new message inside fragmented one", ClientSide, 0, append(
			frameWith(ws.Header{OpCode: ws.OpText, Masked: true, Mask: mask, Length: 1}, []byte("x")),
			text("y", true)...), ws.StatusProtocolError},
		{"length with top bit set", ClientSide, 0, hugeLen, ws.StatusProtocolError},
		{"close of one byte", ClientSide, 0, frameWith(ws.Header{Fin: true, OpCode: ws.OpClose, Masked: true, Mask: mask, Length: 1}, []byte{3}), ws.StatusProtocolError},
		{"close with reserved code 1005", ClientSide, 0, AppendClose(nil, 1005, "", true), ws.StatusProtocolError},
		{"close reason not UTF-8", ClientSide, 0, frameWith(ws.Header{Fin: true, OpCode: ws.OpClose, Masked: true, Mask: mask, Length: 4}, []byte{0x03, 0xe8, 0xff, 0xfe}), ws.StatusInvalidFramePayloadData},
		{"message over the limit", ClientSide, 10, text("0123456789a", true), ws.StatusMessageTooBig},
		{"fragmented message over the limit", ClientSide, 10, append(
			frameWith(ws.Header{OpCode: ws.OpText, Masked: true, Mask: mask, Length: 6}, []byte("012345")),
			frameWith(ws.Header{Fin: true, OpCode: ws.OpContinuation, Masked: true, Mask: mask, Length: 6}, []byte("678901"))...), ws.StatusMessageTooBig},
	}
	for _, tc := range cases {
		for _, chunk := range []int{1, 5, 1 << 16} {
			_, _, err := feed(t, tc.dir, tc.maxMsg, tc.stream, chunk)
			var pe *ProtocolError
			if !errors.As(err, &pe) {
				t.Fatalf("%s/chunk %d: got %v, want a protocol error", tc.name, chunk, err)
			}
			if pe.Code != tc.code {
				t.Fatalf("%s/chunk %d: close code %d, want %d (%s)", tc.name, chunk, pe.Code, tc.code, pe.Reason)
			}
		}
	}
}

func TestScannerForwardsNothingOfARejectedFrame(t *testing.T) {
	good := text("fine", true)
	bad := text("unmasked", false)
	got, _, err := feed(t, ClientSide, 0, append(append([]byte(nil), good...), bad...), 1)
	if err == nil {
		t.Fatal("want an error for the unmasked frame")
	}
	if !bytes.Equal(got, good) {
		t.Fatalf("forwarded %q, want only the good frame", got)
	}
}

func TestScannerMidFrame(t *testing.T) {
	s := NewScanner(UpstreamSide, 0)
	f := AppendFrame(nil, ws.OpBinary, make([]byte, 1000), false)
	sink := &sliceSink{}
	if _, err := s.Forward(NewByteSource(f[:500]), sink); err != nil {
		t.Fatal(err)
	}
	if !s.MidFrame() {
		t.Fatal("half a frame forwarded, but MidFrame is false")
	}
	if _, err := s.Forward(NewByteSource(f[500:]), sink); err != nil {
		t.Fatal(err)
	}
	if s.MidFrame() {
		t.Fatal("whole frame forwarded, but MidFrame is true")
	}
	if s.Frames != 1 || s.Bytes != uint64(len(f)) {
		t.Fatalf("counted %d frames, %d bytes; want 1, %d", s.Frames, s.Bytes, len(f))
	}
}

func TestAppendCloseCutsLongReasonAtRuneBoundary(t *testing.T) {
	reason := string(bytes.Repeat([]byte("é"), 100)) // 200 bytes
	f := AppendClose(nil, 1000, reason, false)
	_, closes, err := feed(t, UpstreamSide, 0, f, 1<<10)
	if err != nil {
		t.Fatal(err)
	}
	if len(closes) != 1 || len(closes[0].Reason) > 123 || len(closes[0].Reason)%2 != 0 {
		t.Fatalf("close reason %q not cut to a valid length", closes[0].Reason)
	}
}

// pick is an Inspector that wants frames whose prefix contains its word.
type pick struct {
	word string
	got  []string
}

func (p *pick) Wants(prefix []byte) bool { return bytes.Contains(prefix, []byte(p.word)) }
func (p *pick) Inspect(b []byte)         { p.got = append(p.got, string(b)) }

func TestInspectorSeesChosenFramesWhole(t *testing.T) {
	long := `{"type":"response.done","pad":"` + string(bytes.Repeat([]byte("x"), 3000)) + `"}`
	frames := [][]byte{
		text(`{"type":"response.output_audio.delta","delta":"AAAA"}`, false),
		text(`{"type":"response.done","usage":{}}`, false),
		AppendFrame(nil, ws.OpBinary, []byte(`{"type":"response.done"}`), false), // not text
		text(long, false),
		AppendFrame(nil, ws.OpPing, nil, false),
		text(`{"type":"response.done","short":1}`, false),
	}
	stream := bytes.Join(frames, nil)
	want := []string{`{"type":"response.done","usage":{}}`, long, `{"type":"response.done","short":1}`}
	for _, chunk := range []int{1, 2, 7, 100, 300, 4096, 1 << 20} {
		s := NewScanner(UpstreamSide, 0)
		p := &pick{word: "response.done"}
		s.SetInspector(p)
		sink := &sliceSink{}
		for off := 0; off < len(stream); off += chunk {
			src := NewByteSource(stream[off:min(off+chunk, len(stream))])
			for src.Len() > 0 {
				if _, err := s.Forward(src, sink); err != nil {
					t.Fatal(err)
				}
			}
		}
		if !bytes.Equal(sink.b, stream) {
			t.Fatalf("chunk %d: inspecting changed what was forwarded", chunk)
		}
		if len(p.got) != len(want) {
			t.Fatalf("chunk %d: inspected %d frames, want %d", chunk, len(p.got), len(want))
		}
		for i := range want {
			if p.got[i] != want[i] {
				t.Fatalf("chunk %d: frame %d inspected as %.60q, want %.60q", chunk, i, p.got[i], want[i])
			}
		}
	}
}

// HoldCloses: a close frame is returned, counted and not written, whether
// it arrives whole or byte by byte; the frames around it are written.
func TestScannerHoldsCloses(t *testing.T) {
	text := AppendFrame(nil, ws.OpText, []byte(`{"type":"x"}`), true)
	cl := AppendClose(nil, ws.StatusNormalClosure, "bye", true)
	for _, chunk := range []int{1, 3, 1000} {
		s := NewScanner(ClientSide, 0)
		s.HoldCloses()
		sink := &sliceSink{}
		var got []Close
		stream := append(append([]byte(nil), text...), cl...)
		for off := 0; off < len(stream); off += chunk {
			src := NewByteSource(stream[off:min(off+chunk, len(stream))])
			for src.Len() > 0 {
				c, err := s.Forward(src, sink)
				if err != nil {
					t.Fatal(err)
				}
				if c != nil {
					got = append(got, *c)
				}
			}
		}
		if string(sink.b) != string(text) || len(got) != 1 || got[0].Code != ws.StatusNormalClosure || got[0].Reason != "bye" ||
			s.Frames != 2 || s.Bytes != uint64(len(stream)) || !s.HoldsCloses() {
			t.Fatalf("chunk %d: wrote %q, closes %v, counted %d frames %d bytes", chunk, sink.b, got, s.Frames, s.Bytes)
		}
	}
}

// KeepCut keeps what was forwarded of a frame a read ended in the middle
// of, up to its bound, so a relay that loses its destination can send the
// frame whole elsewhere; a frame forwarded within one read keeps nothing.
func TestScannerKeepsCutFrame(t *testing.T) {
	small := text(string(bytes.Repeat([]byte("s"), 3000)), true)
	big := text(string(bytes.Repeat([]byte("b"), 9000)), true)
	for _, tc := range []struct {
		name  string
		frame []byte
		split []int // where the reads end
		kept  bool  // TakeCut after the last read holds the frame's start
	}{
		{"header only", small, []int{8}, true},
		{"header in two reads", small, []int{3, 8, 20}, true},
		{"header and some payload", small, []int{1000}, true},
		{"over several reads", small, []int{1, 2, 500, 2000}, true},
		{"too long", big, []int{4000}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := NewScanner(ClientSide, 0)
			s.KeepCut(8 << 10)
			sink := &sliceSink{}
			off := 0
			for _, end := range tc.split {
				if _, err := s.Forward(NewByteSource(tc.frame[off:end]), sink); err != nil {
					t.Fatal(err)
				}
				off = end
			}
			cut := s.TakeCut()
			if !tc.kept {
				if cut != nil {
					t.Fatalf("kept %d bytes of a frame over the bound", len(cut.B))
				}
				return
			}
			if cut == nil || !bytes.Equal(cut.B, tc.frame[:off]) {
				t.Fatalf("kept %v, want the %d bytes forwarded", cut, off)
			}
			// The rest still passes to whatever sink comes next, and the
			// scanner keeps no more of it.
			rest := &sliceSink{}
			if _, err := s.Forward(NewByteSource(tc.frame[off:]), rest); err != nil {
				t.Fatal(err)
			}
			if whole := append(cut.B, rest.b...); !bytes.Equal(whole, tc.frame) || s.MidFrame() || s.cut != nil {
				t.Fatalf("kept start and rest make %d bytes, want the %d of the frame", len(whole), len(tc.frame))
			}
		})
	}

	// Whole frames in one read: nothing kept, nothing allocated.
	s := NewScanner(ClientSide, 0)
	s.KeepCut(8 << 10)
	stream := bytes.Repeat(small, 4)
	src := NewByteSource(nil)
	allocs := testing.AllocsPerRun(100, func() {
		src.Reset(stream)
		if _, err := s.Forward(src, discard{}); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 || s.TakeCut() != nil {
		t.Errorf("whole frames: %v allocations per read, kept %v", allocs, s.cut)
	}
}

type discard struct{}

func (discard) WriteBinary(p []byte) (int, error) { return len(p), nil }

// DropRest sends the rest of a frame cut in two nowhere, whatever the sink,
// and the next frame goes through as usual.
func TestScannerDropsRest(t *testing.T) {
	first := text(string(bytes.Repeat([]byte("x"), 2000)), true)
	next := text("next", true)
	s := NewScanner(ClientSide, 0)
	if _, err := s.Forward(NewByteSource(first[:100]), &sliceSink{}); err != nil {
		t.Fatal(err)
	}
	s.DropRest()
	sink := &sliceSink{}
	for _, part := range [][]byte{first[100:1000], append(first[1000:len(first):len(first)], next...)} {
		if _, err := s.Forward(NewByteSource(part), sink); err != nil {
			t.Fatal(err)
		}
	}
	if !bytes.Equal(sink.b, next) {
		t.Fatalf("forwarded %d bytes, want only the next frame's %d", len(sink.b), len(next))
	}
	if s.Frames != 2 || s.MidFrame() {
		t.Errorf("counted %d frames, mid-frame %v", s.Frames, s.MidFrame())
	}
}
