package mockai_test

import (
	"encoding/base64"
	"strings"
	"testing"
	"time"

	"rtgate/mockai"
)

// What a test scripts mockai to say (Config.InputTranscripts,
// TranscriptionDelay, OutputTranscripts, OutputTranscriptLag,
// ToolArguments), with gorilla as the client.

// betaTranscription turns input transcription on with the beta
// interface's field, which a client may still send.
var betaTranscription = map[string]any{"type": "session.update", "session": map[string]any{
	"input_audio_transcription": map[string]any{"model": "whisper-1"}}}

// commitTurn appends 100 ms of audio and commits it; it returns the
// committed item's id.
func commitTurn(ic *itemConn) string {
	ic.t.Helper()
	ic.send(map[string]any{"type": "input_audio_buffer.append", "audio": base64.StdEncoding.EncodeToString(make([]byte, 4800))})
	ic.send(map[string]any{"type": "input_audio_buffer.commit"})
	return ic.expect("input_audio_buffer.committed").str("item_id")
}

// userTranscript is the transcript of user item id as retrieve shows it
// (nil while it has none).
func userTranscript(ic *itemConn, id string) any {
	ic.t.Helper()
	content, _ := ic.retrieved(id).get("item.content").([]any)
	if len(content) != 1 {
		ic.t.Fatalf("item %s content %v, want one part", id, content)
	}
	part, _ := content[0].(map[string]any)
	return part["transcript"]
}

func TestInputTranscripts(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		cfg     mockai.Config
		update  map[string]any // nil: transcription stays off
		commits int
		want    []string // the transcription.completed of each commit, in order; nil: none
	}{
		{"default text every turn", mockai.Config{}, transcription, 2, []string{mockTranscript, mockTranscript}},
		{"scripted, in order, cycling", mockai.Config{InputTranscripts: []string{"book a flight", "to Paris"}}, transcription, 3,
			[]string{"book a flight", "to Paris", "book a flight"}},
		{"beta field turns transcription on", mockai.Config{InputTranscripts: []string{"hola"}}, betaTranscription, 1, []string{"hola"}},
		{"transcription off: no event, no transcript", mockai.Config{InputTranscripts: []string{"secret"}}, nil, 2, nil},
	}
	for _, tc := range tests {
		for _, xai := range []bool{false, true} {
			name := tc.name + "/openai"
			if xai {
				name = tc.name + "/xai"
			}
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				ic := openItems(t, start(t, tc.cfg), xai)
				if tc.update != nil {
					ic.send(tc.update)
					ic.expect("session.updated")
				}
				for i := range tc.commits {
					id := commitTurn(ic)
					if tc.want == nil {
						// Sent at once when it is sent: the retrieve's answer
						// would come after it.
						if got := userTranscript(ic, id); got != nil {
							t.Errorf("turn %d: transcript %v without transcription", i, got)
						}
						continue
					}
					ev := ic.expect("conversation.item.input_audio_transcription.completed")
					if ev.str("item_id") != id || ev.str("transcript") != tc.want[i] {
						t.Errorf("turn %d: %v, want item %s transcript %q", i, ev, id, tc.want[i])
					}
					if got := userTranscript(ic, id); got != tc.want[i] {
						t.Errorf("turn %d: item transcript %v, want %q", i, got, tc.want[i])
					}
				}
			})
		}
	}
}

