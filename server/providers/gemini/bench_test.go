package gemini

import (
	"strings"
	"testing"

	"github.com/gobwas/ws"
	"github.com/valyala/bytebufferpool"

	"rtgate/frames"
)

type discard struct{}

func (discard) WriteBinary(p []byte) (int, error) { return len(p), nil }

// BenchmarkTranslate is the translation's cost per message of the two
// messages that are most of a voice session's traffic, each way, through a
// translating scanner as the relay runs it: the client's 20 ms audio append
// (24 kHz PCM16, 960 bytes, 1,280 base64) becoming Gemini's realtimeInput,
// and Gemini's audio part (a 40 ms chunk, 1,920 bytes) becoming OpenAI's
// output_audio.delta. Compare with frames' BenchmarkTranslate/verbatim
// (the zero-copy path) for what translation adds.
func BenchmarkTranslate(b *testing.B) {
	audio := strings.Repeat("AAAA", 320) // 960 bytes of PCM16
	reply := strings.Repeat("BBBB", 640) // 1,920 bytes
	cases := []struct {
		name string
		from frames.Side
		msg  []byte
	}{
		{"client-append-20ms", frames.ClientSide,
			frames.AppendFrame(nil, ws.OpText, []byte(`{"type":"input_audio_buffer.append","audio":"`+audio+`"}`), true)},
		{"gemini-audio-40ms", frames.UpstreamSide,
			frames.AppendFrame(nil, ws.OpBinary, []byte(`{"serverContent":{"modelTurn":{"parts":[{"inlineData":{"mimeType":"audio/pcm;rate=24000","data":"`+reply+`"}}]}}}`), false)},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			s := New("models/gemini-3.8-live", "gemini-3.8-live")
			sc := frames.NewScanner(c.from, 0)
			if c.from == frames.ClientSide {
				sc.SetTranslator(s.FromClient())
			} else {
				sc.SetTranslator(s.FromUpstream())
			}
			src := frames.NewByteSource(nil)
			b.ReportAllocs()
			b.SetBytes(int64(len(c.msg)))
			for range b.N {
				src.Reset(c.msg)
				if _, err := sc.Forward(src, discard{}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkTurn is one whole spoken answer of a second each way, as the
// relay carries it: the client's 50 audio appends (20 ms each) and commit
// upstream, and Gemini's 25 audio chunks (40 ms each), its transcription,
// turnComplete and usage to the client. verbatim is the same number of
// OpenAI frames of the same sizes through the zero-copy path, measured in
// the same run: the ratio is what translating a turn costs.
func BenchmarkTurn(b *testing.B) {
	audio := strings.Repeat("AAAA", 320)
	chunk := strings.Repeat("BBBB", 640)
	var up, down, upVerbatim, downVerbatim []byte
	for range 50 {
		up = frames.AppendFrame(up, ws.OpText, []byte(`{"type":"input_audio_buffer.append","audio":"`+audio+`"}`), true)
	}
	up = frames.AppendFrame(up, ws.OpText, []byte(`{"type":"input_audio_buffer.commit"}`), true)
	upVerbatim = up
	for range 25 {
		down = frames.AppendFrame(down, ws.OpBinary, []byte(`{"serverContent":{"modelTurn":{"parts":[{"inlineData":{"mimeType":"audio/pcm;rate=24000","data":"`+chunk+`"}}]}}}`), false)
		downVerbatim = frames.AppendFrame(downVerbatim, ws.OpText, []byte(`{"type":"response.output_audio.delta","event_id":"event_0123456789ab1","response_id":"resp_0123456789ab2","item_id":"item_0123456789ab3","output_index":0,"content_index":0,"delta":"`+chunk+`"}`), false)
	}
	for _, m := range []string{
		`{"serverContent":{"outputTranscription":{"text":"Hello from mockai."}}}`,
		`{"serverContent":{"turnComplete":true}}`,
		`{"usageMetadata":{"promptTokenCount":120,"responseTokenCount":40,"totalTokenCount":160,"promptTokensDetails":[{"modality":"AUDIO","tokenCount":100},{"modality":"TEXT","tokenCount":20}],"responseTokensDetails":[{"modality":"AUDIO","tokenCount":40}]}}`,
	} {
		down = frames.AppendFrame(down, ws.OpBinary, []byte(m), false)
	}
	for range 8 { // OpenAI's own events around a response, of similar sizes
		downVerbatim = frames.AppendFrame(downVerbatim, ws.OpText, []byte(strings.Repeat("x", 400)), false)
	}
	for _, mode := range []string{"verbatim", "translated"} {
		b.Run(mode, func(b *testing.B) {
			c2u, u2c := frames.NewScanner(frames.ClientSide, 0), frames.NewScanner(frames.UpstreamSide, 0)
			in, out := upVerbatim, downVerbatim
			if mode == "translated" {
				s := New("models/gemini-3.8-live", "gemini-3.8-live")
				c2u.SetTranslator(s.FromClient())
				u2c.SetTranslator(s.FromUpstream())
				in, out = up, down
			}
			src := frames.NewByteSource(nil)
			b.ReportAllocs()
			for range b.N {
				for _, run := range []struct {
					sc *frames.Scanner
					b  []byte
				}{{c2u, in}, {u2c, out}} {
					// One frame per read, as a relay sees a live call.
					for rest := run.b; len(rest) > 0; {
						h, hlen, _, _ := frames.ParseHeader(rest)
						n := hlen + int(h.Length)
						src.Reset(rest[:n])
						if _, err := run.sc.Forward(src, discard{}); err != nil {
							b.Fatal(err)
						}
						rest = rest[n:]
					}
					if r := run.sc.TakeReplies(); r != nil {
						bytebufferpool.Put(r)
					}
				}
			}
		})
	}
}
