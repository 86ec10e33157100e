package usage

import (
	"strings"
	"testing"
)

// The meter takes usage.seconds' growth (never the sum), books each
// response's backend tokens once, and knows whether session.closed came.
func TestLiveMeter(t *testing.T) {
	var m LiveMeter
	var grew []float64
	var models []string
	closed := 0
	var started []string
	m.OnStarted = func(id string) { started = append(started, id) }
	m.OnSeconds = func(add float64) { grew = append(grew, add) }
	m.OnTokens = func(model string, _ Usage) { models = append(models, model) }
	m.OnClosed = func() { closed++ }
	completed := `{"type":"response.event","event_id":"e","delegation_id":"d","event":{"type":"response.completed","response":{"id":"resp_1","model":"gpt-5-mini","usage":{"input_tokens":120,"input_tokens_details":{"cached_tokens":20},"output_tokens":30,"output_tokens_details":{"reasoning_tokens":10},"total_tokens":150}}}}`
	events := []string{
		`{"type":"session.started","session":{"id":"live_1"}}`,
		`{"type":"session.started","session":{"id":"live_2"}}`, // only the first names the session
		`{"type":"session.usage.updated","usage":{"seconds":1.5},"context_window":{"usage_ratio":0.1}}`,
		`{"type":"session.usage.updated","usage":{"seconds":3.0}}`,
		`{"type":"session.usage.updated","usage":{"seconds":2.0}}`, // shrinking: ignored
		`{"type":"response.event","event":{"type":"response.output_text.delta","delta":"hi"}}`,
		completed,
		completed, // the same response again: booked once
		`{"type":"session.closed","reason":"close_requested","usage":{"seconds":4.25}}`,
		`{"type":"session.closed","reason":"close_requested","usage":{"seconds":4.25}}`,
	}
	for _, e := range events {
		p := []byte(e)
		if m.Wants(p[:min(len(p), 256)]) {
			m.Inspect(p)
		}
	}
	if m.Seconds != 4.25 || !m.Closed || m.Reason != "close_requested" || closed != 1 {
		t.Fatalf("seconds %v closed %v (%d) reason %q", m.Seconds, m.Closed, closed, m.Reason)
	}
	if len(started) != 1 || started[0] != "live_1" {
		t.Errorf("started %v, want [live_1]", started)
	}
	if len(grew) != 3 || grew[0] != 1.5 || grew[1] != 1.5 || grew[2] != 1.25 {
		t.Errorf("growth %v, want [1.5 1.5 1.25]", grew)
	}
	u := m.Usage
	if u.Responses != 1 || u.InputTokens != 120 || u.OutputTokens != 30 || u.InputTokenDetails.CachedTokens != 20 ||
		u.InputTokenDetails.TextTokens != 120 || u.OutputTokenDetails.TextTokens != 30 || len(models) != 1 || models[0] != "gpt-5-mini" {
		t.Errorf("backend usage %+v models %v", u, models)
	}
}

// Wants passes over deltas without a look inside, and looks at a wrapped
// event whose type is beyond the prefix rather than miss it.
func TestLiveMeterWants(t *testing.T) {
	var m LiveMeter
	cases := map[string]bool{
		`{"type":"session.output_audio.delta","delta":"AAAA"}`:                                  false,
		`{"type":"response.event","event":{"type":"response.output_text.delta"}}`:               false,
		`{"type":"response.event","event":{"type":"response.failed","response":{}}}`:            true,
		`{"type":"response.event","x":"` + strings.Repeat("a", 300) + `","event":{"type":"x"}}`: true,
		`{"type":"session.usage.updated","usage":{"seconds":1}}`:                                true,
	}
	for e, want := range cases {
		p := []byte(e)
		if got := m.Wants(p[:min(len(p), 256)]); got != want {
			t.Errorf("Wants(%.60s) = %v", e, got)
		}
	}
	p := []byte(`{"type":"session.output_audio.delta","event_id":"event_1","delta":"` + strings.Repeat("A", 200) + `"}`)
	if n := testing.AllocsPerRun(100, func() { m.Wants(p[:256]) }); n != 0 {
		t.Errorf("Wants allocates %v times per delta", n)
	}
}

// session.updated's delegation reaches OnDelegation (a Responses model, or
// "" for none), and only when OnDelegation is set.
func TestLiveMeterDelegation(t *testing.T) {
	updated := []string{
		`{"type":"session.updated","event_id":"e1","session":{"id":"live_1","delegation":{"type":"responses","responses":{"model":"o3-pro"}}}}`,
		`{"type":"session.updated","event_id":"e2","session":{"id":"live_1","triggers":[]}}`,
		`{"type":"session.updated","event_id":"e3","session":{"id":"live_1","delegation":{"type":"realtime"}}}`,
	}
	var m LiveMeter
	for _, e := range updated {
		if p := []byte(e); m.Wants(p[:min(len(p), 256)]) {
			t.Fatalf("Wants(%s) without OnDelegation", e)
		}
	}
	var got []string
	m.OnDelegation = func(model string) { got = append(got, model) }
	for _, e := range updated {
		if p := []byte(e); m.Wants(p[:min(len(p), 256)]) {
			m.Inspect(p)
		}
	}
	if len(got) != 3 || got[0] != "o3-pro" || got[1] != "" || got[2] != "" {
		t.Fatalf("delegations %q, want [o3-pro, \"\", \"\"]", got)
	}
}

// A session resumed on a fresh upstream session (NextSession) adds that
// session's cumulative seconds to the earlier ones', never replaces them.
func TestLiveMeterAcrossUpstreamSessions(t *testing.T) {
	var m LiveMeter
	var grew []float64
	m.OnSeconds = func(add float64) { grew = append(grew, add) }
	feed := func(events ...string) {
		for _, e := range events {
			p := []byte(e)
			if m.Wants(p[:min(len(p), 256)]) {
				m.Inspect(p)
			}
		}
	}
	feed(`{"type":"session.usage.updated","usage":{"seconds":2}}`,
		`{"type":"session.closed","reason":"expired","usage":{"seconds":3}}`)
	if m.Seconds != 3 || !m.Closed {
		t.Fatalf("first upstream: seconds %v closed %v", m.Seconds, m.Closed)
	}
	m.NextSession()
	if m.Closed || m.Reason != "" {
		t.Fatalf("the fresh upstream's session.closed is yet to come: closed %v %q", m.Closed, m.Reason)
	}
	feed(`{"type":"session.usage.updated","usage":{"seconds":1}}`,
		`{"type":"session.usage.updated","usage":{"seconds":0.5}}`, // shrinking: ignored
		`{"type":"session.closed","reason":"close_requested","usage":{"seconds":2.5}}`)
	if m.Seconds != 5.5 || !m.Closed || m.Reason != "close_requested" {
		t.Fatalf("both upstreams: seconds %v, want 5.5 (3 + 2.5); closed %v %q", m.Seconds, m.Closed, m.Reason)
	}
	if want := []float64{2, 1, 1, 1.5}; len(grew) != len(want) || grew[0] != 2 || grew[1] != 1 || grew[2] != 1 || grew[3] != 1.5 {
		t.Errorf("growth %v, want %v", grew, want)
	}
}
