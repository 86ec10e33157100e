package gemini

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/gobwas/ws"

	"rtgate/frames"
)

// relay runs messages through one side's translator as the gateway's relay
// does (a frames.Scanner with the translator set) and returns what went on
// and what was answered back, as decoded JSON objects.
type relay struct {
	t        *testing.T
	s        *Session
	client   *frames.Scanner
	upstream *frames.Scanner
}

func newRelay(t *testing.T) *relay {
	s := New("models/gemini-3.8-live", "gemini-3.8-live")
	r := &relay{t: t, s: s, client: frames.NewScanner(frames.ClientSide, 0), upstream: frames.NewScanner(frames.UpstreamSide, 0)}
	r.client.SetTranslator(s.FromClient())
	r.upstream.SetTranslator(s.FromUpstream())
	return r
}

type sink struct{ b []byte }

func (k *sink) WriteBinary(p []byte) (int, error) { k.b = append(k.b, p...); return len(p), nil }

// messages parses a stream of whole frames into JSON objects.
func messages(t *testing.T, b []byte) []map[string]any {
	t.Helper()
	var out []map[string]any
	for len(b) > 0 {
		h, hlen, ok, err := frames.ParseHeader(b)
		if !ok || err != nil {
			t.Fatalf("bad frame: %v", err)
		}
		p := append([]byte(nil), b[hlen:hlen+int(h.Length)]...)
		if h.Masked {
			ws.Cipher(p, h.Mask, 0)
		}
		var m map[string]any
		if err := json.Unmarshal(p, &m); err != nil {
			t.Fatalf("not JSON: %s", p)
		}
		out = append(out, m)
		b = b[hlen+int(h.Length):]
	}
	return out
}

// fromClient sends a client event; it returns what Gemini got and what the
// client got back.
func (r *relay) fromClient(event string) (toGemini, back []map[string]any) {
	r.t.Helper()
	k := &sink{}
	if _, err := r.client.Forward(frames.NewByteSource(frames.AppendFrame(nil, ws.OpText, []byte(event), true)), k); err != nil {
		r.t.Fatal(err)
	}
	toGemini = messages(r.t, k.b)
	if rep := r.client.TakeReplies(); rep != nil {
		typeFirst(r.t, rep.B)
		back = messages(r.t, rep.B)
	}
	return toGemini, back
}

// typeFirst checks that every event in a stream of frames to the client
// starts with its type: the gateway's meters read it off the front.
func typeFirst(t *testing.T, b []byte) {
	t.Helper()
	for len(b) > 0 {
		h, hlen, _, _ := frames.ParseHeader(b)
		if p := b[hlen : hlen+int(h.Length)]; !strings.HasPrefix(string(p), `{"type":"`) {
			t.Fatalf("an event does not start with its type: %.80s", p)
		}
		b = b[hlen+int(h.Length):]
	}
}

// fromGemini sends a Gemini message (a binary frame, as Gemini sends them)
// and returns what the client got.
func (r *relay) fromGemini(msg string) []map[string]any {
	r.t.Helper()
	k := &sink{}
	if _, err := r.upstream.Forward(frames.NewByteSource(frames.AppendFrame(nil, ws.OpBinary, []byte(msg), false)), k); err != nil {
		r.t.Fatal(err)
	}
	typeFirst(r.t, k.b)
	return messages(r.t, k.b)
}

func types(ms []map[string]any) string {
	var t []string
	for _, m := range ms {
		if s, ok := m["type"].(string); ok {
			t = append(t, s)
		} else {
			for k := range m {
				t = append(t, k)
			}
		}
	}
	return strings.Join(t, " ")
}

// field reads a path of object keys and array indexes ("0").
func field(v any, path ...string) any {
	for _, p := range path {
		switch x := v.(type) {
		case map[string]any:
			v = x[p]
		case []any:
			i := 0
			for _, c := range p {
				i = i*10 + int(c-'0')
			}
			if i >= len(x) {
				return nil
			}
			v = x[i]
		default:
			return nil
		}
	}
	return v
}

