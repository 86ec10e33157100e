package server

import (
	"context"
	"encoding/json"
	"os/exec"
	"strings"
	"testing"

	"rtgate/server/recording"
	"rtgate/server/recording/s3test"
	"rtgate/server/spenddb/pgtest"
	"rtgate/server/transcript"
	"rtgate/server/usage"
)

// sdkGuardrailRun is what guardrails.mjs printed.
type sdkGuardrailRun struct {
	Events []string `json:"events"`
	Errors []struct {
		Type    string `json:"type"`
		Message string `json:"message"`
	} `json:"errors"`
	AudioDeltas     int      `json:"audio_deltas"`
	Transcript      string   `json:"transcript"`
	UserTranscripts []string `json:"user_transcripts"`
	ToolCalls       []struct {
		Name, CallID, Arguments string
	} `json:"tool_calls"`
	Failure string `json:"failure"`
}

// TestGuardrailsWithTheOfficialSDK: the official openai SDK's
// OpenAIRealtimeWS, unchanged, through the gateway's record and guardrails,
// over ws:// and wss:// upstreams, mockai's words scripted for the test.
//
// A key with the default guardrail only: its clean turn is answered; the
// turn where the user says a banned word gets a guardrail_violation and the
// spoken warning, never an answer of its own; its tool call passes. Its
// record lands in the usage log and in Postgres with the transcript, the
// tool call and the block, the phone number the caller said redacted in
// both. A key whose guardrails also check tool calls and the model's
// output: its tool call never reaches the SDK (a violation instead), and
// the model's answer to the refusal, which says a banned phrase, is cut:
// the SDK hears part of it, never the phrase, and the upstream truncates
// the item at what was heard. Both sessions are recorded to an
// S3-compatible bucket (s3rver): key A's holds the SDK's audio and the
// violation, and `wsbench replay` plays it back through the gateway.
func TestGuardrailsWithTheOfficialSDK(t *testing.T) {
	pg := pgtest.Start(t)
	s3 := s3test.Start(t)
	t.Setenv("AWS_ACCESS_KEY_ID", s3.AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", s3.SecretKey)
	wsbench := buildTool(t, "wsbench")
	t.Setenv("TEAM_B_KEY", "sk-team-b-guarded")
	const phone = "555-0100"
	for _, scheme := range []string{"ws", "wss"} {
		t.Run(scheme, func(t *testing.T) {
			g, lc, logPath, mock, roots := providerGateway(t, scheme, []string{"-deltas", "8", "-delta-interval", "40ms",
				"-input-transcript", "what is the weather, call me at " + phone, "-input-transcript", "my password is hunter2",
				"-output-transcript", "The launch code is 0000 and that is all.",
				"-tool-arguments", `{"action":"delete_everything"}`},
				func(root string) string {
					return `
  - model_name: gpt-realtime
    litellm_params:
      model: openai/gpt-realtime
      api_base: ` + root + `/v1
      api_key: os.environ/RTGATE_TEST_UPSTREAM
      log_transcripts: true
      record_sessions: true
keys:
  - name: team-a
    key: os.environ/TEAM_A_KEY
  - name: team-b
    key: os.environ/TEAM_B_KEY
    guardrails: [no-destruction, no-codes]
transcripts:
  redact:
    - pattern: '\d{3}-\d{4}'
      label: PHONE
guardrails:
  - guardrail_name: no-secrets
    litellm_params:
      guardrail: litellm_content_filter
      mode: realtime_input_transcription
      default_on: true
      blocked_words: [password]
      realtime_violation_message: "I can't take passwords."
  - guardrail_name: no-destruction
    litellm_params:
      guardrail: litellm_content_filter
      mode: realtime_tool_call
      patterns:
        - pattern: 'delete_\w+'
          name: destructive
  - guardrail_name: no-codes
    litellm_params:
      guardrail: litellm_content_filter
      mode: realtime_output_transcription
      blocked_words: ["launch code"]
      transcript_lag_ms: 0`
				}, func(c *Settings) {
					c.DatabaseURL, c.Continuity = pg.URL, false
					c.Recordings, c.RecordingsS3Endpoint = "s3://"+s3.Bucket+"/sdk-"+scheme+"/", s3.Endpoint
				})
			run := func(key, scenario string) sdkGuardrailRun {
				out := runNode(t, "guardrails.mjs", "SCENARIO="+scenario, "MODEL=gpt-realtime",
					"GATEWAY_BASE=https://"+g.addr+"/v1", "GATEWAY_KEY="+key, "NODE_EXTRA_CA_CERTS="+lc.certFile)
				var got sdkGuardrailRun
				if err := json.Unmarshal(out, &got); err != nil {
					t.Fatalf("guardrails.mjs printed %q: %v", out, err)
				}
				if got.Failure != "" {
					t.Fatalf("the SDK's session failed: %s; events %v", got.Failure, got.Events)
				}
				return got
			}

			a := run("sk-team-a-test", "speech")
			if len(a.Errors) != 1 || a.Errors[0].Type != "guardrail_violation" || !strings.Contains(a.Errors[0].Message, "no-secrets") {
				t.Fatalf("key A's errors %+v, want one guardrail_violation from no-secrets", a.Errors)
			}
			if len(a.ToolCalls) != 1 || a.ToolCalls[0].Name != "manage_account" {
				t.Fatalf("key A's tool call %+v, want manage_account whole", a.ToolCalls)
			}
			if len(a.UserTranscripts) != 2 {
				t.Fatalf("user transcripts %v", a.UserTranscripts)
			}

			b := run("sk-team-b-guarded", "tools")
			if len(b.ToolCalls) != 0 {
				t.Fatalf("the blocked tool call reached the SDK: %+v", b.ToolCalls)
			}
			if len(b.Errors) != 2 || !strings.Contains(b.Errors[0].Message, "destructive") || !strings.Contains(b.Errors[1].Message, "no-codes") {
				t.Fatalf("key B's errors %+v, want the tool call's, then the output's", b.Errors)
			}
			if b.AudioDeltas == 0 || b.AudioDeltas >= 8 || strings.Contains(strings.ToLower(b.Transcript), "launch code") {
				t.Fatalf("key B heard %d of 8 audio deltas and %q: want the start, not the phrase", b.AudioDeltas, b.Transcript)
			}
			truncated := false
			for _, e := range mockEvents(t, mock, roots) {
				truncated = truncated || e.Type == "conversation.item.truncate"
			}
			if !truncated {
				t.Fatal("the cut answer's item was not truncated upstream")
			}

			recs := waitRecords(t, logPath, 2)
			checkSDKRecording(t, s3, "sdk-"+scheme+"/", recs, wsbench, g, lc)
			raw := shutdownAndReadLog(t, g, logPath)
			if strings.Contains(string(raw), phone) {
				t.Fatal("the usage log holds the number the rule redacts")
			}
			for _, rec := range recs {
				if rec.KeyName != "team-a" {
					continue
				}
				var entries []byte
				if err := pg.Conn(t).QueryRow(context.Background(),
					`SELECT entries FROM session_conversation WHERE session_id = $1`, rec.SessionID).Scan(&entries); err != nil {
					t.Fatalf("no session_conversation row: %v", err)
				}
				var row []transcript.Entry
				if err := json.Unmarshal(entries, &row); err != nil {
					t.Fatal(err)
				}
				var redacted, call, block bool
				for _, e := range row {
					redacted = redacted || e.Kind == transcript.KindTranscript && e.Role == "user" && strings.Contains(e.Text, "[PHONE]")
					call = call || e.Kind == transcript.KindToolCall && e.Name == "manage_account"
					block = block || e.Kind == transcript.KindGuardrail && e.Name == "no-secrets" && e.Status == "blocked"
				}
				if !redacted || !call || !block || strings.Contains(string(entries), phone) {
					t.Fatalf("Postgres row: redacted transcript %v, tool call %v, block %v, number present %v",
						redacted, call, block, strings.Contains(string(entries), phone))
				}
			}
		})
	}
}

// checkSDKRecording: key A's session, recorded in the bucket under prefix,
// holds the SDK's appended audio on the WAV's first channel and the
// guardrail's error among the upstream's events; `wsbench replay` plays its
// client side back through the gateway (the same key, so the same
// guardrail) and compares as many turns as were recorded.
func checkSDKRecording(t *testing.T, s3 *s3test.Server, prefix string, recs []usage.Record, wsbench string, g *gateway, lc listenerCert) {
	t.Helper()
	store, err := recording.NewS3Store(recording.S3Config{Endpoint: s3.Endpoint, Region: s3.Region, Bucket: s3.Bucket,
		AccessKey: s3.AccessKey, SecretKey: s3.SecretKey, Prefix: prefix, PathStyle: true})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "both sessions' recordings", func() bool {
		objects, _ := store.List(context.Background(), "")
		return len(objects) == 6
	})
	var id string
	for _, r := range recs {
		if r.KeyName == "team-a" {
			id = r.SessionID
		}
	}
	rec, err := recording.Open(context.Background(), store, id)
	if err != nil {
		t.Fatalf("key A's recording: %v", err)
	}
	events, err := rec.ReadEvents()
	if err != nil {
		t.Fatal(err)
	}
	var appends int
	var violation bool
	for _, e := range events {
		if e.Type() == "input_audio_buffer.append" && e.Audio != nil && e.Audio.Channel == 0 && e.Audio.Samples == 2400 {
			appends++
		}
		violation = violation || e.From == "upstream" && e.Type() == "error" && strings.Contains(string(e.Raw), "guardrail_violation")
	}
	if appends != 10 || !violation {
		t.Fatalf("key A's recording: %d appends of 100 ms on channel 0 (want 10), the violation %v", appends, violation)
	}
	out, err := exec.Command(wsbench, "replay", "-json", "-speed", "2", "-s3-endpoint", s3.Endpoint, "-s3-bucket", s3.Bucket,
		"-s3-prefix", prefix, "-s3-region", s3.Region, "-session", id, "-ca", lc.certFile,
		"-url", "wss://"+g.addr+"/v1/realtime?model=gpt-realtime", "-key", "sk-team-a-test").Output()
	if err != nil {
		t.Fatalf("wsbench replay: %v\n%s", err, out)
	}
	var report struct {
		Summary struct {
			RecordedTurns int `json:"recorded_turns"`
			ReplayedTurns int `json:"replayed_turns"`
		} `json:"summary"`
	}
	if err := json.Unmarshal(out, &report); err != nil || report.Summary.RecordedTurns < 3 ||
		report.Summary.ReplayedTurns != report.Summary.RecordedTurns {
		t.Fatalf("the replay's report (%v): %s", err, out)
	}
}
