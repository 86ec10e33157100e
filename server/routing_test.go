package server

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"rtgate/mockai"
	"rtgate/server/usage"
)

// writeConfig writes a config file and the environment it names.
func writeConfig(t *testing.T, body string) string {
	t.Helper()
	t.Setenv("RTGATE_TEST_MASTER", testMasterKey)
	t.Setenv("RTGATE_TEST_UPSTREAM", testUpstreamKey)
	t.Setenv("TEAM_A_KEY", "sk-team-a-test")
	path := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func openaiEntry(group string, m *mockai.Server) string {
	return `
  - model_name: ` + group + `
    litellm_params:
      model: openai/gpt-realtime
      api_base: ` + m.BaseURL() + `
      api_key: os.environ/RTGATE_TEST_UPSTREAM`
}

const configTail = `
general_settings:
  master_key: os.environ/RTGATE_TEST_MASTER
`

func TestFailoverToTheNextDeployment(t *testing.T) {
	bad := startMock(t, mockai.Config{StatusCode: 503})
	good := startMock(t, mockai.Config{})
	path := writeConfig(t, "model_list:"+openaiEntry("gpt-realtime", bad)+openaiEntry("gpt-realtime", good)+configTail)
	g := startGateway(t, nil, func(c *Config) { c.ConfigFile = path })
	for range 6 {
		c := g.dial(t, "model=gpt-realtime", bearer(testMasterKey))
		if e := read(t, c); e.typ() != "session.created" {
			t.Fatalf("got %v, want session.created from the healthy deployment", e)
		}
		_ = c.Close()
	}
	if n := len(good.Records()); n != 6 {
		t.Fatalf("the healthy deployment served %d of 6 connects", n)
	}
	if n := len(bad.Records()); n == 0 {
		t.Fatal("the refusing deployment was never tried: the test proves nothing about failover")
	}
}

func TestRoutesToTheDeploymentWithFewestSessions(t *testing.T) {
	a, b := startMock(t, mockai.Config{}), startMock(t, mockai.Config{})
	path := writeConfig(t, "model_list:"+openaiEntry("gpt-realtime", a)+openaiEntry("gpt-realtime", b)+configTail)
	g := startGateway(t, nil, func(c *Config) { c.ConfigFile = path })
	for range 6 {
		c := g.dial(t, "model=gpt-realtime", bearer(testMasterKey))
		read(t, c) // held open
	}
	if na, nb := a.Stats().Active, b.Stats().Active; na != 3 || nb != 3 {
		t.Fatalf("six held sessions split %d/%d, want 3/3", na, nb)
	}
}

func TestAzureUpstreamShape(t *testing.T) {
	preview, ga := startMock(t, mockai.Config{}), startMock(t, mockai.Config{})
	base := func(m *mockai.Server) string { return "http://" + m.Addr() }
	path := writeConfig(t, `model_list:
  - model_name: azure-preview
    litellm_params:
      model: azure/my-deployment
      api_base: `+base(preview)+`
      api_version: "2025-04-01-preview"
      api_key: os.environ/RTGATE_TEST_UPSTREAM
  - model_name: azure-ga
    litellm_params:
      model: azure/my-ga-deployment
      api_base: `+base(ga)+`
      api_key: os.environ/RTGATE_TEST_UPSTREAM`+configTail)
	g := startGateway(t, nil, func(c *Config) { c.ConfigFile = path })
	for _, tc := range []struct {
		group, path, query string
		m                  *mockai.Server
	}{
		{"azure-preview", "/openai/realtime", "api-version=2025-04-01-preview&deployment=my-deployment", preview},
		{"azure-ga", "/openai/v1/realtime", "model=my-ga-deployment", ga},
	} {
		c := g.dial(t, "model="+tc.group, bearer(testMasterKey))
		if e := read(t, c); e.typ() != "session.created" {
			t.Fatalf("%s: got %v", tc.group, e)
		}
		r := tc.m.Records()[0]
		if r.Path != tc.path || r.Query != tc.query {
			t.Fatalf("%s: upstream request %s?%s, want %s?%s", tc.group, r.Path, r.Query, tc.path, tc.query)
		}
		if r.Header.Get("Api-Key") != testUpstreamKey || r.Header.Get("Authorization") != "" {
			t.Fatalf("%s: Azure wants the key in api-key and no Authorization", tc.group)
		}
	}
}

func TestKeysRestrictModelsAndLimitSessions(t *testing.T) {
	m := startMock(t, mockai.Config{})
	path := writeConfig(t, "model_list:"+openaiEntry("fast", m)+openaiEntry("slow", m)+`
keys:
  - name: team-a
    key: os.environ/TEAM_A_KEY
    models: [fast]
    max_sessions: 1
`+configTail)
	g := startGateway(t, nil, func(c *Config) { c.ConfigFile = path })
	teamA := bearer("sk-team-a-test")
	dialModel := func(model string, h http.Header) (int, string) {
		c, resp, err := dialer().Dial(g.url("model="+model), h)
		if err == nil {
			t.Cleanup(func() { _ = c.Close() })
			read(t, c)
			return 0, ""
		}
		var body struct{ Error struct{ Code string } }
		_ = json.NewDecoder(resp.Body).Decode(&body)
		return resp.StatusCode, body.Error.Code
	}
	if status, code := dialModel("slow", teamA); status != 403 || code != "model_not_allowed" {
		t.Fatalf("team-a on slow: %d %q, want 403 model_not_allowed", status, code)
	}
	if status, _ := dialModel("fast", teamA); status != 0 {
		t.Fatalf("team-a on fast: %d", status)
	}
	if status, code := dialModel("fast", teamA); status != 429 || code != "concurrent_sessions_exceeded" {
		t.Fatalf("team-a's second session: %d %q, want 429", status, code)
	}
	// The master key may use everything, and team-a's limit is not its own.
	for _, model := range []string{"fast", "slow", "fast"} {
		if status, code := dialModel(model, bearer(testMasterKey)); status != 0 {
			t.Fatalf("master key on %s: %d %q", model, status, code)
		}
	}
	if status, _ := dialModel("nope", bearer(testMasterKey)); status != 404 {
		t.Fatalf("unknown group: %d, want 404", status)
	}
}

func TestReloadKeepsLiveSessions(t *testing.T) {
	first, second := startMock(t, mockai.Config{}), startMock(t, mockai.Config{})
	path := writeConfig(t, "model_list:"+openaiEntry("gpt-realtime", first)+configTail)
	g := startGateway(t, nil, func(c *Config) { c.ConfigFile = path })
	live := g.dial(t, "model=gpt-realtime", bearer(testMasterKey))
	read(t, live)

	if err := os.WriteFile(path, []byte("model_list:"+openaiEntry("gpt-realtime", second)+configTail), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := g.srv.Reload(); err != nil {
		t.Fatal(err)
	}
	fresh := g.dial(t, "model=gpt-realtime", bearer(testMasterKey))
	read(t, fresh)
	if len(second.Records()) != 1 || len(first.Records()) != 1 {
		t.Fatalf("after reload: first saw %d connects, second %d; want the new session on the second", len(first.Records()), len(second.Records()))
	}
	send(t, live, map[string]any{"type": "session.update", "session": map[string]any{"type": "realtime"}})
	if e := read(t, live); e.typ() != "session.updated" {
		t.Fatalf("the live session broke on reload: %v", e.typ())
	}

	// A bad file is refused and the running configuration kept.
	if err := os.WriteFile(path, []byte("model_list:\n  - model_name: x\n    bogus: 1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := g.srv.Reload(); err == nil || !strings.Contains(err.Error(), "bogus") {
		t.Fatalf("reloading a bad file: %v, want an error naming the bad field", err)
	}
	again := g.dial(t, "model=gpt-realtime", bearer(testMasterKey))
	if e := read(t, again); e.typ() != "session.created" || len(second.Records()) != 2 {
		t.Fatalf("after a bad reload the old config did not keep serving: %v", e.typ())
	}
}

// TestUsageAccounting runs three responses through the gateway and checks
// the session's usage record against what mockai sent (its formula: input
// audio = appended bytes / 480, output audio = deltas × delta bytes / 480,
// 10 input text and 5 output text tokens a response).
func TestUsageAccounting(t *testing.T) {
	m := startMock(t, mockai.Config{AudioDeltas: 4, AudioDeltaBytes: 9600})
	logPath := filepath.Join(t.TempDir(), "usage.jsonl")
	g := startGateway(t, m, func(c *Config) { c.UsageLog = logPath })
	c := g.dial(t, "model=gpt-realtime", bearer(testMasterKey))
	read(t, c)
	for _, ms := range []int{100, 250, 500} { // audio appended before each response
		send(t, c, map[string]any{"type": "input_audio_buffer.append", "audio": base64.StdEncoding.EncodeToString(make([]byte, 48*ms))})
		send(t, c, map[string]any{"type": "response.create"})
		readUntil(t, c, "response.done")
	}
	_ = c.WriteMessage(websocket.CloseMessage, websocket.FormatCloseMessage(1000, ""))
	closeOf(t, c)
	waitFor(t, "the session to end", func() bool { return g.srv.SessionsOpen() == 0 })
	ctx, cancel := contextWithTimeout(5 * time.Second)
	defer cancel()
	_ = g.srv.Shutdown(ctx) // flushes the usage log

	f, err := os.Open(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var rec usage.Record
	sc := bufio.NewScanner(f)
	if !sc.Scan() {
		t.Fatal("the usage log is empty")
	}
	if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
		t.Fatal(err)
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(sc.Bytes(), &raw); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"session_id", "key_name", "model_group", "started_at", "ended_at", "outcome", "usage", "cost_usd"} {
		if _, ok := raw[name]; !ok {
			t.Errorf("the usage record has no %q: %s", name, sc.Bytes())
		}
	}
	if !strings.Contains(string(raw["usage"]), `"input_token_details":{"text_tokens":30,`) {
		t.Errorf("usage not in OpenAI's shape: %s", raw["usage"])
	}
	u := rec.Usage
	want := usage.Usage{Responses: 3}
	want.InputTokenDetails.AudioTokens = (4800 + 12000 + 24000) / 480
	want.InputTokenDetails.TextTokens = 30
	want.OutputTokenDetails.AudioTokens = 3 * 4 * 9600 / 480
	want.OutputTokenDetails.TextTokens = 15
	want.InputTokens = want.InputTokenDetails.AudioTokens + want.InputTokenDetails.TextTokens
	want.OutputTokens = want.OutputTokenDetails.AudioTokens + want.OutputTokenDetails.TextTokens
	want.TotalTokens = want.InputTokens + want.OutputTokens
	if u != want {
		t.Fatalf("usage %+v, want %+v", u, want)
	}
	if rec.KeyName != "master" || !strings.HasPrefix(rec.SessionID, "gws_") || rec.EndedAt.Before(rec.StartedAt) || rec.ModelGroup != "gpt-realtime" || rec.Outcome != "client_closed" || rec.FramesOut == 0 {
		t.Fatalf("record %+v", rec)
	}
	if got := metricSum(t, g, "rtgate_tokens_total"); got != float64(want.TotalTokens) {
		t.Fatalf("rtgate_tokens_total %v, want %d", got, want.TotalTokens)
	}
}

func contextWithTimeout(d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), d)
}