// TestFirstSessionUpdateBecomesSetup: the client's first session.update is
// Gemini's setup, in Gemini's terms, and the client's session.updated comes
// with Gemini's setupComplete.
func TestFirstSessionUpdateBecomesSetup(t *testing.T) {
	tests := []struct {
		name   string
		update string
		check  map[string]any // path (dotted) in setup -> want
	}{
		{"instructions, voice, tools, transcription", `{"type":"session.update","session":{"type":"realtime","instructions":"Be brief.",
			"audio":{"input":{"transcription":{"model":"whisper-1"}},"output":{"voice":"alloy"}},
			"tools":[{"type":"function","name":"get_weather","description":"Weather.","parameters":{"type":"object"}}]}}`,
			map[string]any{
				"model": "models/gemini-3.8-live", "systemInstruction.parts.0.text": "Be brief.",
				"generationConfig.responseModalities.0":                                   "AUDIO",
				"generationConfig.speechConfig.voiceConfig.prebuiltVoiceConfig.voiceName": "Zephyr",
				"tools.0.functionDeclarations.0.name":                                     "get_weather",
				"realtimeInputConfig.automaticActivityDetection.disabled":                 nil,
			}},
		{"text only, turn detection off, a Gemini voice", `{"type":"session.update","session":{"output_modalities":["text"],
			"audio":{"input":{"turn_detection":null},"output":{"voice":"Kore"}}}}`,
			map[string]any{
				"generationConfig.responseModalities.0":                   "TEXT",
				"realtimeInputConfig.automaticActivityDetection.disabled": true,
				"outputAudioTranscription":                                nil,
				"inputAudioTranscription":                                 nil,
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newRelay(t)
			toGemini, back := r.fromClient(tt.update)
			if len(toGemini) != 1 || toGemini[0]["setup"] == nil || len(back) != 0 {
				t.Fatalf("Gemini got %v, client got %v; want one setup and nothing back yet", toGemini, back)
			}
			setup := toGemini[0]["setup"]
			for path, want := range tt.check {
				if got := field(setup, strings.Split(path, ".")...); got != want {
					t.Errorf("setup.%s = %v, want %v", path, got, want)
				}
			}
			got := r.fromGemini(`{"setupComplete":{}}`)
			if types(got) != "session.updated" {
				t.Fatalf("after setupComplete the client got %s, want session.updated", types(got))
			}
		})
	}
}

// TestAudioBeforeAnyUpdate: a client that streams audio at once gets the
// default setup sent first; the audio's base64 reaches Gemini unchanged,
// labelled with its rate; a commit ends the audio stream and is
// acknowledged.
func TestAudioBeforeAnyUpdate(t *testing.T) {
	r := newRelay(t)
	toGemini, _ := r.fromClient(`{"type":"input_audio_buffer.append","audio":"AAEC/w=="}`)
	if len(toGemini) != 2 || toGemini[0]["setup"] == nil {
		t.Fatalf("Gemini got %v, want setup then the audio", toGemini)
	}
	if field(toGemini[1], "realtimeInput", "audio", "data") != "AAEC/w==" ||
		field(toGemini[1], "realtimeInput", "audio", "mimeType") != "audio/pcm;rate=24000" {
		t.Fatalf("audio message %v", toGemini[1])
	}
	toGemini, back := r.fromClient(`{"type":"input_audio_buffer.commit"}`)
	if len(toGemini) != 1 || field(toGemini[0], "realtimeInput", "audioStreamEnd") != true || types(back) != "input_audio_buffer.committed" {
		t.Fatalf("commit: Gemini got %v, client got %s", toGemini, types(back))
	}
	// A response.create right after a commit asks for nothing more: Gemini
	// answers the speech on its own. It is held, and asked after all when
	// Gemini has not begun by AutoAnswerWait (the audio held no speech).
	held := 0
	r.s.OnHeld = func() { held++ }
	if toGemini, _ := r.fromClient(`{"type":"response.create"}`); len(toGemini) != 0 || held != 1 {
		t.Fatalf("response.create after a commit sent %v (held %d times)", toGemini, held)
	}
	if ask := string(r.s.Recheck()); ask != `{"clientContent":{"turnComplete":true}}` {
		t.Fatalf("Recheck with no answer begun: %q", ask)
	}
	if again := r.s.Recheck(); again != nil {
		t.Fatalf("a second Recheck asked again: %s", again)
	}
	// Held again, and Gemini answers meanwhile: nothing more to ask.
	r.fromClient(`{"type":"input_audio_buffer.commit"}`)
	r.fromClient(`{"type":"response.create"}`)
	r.fromGemini(`{"serverContent":{"outputTranscription":{"text":"Hi."}}}`)
	if ask := r.s.Recheck(); ask != nil {
		t.Fatalf("Recheck while Gemini answers: %s", ask)
	}
}

