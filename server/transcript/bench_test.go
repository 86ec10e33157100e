package transcript

import (
	"fmt"
	"strings"
	"testing"

	"rtgate/server/eventtype"
)

// BenchmarkRecorder measures what the conversation record costs the relay
// per event:
//
//   - audio: the frames that are nearly all of a session's (a 20 ms
//     response.output_audio.delta, a client's input_audio_buffer.append,
//     GPT-Live's session.output_audio.delta), given the type the relay
//     read already ("filter"), and with that type scan ("of+filter"):
//     the filter turns them away without parsing or allocating;
//   - transcript_delta: an answer's transcript delta joining its open
//     entry (read by hand), and live_transcript_delta GPT-Live's;
//   - transcript_done: an answer's transcript done, each a new entry
//     (parsed with encoding/json), without and with two redaction rules.
//
// A fresh Recorder replaces a full one every few thousand events, outside
// the timer.
func BenchmarkRecorder(b *testing.B) {
	audio := strings.Repeat("A", 1280) // 20 ms of 24 kHz PCM16, base64
	frames := map[string][]byte{
		"audio/output": []byte(`{"type":"response.output_audio.delta","event_id":"event_2","response_id":"resp_1","item_id":"item_1",` +
			`"output_index":0,"content_index":0,"delta":"` + audio + `"}`),
		"audio/append": []byte(`{"type":"input_audio_buffer.append","event_id":"event_1","audio":"` + audio + `"}`),
		"audio/live":   []byte(`{"type":"session.output_audio.delta","event_id":"event_3","delta":"` + audio + `"}`),
	}
	wants := map[string]func(typ, prefix []byte) bool{
		"audio/output": func(typ, _ []byte) bool { return WantsUpstream(typ) },
		"audio/append": func(typ, _ []byte) bool { return WantsClient(typ) },
		"audio/live":   LiveWantsUpstream,
	}
	for _, name := range []string{"audio/output", "audio/append", "audio/live"} {
		p, want := frames[name], wants[name]
		prefix := p[:256]
		typ, _ := eventtype.Of(p)
		b.Run(name+"/filter", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if want(typ, prefix) {
					b.Fatal("wanted")
				}
			}
		})
		b.Run(name+"/of+filter", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if t, ok := eventtype.Of(prefix); !ok || want(t, prefix) {
					b.Fatal("wanted")
				}
			}
		})
	}

	b.Run("transcript_delta", func(b *testing.B) {
		delta := []byte(`{"type":"response.output_audio_transcript.delta","event_id":"event_3","response_id":"resp_1",` +
			`"item_id":"item_1","output_index":0,"content_index":0,"delta":" there"}`)
		benchEvents(b, func(r *Recorder, _ int) error { return r.Upstream(delta) }, nil)
	})
	b.Run("live_transcript_delta", func(b *testing.B) {
		delta := []byte(`{"type":"session.output_transcript.delta","event_id":"event_3","delta":" there","start_ms":100,"end_ms":200}`)
		benchEvents(b, func(r *Recorder, _ int) error { return r.LiveUpstream(delta) }, nil)
	})
	done := make([][]byte, recorderEvents)
	for i := range done {
		done[i] = fmt.Appendf(nil, `{"type":"response.output_audio_transcript.done","event_id":"event_4","response_id":"resp_%d",`+
			`"item_id":"item_%d","output_index":0,"content_index":0,"transcript":"Your order shipped on Monday; it should arrive by Friday."}`, i, i)
	}
	rules := []Rule{mustBenchRule(b, `\b\d(?:[ -]?\d){12,15}\b`, "CARD"), mustBenchRule(b, `[\w.+-]+@[\w-]+\.[\w.]+`, "EMAIL")}
	b.Run("transcript_done", func(b *testing.B) {
		benchEvents(b, func(r *Recorder, i int) error { return r.Upstream(done[i]) }, nil)
	})
	b.Run("transcript_done/redacted", func(b *testing.B) {
		benchEvents(b, func(r *Recorder, i int) error { return r.Upstream(done[i]) }, rules)
	})
}

// recorderEvents is how many events one Recorder takes in benchEvents.
const recorderEvents = 4096

// benchEvents runs read once per iteration (i: the event's number in its
// Recorder), with a fresh Recorder every recorderEvents.
func benchEvents(b *testing.B, read func(r *Recorder, i int) error, rules []Rule) {
	var r *Recorder
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if i%recorderEvents == 0 {
			b.StopTimer()
			r = newRecorder(b, 1<<20, rules...)
			b.StartTimer()
		}
		if err := read(r, i%recorderEvents); err != nil {
			b.Fatal(err)
		}
	}
	if rec := r.Close(); len(rec.Entries) == 0 || rec.Cut != 0 {
		b.Fatalf("the last Recorder kept %d entries, cut %d", len(rec.Entries), rec.Cut)
	}
}

func mustBenchRule(b *testing.B, pattern, label string) Rule {
	r, err := NewRule(pattern, label)
	if err != nil {
		b.Fatal(err)
	}
	return r
}
