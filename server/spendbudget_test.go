package server

import (
	"encoding/base64"
	"encoding/json"
	"math"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"rtgate/mockai"
	"rtgate/server/redistest"
)

// One gpt-realtime response from mockai with 100 ms of audio appended and 4
// output deltas of 9600 bytes: 10 input text, 10 input audio (4800/480), 5
// output text and 80 output audio tokens (4×9600/480), which at $4, $32,
// $16 and $64 a million cost 0.00004 + 0.00032 + 0.00008 + 0.00512 =
// 0.00556 USD.
const responseCost = 0.00556

// budgetConfig is a routes file with key team-a (TEAM_A_KEY) on budget max.
func budgetConfig(t *testing.T, m *mockai.Server, max string) string {
	return writeConfig(t, "model_list:"+openaiEntry("gpt-realtime", m)+`
keys:
  - name: team-a
    key: os.environ/TEAM_A_KEY
    max_budget: `+max+`
    budget_duration: 30d
`+configTail)
}

// respond asks for one response and reads up to its response.done.
func respond(t *testing.T, c *websocket.Conn) {
	t.Helper()
	send(t, c, map[string]any{"type": "input_audio_buffer.append", "audio": base64.StdEncoding.EncodeToString(make([]byte, 4800))})
	send(t, c, map[string]any{"type": "response.create"})
	readUntil(t, c, "response.done")
}

// budgetSpent is key's spend in its current window as g's ledger knows it
// (rtgate_budget_spent_usd).
func budgetSpent(t testing.TB, g *gateway, key string) float64 {
	t.Helper()
	return gatheredWhere(t, g.srv.reg, "rtgate_budget_spent_usd", "key", key)
}

// refusedForBudget dials and expects a 429 budget_exceeded refusal.
func refusedForBudget(t *testing.T, g *gateway, key string) {
	t.Helper()
	_, resp, err := dialer().Dial(g.url("model=gpt-realtime"), bearer(key))
	if err == nil {
		t.Fatal("a key over its budget connected")
	}
	if resp == nil || resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("refusal %v, want HTTP 429", err)
	}
	defer resp.Body.Close()
	var body struct {
		Error struct{ Type, Code, Message string }
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		t.Fatal(err)
	}
	if body.Error.Code != "budget_exceeded" || body.Error.Type != "insufficient_quota" || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("refusal %+v (Retry-After %q), want an insufficient_quota error with code budget_exceeded and a Retry-After",
			body.Error, resp.Header.Get("Retry-After"))
	}
	t.Logf("refused: HTTP %d %s: %s", resp.StatusCode, body.Error.Code, body.Error.Message)
}

// TestBudget runs team-a to its budget of 0.012 USD over a wss:// upstream:
// a first session of one response (0.00556), a second whose second response
// takes the key to 0.01112 + 0.00556 = 0.01668, so that it ends after that
// response with an error event and close 1008; then connects are refused
// with 429, also after a restart, while the master key is unaffected.
func TestBudget(t *testing.T) {
	m := startMock(t, mockai.Config{AudioDeltas: 4, AudioDeltaBytes: 9600, TLS: true})
	path := budgetConfig(t, m, "0.012")
	dir := t.TempDir()
	logPath, state := filepath.Join(dir, "usage.jsonl"), filepath.Join(dir, "budgets.json")
	mutate := func(c *Settings) {
		c.RoutesFile, c.UsageLog, c.SpendState = path, logPath, state
		c.UpstreamRoots = trustMock(t, m)
	}
	g := startGateway(t, nil, mutate)
	team := "sk-team-a-test"

	c := g.dial(t, "model=gpt-realtime", bearer(team))
	read(t, c)
	respond(t, c)
	_ = c.WriteMessage(websocket.CloseMessage, websocket.FormatCloseMessage(1000, ""))
	closeOf(t, c)

	c = g.dial(t, "model=gpt-realtime", bearer(team))
	read(t, c)
	respond(t, c) // 0.01112: under
	respond(t, c) // 0.01668: over, and this response arrived whole
	if e := read(t, c); e.typ() != "error" || e.str("error", "code") != "budget_exceeded" {
		t.Fatalf("after the response that crossed the budget: %v, want an error event budget_exceeded", e)
	}
	if ce := closeOf(t, c); ce.Code != 1008 {
		t.Fatalf("close %d %q, want 1008", ce.Code, ce.Text)
	}
	waitFor(t, "the sessions to end", func() bool { return g.srv.SessionsOpen() == 0 })
	refusedForBudget(t, g, team)
	if got := metricSum(t, g, "rtgate_budget_refused_total"); got != 1 {
		t.Errorf("rtgate_budget_refused_total %v", got)
	}
	if got := metricSum(t, g, "rtgate_budget_ended_sessions_total"); got != 1 {
		t.Errorf("rtgate_budget_ended_sessions_total %v", got)
	}
	master := g.dial(t, "model=gpt-realtime", bearer(testMasterKey))
	if e := read(t, master); e.typ() != "session.created" {
		t.Fatalf("the master key got %v", e)
	}
	_ = master.Close()
	waitFor(t, "the sessions to end", func() bool { return g.srv.SessionsOpen() == 0 })
	ctx, cancel := contextWithTimeout(5 * time.Second)
	defer cancel()
	_ = g.srv.Shutdown(ctx)

	recs := readRecords(t, logPath)
	var costs []float64
	for _, r := range recs {
		if r.KeyName == "team-a" {
			costs = append(costs, r.CostUSD)
		}
	}
	if recs[len(recs)-2].Outcome != "budget_exceeded" {
		t.Errorf("the session ended by the budget has outcome %q", recs[len(recs)-2].Outcome)
	}
	if len(costs) != 2 || math.Abs(costs[0]-responseCost) > 1e-12 || math.Abs(costs[1]-2*responseCost) > 1e-12 {
		t.Fatalf("team-a session costs %v, want [%v %v]", costs, responseCost, 2*responseCost)
	}
	t.Logf("team-a (max_budget 0.012 USD, 30d): session costs %v USD; total %.5f", costs, costs[0]+costs[1])

	// A restart keeps the spend: the key is still refused.
	g2 := startGateway(t, nil, mutate)
	refusedForBudget(t, g2, team)
}

// TestBudgetSharedThroughRedis: spend on one instance refuses the key on
// another that shares the Redis.
func TestBudgetSharedThroughRedis(t *testing.T) {
	rs := redistest.Start(t)
	m := startMock(t, mockai.Config{AudioDeltas: 4, AudioDeltaBytes: 9600})
	path := budgetConfig(t, m, "0.005")
	mutate := func(c *Settings) { c.RoutesFile, c.RedisURL = path, rs.URL() }
	a, b := startGateway(t, nil, mutate), startGateway(t, nil, mutate)
	team := "sk-team-a-test"

	c := a.dial(t, "model=gpt-realtime", bearer(team))
	read(t, c)
	respond(t, c) // 0.00556 > 0.005
	if e := read(t, c); e.typ() != "error" || e.str("error", "code") != "budget_exceeded" {
		t.Fatalf("got %v, want budget_exceeded", e)
	}
	if ce := closeOf(t, c); ce.Code != 1008 {
		t.Fatalf("close %d, want 1008", ce.Code)
	}
	// Instance b learns of it at its next sync (every 250 ms).
	waitFor(t, "instance b to see the spend", func() bool {
		return budgetSpent(t, b, "team-a") >= 0.005
	})
	refusedForBudget(t, b, team)
}