// TestLaterSessionUpdates: once the setup is sent, an update that changes
// nothing Gemini fixed is acknowledged, one that does gets an error naming
// the fields, never a silent drop; formats Gemini cannot take are refused.
func TestLaterSessionUpdates(t *testing.T) {
	r := newRelay(t)
	r.fromClient(`{"type":"session.update","session":{"instructions":"A"}}`)
	r.fromGemini(`{"setupComplete":{}}`)
	tests := []struct {
		update, want, param string
	}{
		{`{"type":"session.update","session":{"instructions":"A"}}`, "session.updated", ""},
		{`{"type":"session.update","session":{"instructions":"B","audio":{"output":{"voice":"ash"}}}}`, "error", "session.instructions"},
		{`{"type":"session.update","event_id":"e1","session":{"audio":{"input":{"format":{"type":"audio/pcmu"}}}}}`, "error", "session.audio.input.format"},
	}
	for _, tt := range tests {
		toGemini, back := r.fromClient(tt.update)
		if len(toGemini) != 0 || types(back) != tt.want {
			t.Fatalf("%s: Gemini got %v, client got %s; want %s", tt.update, toGemini, types(back), tt.want)
		}
		if tt.param != "" && field(back[0], "error", "param") != tt.param {
			t.Fatalf("%s: error %v, want param %s", tt.update, back[0]["error"], tt.param)
		}
	}
}

// TestModelTurnBecomesAResponse: Gemini's model turn is one OpenAI
// response with its lifecycle, audio and transcript deltas, and a
// response.done carrying the turn's usage per modality, which Gemini sends
// in a message of its own after turnComplete.
func TestModelTurnBecomesAResponse(t *testing.T) {
	r := newRelay(t)
	r.fromClient(`{"type":"session.update","session":{"audio":{"input":{"transcription":{"model":"whisper-1"}}}}}`)
	r.fromGemini(`{"setupComplete":{}}`)
	var got []map[string]any
	for _, m := range []string{
		`{"serverContent":{"inputTranscription":{"text":"hello"}}}`,
		`{"serverContent":{"modelTurn":{"parts":[{"inlineData":{"mimeType":"audio/pcm;rate=24000","data":"AAAA"}}]}}}`,
		`{"serverContent":{"outputTranscription":{"text":"Hi there."}}}`,
		`{"serverContent":{"modelTurn":{"parts":[{"inlineData":{"mimeType":"audio/pcm;rate=24000","data":"BBBB"}}]}}}`,
		`{"serverContent":{"generationComplete":true}}`,
		`{"serverContent":{"turnComplete":true}}`,
		`{"usageMetadata":{"promptTokenCount":30,"responseTokenCount":50,"totalTokenCount":80,
			"promptTokensDetails":[{"modality":"TEXT","tokenCount":10},{"modality":"AUDIO","tokenCount":20}],
			"responseTokensDetails":[{"modality":"AUDIO","tokenCount":50}]}}`,
	} {
		got = append(got, r.fromGemini(m)...)
	}
	want := "conversation.item.added conversation.item.input_audio_transcription.delta " +
		"conversation.item.input_audio_transcription.completed response.created response.output_item.added " +
		"response.content_part.added response.output_audio.delta response.output_audio_transcript.delta " +
		"response.output_audio.delta response.output_audio.done response.output_audio_transcript.done " +
		"response.content_part.done response.output_item.done response.done"
	if types(got) != want {
		t.Fatalf("events\n %s\nwant\n %s", types(got), want)
	}
	done := got[len(got)-1]
	for path, want := range map[string]float64{
		"input_tokens": 30, "output_tokens": 50, "input_token_details.audio_tokens": 20,
		"input_token_details.text_tokens": 10, "output_token_details.audio_tokens": 50, "output_token_details.text_tokens": 0,
	} {
		if v := field(done, append([]string{"response", "usage"}, strings.Split(path, ".")...)...); v != want {
			t.Errorf("usage.%s = %v, want %v", path, v, want)
		}
	}
	if field(done, "response", "output", "0", "content", "0", "transcript") != "Hi there." ||
		field(done, "response", "status") != "completed" {
		t.Errorf("response.done %v", done["response"])
	}
	// Ids are stable across the turn's events.
	resp := field(got[3], "response", "id")
	for _, e := range got[4:] {
		if id, ok := e["response_id"]; ok && id != resp {
			t.Fatalf("%s names response %v, want %v", e["type"], id, resp)
		}
	}
}