// TestTranscriptionDelay: the transcript comes after the response server
// VAD started (OpenAI's order when transcription is slow), and delayed
// transcripts keep the order of their turns.
func TestTranscriptionDelay(t *testing.T) {
	t.Parallel()
	// The delay is long beside the few events in between, so that the
	// order does not depend on scheduling.
	const delay = 500 * time.Millisecond
	tests := []struct {
		name string
		run  func(t *testing.T, ic *itemConn)
	}{
		{"after the VAD turn's response", func(t *testing.T, ic *itemConn) {
			// Both in one update: session.update replaces audio as a whole.
			upd := vadUpdate(nil)
			upd["session"].(map[string]any)["audio"].(map[string]any)["input"].(map[string]any)["transcription"] =
				map[string]any{"model": "whisper-1"}
			ic.send(upd)
			ic.expect("session.updated")
			appendChunks(t, ic.c, speech, 5)
			ic.expect("input_audio_buffer.speech_started")
			appendChunks(t, ic.c, silence, 5)
			ic.expect("input_audio_buffer.speech_stopped")
			id := ic.expect("input_audio_buffer.committed").str("item_id")
			// The response first: the transcript waits for its delay.
			ic.expect("response.created")
			var order []string
			for range maxEvents {
				ev := ic.next()
				typ := ev.str("type")
				if typ == "conversation.item.input_audio_transcription.completed" {
					if ev.str("item_id") != id || ev.str("transcript") != "one" {
						t.Fatalf("transcript %v, want %q for %s", ev, "one", id)
					}
					order = append(order, "transcript")
				}
				if typ == "response.done" {
					order = append(order, "response.done")
				}
				if len(order) == 2 {
					break
				}
			}
			if len(order) != 2 {
				t.Fatalf("saw %v, want a transcript and response.done", order)
			}
		}},
		{"in the order of the turns", func(t *testing.T, ic *itemConn) {
			first, second := commitTurn(ic), commitTurn(ic)
			for i, want := range []struct{ id, text string }{{first, "one"}, {second, "two"}} {
				ev := ic.expect("conversation.item.input_audio_transcription.completed")
				if ev.str("item_id") != want.id || ev.str("transcript") != want.text {
					t.Errorf("transcript %d: %v, want %q for %s", i, ev, want.text, want.id)
				}
			}
		}},
		{"the item has no transcript until it is sent", func(t *testing.T, ic *itemConn) {
			id := commitTurn(ic)
			if got := userTranscript(ic, id); got != nil {
				t.Errorf("transcript %v before the delay", got)
			}
			ic.expect("conversation.item.input_audio_transcription.completed")
			if got := userTranscript(ic, id); got != "one" {
				t.Errorf("transcript %v after the event, want %q", got, "one")
			}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := start(t, mockai.Config{InputTranscripts: []string{"one", "two"}, TranscriptionDelay: delay})
			ic := openItems(t, srv, false)
			ic.send(transcription)
			ic.expect("session.updated")
			tc.run(t, ic)
		})
	}
}

// spokenResponse is what a client saw of one audio response.
type spokenResponse struct {
	order     []string // "audio", "text" (a transcript delta), "done" (the transcript's .done)
	deltas    []string // the transcript deltas
	doneText  string   // the transcript .done's
	dones     int      // transcript .done events
	final     event    // response.done
	contentTx string   // response.done's message transcript
}

// readSpoken reads a response's events up to response.done.
func readSpoken(t *testing.T, ic *itemConn) spokenResponse {
	t.Helper()
	var sp spokenResponse
	for range maxEvents {
		ev := ic.next()
		switch ev.str("type") {
		case "response.output_audio.delta":
			sp.order = append(sp.order, "audio")
		case "response.output_audio_transcript.delta":
			sp.order = append(sp.order, "text")
			sp.deltas = append(sp.deltas, ev.str("delta"))
		case "response.output_audio_transcript.done":
			sp.order = append(sp.order, "done")
			sp.doneText = ev.str("transcript")
			sp.dones++
		case "error":
			t.Fatalf("error during the response: %v", ev)
		case "response.done":
			sp.final = ev
			output, _ := ev.get("response.output").([]any)
			if len(output) == 1 {
				item, _ := output[0].(map[string]any)
				content, _ := item["content"].([]any)
				if len(content) == 1 {
					part, _ := content[0].(map[string]any)
					sp.contentTx, _ = part["transcript"].(string)
				}
			}
			return sp
		}
	}
	t.Fatalf("no response.done in %d events", maxEvents)
	return sp
}

