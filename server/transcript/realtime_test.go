package transcript

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
)

func TestRealtimeKinds(t *testing.T) {
	argsDone := func(name string) step {
		named := ""
		if name != "" {
			named = `"name":` + q(name) + `,`
		}
		return step{up, `{"type":"response.function_call_arguments.done","event_id":"e","response_id":"r1","item_id":"fc1","output_index":0,"call_id":"call_1",` +
			named + `"arguments":"{\"city\":\"Paris\"}"}`}
	}
	callItemDone := step{up, `{"type":"response.output_item.done","event_id":"e","response_id":"r1","output_index":0,"item":{"id":"fc1","object":"realtime.item",` +
		`"type":"function_call","status":"completed","name":"weather","call_id":"call_1","arguments":"{\"city\":\"Paris\"}"}}`}
	tests := []struct {
		name  string
		steps []step
		want  []string
	}{
		{
			name:  "the user's transcript: the completed one, not its deltas",
			steps: []step{committed("u1"), heardDelta("u1", "what "), heardDelta("u1", "time"), heard("u1", "What time is it?")},
			want:  []string{"transcript user u1: What time is it?"},
		},
		{
			name:  "a user's transcript that never completed: partial at Close",
			steps: []step{committed("u1"), heardDelta("u1", "what "), heardDelta("u1", "ti")},
			want:  []string{"transcript user u1: what ti [partial]"},
		},
		{
			name:  "a failed transcription",
			steps: []step{committed("u1"), heardDelta("u1", "wh"), {up, `{"type":"conversation.item.input_audio_transcription.failed","item_id":"u1","content_index":0,"error":{"type":"transcription_error","message":"x"}}`}},
			want:  []string{"transcript user u1: wh [partial] [failed]"},
		},
		{
			name:  "committed audio without transcription leaves nothing",
			steps: []step{committed("u1"), committed("u2")},
			want:  []string{},
		},
		{
			name: "the user's and the system's text items",
			steps: []step{
				userText("u1", "user", "Hello"),
				userText("s1", "system", "Speak French."),
				{cl, `{"type":"conversation.item.create","item":{"type":"message","role":"user","content":[{"type":"input_text","text":"a"},{"type":"input_image","image_url":"data:x"},{"type":"input_text","text":"b"}]}}`},
				{cl, `{"type":"conversation.item.create","item":{"type":"message","role":"user","content":[{"type":"input_audio","audio":"AAAA"}]}}`},
			},
			want: []string{"text user u1: Hello", "text system s1: Speak French.", "text user: a\nb"},
		},
		{
			name:  "the assistant's transcript (GA)",
			steps: []step{saidDelta("r1", "a1", "Bon"), audioDelta("r1", "a1"), saidDelta("r1", "a1", "jour"), said("r1", "a1", "Bonjour!")},
			want:  []string{"transcript assistant a1: Bonjour!"},
		},
		{
			name: "the assistant's transcript (beta names)",
			steps: []step{
				{up, `{"type":"response.audio_transcript.delta","response_id":"r1","item_id":"a1","output_index":0,"content_index":0,"delta":"Hal"}`},
				{up, `{"type":"response.audio_transcript.done","response_id":"r1","item_id":"a1","output_index":0,"content_index":0,"transcript":"Hallo."}`},
			},
			want: []string{"transcript assistant a1: Hallo."},
		},
		{
			name: "the assistant's text, GA and beta",
			steps: []step{
				{up, `{"type":"response.output_text.delta","response_id":"r1","item_id":"a1","output_index":0,"content_index":0,"delta":"One"}`},
				{up, `{"type":"response.output_text.done","response_id":"r1","item_id":"a1","output_index":0,"content_index":0,"text":"One."}`},
				{up, `{"type":"response.text.delta","response_id":"r2","item_id":"a2","output_index":0,"content_index":0,"delta":"Two"}`},
				{up, `{"type":"response.text.done","response_id":"r2","item_id":"a2","output_index":0,"content_index":0,"text":"Two."}`},
			},
			want: []string{"text assistant a1: One.", "text assistant a2: Two."},
		},
		{
			name:  "an answer cut off by the session's end: its deltas, partial",
			steps: []step{saidDelta("r1", "a1", "Once upon"), saidDelta("r1", "a1", " a time")},
			want:  []string{"transcript assistant a1: Once upon a time [partial]"},
		},
		{
			name: "an answer whose response completed without its transcript's done: whole",
			steps: []step{saidDelta("r1", "a1", "Once upon"), saidDelta("r1", "a1", " a time"),
				{up, `{"type":"response.done","response":{"id":"r1","status":"completed"}}`}},
			want: []string{"transcript assistant a1: Once upon a time"},
		},
		{
			name: "an answer whose response failed: partial",
			steps: []step{saidDelta("r1", "a1", "Once upon"),
				{up, `{"type":"response.done","response":{"id":"r1","status":"failed"}}`}},
			want: []string{"transcript assistant a1: Once upon [partial]"},
		},
		{
			name:  "an answer only in output_item.done",
			steps: []step{{up, `{"type":"response.output_item.done","response_id":"r1","item":{"id":"a1","type":"message","role":"assistant","status":"completed","content":[{"type":"output_audio","transcript":"Sure."}]}}`}},
			want:  []string{"transcript assistant a1: Sure."},
		},
		{
			name:  "a tool call (GA: named in its arguments' done), once",
			steps: []step{argsDone("weather"), callItemDone, toolOutput("call_1", `{"temp":21}`)},
			want:  []string{`tool_call assistant fc1 call_1 weather({"city":"Paris"})`, `tool_output tool call_1={"temp":21}`},
		},
		{
			name:  "a tool call (beta: the name from output_item.done)",
			steps: []step{argsDone(""), callItemDone},
			want:  []string{`tool_call assistant fc1 call_1 weather({"city":"Paris"})`},
		},
		{
			name:  "a tool call only in output_item.done",
			steps: []step{callItemDone},
			want:  []string{`tool_call assistant fc1 call_1 weather({"city":"Paris"})`},
		},
		{
			name: "interruptions: turn detected, client cancelled; completed responses are not",
			steps: []step{
				saidDelta("r1", "a1", "Let me"), responseDone("r1", "cancelled", "turn_detected"),
				responseDone("r2", "cancelled", "client_cancelled"), responseDone("r3", "completed", ""),
			},
			want: []string{
				"transcript assistant a1: Let me [partial]", // its response ended without its done
				"interruption r1 [cancelled turn_detected]",
				"interruption r2 [cancelled client_cancelled]",
			},
		},
		{
			name: "the client's truncate marks what the caller heard; the upstream's confirmation changes nothing",
			steps: []step{
				said("r1", "a1", "The long answer."), truncate("a1", 1200),
				{up, `{"type":"conversation.item.truncated","item_id":"a1","content_index":0,"audio_end_ms":1300}`},
			},
			want: []string{"transcript assistant a1: The long answer. [truncated@1200]"},
		},
		{
			name:  "a truncate before the transcript's done: the done keeps the mark",
			steps: []step{saidDelta("r1", "a1", "The"), truncate("a1", 0), said("r1", "a1", "The end.")},
			want:  []string{"transcript assistant a1: The end. [truncated@0]"},
		},
		{
			name:  "a WebRTC call's truncation comes from the upstream alone",
			steps: []step{{up, `{"type":"conversation.item.truncated","item_id":"a1","content_index":0,"audio_end_ms":640}`}, said("r1", "a1", "Hi.")},
			want:  []string{"transcript assistant a1: Hi. [truncated@640]"},
		},
		{
			name: "escaped text and ids",
			steps: []step{
				{up, `{"type":"response.output_audio_transcript.delta","response_id":"r1","item_id":"a\"1","delta":"say \"\u00e9t\u00e9\""}`},
				saidDelta("r1", `a"1`, "\n"),
			},
			want: []string{"transcript assistant a\"1: say \"\u00e9t\u00e9\"\n [partial]"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newRecorder(t, 0)
			feed(t, r, tt.steps...)
			if got := lines(r.Close()); !slices.Equal(got, tt.want) {
				t.Fatalf("record:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tt.want, "\n"))
			}
		})
	}
}

func TestRealtimeWants(t *testing.T) {
	upstream := map[string]bool{
		"response.output_audio.delta":                           false,
		"response.audio.delta":                                  false,
		"input_audio_buffer.speech_started":                     false,
		"rate_limits.updated":                                   false,
		"session.created":                                       false,
		"response.function_call_arguments.delta":                false,
		"input_audio_buffer.committed":                          true,
		"conversation.item.input_audio_transcription.delta":     true,
		"conversation.item.input_audio_transcription.completed": true,
		"response.output_audio_transcript.delta":                true,
		"response.audio_transcript.done":                        true,
		"response.text.done":                                    true,
		"response.done":                                         true,
		"conversation.item.truncated":                           true,
	}
	for typ, want := range upstream {
		if got := WantsUpstream([]byte(typ)); got != want {
			t.Errorf("WantsUpstream(%s) = %v, want %v", typ, got, want)
		}
	}
	client := map[string]bool{
		"input_audio_buffer.append":  false,
		"session.update":             false,
		"response.create":            false,
		"conversation.item.create":   true,
		"conversation.item.truncate": true,
	}
	for typ, want := range client {
		if got := WantsClient([]byte(typ)); got != want {
			t.Errorf("WantsClient(%s) = %v, want %v", typ, got, want)
		}
	}
	if n := testing.AllocsPerRun(100, func() {
		WantsUpstream([]byte("response.output_audio.delta"))
		WantsClient([]byte("input_audio_buffer.append"))
	}); n != 0 {
		t.Fatalf("the filter allocates %v per event", n)
	}
}

func TestRealtimeUnreadable(t *testing.T) {
	r := newRecorder(t, 0)
	feed(t, r, userText("u1", "user", "kept"))
	var syntax *json.SyntaxError
	if err := r.Upstream([]byte(`{"type":"response.output_audio_transcript.done","transcript":`)); !errors.As(err, &syntax) {
		t.Fatalf("a cut-off event: %v, want a JSON syntax error", err)
	}
	var typeErr *json.UnmarshalTypeError
	if err := r.Client([]byte(`{"type":"conversation.item.create","item":"not an item"}`)); !errors.As(err, &typeErr) {
		t.Fatalf("a wrong-shaped event: %v, want an unmarshal type error", err)
	}
	if err := r.Upstream([]byte(`not json`)); !errors.Is(err, ErrNoType) {
		t.Fatalf("no type: %v, want ErrNoType", err)
	}
	if got, want := lines(r.Close()), []string{"text user u1: kept"}; !slices.Equal(got, want) {
		t.Fatalf("record %q, want %q", got, want)
	}
}