// TestToolCallRoundTrip: Gemini's toolCall is a function_call item with
// its arguments and a response.done; the client's function_call_output
// goes back as toolResponse naming the function, and Gemini answers on its
// own after it.
func TestToolCallRoundTrip(t *testing.T) {
	r := newRelay(t)
	r.fromClient(`{"type":"session.update","session":{"tools":[{"type":"function","name":"get_weather"}]}}`)
	r.fromGemini(`{"setupComplete":{}}`)
	got := r.fromGemini(`{"toolCall":{"functionCalls":[{"id":"fc1","name":"get_weather","args":{"city":"Paris"}}]}}`)
	want := "response.created response.output_item.added response.function_call_arguments.delta " +
		"response.function_call_arguments.done response.output_item.done"
	if !strings.HasPrefix(types(got), want) {
		t.Fatalf("events %s, want %s then response.done", types(got), want)
	}
	got = append(got, r.fromGemini(`{"usageMetadata":{"promptTokenCount":5,"responseTokenCount":3}}`)...)
	last := got[len(got)-1]
	if last["type"] != "response.done" || field(last, "response", "output", "0", "type") != "function_call" ||
		field(last, "response", "output", "0", "arguments") != `{"city":"Paris"}` || field(last, "response", "usage", "input_tokens") != 5.0 {
		t.Fatalf("response.done %v", last)
	}
	toGemini, back := r.fromClient(`{"type":"conversation.item.create","item":{"type":"function_call_output","call_id":"fc1","output":"sunny"}}`)
	if len(toGemini) != 1 || field(toGemini[0], "toolResponse", "functionResponses", "0", "name") != "get_weather" ||
		field(toGemini[0], "toolResponse", "functionResponses", "0", "id") != "fc1" ||
		types(back) != "conversation.item.added conversation.item.done" {
		t.Fatalf("function_call_output: Gemini got %v, client got %s", toGemini, types(back))
	}
	if toGemini, _ := r.fromClient(`{"type":"response.create"}`); len(toGemini) != 0 {
		t.Fatalf("response.create after a tool response sent %v: Gemini answers on its own", toGemini)
	}
}