func TestOutputTranscripts(t *testing.T) {
	t.Parallel()
	const long = "The weather in Paris is sunny today."
	tests := []struct {
		name string
		cfg  mockai.Config
		// responses are the transcripts of consecutive responses; order
		// the first one's events (nil: not checked).
		responses []string
		order     []string
		wantDone  bool // a transcript .done (the OpenAI dialect; xAI always sends one)
	}{
		{"default: one delta after the audio", mockai.Config{}, []string{mockTranscript, mockTranscript},
			[]string{"audio", "audio", "audio", "audio", "audio", "text"}, false},
		{"scripted: words over the audio deltas, cycling", mockai.Config{AudioDeltas: 3, OutputTranscripts: []string{long, "Bye now."}},
			[]string{long, "Bye now.", long},
			// 7 words over 3 deltas: 3, 2, 2.
			[]string{"audio", "text", "audio", "text", "audio", "text", "done"}, true},
		{"scripted: fewer words than deltas", mockai.Config{AudioDeltas: 4, OutputTranscripts: []string{"Bye now."}},
			[]string{"Bye now."}, []string{"audio", "text", "audio", "audio", "text", "audio", "done"}, true},
		{"scripted: empty transcript", mockai.Config{AudioDeltas: 2, OutputTranscripts: []string{""}},
			[]string{""}, []string{"audio", "audio", "done"}, true},
		{"no audio: the transcript at once", mockai.Config{AudioDeltas: -1, OutputTranscripts: []string{"Bye now."}},
			[]string{"Bye now."}, []string{"text", "text", "done"}, true},
		{"lag: transcripts after the audio they cover", mockai.Config{AudioDeltas: 3, OutputTranscriptLag: 300 * time.Millisecond,
			OutputTranscripts: []string{long}},
			// No gap between audio deltas: all of them go before the
			// first transcript, which is due 300 ms after the first.
			[]string{long}, []string{"audio", "audio", "audio", "text", "text", "text", "done"}, true},
		{"lag with the default transcript", mockai.Config{AudioDeltas: 2, OutputTranscriptLag: 100 * time.Millisecond},
			[]string{mockTranscript}, []string{"audio", "audio", "text"}, false},
	}
	for _, tc := range tests {
		for _, xai := range []bool{false, true} {
			name := tc.name + "/openai"
			if xai {
				name = tc.name + "/xai"
			}
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				ic := openItems(t, start(t, tc.cfg), xai)
				for i, want := range tc.responses {
					ic.send(map[string]any{"type": "response.create"})
					sp := readSpoken(t, ic)
					if got := strings.Join(sp.deltas, ""); got != want || sp.contentTx != want {
						t.Errorf("response %d: deltas %q (%q), response.done transcript %q, want %q",
							i, sp.deltas, got, sp.contentTx, want)
					}
					// xAI's .done closes what its deltas opened (endOutput).
					wantDones := 0
					if (!xai && tc.wantDone) || (xai && len(sp.deltas) > 0) {
						wantDones = 1
					}
					if sp.dones != wantDones || (wantDones == 1 && sp.doneText != want) {
						t.Errorf("response %d: %d transcript .done (%q), want %d (%q)", i, sp.dones, sp.doneText, wantDones, want)
					}
					if i == 0 && tc.order != nil {
						got, wantOrder := strings.Join(sp.order, " "), strings.Join(tc.order, " ")
						if xai { // its .done is counted above
							got, wantOrder = strings.TrimSuffix(got, " done"), strings.TrimSuffix(wantOrder, " done")
						}
						if got != wantOrder {
							t.Errorf("events %v, want %v", got, wantOrder)
						}
					}
					textTokens := 0
					if len(sp.deltas) > 0 {
						textTokens = 5
					}
					if !xai && sp.final.num("response.usage.output_token_details.text_tokens") != textTokens {
						t.Errorf("response %d: output text tokens %v, want %d", i, sp.final.get("response.usage"), textTokens)
					}
				}
			})
		}
	}
}

