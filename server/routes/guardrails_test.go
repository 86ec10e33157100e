package routes

import (
	"maps"
	"strings"
	"testing"
	"time"

	"rtgate/server/guardrail"
)

// TestConfigGuardrails: the guardrails section in LiteLLM's shape (one mode
// or a list, default_on, on_error and LiteLLM's unreachable_fallback, the
// realtime fields, blocked words as words or {keyword, action}, regex
// patterns, a Generic API's base, key from the environment, headers and
// params), keys naming guardrails, and which a session runs: the default
// ones, its key's, those its connection adds, never fewer; an unknown name
// is an error. Bad entries are refused with their place in the file.
func TestConfigGuardrails(t *testing.T) {
	env := maps.Clone(configEnv)
	env["TEAM_A_KEY"], env["TEAM_B_KEY"], env["GUARD_KEY"] = "sk-team-a-0001", "sk-team-b-0002", "guard-0003"
	r, err := loadConfig(t, `model_list:
  - model_name: m
    litellm_params:
      model: gpt-realtime
guardrails:
  - guardrail_name: words
    litellm_params:
      guardrail: litellm_content_filter
      mode: [realtime_input_transcription, realtime_output_transcription]
      default_on: true
      blocked_words:
        - password
        - keyword: launch code
          action: BLOCK
      patterns:
        - pattern_type: regex
          pattern: '\b\d{13,19}\b'
          name: card
      end_session_after_n_fails: 3
      on_violation: end_session
      realtime_violation_message: "Sorry."
      holdback_ms: 500
      transcript_lag_ms: 80
  - guardrail_name: vendor
    litellm_params:
      guardrail: generic_guardrail_api
      mode: realtime_tool_call
      api_base: http://127.0.0.1:9/guard
      api_key: os.environ/GUARD_KEY
      headers: {X-Team: voice}
      additional_provider_specific_params: {threshold: 0.8}
      unreachable_fallback: fail_open
      timeout: 0.5
  - guardrail_name: extra
    litellm_params:
      guardrail: litellm_content_filter
      mode: pre_call
      blocked_words: [forbidden]
keys:
  - name: guarded
    key: os.environ/TEAM_A_KEY
    guardrails: [vendor]
  - name: plain
    key: os.environ/TEAM_B_KEY
`, env)
	if err != nil {
		t.Fatal(err)
	}
	words := r.Guardrails["words"].Spec()
	if !words.DefaultOn || len(words.Modes) != 2 || len(words.BlockedWords) != 2 || words.BlockedWords[1] != "launch code" ||
		len(words.Patterns) != 1 || words.Patterns[0].Name != "card" || words.EndSessionAfterNFails != 3 ||
		!words.EndSessionOnViolation || words.ViolationMessage != "Sorry." || words.FailOpen ||
		words.Holdback != 500*time.Millisecond || words.TranscriptLag != 80*time.Millisecond {
		t.Fatalf("words: %+v", words)
	}
	vendor := r.Guardrails["vendor"].Spec()
	if vendor.Kind != guardrail.GenericAPI || vendor.APIKey != "guard-0003" || vendor.Headers["X-Team"] != "voice" ||
		vendor.AdditionalParams["threshold"] != 0.8 || !vendor.FailOpen || vendor.Timeout != 500*time.Millisecond {
		t.Fatalf("vendor: %+v", vendor)
	}
	names := func(s guardrail.Set) string {
		var out []string
		for _, g := range s {
			out = append(out, g.Name())
		}
		return strings.Join(out, ",")
	}
	keys := map[string]*ClientKey{}
	for _, k := range r.Keys {
		keys[k.Name] = k
	}
	for _, tc := range []struct {
		key   string
		asked []string
		want  string
	}{
		{"plain", nil, "words"},
		{"guarded", nil, "words,vendor"},
		{"plain", []string{"extra"}, "words,extra"},
		{"guarded", []string{"extra", "words", ""}, "words,vendor,extra"},
	} {
		set, err := r.GuardrailsFor(keys[tc.key], tc.asked)
		if err != nil || names(set) != tc.want {
			t.Errorf("key %s asking %v: %q (%v), want %q", tc.key, tc.asked, names(set), err, tc.want)
		}
	}
	if _, err := r.GuardrailsFor(keys["plain"], []string{"nonexistent"}); err == nil || !strings.Contains(err.Error(), `"nonexistent"`) {
		t.Fatalf("an unknown name: %v", err)
	}

	head := "model_list:\n  - model_name: m\n    litellm_params:\n      model: gpt-realtime\ngeneral_settings:\n  master_key: os.environ/MASTER\n"
	entry := func(params string) string {
		return "guardrails:\n  - guardrail_name: g\n    litellm_params:\n      guardrail: litellm_content_filter\n" + params
	}
	for _, tc := range []struct{ name, section, want string }{
		{"no mode", entry("      blocked_words: [x]\n"), "guardrails[0].litellm_params: mode is missing"},
		{"unknown mode", entry("      mode: during_call\n      blocked_words: [x]\n"), `"during_call" is not a realtime guardrail mode`},
		{"mask", entry("      mode: pre_call\n      blocked_words:\n        - keyword: x\n          action: MASK\n"), `"MASK" is not BLOCK`},
		{"prebuilt pattern", entry("      mode: pre_call\n      patterns:\n        - pattern_type: prebuilt\n          pattern: us_ssn\n"), `"prebuilt" is not regex`},
		{"bad regex", entry("      mode: pre_call\n      patterns:\n        - pattern: '(x'\n"), "guardrails[0]"},
		{"nothing to match", entry("      mode: pre_call\n"), "guardrails[0]"},
		{"bad on_error", entry("      mode: pre_call\n      blocked_words: [x]\n      on_error: maybe\n"), `"maybe" is not fail_open or fail_closed`},
		{"unknown kind", "guardrails:\n  - guardrail_name: g\n    litellm_params:\n      guardrail: lakera\n      mode: pre_call\n", "guardrails[0]"},
		{"generic without base", "guardrails:\n  - guardrail_name: g\n    litellm_params:\n      guardrail: generic_guardrail_api\n      mode: pre_call\n", "guardrails[0]"},
		{"twice", entry("      mode: pre_call\n      blocked_words: [x]\n") + "  - guardrail_name: g\n    litellm_params:\n      guardrail: litellm_content_filter\n      mode: pre_call\n      blocked_words: [y]\n",
			`the name "g" is already used`},
		{"key names an unknown one", "keys:\n  - name: a\n    key: os.environ/TEAM_A_KEY\n    guardrails: [missing]\n", `"missing" is not a guardrail_name in guardrails`},
		{"unknown field", entry("      mode: pre_call\n      blocked_words: [x]\n      blockd_words: [y]\n"), `unknown field "blockd_words"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := loadConfig(t, head+tc.section, env)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want it to say %q", err, tc.want)
			}
		})
	}
}