// TestCancelAndInterruption: response.cancel stops the relay of the turn at
// once and ends the response (cancelled) when Gemini ends the turn; Gemini's
// interrupted ends it as OpenAI's server VAD does.
func TestCancelAndInterruption(t *testing.T) {
	r := newRelay(t)
	r.fromClient(`{"type":"session.update","session":{}}`)
	r.fromGemini(`{"setupComplete":{}}`)
	audio := `{"serverContent":{"modelTurn":{"parts":[{"inlineData":{"mimeType":"audio/pcm;rate=24000","data":"AAAA"}}]}}}`
	r.fromGemini(audio)
	if _, back := r.fromClient(`{"type":"response.cancel"}`); len(back) != 0 {
		t.Fatalf("cancel answered %s", types(back))
	}
	if got := r.fromGemini(audio); len(got) != 0 {
		t.Fatalf("after cancel the client got %s", types(got))
	}
	got := r.fromGemini(`{"serverContent":{"turnComplete":true},"usageMetadata":{"promptTokenCount":1,"responseTokenCount":2}}`)
	closing := "response.output_audio.done response.output_audio_transcript.done response.content_part.done response.output_item.done response.done"
	last := got[len(got)-1]
	if types(got) != closing || field(last, "response", "status") != "cancelled" ||
		field(last, "response", "status_details", "reason") != "client_cancelled" || field(last, "response", "usage", "output_tokens") != 2.0 {
		t.Fatalf("cancelled turn ended with %s %v", types(got), last)
	}
	r.fromGemini(audio)
	got = r.fromGemini(`{"serverContent":{"interrupted":true}}`)
	if types(got) != "input_audio_buffer.speech_started" {
		t.Fatalf("interrupted: %s", types(got))
	}
	if more := r.fromGemini(audio); len(more) != 0 {
		t.Fatalf("after interrupted the client got %s", types(more))
	}
	// Gemini's turnComplete and usage, each alone, end the response with
	// the turn's own usage.
	got = append(got, r.fromGemini(`{"serverContent":{"turnComplete":true}}`)...)
	got = append(got, r.fromGemini(`{"usageMetadata":{"promptTokenCount":7,"responseTokenCount":9}}`)...)
	want := "input_audio_buffer.speech_started response.output_audio.done response.output_audio_transcript.done " +
		"response.content_part.done response.output_item.done response.done"
	if types(got) != want || field(got[len(got)-1], "response", "status_details", "reason") != "turn_detected" ||
		field(got[len(got)-1], "response", "usage", "output_tokens") != 9.0 {
		t.Fatalf("interruption: %s, want %s; last %v", types(got), want, got[len(got)-1])
	}
	// The next turn's response carries its own usage, not the last one's.
	r.fromGemini(audio)
	r.fromGemini(`{"serverContent":{"turnComplete":true}}`)
	next := r.fromGemini(`{"usageMetadata":{"promptTokenCount":20,"responseTokenCount":30}}`)
	if types(next) != "response.done" || field(next[0], "response", "usage", "output_tokens") != 30.0 {
		t.Fatalf("the next turn ended %v", next)
	}
}

// TestEventsWithoutACounterpart: OpenAI events Gemini has no counterpart
// of are answered as OpenAI answers them, never dropped in silence.
func TestEventsWithoutACounterpart(t *testing.T) {
	tests := []struct{ event, want string }{
		{`{"type":"conversation.item.truncate","item_id":"item_1","content_index":0,"audio_end_ms":500}`, "conversation.item.truncated"},
		{`{"type":"conversation.item.delete","item_id":"item_1"}`, "conversation.item.deleted"},
		{`{"type":"conversation.item.retrieve","item_id":"item_1"}`, "error"}, // item_retrieve_invalid_item_id, as OpenAI answers
		{`{"type":"input_audio_buffer.clear"}`, "input_audio_buffer.cleared"},
		{`{"type":"output_audio_buffer.clear"}`, "output_audio_buffer.cleared"},
		{`{"type":"no.such.event"}`, "error"},
		{`not json`, "error"},
	}
	for _, tt := range tests {
		r := newRelay(t)
		r.fromClient(`{"type":"session.update","session":{}}`)
		toGemini, back := r.fromClient(tt.event)
		if len(toGemini) != 0 || types(back) != tt.want {
			t.Errorf("%s: Gemini got %v, client got %s; want %s", tt.event, toGemini, types(back), tt.want)
		}
	}
}

// TestRetrieveAnswersFromWhatTheClientSaw: the agents SDK retrieves every
// transcribed user item; the gateway answers from the items it showed.
func TestRetrieveAnswersFromWhatTheClientSaw(t *testing.T) {
	r := newRelay(t)
	r.fromClient(`{"type":"session.update","session":{"audio":{"input":{"transcription":{"model":"whisper-1"}}}}}`)
	r.fromGemini(`{"setupComplete":{}}`)
	got := r.fromGemini(`{"serverContent":{"inputTranscription":{"text":"hello there"}}}`)
	got = append(got, r.fromGemini(`{"serverContent":{"modelTurn":{"parts":[{"text":"hi"}]}}}`)...)
	var userItem string
	for _, e := range got {
		if e["type"] == "conversation.item.input_audio_transcription.completed" {
			userItem, _ = e["item_id"].(string)
		}
	}
	if userItem == "" {
		t.Fatalf("no transcription completed: %s", types(got))
	}
	_, back := r.fromClient(`{"type":"conversation.item.retrieve","item_id":"` + userItem + `"}`)
	if types(back) != "conversation.item.retrieved" || field(back[0], "item", "content", "0", "transcript") != "hello there" {
		t.Fatalf("retrieve: %v", back)
	}
	_, back = r.fromClient(`{"type":"conversation.item.retrieve","item_id":"item_unknown"}`)
	if types(back) != "error" || field(back[0], "error", "code") != "item_retrieve_invalid_item_id" {
		t.Fatalf("retrieve of an unknown item: %v", back)
	}
}

