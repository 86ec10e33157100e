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
	s := frames.NewScanner(frames.UpstreamSide, 0)
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

func TestMeter(t *testing.T) {
	var booked []Usage
	m := &Meter{OnEvent: func(add Usage) { booked = append(booked, add) }}
	events := []struct {
		payload string
		wanted  bool
	}{
		{responseDoneEvent, true},
		{`{"type":"response.output_audio.delta","delta":"AAAA"}`, false},
		{`{"type":"conversation.item.input_audio_transcription.completed","usage":{"type":"tokens","input_tokens":3,"total_tokens":3}}`, true},
		{`{"type":"response.done","response":{"usage":{"total_tokens":"bad"}}}`, true}, // wanted, then refused
		{`{"type":"session.created","session":{"type":"realtime"}}`, false},
	}
	for _, ev := range events {
		p := []byte(ev.payload)
		if got := m.Wants(p[:min(len(p), frames.InspectPrefix)]); got != ev.wanted {
			t.Fatalf("Wants(%.60s) = %v, want %v", ev.payload, got, ev.wanted)
		}
		if ev.wanted {
			m.Inspect(p)
		}
	}
	if len(booked) != 2 || booked[0].TotalTokens != 253 || booked[1].InputTokens != 3 {
		t.Fatalf("OnEvent saw %+v, want the response.done and the transcription", booked)
	}
	if m.Usage.Responses != 1 || m.Usage.Transcriptions != 1 || m.Usage.TotalTokens != 256 {
		t.Fatalf("meter usage %+v", m.Usage)
	}
}
