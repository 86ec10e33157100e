package xai_test

import (
	"strings"
	"testing"

	"github.com/gobwas/ws"

	"rtgate/frames"
	"rtgate/server/providers/xai"
)

// verbatim emits every message as it came: the least a translator can do,
// so that the verbatim rows show what the translating scanner itself costs
// (collecting the message, framing it again) and the rest what the
// normaliser adds.
type verbatim struct{}

func (verbatim) Translate(_ ws.OpCode, p []byte, out *frames.Output) { out.Text(p) }

// BenchmarkNormalize runs one upstream message per iteration through a
// translating scanner into a discarding sink, as the relay does, with the
// session in the middle of a response (response.created, the item and its
// content part already seen). The audio delta is 4 KiB of base64 (about
// 64 ms of 24 kHz PCM16), the size frames' BenchmarkTranslate uses.
func BenchmarkNormalize(b *testing.B) {
	audio := strings.Repeat("AAAA", 1024)
	cases := []struct{ name, msg string }{
		{"audio-delta/complete", `{"type":"response.output_audio.delta","event_id":"event_d1","response_id":"resp_1","item_id":"item_a","output_index":0,"content_index":0,"delta":"` + audio + `"}`},
		{"audio-delta/without-indexes", `{"type":"response.output_audio.delta","event_id":"event_d1","response_id":"resp_1","item_id":"item_a","delta":"` + audio + `"}`},
		{"audio-delta/beta-name", `{"type":"response.audio.delta","event_id":"event_d1","response_id":"resp_1","item_id":"item_a","delta":"` + audio + `"}`},
		{"transcript-delta/without-indexes", `{"type":"response.output_audio_transcript.delta","event_id":"event_t1","response_id":"resp_1","item_id":"item_a","delta":"Hello there"}`},
		{"response.done/empty-usage", `{"type":"response.done","event_id":"event_rd","response":{"id":"resp_1","object":"realtime.response","status":"completed","output":[{"id":"item_a","type":"message","role":"assistant","status":"completed","content":[{"type":"output_audio","transcript":"Hello there, how can I help?"}]}],"usage":{}}}`},
		{"response.done/complete", `{"type":"response.done","event_id":"event_rd","response":{"id":"resp_1","object":"realtime.response","status":"completed","output":[{"id":"item_a","type":"message","role":"assistant","status":"completed","content":[{"type":"output_audio","transcript":"Hello there, how can I help?"}]}],"usage":{"total_tokens":30,"input_tokens":10,"output_tokens":20}}}`},
		{"ping", `{"type":"ping","event_id":"event_p","timestamp":1760000000000}`},
		{"unknown", `{"type":"rate_limits.updated","event_id":"event_rl","rate_limits":[]}`},
	}
	for _, c := range cases {
		for _, tr := range []string{"normalizer", "verbatim"} {
			if tr == "verbatim" && !strings.HasPrefix(c.name, "audio-delta/complete") && !strings.HasPrefix(c.name, "response.done/complete") {
				continue
			}
			b.Run(c.name+"/"+tr, func(b *testing.B) {
				s := frames.NewScanner(frames.UpstreamSide, 0)
				if tr == "verbatim" {
					s.SetTranslator(verbatim{})
				} else {
					s.SetTranslator(xai.NewNormalizer("grok-voice-latest"))
				}
				src := frames.NewByteSource(nil)
				for _, m := range []string{respCreated, itemAdded, partAdded} {
					src.Reset(frames.AppendFrame(nil, ws.OpText, []byte(m), false))
					if _, err := s.Forward(src, discardSink{}); err != nil {
						b.Fatal(err)
					}
				}
				frame := frames.AppendFrame(nil, ws.OpText, []byte(c.msg), false)
				b.ReportAllocs()
				b.SetBytes(int64(len(frame)))
				b.ResetTimer()
				for range b.N {
					src.Reset(frame)
					if _, err := s.Forward(src, discardSink{}); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