// TestGeminiCloseIsExplained: a close Gemini sends without an error event
// (Vertex's 1007 for a setup it refuses) reaches the client as an error
// event, then the close; a normal close passes alone.
func TestGeminiCloseIsExplained(t *testing.T) {
	for _, tt := range []struct {
		code ws.StatusCode
		want string
	}{{ws.StatusInvalidFramePayloadData, "error"}, {ws.StatusNormalClosure, ""}} {
		r := newRelay(t)
		k := &sink{}
		cl, err := r.upstream.Forward(frames.NewByteSource(frames.AppendClose(nil, tt.code, "Request contains an invalid argument.", false)), k)
		if err != nil || cl == nil || cl.Code != tt.code {
			t.Fatalf("close %v, err %v", cl, err)
		}
		h, hlen, _, _ := frames.ParseHeader(k.b)
		var events []map[string]any
		if h.OpCode == ws.OpText {
			events = messages(t, k.b[:hlen+int(h.Length)])
		}
		if types(events) != tt.want {
			t.Fatalf("close %d: the client got %s before the close, want %q", tt.code, types(events), tt.want)
		}
		if tt.want != "" && !strings.Contains(field(events[0], "error", "message").(string), "(1007): Request contains an invalid argument.") {
			t.Fatalf("error %v", events[0])
		}
	}
}

// TestAudioFastPathMatchesTheDecoder: an audio part taken without decoding
// (either field order) gives the same event as one decoded in full (extra
// fields force the decoder).
func TestAudioFastPathMatchesTheDecoder(t *testing.T) {
	forms := []string{
		`{"serverContent":{"modelTurn":{"parts":[{"inlineData":{"mimeType":"audio/pcm;rate=24000","data":"QUJD"}}]}}}`,
		`{"serverContent":{"modelTurn":{"parts":[{"inlineData":{"data":"QUJD","mimeType":"audio/pcm;rate=24000"}}]}}}`,
		`{"serverContent":{"modelTurn":{"role":"model","parts":[{"inlineData":{"mimeType":"audio/pcm;rate=24000","data":"QUJD"}}]}}}`,
	}
	for _, f := range forms {
		_, fast := audioData([]byte(f))
		r := newRelay(t)
		got := r.fromGemini(f)
		last := got[len(got)-1]
		if last["type"] != "response.output_audio.delta" || last["delta"] != "QUJD" || last["response_id"] != field(got[0], "response", "id") {
			t.Fatalf("%s (fast path %v): %v", f, fast, last)
		}
	}
	if _, ok := audioData([]byte(forms[2])); ok {
		t.Fatal("a message with another field took the fast path")
	}
}

// TestResponseCreateAfterGeminiBegan: Gemini may begin answering a commit
// before the client's response.create arrives; that response.create is the
// answer's, not a second one, while a further one gets OpenAI's
// conversation_already_has_active_response.
func TestResponseCreateAfterGeminiBegan(t *testing.T) {
	r := newRelay(t)
	r.fromClient(`{"type":"input_audio_buffer.append","audio":"AAAA"}`)
	r.fromClient(`{"type":"input_audio_buffer.commit"}`)
	r.fromGemini(`{"serverContent":{"outputTranscription":{"text":"Hi."}}}`)
	if toGemini, back := r.fromClient(`{"type":"response.create"}`); len(toGemini) != 0 || len(back) != 0 {
		t.Fatalf("the answer's own response.create: Gemini got %v, client got %s", toGemini, types(back))
	}
	if _, back := r.fromClient(`{"type":"response.create"}`); types(back) != "error" ||
		field(back[0], "error", "code") != "conversation_already_has_active_response" {
		t.Fatalf("a second response.create: %v", back)
	}
}
