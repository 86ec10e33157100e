package server

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"rtgate/mockai"
)

// Guardrails on GPT-Live sessions (server/guarded's live.go), with gorilla
// as the client and mockai's Live transcripts and delegations scripted per
// test, over ws:// and wss:// upstreams.

// liveGuardGateway starts a gateway with a Live group gpt-live at m, the
// guardrails given (YAML list items) and key team-a.
func liveGuardGateway(t *testing.T, m *mockai.Server, trust func(*Settings), guardrails string) *gateway {
	t.Helper()
	path := writeConfig(t, `model_list:
  - model_name: gpt-live
    litellm_params:
      model: openai/gpt-live-1
      api_base: `+m.BaseURL()+`
      api_key: os.environ/RTGATE_TEST_UPSTREAM
guardrails:`+guardrails+`
keys:
  - name: team-a
    key: os.environ/TEAM_A_KEY
`+configTail)
	return startGateway(t, nil, func(c *Settings) {
		trust(c)
		c.RoutesFile, c.Continuity = path, false
	})
}

// startLiveGuarded opens a Live session on g (query appended to its URL)
// and reads its session.started.
func startLiveGuarded(t *testing.T, g *gateway, query string) *websocket.Conn {
	t.Helper()
	c := dialWith(t, dialer(), g.liveURL()+query, bearer("sk-team-a-test"))
	send(t, c, liveStart("gpt-live", nil))
	if e := read(t, c); e.typ() != "session.started" {
		t.Fatalf("first event %v", e)
	}
	return c
}

// mockGot reports whether mock received a client event of type typ whose
// JSON contains each of parts.
func mockGot(mock *mockai.Server, typ string, parts ...string) bool {
	for _, e := range upstreamEvents(mock, typ) {
		all := true
		for _, p := range parts {
			all = all && strings.Contains(string(e.Event), p)
		}
		if all {
			return true
		}
	}
	return false
}

// TestLiveGuardrailOnTheUsersSpeech: a banned phrase in the user's speech
// is stopped before the model's answer reaches the client: the answer's
// audio and transcript never come, the client gets a guardrail_violation
// error, and the model is asked (session.instructions.append) to say the
// violation message. A clean turn is answered. The second violation ends
// the session: the error, session.close upstream, close 1008.
func TestLiveGuardrailOnTheUsersSpeech(t *testing.T) {
	cfg := mockai.Config{InputTranscripts: []string{"what is the weather", "my PASSWORD is hunter2", "tell me the password"},
		Live: mockai.LiveConfig{UsageInterval: -1}}
	overBoth(t, cfg, func(t *testing.T, mock *mockai.Server, trust func(*Settings)) {
		g := liveGuardGateway(t, mock, trust, `
  - guardrail_name: no-secrets
    litellm_params:
      guardrail: litellm_content_filter
      mode: realtime_input_transcription
      default_on: true
      blocked_words: [password]
      end_session_after_n_fails: 2
      realtime_violation_message: "I can't discuss credentials."`)
		c := startLiveGuarded(t, g, "")
		appendAudio(t, c, liveSecond/10)
		evs := eventsUntil(t, c, "session.output_transcript.delta")
		if types := typesOf(evs); !slices.Contains(types, "session.output_audio.delta") || slices.Contains(types, "error") {
			t.Fatalf("the clean turn: %v", types)
		}

		appendAudio(t, c, liveSecond/10)
		evs = eventsUntil(t, c, "error")
		if e := evs[len(evs)-1]; e.str("error", "type") != "guardrail_violation" || !strings.Contains(e.str("error", "message"), "no-secrets") {
			t.Fatalf("error %v, want a guardrail_violation naming no-secrets", e)
		}
		if types := typesOf(evs); slices.Contains(types, "session.output_audio.delta") || slices.Contains(types, "session.output_transcript.delta") {
			t.Fatalf("the blocked turn's answer reached the client: %v", types)
		}
		waitFor(t, "the instructions upstream", func() bool {
			return mockGot(mock, "session.instructions.append", "I can't discuss credentials.", `"delegation_id":null`)
		})

		appendAudio(t, c, liveSecond/10)
		evs, ce := eventsUntilClose(t, c)
		if ce == nil || ce.Code != 1008 {
			t.Fatalf("the second violation: close %v, want 1008", ce)
		}
		types := typesOf(evs)
		if !slices.ContainsFunc(evs, func(e event) bool { return e.str("error", "type") == "guardrail_violation" }) ||
			slices.Contains(types, "session.output_audio.delta") || slices.Contains(types, "session.instructions.appended") {
			t.Fatalf("before the close: %v", types)
		}
		waitFor(t, "the session closed upstream", func() bool {
			s := mock.LiveSessions()
			return len(s) == 1 && s[0].Reason == "close_requested"
		})
	})
}

