package usage

import (
	"strings"
	"testing"

	"github.com/gobwas/ws"

	"rtgate/frames"
)

// BenchmarkForwardWithUsageReader forwards realistic upstream traffic (audio
// deltas, with a response.done now and then) through a scanner that reads
// usage, to show the reader costs no allocation per frame.
func BenchmarkForwardWithUsageReader(b *testing.B) {
	delta := frames.AppendFrame(nil, ws.OpText, []byte(`{"type":"response.output_audio.delta","response_id":"resp_1","item_id":"item_1","output_index":0,"content_index":0,"delta":"`+strings.Repeat("A", 6400)+`"}`), false)
	done := frames.AppendFrame(nil, ws.OpText, []byte(`{"type":"response.done","response":{"usage":{"total_tokens":70,"input_tokens":60,"output_tokens":10,"input_token_details":{"text_tokens":10,"audio_tokens":50},"output_token_details":{"text_tokens":5,"audio_tokens":5}}}}`), false)
	m := &Meter{}
	s := frames.NewScanner(frames.FromServer, 0)
	s.SetInspector(m)
	src := frames.NewByteSource(nil)
	b.ReportAllocs()
	b.SetBytes(int64(len(delta)))
	for i := 0; b.Loop(); i++ {
		f := delta
		if i%100 == 99 {
			f = done
		}
		src.Reset(f)
		if _, err := s.Forward(src, nil); err != nil {
			b.Fatal(err)
		}
	}
	if m.Usage.Responses == 0 {
		b.Fatal("the usage reader saw no response.done")
	}
}
