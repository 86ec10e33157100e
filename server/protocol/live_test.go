package protocol

import (
	"net/url"
	"testing"
)

func TestLive(t *testing.T) {
	var p Protocol = Live{}
	if m, first := p.Model(url.Values{"model": {"x"}}); m != "" || !first {
		t.Fatalf("Model = %q, %v: GPT-Live's model is in session.start", m, first)
	}
	if ev := event(t, p.End(), true); ev["type"] != "session.close" {
		t.Fatalf("End = %v", ev)
	}
	if ev := event(t, p.Refusal("model_not_found", "no", 0), false); ev["type"] != "error" {
		t.Fatalf("Refusal = %v", ev)
	}
	for typ, want := range map[string]bool{"session.usage.updated": true, "session.closed": true, "response.event": true,
		"session.output_audio.delta": false} {
		if p.UsageEvent([]byte(typ)) != want {
			t.Errorf("UsageEvent(%s) = %v", typ, !want)
		}
	}
	rebuilt := p.Rebuild([]byte(`{"model":"gpt-live-1","instructions":"x"}`), [][]byte{[]byte(`{"type":"message","role":"user"}`)})
	if len(rebuilt) != 1 {
		t.Fatalf("Rebuild: %d frames", len(rebuilt))
	}
	ev := event(t, rebuilt[0], true)
	s := ev["session"].(map[string]any)
	if ev["type"] != "session.start" || s["model"] != "gpt-live-1" || len(s["input"].([]any)) != 1 {
		t.Fatalf("Rebuild = %v", ev)
	}
}

// ReadStart takes session.start naming a model and nothing else; For
// rewrites only session.model.
func TestReadStart(t *testing.T) {
	cases := []struct {
		name    string
		payload string
		text    bool
		err     error
		eventID string
	}{
		{"start", `{"type":"session.start","event_id":"e1","session":{"model":"gpt-live","instructions":"hi","audio":{"output":{"voice":"marin"}}}}`, true, nil, "e1"},
		{"binary", `{"type":"session.start","session":{"model":"m"}}`, false, ErrNotStarted, ""},
		{"other event", `{"type":"response.create","event_id":"e2"}`, true, ErrNotStarted, "e2"},
		{"not JSON", `session.start`, true, ErrNotStarted, ""},
		{"array", `[]`, true, ErrNotStarted, ""},
		{"no session", `{"type":"session.start"}`, true, ErrMissingModel, ""},
		{"no model", `{"type":"session.start","session":{"instructions":"x"}}`, true, ErrMissingModel, ""},
		{"model not a string", `{"type":"session.start","session":{"model":7}}`, true, ErrMissingModel, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			st, err := ReadStart([]byte(c.payload), c.text)
			if err != c.err || st.EventID != c.eventID {
				t.Fatalf("ReadStart: %v, event id %q; want %v, %q", err, st.EventID, c.err, c.eventID)
			}
			if err != nil {
				return
			}
			if st.Model != "gpt-live" {
				t.Fatalf("Model %q", st.Model)
			}
			ev := event(t, st.For("my-azure-live"), true)
			s := ev["session"].(map[string]any)
			if ev["type"] != "session.start" || ev["event_id"] != "e1" || s["model"] != "my-azure-live" || s["instructions"] != "hi" ||
				s["audio"].(map[string]any)["output"].(map[string]any)["voice"] != "marin" || len(s) != 3 || len(ev) != 3 {
				t.Fatalf("For = %v", ev)
			}
			// The held Start is not changed by For.
			if again := event(t, st.For("other"), true); again["session"].(map[string]any)["model"] != "other" || st.Model != "gpt-live" {
				t.Fatalf("For changed the Start: %v", again)
			}
		})
	}
}

// A Live session carried onto a fresh upstream: Kept splits the client's
// session.start into its configuration and its input; Restart puts the
// kept configuration and messages back into a session.start of the
// gateway's, and For gives it a deployment's model.
func TestLiveRestart(t *testing.T) {
	st, err := ReadStart([]byte(`{"type":"session.start","event_id":"evt_1","session":{"model":"gpt-live","instructions":"hi",`+
		`"input":[{"role":"user","content":[{"text":"earlier"}]}]}}`), true)
	if err != nil {
		t.Fatal(err)
	}
	config, input := st.Kept()
	if string(config) != `{"instructions":"hi","model":"gpt-live"}` || len(input) != 1 {
		t.Fatalf("Kept = %s, %d input items", config, len(input))
	}
	items := [][]byte{[]byte(`{"type":"message","role":"user","content":[{"type":"input_text","text":"a"}]}`),
		[]byte(`{"type":"message","role":"assistant","content":[{"type":"output_text","text":"b"}]}`)}
	ev := event(t, Restart(config, items).For("gpt-live-1"), true)
	session, _ := ev["session"].(map[string]any)
	in, _ := session["input"].([]any)
	if ev["type"] != "session.start" || session["model"] != "gpt-live-1" || session["instructions"] != "hi" || len(in) != 2 ||
		in[1].(map[string]any)["role"] != "assistant" {
		t.Fatalf("restart %v", ev)
	}
	if id, _ := ev["event_id"].(string); len(id) < len("event_gw_") || id[:len("event_gw_")] != "event_gw_" {
		t.Errorf("event_id %q, want the gateway's", id)
	}
	rebuilt := Live{}.Rebuild(config, items)
	if len(rebuilt) != 1 || event(t, rebuilt[0], true)["session"].(map[string]any)["model"] != "gpt-live" {
		t.Errorf("Rebuild keeps the configuration's model")
	}
}
