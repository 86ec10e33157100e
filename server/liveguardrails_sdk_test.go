package server

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"rtgate/server/spenddb/pgtest"
	"rtgate/server/transcript"
)

// sdkLiveRun is what liveguardrails.mjs printed: per user turn, what the
// SDK got after that turn's input transcript.
type sdkLiveRun struct {
	Turns        []sdkLiveTurn `json:"turns"`
	Early        []string      `json:"early"`
	ClosedReason string        `json:"closed_reason"`
	CloseCode    int           `json:"close_code"`
	Failure      string        `json:"failure"`
}

// sdkLiveTurn is what the SDK got in one user turn.
type sdkLiveTurn struct {
	Input       string         `json:"input"`
	Events      []string       `json:"events"`
	AudioDeltas int            `json:"audio_deltas"`
	Transcript  string         `json:"transcript"`
	Delegations int            `json:"delegations"`
	Errors      []sdkLiveError `json:"errors"`
}

// sdkLiveError is an error event as the SDK got it.
type sdkLiveError struct {
	Type    string `json:"type"`
	Message string `json:"message"`
}

// TestLiveGuardrailsWithTheOfficialSDK: the official openai SDK's GPT-Live
// client (LiveWS), unchanged, through the gateway's conversation record and
// guardrails, over ws:// and wss:// upstreams. mockai answers each user turn
// with six audio deltas, the words spread over them, and a client
// delegation; its words, per turn of every session, are:
//
//	turn  the user says                              the model says
//	0     what is the weather, call me at 555-0100  Sunny and warm, I will call you back.
//	1     my password is hunter2                    Sure, the launch code is 0000, anything else?
//	2     wire the money to account 666             Done, the money is on its way.
//
// Each key runs one guardrail. team-a (realtime_input_transcription,
// blocked word "password"): turn 1 gets a guardrail_violation and none of
// the model's answer to it; turns 0 and 2 are answered whole. team-b
// (realtime_output_transcription, "launch code"): turn 0 is heard whole,
// turn 1 is cut: fewer audio deltas than mockai sent, never the banned
// words. team-c (realtime_tool_call, "wire the money"): the delegations of
// turns 0 and 1 reach the SDK, turn 2's never does (a violation instead)
// and the model gets it refused. The keys keep transcripts (a Live
// session's key decides alone: its model is named after connect): every
// session's record lands in the usage log and in Postgres with its
// guardrail's block, the phone number redacted in both.
func TestLiveGuardrailsWithTheOfficialSDK(t *testing.T) {
	pg := pgtest.Start(t)
	t.Setenv("TEAM_B_KEY", "sk-team-b-live")
	t.Setenv("TEAM_C_KEY", "sk-team-c-live")
	const phone = "555-0100"
	const deltas = 6
	for _, scheme := range []string{"ws", "wss"} {
		t.Run(scheme, func(t *testing.T) {
			g, lc, logPath, mock, roots := providerGateway(t, scheme, []string{"-deltas", fmt.Sprint(deltas), "-delta-interval", "40ms",
				"-live-usage-interval", "-1s", "-live-client-delegations",
				"-input-transcript", "what is the weather, call me at " + phone,
				"-input-transcript", "my password is hunter2",
				"-input-transcript", "wire the money to account 666",
				"-output-transcript", "Sunny and warm, I will call you back.",
				"-output-transcript", "Sure, the launch code is 0000, anything else?",
				"-output-transcript", "Done, the money is on its way."},
				func(root string) string {
					return `
  - model_name: gpt-live
    litellm_params:
      model: openai/gpt-live-1
      api_base: ` + root + `/v1
      api_key: os.environ/RTGATE_TEST_UPSTREAM
keys:
  - name: team-a
    key: os.environ/TEAM_A_KEY
    log_transcripts: true
    guardrails: [no-secrets]
  - name: team-b
    key: os.environ/TEAM_B_KEY
    log_transcripts: true
    guardrails: [no-codes]
  - name: team-c
    key: os.environ/TEAM_C_KEY
    log_transcripts: true
    guardrails: [no-wires]
transcripts:
  redact:
    - pattern: '\d{3}-\d{4}'
      label: PHONE
guardrails:
  - guardrail_name: no-secrets
    litellm_params:
      guardrail: litellm_content_filter
      mode: realtime_input_transcription
      blocked_words: [password]
      realtime_violation_message: "I can't take passwords."
  - guardrail_name: no-codes
    litellm_params:
      guardrail: litellm_content_filter
      mode: realtime_output_transcription
      blocked_words: ["launch code"]
      holdback_ms: 2000
  - guardrail_name: no-wires
    litellm_params:
      guardrail: litellm_content_filter
      mode: realtime_tool_call
      blocked_words: ["wire the money"]`
				}, func(c *Settings) { c.DatabaseURL, c.Continuity = pg.URL, false })
			run := func(key, turns string) sdkLiveRun {
				out := runNode(t, "liveguardrails.mjs", "MODEL=gpt-live", "TURNS="+turns,
					"GATEWAY_BASE=https://"+g.addr+"/v1", "GATEWAY_KEY="+key, "NODE_EXTRA_CA_CERTS="+lc.certFile)
				var got sdkLiveRun
				if err := json.Unmarshal(out, &got); err != nil {
					t.Fatalf("liveguardrails.mjs printed %q: %v", out, err)
				}
				if got.Failure != "" {
					t.Fatalf("the SDK's session failed: %s; got %+v", got.Failure, got)
				}
				if n := len(strings.Split(turns, ",")); len(got.Turns) != n || got.ClosedReason != "close_requested" || got.CloseCode != 1000 {
					t.Fatalf("%d turns (want %d), session.closed %q, close %d: %+v", len(got.Turns), n, got.ClosedReason, got.CloseCode, got)
				}
				return got
			}
			violation := func(who string, tr sdkLiveTurn, guardrail string) {
				t.Helper()
				if len(tr.Errors) != 1 || tr.Errors[0].Type != "guardrail_violation" || !strings.Contains(tr.Errors[0].Message, guardrail) {
					t.Fatalf("%s: errors %+v, want one guardrail_violation naming %s", who, tr.Errors, guardrail)
				}
			}

			// team-a: the user's speech.
			a := run("sk-team-a-test", "delegation,guardrail,delegation")
			for _, i := range []int{0, 2} {
				if tr := a.Turns[i]; tr.AudioDeltas != deltas || tr.Delegations != 1 || len(tr.Errors) != 0 {
					t.Fatalf("team-a's clean turn %d: %d audio deltas, %d delegations, errors %+v; want %d, 1, none",
						i, tr.AudioDeltas, tr.Delegations, tr.Errors, deltas)
				}
			}
			violation("team-a's turn 1", a.Turns[1], "no-secrets")
			if tr := a.Turns[1]; tr.AudioDeltas != 0 || tr.Transcript != "" || tr.Delegations != 0 {
				t.Fatalf("the blocked turn's answer reached the SDK: %d audio deltas, %q, %d delegations", tr.AudioDeltas, tr.Transcript, tr.Delegations)
			}

			// team-b: the model's words.
			b := run("sk-team-b-live", "delegation,guardrail")
			if tr := b.Turns[0]; tr.AudioDeltas != deltas || len(tr.Errors) != 0 || !strings.Contains(tr.Transcript, "call you back") {
				t.Fatalf("team-b's clean answer: %d audio deltas, %q, errors %+v; want all %d", tr.AudioDeltas, tr.Transcript, tr.Errors, deltas)
			}
			violation("team-b's turn 1", b.Turns[1], "no-codes")
			// The words spread over the six deltas: "Sure, the ", "launch ",
			// "code ", ...: the third delta's text completes the phrase, so
			// its audio and all after it are cut.
			if tr := b.Turns[1]; tr.AudioDeltas == 0 || tr.AudioDeltas > 2 || strings.Contains(tr.Transcript, "code") ||
				strings.Contains(tr.Transcript, "0000") || tr.Delegations != 0 {
				t.Fatalf("team-b's cut answer: %d of %d audio deltas, %q, %d delegations; want those before the banned word's (1 or 2), not the words",
					tr.AudioDeltas, deltas, tr.Transcript, tr.Delegations)
			}

			// team-c: delegations.
			c := run("sk-team-c-live", "delegation,delegation,guardrail")
			for _, i := range []int{0, 1} {
				if tr := c.Turns[i]; tr.Delegations != 1 || len(tr.Errors) != 0 {
					t.Fatalf("team-c's turn %d: %d delegations, errors %+v; want its delegation", i, tr.Delegations, tr.Errors)
				}
			}
			violation("team-c's turn 2", c.Turns[2], "no-wires")
			if tr := c.Turns[2]; tr.Delegations != 0 {
				t.Fatalf("the banned delegation reached the SDK: %v", tr.Events)
			}
			refused := false
			var upstream []string
			for _, e := range mockEvents(t, mock, roots) {
				upstream = append(upstream, e.Type)
				var ev struct {
					DelegationID string `json:"delegation_id"`
					Content      string `json:"content"`
				}
				if e.Type != "session.commentary.append" || json.Unmarshal(e.Event, &ev) != nil {
					continue
				}
				refused = refused || strings.HasPrefix(ev.DelegationID, "del_") && strings.Contains(ev.Content, "refused")
			}
			if !refused {
				t.Fatalf("the upstream never got the blocked delegation's refusal (session.commentary.append with its delegation_id); it got %q", upstream)
			}

			// The record: one per session, each with its guardrail's block,
			// the number redacted in the log and in Postgres.
			recs := waitRecords(t, logPath, 3)
			raw := shutdownAndReadLog(t, g, logPath)
			if strings.Contains(string(raw), phone) {
				t.Fatal("the usage log holds the number the rule redacts")
			}
			blocks := map[string]string{"team-a": "no-secrets", "team-b": "no-codes", "team-c": "no-wires"}
			for _, rec := range recs {
				want, ok := blocks[rec.KeyName]
				if !ok {
					t.Fatalf("a record for key %q", rec.KeyName)
				}
				delete(blocks, rec.KeyName)
				if rec.Conversation == nil {
					t.Fatalf("%s: no conversation record in the usage log", rec.KeyName)
				}
				var entries []byte
				if err := pg.Conn(t).QueryRow(context.Background(),
					`SELECT entries FROM session_conversation WHERE session_id = $1`, rec.SessionID).Scan(&entries); err != nil {
					t.Fatalf("%s: no session_conversation row: %v", rec.KeyName, err)
				}
				var row []transcript.Entry
				if err := json.Unmarshal(entries, &row); err != nil {
					t.Fatal(err)
				}
				for name, list := range map[string][]transcript.Entry{"the usage log": rec.Conversation.Entries, "Postgres": row} {
					var redacted, block bool
					for _, e := range list {
						redacted = redacted || e.Kind == transcript.KindTranscript && e.Role == "user" && strings.Contains(e.Text, "call me at [PHONE]")
						block = block || e.Kind == transcript.KindGuardrail && e.Name == want && e.Status == "blocked"
					}
					if !redacted || !block {
						t.Fatalf("%s's record in %s: redacted user transcript %v, %s's block %v; entries %+v", rec.KeyName, name, redacted, want, block, list)
					}
				}
				if strings.Contains(string(entries), phone) {
					t.Fatalf("%s's Postgres row holds the number the rule redacts", rec.KeyName)
				}
			}
		})
	}
}
