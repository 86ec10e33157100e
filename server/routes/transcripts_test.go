package routes

import (
	"maps"
	"strings"
	"testing"
)

// TestConfigTranscripts: log_transcripts on keys (true, false or unset) and
// deployments, and the transcripts section's bound and redaction rules,
// compiled in order; bad rules are refused with their place in the file.
func TestConfigTranscripts(t *testing.T) {
	env := maps.Clone(configEnv)
	env["TEAM_A_KEY"], env["TEAM_B_KEY"], env["TEAM_C_KEY"] = "sk-team-a-0001", "sk-team-b-0002", "sk-team-c-0003"
	r, err := loadConfig(t, `model_list:
  - model_name: recorded
    litellm_params:
      model: gpt-realtime
      log_transcripts: true
  - model_name: plain
    litellm_params:
      model: gpt-realtime
keys:
  - name: opted-in
    key: os.environ/TEAM_A_KEY
    log_transcripts: true
  - name: opted-out
    key: os.environ/TEAM_B_KEY
    log_transcripts: false
  - name: unset
    key: os.environ/TEAM_C_KEY
transcripts:
  max_bytes: 4096
  redact:
    - pattern: '\b\d{13,19}\b'
      label: CARD
    - pattern: '(?i)password: \S+'
      label: SECRET
`, env)
	if err != nil {
		t.Fatal(err)
	}
	if !only(t, r, "recorded").LogTranscripts || only(t, r, "plain").LogTranscripts {
		t.Fatalf("deployments' log_transcripts: recorded %v, plain %v", only(t, r, "recorded").LogTranscripts, only(t, r, "plain").LogTranscripts)
	}
	want := map[string]string{"opted-in": "true", "opted-out": "false", "unset": "unset"}
	for _, k := range r.Keys {
		got := "unset"
		if k.LogTranscripts != nil {
			got = map[bool]string{true: "true", false: "false"}[*k.LogTranscripts]
		}
		if got != want[k.Name] {
			t.Errorf("key %s: log_transcripts %s, want %s", k.Name, got, want[k.Name])
		}
	}
	tr := r.Transcripts
	if tr.MaxBytes != 4096 || len(tr.Redact) != 2 || tr.Redact[0].Label != "CARD" || tr.Redact[1].Label != "SECRET" {
		t.Fatalf("transcripts %+v", tr)
	}
	if !tr.Redact[0].Pattern.MatchString("card 4111111111111111 ok") || !tr.Redact[1].Pattern.MatchString("PASSWORD: hunter2") {
		t.Fatal("the rules do not match what they were written for")
	}

	for _, tc := range []struct{ name, section, want string }{
		{"bad pattern", "transcripts:\n  redact:\n    - pattern: '(unclosed'\n      label: X\n", "transcripts.redact[0].pattern: is not a regular expression"},
		{"bad label", "transcripts:\n  redact:\n    - pattern: 'x'\n      label: 'two words'\n", `transcripts.redact[0].label: "two words" must be 1 to 64`},
		{"no label", "transcripts:\n  redact:\n    - pattern: 'x'\n", "transcripts.redact[0]: needs a pattern and a label"},
		{"negative bound", "transcripts:\n  max_bytes: -1\n", "transcripts.max_bytes"},
		{"unknown field", "transcripts:\n  redcat: []\n", `unknown field "redcat"`},
		{"key not a boolean", "keys:\n  - name: a\n    key: os.environ/TEAM_A_KEY\n    log_transcripts: sometimes\n", `keys[0].log_transcripts: "sometimes" is not true or false`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := loadConfig(t, "model_list:\n  - model_name: m\n    litellm_params:\n      model: gpt-realtime\n"+
				"general_settings:\n  master_key: os.environ/MASTER\n"+tc.section, env)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want it to say %q", err, tc.want)
			}
		})
	}
}
