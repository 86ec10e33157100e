package server

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"rtgate/mockai"
	"rtgate/server/usage"
)

// writeConfig writes a config file and the environment it names.
func writeConfig(t testing.TB, body string) string {
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

// openaiEntry is a model_list entry: group served by m, with params added
// to its litellm_params (one "name: value" each).
func openaiEntry(group string, m *mockai.Server, params ...string) string {
	entry := `
  - model_name: ` + group + `
    litellm_params:
      model: openai/gpt-realtime
      api_base: ` + m.BaseURL() + `
      api_key: os.environ/RTGATE_TEST_UPSTREAM`
	for _, p := range params {
		entry += "\n      " + p
	}
	return entry
}

const configTail = `
general_settings:
  master_key: os.environ/RTGATE_TEST_MASTER
`

func TestFailoverToTheNextDeployment(t *testing.T) {
	bad := startMock(t, mockai.Config{StatusCode: 503})
	good := startMock(t, mockai.Config{})
	path := writeConfig(t, "model_list:"+openaiEntry("gpt-realtime", bad)+openaiEntry("gpt-realtime", good)+configTail)
	g := startGateway(t, nil, func(c *Settings) { c.RoutesFile = path })
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
	g := startGateway(t, nil, func(c *Settings) { c.RoutesFile = path })
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
	g := startGateway(t, nil, func(c *Settings) { c.RoutesFile = path })
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
	g := startGateway(t, nil, func(c *Settings) { c.RoutesFile = path })
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
	g := startGateway(t, nil, func(c *Settings) { c.RoutesFile = path })
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
	g := startGateway(t, m, func(c *Settings) { c.UsageLog = logPath })
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

// blackhole is a TCP listener that accepts connections and never answers:
// a deployment gone dark behind a load balancer that still accepts. It
// counts the connections it accepted and those the gateway closed.
type blackhole struct {
	ln         net.Listener
	accepted   atomic.Int64
	peerClosed atomic.Int64
}

func startBlackhole(t *testing.T) *blackhole {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &blackhole{ln: ln}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			b.accepted.Add(1)
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, _ = io.Copy(io.Discard, c) // until the gateway closes it
				b.peerClosed.Add(1)
			}()
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		for _, c := range conns {
			_ = c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return b
}

func (b *blackhole) baseURL() string { return "ws://" + b.ln.Addr().String() + "/v1" }

// entryAt is a model_list entry for the upstream at base.
func entryAt(group, base string) string {
	return `
  - model_name: ` + group + `
    litellm_params:
      model: openai/gpt-realtime
      api_base: ` + base + `
      api_key: os.environ/RTGATE_TEST_UPSTREAM`
}

// TestClientLeavingStopsTheDial: a client that leaves while its upstream is
// still being dialed (here: a deployment that never answers) has the dial
// abandoned and closed at once, and no other deployment is tried for it.
func TestClientLeavingStopsTheDial(t *testing.T) {
	a, b := startBlackhole(t), startBlackhole(t)
	path := writeConfig(t, "model_list:"+entryAt("gpt-realtime", a.baseURL())+entryAt("gpt-realtime", b.baseURL())+configTail)
	g := startGateway(t, nil, func(c *Settings) {
		c.RoutesFile = path
		c.DialTimeout = time.Minute // far beyond waitFor's 10 s
		c.HedgeDelay = 0            // one dial at a time
	})
	c := g.dial(t, "model=gpt-realtime", bearer(testMasterKey))
	waitFor(t, "the gateway to dial a deployment", func() bool { return a.accepted.Load()+b.accepted.Load() == 1 })
	_ = c.NetConn().Close() // the client goes away without a close frame
	waitFor(t, "the abandoned dial to be closed", func() bool { return a.peerClosed.Load()+b.peerClosed.Load() == 1 })
	waitFor(t, "the session to end", func() bool { return g.srv.SessionsOpen() == 0 })
	// The attempt is over once the session ended: nothing dials any more.
	if n := a.accepted.Load() + b.accepted.Load(); n != 1 {
		t.Fatalf("the deployments saw %d connects, want 1: the gateway failed over for a client that had left", n)
	}
	if n := metricSum(t, g, "rtgate_upstream_ejections_total"); n != 0 {
		t.Fatalf("%v ejections: a dial abandoned by its client says nothing about the deployment", n)
	}
	if n := metricSum(t, g, "rtgate_upstream_dial_failures_total"); n != 0 {
		t.Fatalf("%v dial failures counted for an abandoned dial", n)
	}
	if n := metricWith(t, g, "rtgate_sessions_total", "outcome", "client_lost"); n != 1 {
		t.Fatalf("%v sessions ended client_lost, want the one whose client left while dialing", n)
	}
}

// metricWith adds up the samples of the named metric family whose label
// has value.
func metricWith(t *testing.T, g *gateway, name, label, value string) float64 {
	t.Helper()
	return gatheredWhere(t, g.srv.reg, name, label, value)
}

// TestRoutingAroundABlackhole: two deployments, one that accepts TCP and never
// answers. Every session succeeds well inside the dial timeout (which now
// bounds the whole attempt, so a connect that waited on the blackhole would
// fail), the blackhole is ejected after the first connect it costs, and from
// then on only probes reach it. Plain and TLS upstreams, pool off and on
// (with the pool on, its own refills dial the blackhole too, so the count of
// connects reaching it is checked with the pool off only).
func TestRoutingAroundABlackhole(t *testing.T) {
	for _, tc := range []struct {
		tlsUp bool
		pool  int
	}{{false, 0}, {true, 0}, {false, 2}, {true, 2}} {
		tlsUp := tc.tlsUp
		name := "ws"
		if tlsUp {
			name = "wss"
		}
		name += fmt.Sprintf("/pool=%d", tc.pool)
		t.Run(name, func(t *testing.T) {
			hole := startBlackhole(t)
			var good *mockai.Server
			if tlsUp {
				good = startTLSMock(t)
			} else {
				good = startMock(t, mockai.Config{})
			}
			path := writeConfig(t, "model_list:"+entryAt("gpt-realtime", hole.baseURL())+openaiEntry("gpt-realtime", good)+configTail)
			logs := &syncBuffer{}
			g := startGatewayLog(t, nil, func(c *Settings) {
				c.RoutesFile = path
				c.DialTimeout = 5 * time.Second
				c.HedgeDelay = 100 * time.Millisecond
				c.Pool.Size = tc.pool
				if tlsUp {
					c.UpstreamRoots = trustMock(t, good)
				}
			}, slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
			connect := func() error {
				c, _, err := dialer().Dial(g.url("model=gpt-realtime"), bearer(testMasterKey))
				if err != nil {
					return err
				}
				defer c.Close()
				_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
				var e event
				if err := c.ReadJSON(&e); err != nil {
					return err
				}
				if e.typ() != "session.created" {
					return fmt.Errorf("first event %v, want session.created", e)
				}
				return nil
			}

			// One session held open on the good deployment makes the
			// blackhole the one with fewest sessions: the next connect
			// goes there first, and is saved by its hedge.
			keep := g.dial(t, "model=gpt-realtime", bearer(testMasterKey))
			if e := read(t, keep); e.typ() != "session.created" {
				t.Fatalf("first session: %v", e)
			}
			if err := connect(); err != nil {
				t.Fatalf("the connect that meets the blackhole: %v", err)
			}
			if tc.pool > 0 {
				// With the pool on, the hedge may not be needed: the
				// pool's own dial to the blackhole may be what ejects it.
				waitFor(t, "the blackhole to be ejected", func() bool { return metricSum(t, g, "rtgate_upstream_ejections_total") >= 1 })
			} else if hole.accepted.Load() == 0 || metricSum(t, g, "rtgate_upstream_ejections_total") != 1 ||
				metricSum(t, g, "rtgate_upstream_hedges_won_total") < 1 {
				t.Fatalf("after the first connect to the blackhole: %d accepts, %v ejections, %v hedges won",
					hole.accepted.Load(), metricSum(t, g, "rtgate_upstream_ejections_total"), metricSum(t, g, "rtgate_upstream_hedges_won_total"))
			}
			holeBefore := hole.accepted.Load()
			probesBefore := metricSum(t, g, "rtgate_upstream_probes_total")

			const sessions, concurrency = 60, 10
			var failed atomic.Int64
			var firstErr atomic.Value
			var wg sync.WaitGroup
			next := make(chan struct{}, sessions)
			for range sessions {
				next <- struct{}{}
			}
			close(next)
			for range concurrency {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for range next {
						if err := connect(); err != nil {
							failed.Add(1)
							firstErr.CompareAndSwap(nil, err.Error())
						}
					}
				}()
			}
			wg.Wait()
			if n := failed.Load(); n > 0 {
				t.Fatalf("%d of %d sessions failed; first: %v\nrouting log:\n%s", n, sessions, firstErr.Load(), logs.grep("deployment", "dial"))
			}
			if got := len(good.Records()); tc.pool == 0 && got != sessions+2 {
				t.Fatalf("the good deployment served %d sessions, want %d", got, sessions+2)
			}
			if n := metricSum(t, g, "rtgate_upstream_ejected"); n != 1 {
				t.Fatalf("rtgate_upstream_ejected sums to %v, want 1 (the blackhole)", n)
			}
			if tc.pool > 0 {
				return
			}
			// Once ejected, the blackhole is dialed only by probes.
			probes := metricSum(t, g, "rtgate_upstream_probes_total") - probesBefore
			waitFor(t, "the probes' connects to arrive", func() bool { return float64(hole.accepted.Load()-holeBefore) >= probes })
			if n := float64(hole.accepted.Load() - holeBefore); n != probes || probes > sessions/4 {
				t.Fatalf("%v connects reached the ejected blackhole in %d sessions, %v of them probes", n, sessions, probes)
			}
		})
	}
}

// TestProbeBringsADeploymentBack: a deployment that refused connects is
// ejected; once it is up again and its backoff is over, one connect probes
// it and it serves sessions again.
func TestProbeBringsADeploymentBack(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close() // nothing listens there yet: connects are refused
	good := startMock(t, mockai.Config{})
	path := writeConfig(t, "model_list:"+entryAt("gpt-realtime", "ws://"+addr+"/v1")+openaiEntry("gpt-realtime", good)+configTail)
	g := startGateway(t, nil, func(c *Settings) { c.RoutesFile = path })
	session := func() *websocket.Conn {
		c := g.dial(t, "model=gpt-realtime", bearer(testMasterKey))
		if e := read(t, c); e.typ() != "session.created" {
			t.Fatalf("got %v, want session.created", e)
		}
		return c
	}
	// Hold sessions open so that fewest-live routing prefers the other
	// deployment as soon as it is healthy.
	for metricSum(t, g, "rtgate_upstream_ejections_total") == 0 {
		if len(good.Records()) > 20 {
			t.Fatal("the refusing deployment was never tried")
		}
		session()
	}
	if metricSum(t, g, "rtgate_upstream_ejected") != 1 {
		t.Fatal("the refusing deployment is not marked ejected")
	}
	back := startMockAt(t, addr)
	waitFor(t, "a probe to reach the deployment that is back", func() bool {
		session()
		return len(back.Records()) > 0
	})
	if n := metricSum(t, g, "rtgate_upstream_probes_total"); n < 1 {
		t.Fatalf("%v probes, want the deployment brought back by one", n)
	}
	if metricSum(t, g, "rtgate_upstream_ejected") != 0 {
		t.Fatal("the deployment that answered its probe is still ejected")
	}
	// Healthy again, with fewer live sessions: it gets the next connect.
	before := len(back.Records())
	session()
	if len(back.Records()) != before+1 {
		t.Fatal("the deployment brought back does not get sessions")
	}
}

// startMockAt starts an in-process mockai on addr.
func startMockAt(t *testing.T, addr string) *mockai.Server {
	t.Helper()
	m, err := mockai.Start(mockai.Config{Key: testUpstreamKey}, addr)
	if err != nil {
		t.Fatalf("starting mockai on %s: %v", addr, err)
	}
	t.Cleanup(func() { _ = m.Close() })
	return m
}

// grep returns the lines holding any of words.
func (s *syncBuffer) grep(words ...string) string {
	var out []string
	for _, line := range strings.Split(s.String(), "\n") {
		for _, w := range words {
			if strings.Contains(line, w) && !strings.Contains(line, "session ended") {
				out = append(out, line)
				break
			}
		}
	}
	return strings.Join(out, "\n")
}
