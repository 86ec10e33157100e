package frames

import (
	"bytes"
	"strings"
	"testing"

	"github.com/gobwas/ws"
)

// recorder is an Inspector and a Holder that remembers what it saw.
type recorder struct {
	wanted    string // a prefix Wants says yes to
	inspected []string
	holdText  string // text payloads containing it are held
	holdCode  ws.StatusCode
}

func (r *recorder) Wants(p []byte) bool { return bytes.HasPrefix(p, []byte(r.wanted)) }
func (r *recorder) Inspect(p []byte)    { r.inspected = append(r.inspected, string(p)) }
func (r *recorder) HoldText(p []byte) bool {
	return r.holdText != "" && bytes.Contains(p, []byte(r.holdText))
}
func (r *recorder) HoldClose(c Close) bool { return c.Code == r.holdCode }

// Masked client frames are inspected unmasked, in any chunking, and the
// stream itself is forwarded untouched.
func TestInspectMasked(t *testing.T) {
	want := `{"type":"session.update","session":{"instructions":"` + strings.Repeat("x", 400) + `"}}`
	stream := append(text(`{"type":"input_audio_buffer.append","audio":"AAAA"}`, true), text(want, true)...)
	for _, chunk := range []int{1, 7, 100, len(stream)} {
		s := NewScanner(ClientSide, 0)
		r := &recorder{wanted: `{"type":"session.update"`}
		s.SetInspector(r)
		sink := &sliceSink{}
		for off := 0; off < len(stream); off += chunk {
			src := NewByteSource(stream[off:min(off+chunk, len(stream))])
			if _, err := s.Forward(src, sink); err != nil {
				t.Fatal(err)
			}
		}
		if !bytes.Equal(sink.b, stream) {
			t.Fatalf("chunk %d: the stream changed", chunk)
		}
		if len(r.inspected) != 1 || r.inspected[0] != want {
			t.Errorf("chunk %d: inspected %q", chunk, r.inspected)
		}
	}
}

// A Holder consumes the small text frames and close frames it chooses;
// everything else passes byte for byte, in any chunking.
func TestHolder(t *testing.T) {
	keep1 := text(`{"type":"response.done"}`, false)
	held := text(`{"type":"error","error":{"code":"session_expired"}}`, false)
	big := text(`{"type":"response.output_audio.delta","delta":"`+strings.Repeat("A", 2*MaxHold)+`","session_expired":1}`, false)
	closeHeld := AppendClose(nil, ws.StatusGoingAway, "bye", false)
	var stream []byte
	for _, f := range [][]byte{keep1, held, big, keep1} {
		stream = append(stream, f...)
	}
	wantOut := append(append(append([]byte{}, keep1...), big...), keep1...)
	for _, chunk := range []int{1, 5, 64, len(stream) + len(closeHeld)} {
		s := NewScanner(UpstreamSide, 0)
		s.SetHolder(&recorder{holdText: "session_expired", holdCode: ws.StatusGoingAway})
		sink := &sliceSink{}
		all := append(append([]byte{}, stream...), closeHeld...)
		var closes []Close
		heldClose := false
		for off := 0; off < len(all); off += chunk {
			src := NewByteSource(all[off:min(off+chunk, len(all))])
			for src.Len() > 0 {
				cl, err := s.Forward(src, sink)
				if err != nil {
					t.Fatal(err)
				}
				if cl != nil {
					closes = append(closes, *cl)
					heldClose = s.HeldClose()
				}
			}
		}
		if !bytes.Equal(sink.b, wantOut) {
			t.Errorf("chunk %d: forwarded %d bytes, want %d (the held frames left out)", chunk, len(sink.b), len(wantOut))
		}
		if len(closes) != 1 || !heldClose || s.HeldClose() {
			t.Errorf("chunk %d: closes %v held %v", chunk, closes, heldClose)
		}
	}
}
