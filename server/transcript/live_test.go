package transcript

import (
	"slices"
	"strings"
	"testing"
)

// GPT-Live events, shaped as the official SDK's types (openai 7.59.0) and
// mockai's Live server send them.
func liveHeard(d string) step {
	return step{lup, `{"type":"session.input_transcript.delta","event_id":"e","delta":` + q(d) + `,"start_ms":0,"end_ms":10}`}
}
func liveSaid(d string) step {
	return step{lup, `{"type":"session.output_transcript.delta","event_id":"e","delta":` + q(d) + `,"start_ms":0,"end_ms":10}`}
}
func liveBackend(del, inner string) step {
	return step{lup, `{"type":"response.event","event_id":"e","delegation_id":` + q(del) + `,"event":` + inner + `}`}
}

func TestLiveKinds(t *testing.T) {
	delegated := step{lup, `{"type":"session.delegation.created","event_id":"e","offset_ms":1200,` +
		`"delegation":{"id":"del_1","target":"responses","type":"delegation","response_id":"resp_1"}}`}
	created := liveBackend("del_1", `{"type":"response.created","sequence_number":0,"response":{"id":"resp_1","status":"in_progress","output":[]}}`)
	textDelta := func(d string) step {
		return liveBackend("del_1", `{"type":"response.output_text.delta","sequence_number":1,"item_id":"msg_1","output_index":0,"content_index":0,"delta":`+q(d)+`}`)
	}
	ended := func(status string) step {
		return liveBackend("del_1", `{"type":"response.`+status+`","sequence_number":9,"response":{"id":"resp_1","status":"`+status+`","usage":{"input_tokens":1,"output_tokens":1,"total_tokens":2}}}`)
	}
	tests := []struct {
		name  string
		steps []step
		want  []string
	}{
		{
			name:  "transcript deltas of one side join until the other speaks; the last is whole at Close",
			steps: []step{liveHeard("Book a "), liveHeard("table."), liveSaid("For how "), liveSaid("many?"), liveHeard("Two.")},
			want:  []string{"transcript user: Book a table.", "transcript assistant: For how many?", "transcript user: Two."},
		},
		{
			name:  "speaking over each other: each change of side a new entry",
			steps: []step{liveSaid("The weather "), liveHeard("Stop"), liveSaid("is"), liveHeard(".")},
			want:  []string{"transcript assistant: The weather ", "transcript user: Stop", "transcript assistant: is", "transcript user: ."},
		},
		{
			name: "a Responses delegation: its text from deltas, whole once the response completed",
			steps: []step{
				liveHeard("What's on my calendar?"), delegated, created, textDelta("You have "), textDelta("two meetings."), ended("completed"),
			},
			want: []string{
				"transcript user: What's on my calendar?",
				"delegation assistant del_1->responses",
				"text assistant msg_1: You have two meetings. del=del_1",
			},
		},
		{
			name:  "a delegated response that did not complete: partial, with its status",
			steps: []step{delegated, textDelta("You have "), ended("incomplete")},
			want:  []string{"delegation assistant del_1->responses", "text assistant msg_1: You have  del=del_1 [partial] [incomplete]"},
		},
		{
			name: "the backend's text done, and its tool call and the client's output",
			steps: []step{
				textDelta("Checking"),
				liveBackend("del_1", `{"type":"response.output_text.done","sequence_number":2,"item_id":"msg_1","output_index":0,"content_index":0,"text":"Checking."}`),
				liveBackend("del_1", `{"type":"response.function_call_arguments.done","sequence_number":3,"item_id":"fc_1","output_index":1,"arguments":"{\"day\":\"today\"}"}`),
				liveBackend("del_1", `{"type":"response.output_item.done","sequence_number":4,"output_index":1,"item":{"id":"fc_1","type":"function_call","status":"completed","call_id":"call_1","name":"calendar","arguments":"{\"day\":\"today\"}"}}`),
				{lcl, `{"type":"response.item.create","item":{"type":"function_call_output","call_id":"call_1","output":"2 meetings"}}`},
				{lcl, `{"type":"response.item.create","item":{"role":"user","content":"and tomorrow?"}}`},
				{lcl, `{"type":"response.create"}`},
			},
			want: []string{
				"text assistant msg_1: Checking. del=del_1",
				`tool_call assistant fc_1 call_1 calendar({"day":"today"}) del=del_1`,
				"tool_output tool call_1=2 meetings",
				"text user: and tomorrow?",
			},
		},
		{
			name: "a client delegation answered with commentary; context the app adds",
			steps: []step{
				{lup, `{"type":"session.delegation.created","event_id":"e","offset_ms":10,"delegation":{"id":"del_2","target":"client","type":"delegation"}}`},
				{lcl, `{"type":"session.commentary.append","delegation_id":"del_2","content":"The order shipped."}`},
				{lcl, `{"type":"session.instructions.append","delegation_id":null,"content":"Be brief."}`},
				{lcl, `{"type":"session.thinking.append","delegation_id":null,"content":"User is in a hurry."}`},
			},
			want: []string{
				"delegation assistant del_2->client",
				"context developer (commentary): The order shipped. del=del_2",
				"context developer (instructions): Be brief.",
				"context developer (thinking): User is in a hurry.",
			},
		},
		{
			name: "session.start's history",
			steps: []step{
				{lcl, `{"type":"session.start","session":{"model":"gpt-live-1","instructions":"x","input":[` +
					`{"type":"message","role":"developer","content":[{"type":"input_text","text":"Caller is a member."}]},` +
					`{"role":"user","content":[{"text":"Hi"}]},{"role":"assistant","content":[{"type":"output_text","text":"Hello!"}]}]}}`},
				liveHeard("Where is my order?"),
			},
			want: []string{"text developer: Caller is a member.", "text user: Hi", "text assistant: Hello!", "transcript user: Where is my order?"},
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

func TestLiveWants(t *testing.T) {
	upstream := []struct {
		ev   string
		want bool
	}{
		{`{"type":"session.output_audio.delta","delta":"AAAA"}`, false},
		{`{"type":"session.input_audio.append","audio":"AAAA"}`, false}, // a sideband's reflected audio
		{`{"type":"session.usage.updated","usage":{"seconds":1}}`, false},
		{`{"type":"session.input_transcript.delta","delta":"a"}`, true},
		{`{"type":"session.output_transcript.delta","delta":"a"}`, true},
		{`{"type":"session.delegation.created","delegation":{"id":"d"}}`, true},
		{`{"type":"response.event","delegation_id":"d","event":{"type":"response.output_text.delta","delta":"a"}}`, true},
		{`{"type":"response.event","delegation_id":"d","event":{"type":"response.function_call_arguments.delta","delta":"a"}}`, false},
		{`{"type":"response.event","delegation_id":"d","event":{"type":"response.reasoning_summary_text.delta","delta":"a"}}`, false},
		{`{"type":"response.event","delegation_id":"d","event":{"type":"response.completed"}}`, true},
		// the wrapped type past the prefix: looked at whole rather than missed
		{`{"type":"response.event","delegation_id":"` + strings.Repeat("d", 300) + `","event":{"type":"response.output_text.delta"}}`, true},
	}
	for _, tt := range upstream {
		p := []byte(tt.ev)
		typ := p[9 : strings.IndexByte(tt.ev[9:], '"')+9]
		if got := LiveWantsUpstream(typ, p[:min(len(p), 256)]); got != tt.want {
			t.Errorf("LiveWantsUpstream(%.90s) = %v, want %v", tt.ev, got, tt.want)
		}
	}
	for typ, want := range map[string]bool{
		"session.input_audio.append": false, "session.update": false, "response.create": false,
		"session.start": true, "response.item.create": true, "session.commentary.append": true,
	} {
		if got := LiveWantsClient([]byte(typ)); got != want {
			t.Errorf("LiveWantsClient(%s) = %v, want %v", typ, got, want)
		}
	}
	audio := []byte(`{"type":"session.output_audio.delta","delta":"AAAA"}`)
	if n := testing.AllocsPerRun(100, func() {
		LiveWantsUpstream(audio[9:35], audio)
		LiveWantsClient([]byte("session.input_audio.append"))
	}); n != 0 {
		t.Fatalf("the Live filter allocates %v per event", n)
	}
}

// TestLiveCap: Live turns past the cap are counted cut, one per turn.
func TestLiveCap(t *testing.T) {
	r := newRecorder(t, entryOverhead+40)
	feed(t, r, liveHeard("hello"), liveSaid("hi"), liveSaid(" there"), liveHeard("bye"))
	rec := r.Close()
	if got, want := lines(rec), []string{"transcript user: hello"}; !slices.Equal(got, want) {
		t.Fatalf("record %q, want %q", got, want)
	}
	if rec.Cut != 2 || rec.CutBytes != 2*entryOverhead+len("hi there")+len("bye") {
		t.Fatalf("cut %d (%d bytes), want 2 turns", rec.Cut, rec.CutBytes)
	}
}