// TestOutputTranscriptCancelled: a cancel stops the transcript where the
// audio stopped; what was sent is the transcript, in .done and in
// response.done.
func TestOutputTranscriptCancelled(t *testing.T) {
	t.Parallel()
	// An hour between audio deltas: the cancel always comes after the first.
	srv := start(t, mockai.Config{AudioDeltas: 3, AudioDeltaInterval: time.Hour, OutputTranscripts: []string{"one two three"}})
	ic := openItems(t, srv, false)
	ic.send(map[string]any{"type": "response.create"})
	ic.expect("response.created")
	ic.expect("rate_limits.updated")
	ic.expect("response.output_audio.delta")
	if ev := ic.expect("response.output_audio_transcript.delta"); ev.str("delta") != "one " {
		t.Fatalf("first transcript delta %q, want %q", ev.str("delta"), "one ")
	}
	ic.send(map[string]any{"type": "response.cancel"})
	if ev := ic.expect("response.output_audio_transcript.done"); ev.str("transcript") != "one " {
		t.Errorf("transcript .done %q, want what was sent, %q", ev.str("transcript"), "one ")
	}
	done := ic.expect("response.done")
	if done.str("response.status") != "cancelled" {
		t.Errorf("status %q, want cancelled", done.str("response.status"))
	}
	output, _ := done.get("response.output").([]any)
	var content []any
	if len(output) == 1 {
		item, _ := output[0].(map[string]any)
		content, _ = item["content"].([]any)
	}
	if len(content) != 1 || content[0].(map[string]any)["transcript"] != "one " {
		t.Errorf("response.done output %v, want the transcript sent, %q", output, "one ")
	}
}

func TestToolArguments(t *testing.T) {
	t.Parallel()
	tools := []any{map[string]any{"type": "function", "name": "get_weather", "parameters": map[string]any{"type": "object"}}}
	tests := []struct {
		name       string
		args       string
		want       string
		wantDeltas int // at least
	}{
		{"default", "", "{}", 1},
		{"scripted", `{"city":"Paris","unit":"celsius"}`, `{"city":"Paris","unit":"celsius"}`, 2},
		{"scripted, not ASCII", `{"q":"héllo wörld"}`, `{"q":"héllo wörld"}`, 2},
		{"scripted, two characters", `{}`, `{}`, 2},
	}
	for _, tc := range tests {
		for _, xai := range []bool{false, true} {
			name := tc.name + "/openai"
			if xai {
				name = tc.name + "/xai"
			}
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				ic := openItems(t, start(t, mockai.Config{ToolArguments: tc.args}), xai)
				ic.send(map[string]any{"type": "session.update", "session": map[string]any{"type": "realtime", "tools": tools}})
				ic.expect("session.updated")
				for turn := range 2 { // every call carries them
					ic.send(map[string]any{"type": "response.create", "response": map[string]any{"tool_choice": "required"}})
					var deltas []string
					var done, itemDone, final event
					for range maxEvents {
						ev := ic.next()
						switch ev.str("type") {
						case "response.function_call_arguments.delta":
							if done != nil {
								t.Errorf("argument delta after .done")
							}
							deltas = append(deltas, ev.str("delta"))
						case "response.function_call_arguments.done":
							done = ev
						case "response.output_item.done":
							itemDone = ev
						case "response.done":
							final = ev
						case "error":
							t.Fatalf("error: %v", ev)
						}
						if final != nil {
							break
						}
					}
					if final == nil || done == nil || itemDone == nil {
						t.Fatalf("turn %d: .done %v, output_item.done %v, response.done %v", turn, done, itemDone, final)
					}
					if len(deltas) < tc.wantDeltas || (tc.args == "" && len(deltas) != 1) || strings.Join(deltas, "") != tc.want {
						t.Errorf("turn %d: deltas %q, want at least %d joining to %s", turn, deltas, tc.wantDeltas, tc.want)
					}
					output, _ := final.get("response.output").([]any)
					var finalArgs any
					if len(output) == 1 {
						item, _ := output[0].(map[string]any)
						finalArgs = item["arguments"]
					}
					if done.str("arguments") != tc.want || itemDone.str("item.arguments") != tc.want || finalArgs != tc.want {
						t.Errorf("turn %d: arguments .done %q, output_item.done %q, response.done %v, want %s",
							turn, done.str("arguments"), itemDone.str("item.arguments"), finalArgs, tc.want)
					}
				}
			})
		}
	}
}
