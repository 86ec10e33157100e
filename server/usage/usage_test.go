package usage

import (
	"encoding/json"
	"strings"
	"testing"
)

// responseDoneEvent is shaped like a GA response.done from the upstream.
const responseDoneEvent = `{"type":"response.done","event_id":"event_C2x","response":{"object":"realtime.response",` +
	`"id":"resp_C2x","status":"completed","status_details":null,"output":[{"id":"item_C2x","type":"message",` +
	`"status":"completed","role":"assistant","content":[{"type":"output_audio","transcript":"Hello! \"Quoted\" text."}]}],` +
	`"conversation_id":"conv_C2x","output_modalities":["audio"],"max_output_tokens":"inf","audio":{"output":{"format":` +
	`{"type":"audio/pcm","rate":24000},"voice":"alloy"}},"usage":{"total_tokens":253,"input_tokens":132,"output_tokens":121,` +
	`"input_token_details":{"text_tokens":119,"audio_tokens":13,"image_tokens":0,"cached_tokens":64,` +
	`"cached_tokens_details":{"text_tokens":60,"audio_tokens":4,"image_tokens":0}},` +
	`"output_token_details":{"text_tokens":30,"audio_tokens":91}},"metadata":null}}`

// usageOf builds a Usage in OpenAI's nesting from flat counts.
func usageOf(responses, in, out, total, inText, inAudio, inImage, cached, cachedText, cachedAudio, cachedImage, outText, outAudio int64) Usage {
	return Usage{Responses: responses, InputTokens: in, OutputTokens: out, TotalTokens: total,
		InputTokenDetails: InputTokenDetails{TextTokens: inText, AudioTokens: inAudio, ImageTokens: inImage, CachedTokens: cached,
			CachedTokensDetails: CachedTokensDetails{TextTokens: cachedText, AudioTokens: cachedAudio, ImageTokens: cachedImage}},
		OutputTokenDetails: OutputTokenDetails{TextTokens: outText, AudioTokens: outAudio}}
}

func TestUsageAddEvent(t *testing.T) {
	var u Usage
	if err := u.AddEvent([]byte(responseDoneEvent)); err != nil {
		t.Fatal(err)
	}
	want := usageOf(1, 132, 121, 253, 119, 13, 0, 64, 60, 4, 0, 30, 91)
	if u != want {
		t.Fatalf("after one response.done: %+v, want %+v", u, want)
	}

	// Sums across events; missing fields count as zero.
	for _, ev := range []string{
		responseDoneEvent,
		`{"type":"response.done","response":{"status":"cancelled","usage":{"total_tokens":5,"input_tokens":5,` +
			`"input_token_details":{"image_tokens":5,"cached_tokens":2,"cached_tokens_details":{"image_tokens":2}}}}}`,
		`{"type":"response.done","response":{"status":"failed","usage":null}}`, // still a response
		`{"type":"response.done","response":{"status":"failed"}}`,
		`{"type":"response.done"}`,
		// The event's own fields never touch the counts of events.
		`{"type":"response.done","response":{"usage":{"responses":7,"transcriptions":3,"total_tokens":1,"output_tokens":1,"output_token_details":{"text_tokens":1}}}}`,
	} {
		if err := u.AddEvent([]byte(ev)); err != nil {
			t.Fatalf("AddEvent(%s): %v", ev, err)
		}
	}
	want = usageOf(7, 269, 243, 512, 238, 26, 5, 130, 120, 8, 2, 61, 182)
	if u != want {
		t.Errorf("after seven events: %+v, want %+v", u, want)
	}
}

func TestUsageTranscription(t *testing.T) {
	var u Usage
	for _, ev := range []string{
		`{"type":"conversation.item.input_audio_transcription.completed","event_id":"e1","item_id":"i1","content_index":0,` +
			`"transcript":"Hello.","usage":{"type":"tokens","total_tokens":30,"input_tokens":22,"input_token_details":{"text_tokens":2,"audio_tokens":20},"output_tokens":8}}`,
		`{"type":"conversation.item.input_audio_transcription.completed","item_id":"i2","transcript":"Hi.",` +
			`"usage":{"type":"duration","seconds":2.5}}`,
		`{"type":"conversation.item.input_audio_transcription.completed","item_id":"i3","transcript":"no usage"}`,
	} {
		if err := u.AddEvent([]byte(ev)); err != nil {
			t.Fatalf("AddEvent(%s): %v", ev, err)
		}
	}
	// OpenAI reports the transcript's tokens as output_tokens without
	// output_token_details: they are text (priced, not dropped).
	want := Usage{Transcriptions: 2, TranscriptionSeconds: 2.5, InputTokens: 22, OutputTokens: 8, TotalTokens: 30,
		InputTokenDetails: InputTokenDetails{TextTokens: 2, AudioTokens: 20}, OutputTokenDetails: OutputTokenDetails{TextTokens: 8}}
	if u != want {
		t.Fatalf("usage %+v, want %+v", u, want)
	}
}

