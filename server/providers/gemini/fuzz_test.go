package gemini

import (
	"testing"

	"github.com/gobwas/ws"

	"rtgate/frames"
)

// FuzzTranslate feeds arbitrary messages both ways through one session: a
// client or an upstream may send anything, and the translation must answer
// it (an error event at worst) without panicking, and emit only whole
// frames.
func FuzzTranslate(f *testing.F) {
	for _, seed := range []string{
		`{"type":"session.update","session":{"tools":[{"type":"function","name":"f","parameters":{"type":"object"}}],"audio":{"input":{"turn_detection":null}}}}`,
		`{"type":"input_audio_buffer.append","audio":"AAAA"}`,
		`{"type":"conversation.item.create","item":{"type":"function_call_output","call_id":"c","output":"x"}}`,
		`{"serverContent":{"modelTurn":{"parts":[{"inlineData":{"mimeType":"audio/pcm;rate=24000","data":"QUJD"}}]}}}`,
		`{"toolCall":{"functionCalls":[{"id":"c","name":"f","args":{"a":1}}]}}`,
		`{"serverContent":{"turnComplete":true},"usageMetadata":{"promptTokenCount":1}}`,
		`{"type":"response.cancel"}`, `{}`, `[]`, `null`, "\x00",
	} {
		f.Add([]byte(seed), true)
		f.Add([]byte(seed), false)
	}
	f.Fuzz(func(t *testing.T, msg []byte, fromClient bool) {
		r := newRelay(t)
		for range 2 { // twice: the second sees the state the first left
			k := &sink{}
			var err error
			if fromClient {
				_, err = r.client.Forward(frames.NewByteSource(frames.AppendFrame(nil, ws.OpText, msg, true)), k)
				if rep := r.client.TakeReplies(); rep != nil {
					whole(t, rep.B)
				}
			} else {
				_, err = r.upstream.Forward(frames.NewByteSource(frames.AppendFrame(nil, ws.OpBinary, msg, false)), k)
			}
			if err != nil {
				t.Fatal(err)
			}
			whole(t, k.b)
			fromClient = !fromClient
		}
	})
}

// whole checks that b is a run of whole frames.
func whole(t *testing.T, b []byte) {
	t.Helper()
	for len(b) > 0 {
		h, hlen, ok, err := frames.ParseHeader(b)
		if !ok || err != nil || len(b) < hlen+int(h.Length) {
			t.Fatalf("a partial frame: %d bytes left", len(b))
		}
		b = b[hlen+int(h.Length):]
	}
}
