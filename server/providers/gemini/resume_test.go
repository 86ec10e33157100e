package gemini

import (
	"encoding/json"
	"testing"
	"time"
)

// TestResumableMoments: when a session can move to a new connection
// without losing anything (Quiet), and whether it can move at all
// (Resumable), through a conversation's steps.
func TestResumableMoments(t *testing.T) {
	const (
		update    = `{"type":"session.update","session":{"instructions":"Be brief."}}`
		setupDone = `{"setupComplete":{}}`
		text      = `{"type":"conversation.item.create","item":{"type":"message","role":"user","content":[{"type":"input_text","text":"hi"}]}}`
		create    = `{"type":"response.create"}`
		audioOut  = `{"serverContent":{"modelTurn":{"parts":[{"inlineData":{"mimeType":"audio/pcm;rate=24000","data":"AAAA"}}]}}}`
		turnDone  = `{"serverContent":{"turnComplete":true},"usageMetadata":{"promptTokenCount":1,"responseTokenCount":1}}`
		handle    = `{"sessionResumptionUpdate":{"newHandle":"h1","resumable":true}}`
		notYet    = `{"sessionResumptionUpdate":{}}`
		cancelled = `{"toolCallCancellation":{"ids":["fc1"]}}`
		usageOnly = `{"usageMetadata":{"promptTokenCount":1,"responseTokenCount":1}}`
		heard     = `{"serverContent":{"inputTranscription":{"text":"hel"}}}`
		call      = `{"toolCall":{"functionCalls":[{"id":"fc1","name":"f","args":{}}]}}`
		answer    = `{"type":"conversation.item.create","item":{"type":"function_call_output","call_id":"fc1","output":"ok"}}`
	)
	type step struct {
		client, gemini   string // one of them: what happens
		quiet, resumable bool   // then

	}
	// Every case starts with the setup: nothing said yet, so a new
	// connection without a handle loses nothing.
	setup := []step{{client: update, quiet: true, resumable: true}, {gemini: setupDone, quiet: true, resumable: true}}
	tests := []struct {
		name  string
		steps []step
	}{
		{"nothing said: no handle needed", nil},
		{"a turn, then its handle", []step{
			{client: text, resumable: false},
			{client: create, resumable: false},
			{gemini: audioOut, resumable: false},
			{gemini: turnDone, resumable: false},
			{gemini: handle, quiet: true, resumable: true},
			{gemini: notYet, quiet: true, resumable: true}, // not resumable now: the newest handle stands
		}},
		{"a handle given mid-answer is not a resumable point", []step{
			{client: text}, {client: create},
			{gemini: audioOut},
			{gemini: handle, quiet: false, resumable: true},
			{gemini: turnDone, quiet: false, resumable: true},
		}},
		{"the user speaking after the handle", []step{
			{client: text}, {client: create}, {gemini: audioOut}, {gemini: turnDone},
			{gemini: handle, quiet: true, resumable: true},
			{gemini: heard, quiet: false, resumable: true},
		}},
		{"an unanswered function call", []step{
			{client: text}, {client: create},
			{gemini: call},
			{gemini: handle, quiet: false, resumable: true},
			{client: answer, quiet: false, resumable: true},
			{gemini: audioOut, resumable: true}, {gemini: turnDone, resumable: true},
			{gemini: handle, quiet: true, resumable: true},
		}},
		{"a call Gemini cancelled waits for no answer", []step{
			{client: text}, {client: create},
			{gemini: call}, {gemini: usageOnly},
			{gemini: handle, quiet: false, resumable: true},
			{gemini: cancelled, quiet: false, resumable: true}, // the handle was given with the call out
			{gemini: handle, quiet: true, resumable: true},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := newRelay(t)
			for i, st := range append(setup, tc.steps...) {
				if st.client != "" {
					r.fromClient(st.client)
				} else {
					r.fromGemini(st.gemini)
				}
				if q := r.s.Quiet(); q != st.quiet {
					t.Fatalf("step %d (%s%s): Quiet %v, want %v", i, st.client, st.gemini, q, st.quiet)
				}
				if res := r.s.Resumable(); res != st.resumable {
					t.Fatalf("step %d (%s%s): Resumable %v, want %v", i, st.client, st.gemini, res, st.resumable)
				}
			}
		})
	}
}

// TestResumeSetupNamesTheHandle: the new connection's setup is the
// session's configuration with the newest handle; before any handle, the
// configuration alone.
func TestResumeSetupNamesTheHandle(t *testing.T) {
	r := newRelay(t)
	r.fromClient(`{"type":"session.update","session":{"instructions":"Be brief.","audio":{"output":{"voice":"marin"}}}}`)
	read := func() (handle, instructions string) {
		var m struct {
			Setup struct {
				SessionResumption struct {
					Handle *string `json:"handle"`
				} `json:"sessionResumption"`
				SystemInstruction struct {
					Parts []struct{ Text string } `json:"parts"`
				} `json:"systemInstruction"`
			} `json:"setup"`
		}
		if err := json.Unmarshal(r.s.ResumeSetup(), &m); err != nil {
			t.Fatal(err)
		}
		if m.Setup.SessionResumption.Handle != nil {
			handle = *m.Setup.SessionResumption.Handle
		}
		if len(m.Setup.SystemInstruction.Parts) > 0 {
			instructions = m.Setup.SystemInstruction.Parts[0].Text
		}
		return handle, instructions
	}
	if h, ins := read(); h != "" || ins != "Be brief." {
		t.Fatalf("before any handle: handle %q, instructions %q", h, ins)
	}
	r.fromGemini(`{"setupComplete":{}}`)
	r.fromGemini(`{"sessionResumptionUpdate":{"newHandle":"h1","resumable":true}}`)
	r.fromGemini(`{"sessionResumptionUpdate":{"newHandle":"h2","resumable":true}}`)
	if h, ins := read(); h != "h2" || ins != "Be brief." {
		t.Fatalf("after two handles: handle %q, instructions %q, want h2 and the session's", h, ins)
	}
}