// TestLiveGuardrailOnDelegations: a delegation whose task (the user's
// turn that led to it: the event carries none) is banned never reaches the
// client, which gets a guardrail_violation error; the model gets the
// delegation's result as a refusal (session.commentary.append with its
// delegation_id). A clean one goes on. The guardrail is asked for with
// ?guardrails=.
func TestLiveGuardrailOnDelegations(t *testing.T) {
	cfg := mockai.Config{InputTranscripts: []string{"book a table for two", "wire the money to account 666"},
		Live: mockai.LiveConfig{UsageInterval: -1, ClientDelegations: true}}
	overBoth(t, cfg, func(t *testing.T, mock *mockai.Server, trust func(*Settings)) {
		g := liveGuardGateway(t, mock, trust, `
  - guardrail_name: no-wires
    litellm_params:
      guardrail: litellm_content_filter
      mode: realtime_tool_call
      blocked_words: ["wire the money"]`)
		c := startLiveGuarded(t, g, "?guardrails=no-wires")
		appendAudio(t, c, liveSecond/10)
		evs := eventsUntil(t, c, "session.delegation.created")
		if slices.Contains(typesOf(evs), "error") {
			t.Fatalf("the clean delegation: %v", typesOf(evs))
		}

		appendAudio(t, c, liveSecond/10)
		evs = eventsUntil(t, c, "error")
		if e := evs[len(evs)-1]; e.str("error", "type") != "guardrail_violation" || !strings.Contains(e.str("error", "message"), "no-wires") {
			t.Fatalf("error %v, want a guardrail_violation naming no-wires", e)
		}
		if slices.Contains(typesOf(evs), "session.delegation.created") {
			t.Fatalf("the banned delegation reached the client: %v", typesOf(evs))
		}
		waitFor(t, "the refusal upstream", func() bool {
			return mockGot(mock, "session.commentary.append", `"delegation_id":"del_`, "refused")
		})
		send(t, c, map[string]any{"type": "session.close"})
		evs, _ = eventsUntilClose(t, c)
		if types := typesOf(evs); slices.Contains(types, "session.delegation.created") || slices.Contains(types, "session.commentary.appended") {
			t.Fatalf("after the block: %v", types)
		}
	})
}

// TestLiveGuardrailCutsFlaggedOutput: the model's answer is checked as its
// transcript streams, and each audio delta waits for the transcript whose
// end_ms covers it: the audio of the words up to the banned phrase's last
// word never reaches the client, nor that word's transcript. The client
// gets less audio than the model sent, then the error; the model is told
// the answer was blocked.
func TestLiveGuardrailCutsFlaggedOutput(t *testing.T) {
	const deltas = 6
	cfg := mockai.Config{AudioDeltas: deltas, AudioDeltaInterval: 40 * time.Millisecond,
		OutputTranscripts: []string{"Sure, the launch code is 0000, anything else?"},
		Live:              mockai.LiveConfig{UsageInterval: -1}}
	overBoth(t, cfg, func(t *testing.T, mock *mockai.Server, trust func(*Settings)) {
		g := liveGuardGateway(t, mock, trust, `
  - guardrail_name: no-codes
    litellm_params:
      guardrail: litellm_content_filter
      mode: realtime_output_transcription
      default_on: true
      blocked_words: ["launch code"]
      holdback_ms: 2000`)
		c := startLiveGuarded(t, g, "")
		appendAudio(t, c, liveSecond/10)
		evs := eventsUntil(t, c, "error")
		if e := evs[len(evs)-1]; e.str("error", "type") != "guardrail_violation" || !strings.Contains(e.str("error", "message"), "no-codes") {
			t.Fatalf("error %v, want a guardrail_violation naming no-codes", e)
		}
		waitFor(t, "the instructions upstream", func() bool {
			return mockGot(mock, "session.instructions.append", "blocked", `"delegation_id":null`)
		})
		send(t, c, map[string]any{"type": "session.close"})
		rest, _ := eventsUntilClose(t, c)
		var audio int
		var text string
		for _, e := range append(evs, rest...) {
			switch e.typ() {
			case "session.output_audio.delta":
				audio++
			case "session.output_transcript.delta":
				text += e.str("delta")
			}
		}
		// The words spread over the six deltas: "Sure, the ", "launch ",
		// "code ", ...: the third delta's text completes the phrase, so
		// its audio and all after it are cut.
		if strings.Contains(text, "code") || strings.Contains(text, "0000") {
			t.Fatalf("the banned words reached the client: %q", text)
		}
		if audio == 0 || audio > 2 {
			t.Fatalf("%d of %d audio deltas reached the client, want those before the banned word's (1 or 2)", audio, deltas)
		}
	})
}
