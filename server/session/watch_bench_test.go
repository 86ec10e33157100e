package session

import (
	"strings"
	"testing"

	"github.com/gobwas/ws"

	"rtgate/frames"
	"rtgate/server/protocol"
	"rtgate/server/turns"
	"rtgate/server/usage"
)

// realtimeTurnEvents is one voice turn of a Realtime conversation as the
// upstream sends it: the client's speech, a response with 50 output audio
// deltas (~4.8 KB of base64 each: 100 ms of PCM16 at 24 kHz) and 10
// transcript deltas, and its response.done with usage.
func realtimeTurnEvents() [][]byte {
	ev := []string{
		`{"type":"input_audio_buffer.speech_started","event_id":"event_1","audio_start_ms":1000,"item_id":"item_u1"}`,
		`{"type":"input_audio_buffer.speech_stopped","event_id":"event_2","audio_end_ms":2000,"item_id":"item_u1"}`,
		`{"type":"input_audio_buffer.committed","event_id":"event_3","previous_item_id":null,"item_id":"item_u1"}`,
		`{"type":"conversation.item.created","event_id":"event_4","item":{"id":"item_u1","type":"message","role":"user","content":[{"type":"input_audio"}]}}`,
		`{"type":"response.created","event_id":"event_5","response":{"id":"resp_1","object":"realtime.response","status":"in_progress"}}`,
		`{"type":"response.output_item.added","event_id":"event_6","response_id":"resp_1","output_index":0,"item":{"id":"item_a1","type":"message","role":"assistant"}}`,
	}
	for range 50 {
		ev = append(ev, `{"type":"response.output_audio.delta","event_id":"event_7","response_id":"resp_1","item_id":"item_a1","output_index":0,"content_index":0,"delta":"`+strings.Repeat("A", 4800)+`"}`)
	}
	for range 10 {
		ev = append(ev, `{"type":"response.output_audio_transcript.delta","event_id":"event_8","response_id":"resp_1","item_id":"item_a1","output_index":0,"content_index":0,"delta":"Hello "}`)
	}
	ev = append(ev,
		`{"type":"response.output_audio.done","event_id":"event_9","response_id":"resp_1","item_id":"item_a1","output_index":0,"content_index":0}`,
		`{"type":"response.done","event_id":"event_10","response":{"id":"resp_1","status":"completed","usage":{"total_tokens":70,"input_tokens":60,"output_tokens":10,"input_token_details":{"text_tokens":10,"audio_tokens":50},"output_token_details":{"text_tokens":5,"audio_tokens":5}}}}`)
	out := make([][]byte, len(ev))
	for i, e := range ev {
		out[i] = frames.AppendFrame(nil, ws.OpText, []byte(e), false)
	}
	return out
}

// BenchmarkWatch forwards a Realtime conversation's upstream turns through
// the upstream scanner with the session's watch as its inspector (usage,
// responses in flight, turns), as the relay does: the per-frame cost of
// reading the upstream's events, which must not allocate.
func BenchmarkWatch(b *testing.B) {
	seq := realtimeTurnEvents()
	info := &sessionInfo{flights: &usage.Flights{Relayed: func() uint64 { return 0 }, FromClient: func() uint64 { return 0 },
		Cancel: protocol.Realtime{}.Cancel}}
	info.meter.SplitTranscription = true
	var turnsSeen int
	info.turns.Observe = func(turns.Event) { turnsSeen++ }
	w := &setupWatch{sessionInfo: info, mgr: &Manager{}, seen: true, capSeen: true}
	w.chooseObservers()
	s := frames.NewScanner(frames.UpstreamSide, 0)
	s.SetInspector(w)
	src := frames.NewByteSource(nil)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		src.Reset(seq[i%len(seq)])
		if _, err := s.Forward(src, nil); err != nil {
			b.Fatal(err)
		}
	}
	if b.N >= len(seq) && info.meter.Usage.Responses == 0 {
		b.Fatal("the watch's meter saw no response.done")
	}
}