// TestLostEndsWhatWasInProgress: a connection lost mid-answer ends the
// response for the client (response.done, failed, naming the loss); one
// lost while a session.update waited for setupComplete answers it; one lost
// between turns ends nothing.
func TestLostEndsWhatWasInProgress(t *testing.T) {
	r := newRelay(t)
	r.fromClient(`{"type":"session.update","session":{"instructions":"x"}}`)
	if ended, _ := r.s.Lost(); types(messages(t, ended)) != "session.updated" {
		t.Fatalf("lost before setupComplete: the client got %s, want its session.updated", types(messages(t, ended)))
	}
	r.fromClient(`{"type":"conversation.item.create","item":{"type":"message","role":"user","content":[{"type":"input_text","text":"hi"}]}}`)
	r.fromClient(`{"type":"response.create"}`)
	r.fromGemini(`{"serverContent":{"outputTranscription":{"text":"Hel"}}}`)
	ended, lost := r.s.Lost()
	got := messages(t, ended)
	last := got[len(got)-1]
	if last["type"] != "response.done" || field(last, "response", "id") != lost || field(last, "response", "status") != "failed" ||
		field(last, "response", "status_details", "error", "code") != "upstream_lost" ||
		field(last, "response", "output", "0", "status") != "incomplete" {
		t.Fatalf("lost mid-answer: the client got %s, last %v", types(got), last)
	}
	if b, _ := r.s.Lost(); b != nil {
		t.Fatalf("lost between turns: the client got %s", types(messages(t, b)))
	}
	// The next turn, on the new connection, is a response of its own.
	if got := r.fromGemini(`{"serverContent":{"outputTranscription":{"text":"Again"}}}`); len(got) == 0 || got[0]["type"] != "response.created" {
		t.Fatalf("the first output after the move: %s, want a new response", types(got))
	}
}

// TestGoAwayIsTheGatewaysToAct: Gemini's goAway reaches OnGoAway with its
// time left (protobuf Duration), and nothing of it reaches the client.
func TestGoAwayIsTheGatewaysToAct(t *testing.T) {
	for _, tc := range []struct {
		msg  string
		want time.Duration
	}{
		{`{"goAway":{"timeLeft":"50s"}}`, 50 * time.Second},
		{`{"goAway":{"timeLeft":"0.500s"}}`, 500 * time.Millisecond},
		{`{"goAway":{}}`, 0},
		{`{"goAway":{"timeLeft":"soon"}}`, 0},
	} {
		r := newRelay(t)
		var got []time.Duration
		r.s.OnGoAway = func(left time.Duration) { got = append(got, left) }
		r.fromClient(`{"type":"session.update","session":{}}`)
		if out := r.fromGemini(tc.msg); len(out) != 0 {
			t.Fatalf("%s: the client got %s", tc.msg, types(out))
		}
		if len(got) != 1 || got[0] != tc.want {
			t.Fatalf("%s: OnGoAway got %v, want [%v]", tc.msg, got, tc.want)
		}
	}
}

// TestManualTurnAcrossAMove: with turn detection off, a user turn opened on
// one connection (activityStart) is no resumable point, and after a move
// the next append opens it again on the new connection, so the commit's
// activityEnd closes a turn Gemini knows.
func TestManualTurnAcrossAMove(t *testing.T) {
	r := newRelay(t)
	r.fromClient(`{"type":"session.update","session":{"audio":{"input":{"turn_detection":null}}}}`)
	r.fromGemini(`{"setupComplete":{}}`)
	r.fromGemini(`{"sessionResumptionUpdate":{"newHandle":"h1","resumable":true}}`)
	const appendAudio = `{"type":"input_audio_buffer.append","audio":"AAAA"}`
	if toGemini, _ := r.fromClient(appendAudio); types(toGemini) != "realtimeInput realtimeInput" {
		t.Fatalf("the first append sent %v, want activityStart and the audio", toGemini)
	}
	r.fromGemini(`{"sessionResumptionUpdate":{"newHandle":"h2","resumable":true}}`)
	if r.s.Quiet() {
		t.Fatal("quiet with the user's turn open")
	}
	r.s.Lost()
	toGemini, _ := r.fromClient(appendAudio)
	if len(toGemini) != 2 || field(toGemini[0], "realtimeInput", "activityStart") == nil {
		t.Fatalf("the first append on the new connection sent %v, want activityStart first", toGemini)
	}
	if toGemini, _ := r.fromClient(`{"type":"input_audio_buffer.commit"}`); len(toGemini) != 1 || field(toGemini[0], "realtimeInput", "activityEnd") == nil {
		t.Fatalf("the commit sent %v, want activityEnd", toGemini)
	}
}

// TestSetupKeepsLongSessions: every setup asks for a sliding context
// window: without it Gemini ends an audio session after about 15 minutes,
// whatever its connections.
func TestSetupKeepsLongSessions(t *testing.T) {
	r := newRelay(t)
	toGemini, _ := r.fromClient(`{"type":"session.update","session":{}}`)
	if len(toGemini) != 1 || field(toGemini[0], "setup", "contextWindowCompression", "slidingWindow") == nil {
		t.Fatalf("setup %v, want contextWindowCompression.slidingWindow", toGemini)
	}
}