// TestTranscriptionKinds: a transcription's totals reported without their
// split get their kind (input audio, output text); a split given is kept;
// a response.done's are never guessed.
func TestTranscriptionKinds(t *testing.T) {
	for _, tc := range []struct {
		name, ev     string
		inAudio, out int64
	}{
		{"no details", `{"type":"conversation.item.input_audio_transcription.completed","usage":{"type":"tokens","input_tokens":100,"output_tokens":5,"total_tokens":105}}`, 100, 5},
		{"details given", `{"type":"conversation.item.input_audio_transcription.completed","usage":{"type":"tokens","input_tokens":100,"input_token_details":{"text_tokens":10,"audio_tokens":90},"output_tokens":5,"output_token_details":{"text_tokens":5}}}`, 90, 5},
		{"response.done", `{"type":"response.done","response":{"usage":{"input_tokens":100,"output_tokens":5}}}`, 0, 0},
	} {
		u, err := Parse([]byte(tc.ev))
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if u.InputTokenDetails.AudioTokens != tc.inAudio || u.OutputTokenDetails.TextTokens != tc.out {
			t.Errorf("%s: %+v, want %d input audio and %d output text tokens", tc.name, u, tc.inAudio, tc.out)
		}
	}
}

// TestUsageJSONShape pins the record's usage object to OpenAI's names and
// nesting.
func TestUsageJSONShape(t *testing.T) {
	b, err := json.Marshal(usageOf(2, 10, 20, 30, 4, 5, 1, 3, 1, 1, 1, 7, 13))
	if err != nil {
		t.Fatal(err)
	}
	want := `{"responses":2,"input_tokens":10,"output_tokens":20,"total_tokens":30,` +
		`"input_token_details":{"text_tokens":4,"audio_tokens":5,"image_tokens":1,"cached_tokens":3,` +
		`"cached_tokens_details":{"text_tokens":1,"audio_tokens":1,"image_tokens":1}},` +
		`"output_token_details":{"text_tokens":7,"audio_tokens":13}}`
	if string(b) != want {
		t.Fatalf("JSON\n%s\nwant\n%s", b, want)
	}
}

func TestUsageRejectsBadEvents(t *testing.T) {
	for _, tc := range []struct{ name, payload, want string }{
		{"not JSON", `{"type":"response.done",`, "reading event usage"},
		{"another event", `{"type":"response.created","response":{"usage":{"total_tokens":9}}}`, `type is "response.created"`},
		{"no type", `{"response":{"usage":{"total_tokens":9}}}`, `type is ""`},
		{"wrong field type", `{"type":"response.done","response":{"usage":{"total_tokens":"9"}}}`, "reading event usage"},
		{"fraction", `{"type":"response.done","response":{"usage":{"total_tokens":1.5}}}`, "reading event usage"},
		{"negative", `{"type":"response.done","response":{"usage":{"total_tokens":9,"output_token_details":{"audio_tokens":-4}}}}`, "negative"},
		{"negative cached", `{"type":"response.done","response":{"usage":{"input_token_details":{"cached_tokens_details":{"audio_tokens":-1}}}}}`, "negative"},
		{"negative duration", `{"type":"conversation.item.input_audio_transcription.completed","usage":{"type":"duration","seconds":-1}}`, "negative"},
		{"long type", `{"type":"` + strings.Repeat("x", 500) + `"}`, "type is"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u := Usage{Responses: 2, TotalTokens: 7}
			err := u.AddEvent([]byte(tc.payload))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want one containing %q", err, tc.want)
			}
			if len(err.Error()) > 200 {
				t.Errorf("error is %d bytes long: the event's content is not bounded in it", len(err.Error()))
			}
			if u != (Usage{Responses: 2, TotalTokens: 7}) {
				t.Errorf("a refused event changed the usage: %+v", u)
			}
		})
	}
}
