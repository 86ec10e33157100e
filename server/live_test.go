package server

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"rtgate/mockai"
	"rtgate/server/admin"
	"rtgate/server/usage"
)

// GPT-Live through the gateway, driven by gorilla (an independent client):
// sessions, the first-frame rules, refusals after the upgrade, the
// session.close farewell, metering and budgets. The Node SDK's LiveWS runs
// the same path in TestLiveNodeSDK.

// liveSecond is one second of mockai's default Live input format (PCM16 at
// 24 kHz): mockai bills the audio it receives.
const liveSecond = 48000

func (g *gateway) liveURL() string { return "ws://" + g.addr + "/v1/live/sessions" }

// dialLive opens a Live socket with key.
func (g *gateway) dialLive(t testing.TB, key string) *websocket.Conn {
	t.Helper()
	return dialWith(t, dialer(), g.liveURL(), bearer(key))
}

func liveStart(model string, extra map[string]any) map[string]any {
	session := map[string]any{"model": model, "instructions": "be brief"}
	for k, v := range extra {
		session[k] = v
	}
	return map[string]any{"type": "session.start", "event_id": "evt_start", "session": session}
}

// appendAudio sends n bytes of silence.
func appendAudio(t testing.TB, c *websocket.Conn, n int) {
	t.Helper()
	send(t, c, map[string]any{"type": "session.input_audio.append", "audio": base64.StdEncoding.EncodeToString(make([]byte, n))})
}

// untilSeconds reads until a session.usage.updated reports at least want
// seconds.
func untilSeconds(t testing.TB, c *websocket.Conn, want float64) {
	t.Helper()
	for range 1000 {
		e := read(t, c)
		if e.typ() == "session.usage.updated" && e["usage"].(map[string]any)["seconds"].(float64) >= want {
			return
		}
	}
	t.Fatalf("no session.usage.updated with %v seconds", want)
}

// liveConfig is a routes file with a Live group gpt-live (an alias of
// openai/gpt-live-1 at m), a Realtime group, and key team-a (TEAM_A_KEY)
// with extra lines.
func liveConfig(t *testing.T, m *mockai.Server, liveInfo, keyExtra string) string {
	return writeConfig(t, "model_list:"+openaiEntry("gpt-realtime", m)+`
  - model_name: gpt-live
    litellm_params:
      model: openai/gpt-live-1
      api_base: `+m.BaseURL()+`
      api_key: os.environ/RTGATE_TEST_UPSTREAM`+liveInfo+`
keys:
  - name: team-a
    key: os.environ/TEAM_A_KEY`+keyExtra+`
`+configTail)
}

// shutdownAndReadLog shuts g down, which flushes the spend log, and
// returns the usage log at path as it stands then.
func shutdownAndReadLog(t testing.TB, g *gateway, path string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := g.srv.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

// waitRecords waits for n usage records.
func waitRecords(t testing.TB, path string, n int) []usage.Record {
	t.Helper()
	var recs []usage.Record
	waitFor(t, "the usage records", func() bool {
		recs = nil
		if _, err := os.Stat(path); err == nil {
			recs = readRecords(t, path)
		}
		return len(recs) >= n
	})
	return recs
}

// readBody reads a refused dial's response body.
func readBody(t testing.TB, resp *http.Response) string {
	t.Helper()
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestLiveSession runs a Live session over a plain and a TLS upstream: the
// config alias gpt-live reaches mockai as gpt-live-1 with the upstream's
// key, audio is answered, usage seconds grow, session.close is answered by
// session.closed, and the record carries the protocol, the seconds and
// their cost at $0.05 a minute.
func TestLiveSession(t *testing.T) {
	overBoth(t, mockai.Config{Live: mockai.LiveConfig{UsageInterval: 50 * time.Millisecond}}, func(t *testing.T, m *mockai.Server, trust func(*Settings)) {
		g, logPath := liveGateway(t, m, trust)
		c := g.dialLive(t, "sk-team-a-test")
		send(t, c, liveStart("gpt-live", nil))
		started := read(t, c)
		if started.typ() != "session.started" || started.str("session", "model") != "gpt-live-1" ||
			!strings.HasPrefix(started.str("session", "id"), "live_") || started.str("client_event_id") != "evt_start" {
			t.Fatalf("first event %v, want session.started for gpt-live-1 answering evt_start", started)
		}
		appendAudio(t, c, 2*liveSecond)
		readUntil(t, c, "session.output_audio.delta")
		untilSeconds(t, c, 2)
		send(t, c, map[string]any{"type": "session.close"})
		closed, _ := readUntil(t, c, "session.closed")
		if closed.str("reason") != "close_requested" || closed.str("usage", "seconds") != "2" {
			t.Fatalf("session.closed %v", closed)
		}
		if ce := closeOf(t, c); ce.Code != websocket.CloseNormalClosure {
			t.Fatalf("close %v, want 1000 from the upstream", ce)
		}
		lives := m.LiveSessions()
		if len(lives) != 1 || lives[0].Model != "gpt-live-1" || lives[0].Key != testUpstreamKey || !lives[0].ClosedSent {
			t.Fatalf("mockai saw %+v, want one gpt-live-1 session with the upstream key", lives)
		}
		rec := waitRecords(t, logPath, 1)[0]
		if rec.Protocol != "live" || rec.Seconds != 2 || rec.Unconfirmed || rec.ModelGroup != "gpt-live" || rec.KeyName != "team-a" ||
			math.Abs(rec.CostUSD-2*0.05/60) > 1e-12 {
			t.Fatalf("record %+v, want a confirmed live session of 2 s costing %v", rec, 2*0.05/60)
		}
		t.Logf("record: protocol %s, %v s, %v USD", rec.Protocol, rec.Seconds, rec.CostUSD)
	})
}

// TestLiveClientLeaves: a client that drops its socket, or sends a close
// frame, without session.close still gets its session ended the Live way:
// the gateway sends session.close, mockai answers session.closed (not
// connection_lost), and the usage is booked as confirmed.
func TestLiveClientLeaves(t *testing.T) {
	for _, how := range []string{"drop", "close frame", "drop, wss upstream", "close frame, wss upstream"} {
		t.Run(how, func(t *testing.T) {
			tlsUp := strings.HasSuffix(how, "wss upstream")
			m := startMock(t, mockai.Config{TLS: tlsUp, Live: mockai.LiveConfig{UsageInterval: 50 * time.Millisecond}})
			logPath := filepath.Join(t.TempDir(), "usage.jsonl")
			g := startGateway(t, m, func(c *Settings) {
				c.UsageLog = logPath
				if tlsUp {
					c.UpstreamRoots = trustMock(t, m)
				}
			})
			c := g.dialLive(t, testMasterKey)
			send(t, c, liveStart("gpt-live-1", nil))
			if e := read(t, c); e.typ() != "session.started" {
				t.Fatalf("first event %v", e)
			}
			appendAudio(t, c, liveSecond)
			untilSeconds(t, c, 1)
			if strings.HasPrefix(how, "drop") {
				_ = c.UnderlyingConn().Close()
			} else {
				_ = c.WriteMessage(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, "bye"))
				if ce := closeOf(t, c); ce.Code != websocket.CloseNormalClosure {
					t.Fatalf("the client's close was answered with %v", ce)
				}
			}
			rec := waitRecords(t, logPath, 1)[0]
			lives := m.LiveSessions()
			if len(lives) != 1 || lives[0].Reason != "close_requested" || !lives[0].ClosedSent {
				t.Fatalf("mockai's session %+v, want it ended by session.close", lives)
			}
			if rec.Unconfirmed || rec.Seconds != 1 || rec.Protocol != "live" {
				t.Fatalf("record %+v, want 1 confirmed second", rec)
			}
		})
	}
}

// TestLiveUnconfirmed: an upstream that ends without session.closed (it
// drops, or answers session.close with a bare close) leaves the last
// reported seconds billed and the record marked unconfirmed.
func TestLiveUnconfirmed(t *testing.T) {
	t.Run("wss upstream drops", func(t *testing.T) {
		m := startMock(t, mockai.Config{TLS: true, DropAfterFrames: 8, Live: mockai.LiveConfig{UsageInterval: 20 * time.Millisecond}})
		logPath := filepath.Join(t.TempDir(), "usage.jsonl")
		// Without continuity (with it, every drop here would be resumed:
		// TestLiveResume*): the session ends with its upstream.
		g := startGateway(t, m, func(c *Settings) {
			c.UsageLog, c.UpstreamRoots, c.Continuity = logPath, trustMock(t, m), false
		})
		c := g.dialLive(t, testMasterKey)
		send(t, c, liveStart("gpt-live-1", nil))
		appendAudio(t, c, liveSecond)
		last := 0.0
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		for {
			_, p, err := c.ReadMessage()
			if err != nil {
				break
			}
			var e event
			if json.Unmarshal(p, &e) == nil && e.typ() == "session.usage.updated" {
				last = e["usage"].(map[string]any)["seconds"].(float64)
			}
		}
		rec := waitRecords(t, logPath, 1)[0]
		if !rec.Unconfirmed || rec.Seconds != last || rec.Outcome != "upstream_lost" {
			t.Fatalf("record %+v, want unconfirmed, upstream_lost, %v s (the last reported)", rec, last)
		}
	})
	t.Run("no session.closed", func(t *testing.T) {
		m := startMock(t, mockai.Config{Live: mockai.LiveConfig{UsageInterval: 20 * time.Millisecond, NoClosed: true}})
		logPath := filepath.Join(t.TempDir(), "usage.jsonl")
		g := startGateway(t, m, func(c *Settings) { c.UsageLog = logPath })
		c := g.dialLive(t, testMasterKey)
		send(t, c, liveStart("gpt-live-1", nil))
		appendAudio(t, c, liveSecond)
		untilSeconds(t, c, 1)
		send(t, c, map[string]any{"type": "session.close"})
		closeOf(t, c)
		rec := waitRecords(t, logPath, 1)[0]
		if !rec.Unconfirmed || rec.Seconds != 1 {
			t.Fatalf("record %+v, want 1 unconfirmed second", rec)
		}
	})
}

// expectLiveRefusal reads an error event with code, then a close with
// closeCode.
func expectLiveRefusal(t *testing.T, c *websocket.Conn, code string, closeCode int) {
	t.Helper()
	e := read(t, c)
	if e.typ() != "error" || e.str("error", "code") != code || e.str("error", "message") == "" {
		t.Fatalf("event %v, want an error %s", e, code)
	}
	if ce := closeOf(t, c); ce.Code != closeCode {
		t.Fatalf("close %v, want %d", ce, closeCode)
	}
}

// TestLiveFirstFrameRules: what may come first on a Live socket, and the
// refusals known only once session.start names the model. None reaches an
// upstream.
func TestLiveFirstFrameRules(t *testing.T) {
	m := startMock(t, mockai.Config{})
	g := startGateway(t, nil, func(c *Settings) {
		c.RoutesFile = liveConfig(t, m, "\n      max_parallel_requests: 1", "\n    models: [gpt-realtime]")
		c.LiveStartTimeout = time.Second
	})
	cases := []struct {
		name, key string
		kind      int
		msg       any
		code      string
		closeCode int
	}{
		{"another event first", testMasterKey, websocket.TextMessage, map[string]any{"type": "response.create"}, "session_not_started", 4000},
		{"binary frame first", testMasterKey, websocket.BinaryMessage, "\x00\x01\x02", "session_not_started", 4000},
		{"not JSON", testMasterKey, websocket.TextMessage, "session.start", "session_not_started", 4000},
		{"no model", testMasterKey, websocket.TextMessage, map[string]any{"type": "session.start", "session": map[string]any{}}, "missing_required_parameter", 4000},
		{"unknown model", testMasterKey, websocket.TextMessage, liveStart("gpt-live-9", nil), "model_not_found", 1008},
		{"a Realtime model", testMasterKey, websocket.TextMessage, liveStart("gpt-realtime", nil), "invalid_model", 1008},
		{"model the key may not use", "sk-team-a-test", websocket.TextMessage, liveStart("gpt-live", nil), "model_not_allowed", 1008},
		{"nothing in time", testMasterKey, -1, nil, "session_start_timeout", 4000},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := g.dialLive(t, tc.key)
			switch b, isString := tc.msg.(string); {
			case tc.kind < 0:
			case isString:
				_ = c.WriteMessage(tc.kind, []byte(b))
			default:
				send(t, c, tc.msg)
			}
			expectLiveRefusal(t, c, tc.code, tc.closeCode)
		})
	}

	// No room: the Live deployment takes one session at a time.
	held := g.dialLive(t, testMasterKey)
	send(t, held, liveStart("gpt-live", nil))
	if e := read(t, held); e.typ() != "session.started" {
		t.Fatalf("first session: %v", e)
	}
	c := g.dialLive(t, testMasterKey)
	send(t, c, liveStart("gpt-live", nil))
	expectLiveRefusal(t, c, "deployment_at_capacity", 1008)
	if n := len(m.LiveSessions()); n != 1 {
		t.Fatalf("mockai saw %d Live sessions, want only the admitted one", n)
	}

	// A binary frame once started is the upstream's to answer; the
	// session goes on.
	_ = held.WriteMessage(websocket.BinaryMessage, []byte{1, 2, 3})
	if e := read(t, held); e.typ() != "error" || e.str("error", "code") != "invalid_value" {
		t.Fatalf("binary frame after start: %v", e)
	}
	send(t, held, map[string]any{"type": "session.close"})
	readUntil(t, held, "session.closed")
}

// TestLiveRouteRefusals: refusals before the upgrade. rtgate's client
// secrets are not for Live; a Live model is not served on /v1/realtime.
func TestLiveRouteRefusals(t *testing.T) {
	m := startMock(t, mockai.Config{})
	g := startGateway(t, m, nil)
	secret, _ := mint(t, g, testMasterKey, map[string]any{"session": map[string]any{"type": "realtime", "model": "gpt-realtime"}})
	_, resp, err := dialer().Dial(g.liveURL(), bearer(secret))
	if err == nil || resp == nil || resp.StatusCode != http.StatusForbidden {
		t.Fatalf("a client secret on the Live route: %v (HTTP %d), want 403", err, httpStatus(resp))
	}
	body := readBody(t, resp)
	if !strings.Contains(body, "client_secret_not_supported") || !strings.Contains(body, "WebRTC") {
		t.Fatalf("refusal %s", body)
	}
	_, resp, err = dialer().Dial(g.url("model=gpt-live-1"), bearer(testMasterKey))
	if err == nil || resp == nil || resp.StatusCode != http.StatusBadRequest || !strings.Contains(readBody(t, resp), "invalid_model") {
		t.Fatalf("a Live model on /v1/realtime: %v (HTTP %d), want 400 invalid_model", err, httpStatus(resp))
	}
	_, resp, err = dialer().Dial(g.liveURL(), bearer("sk-wrong"))
	if err == nil || resp == nil || resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("a bad key on the Live route: %v (HTTP %d), want 401", err, httpStatus(resp))
	}
}

// TestLiveBudget: a key whose Live session reaches its budget mid-session
// gets budget_exceeded, then the session's final usage (session.closed,
// asked for with session.close) and close 1008; the record books the final
// seconds; a new connect is refused with 429.
func TestLiveBudget(t *testing.T) {
	for _, tlsUp := range []bool{false, true} {
		name := "ws"
		if tlsUp {
			name = "wss"
		}
		t.Run(name, func(t *testing.T) {
			m := startMock(t, mockai.Config{TLS: tlsUp, Live: mockai.LiveConfig{UsageInterval: 20 * time.Millisecond}})
			dir := t.TempDir()
			logPath := filepath.Join(dir, "usage.jsonl")
			g := startGateway(t, nil, func(c *Settings) {
				c.RoutesFile = liveConfig(t, m, "\n    model_info: {input_cost_per_second: 0.001}",
					"\n    max_budget: 0.002\n    budget_duration: 30d")
				c.UsageLog, c.SpendState = logPath, filepath.Join(dir, "budgets.json")
				if tlsUp {
					c.UpstreamRoots = trustMock(t, m)
				}
			})
			c := g.dialLive(t, "sk-team-a-test")
			send(t, c, liveStart("gpt-live", nil))
			appendAudio(t, c, 3*liveSecond) // 3 s at $0.001: over the $0.002 budget
			e, seen := readUntil(t, c, "error")
			if e.str("error", "code") != "budget_exceeded" {
				t.Fatalf("error %v after %v", e, seen)
			}
			closed, _ := readUntil(t, c, "session.closed")
			if closed.str("reason") != "close_requested" {
				t.Fatalf("session.closed %v", closed)
			}
			if ce := closeOf(t, c); ce.Code != websocket.ClosePolicyViolation {
				t.Fatalf("close %v, want 1008", ce)
			}
			rec := waitRecords(t, logPath, 1)[0]
			if rec.Outcome != "budget_exceeded" || rec.Unconfirmed || rec.Seconds != 3 || math.Abs(rec.CostUSD-0.003) > 1e-12 ||
				rec.CloseCode != 1008 {
				t.Fatalf("record %+v, want budget_exceeded with 3 confirmed seconds costing 0.003", rec)
			}
			t.Logf("budget ended the session: %v s booked, %v USD, close %d", rec.Seconds, rec.CostUSD, rec.CloseCode)
			_, resp, err := dialer().Dial(g.liveURL(), bearer("sk-team-a-test"))
			if err == nil || resp == nil || resp.StatusCode != http.StatusTooManyRequests {
				t.Fatalf("connect after the budget: %v (HTTP %d), want 429", err, httpStatus(resp))
			}
		})
	}
}

// TestLiveBackendTokens: with Responses delegation, each delegated
// response's tokens are booked once, at the backend model's prices (here
// the Live entry's model_info token prices, which override gpt-5-mini's
// built-in ones), beside the seconds.
func TestLiveBackendTokens(t *testing.T) {
	m := startMock(t, mockai.Config{Live: mockai.LiveConfig{UsageInterval: -1}})
	logPath := filepath.Join(t.TempDir(), "usage.jsonl")
	g := startGateway(t, nil, func(c *Settings) {
		c.RoutesFile = liveConfig(t, m, "\n    model_info: {input_cost_per_token: 0.000001, cache_read_input_token_cost: 0.0000001, output_cost_per_token: 0.000004}", "")
		c.UsageLog = logPath
	})
	c := g.dialLive(t, testMasterKey)
	send(t, c, liveStart("gpt-live", map[string]any{"delegation": map[string]any{"type": "responses", "responses": map[string]any{"model": "gpt-5-mini"}}}))
	if e := read(t, c); e.typ() != "session.started" {
		t.Fatalf("first event %v", e)
	}
	for range 2 {
		send(t, c, map[string]any{"type": "response.create"})
		for {
			e := read(t, c)
			if e.typ() == "response.event" && e.str("event", "type") == "response.completed" {
				break
			}
		}
	}
	appendAudio(t, c, liveSecond)
	send(t, c, map[string]any{"type": "session.close"})
	readUntil(t, c, "session.closed")
	rec := waitRecords(t, logPath, 1)[0]
	u := rec.Usage
	// Per response: 120 in (20 cached), 30 out.
	want := 2*(100*0.000001+20*0.0000001+30*0.000004) + 1*0.05/60
	if u.Responses != 2 || u.InputTokens != 240 || u.InputTokenDetails.CachedTokens != 40 || u.OutputTokens != 60 ||
		rec.Seconds != 1 || math.Abs(rec.CostUSD-want) > 1e-12 {
		t.Fatalf("record usage %+v, %v s, %v USD; want 2 responses of 120/20/30 tokens, 1 s, %v USD", u, rec.Seconds, rec.CostUSD, want)
	}
	t.Logf("record: %v s, %d backend input (%d cached), %d output tokens, %v USD", rec.Seconds, u.InputTokens,
		u.InputTokenDetails.CachedTokens, u.OutputTokens, rec.CostUSD)
}

// TestLiveStatusAndMetrics: the status page counts Live sessions beside
// Realtime ones (by protocol, and each deployment's protocol), and the
// metrics have them by protocol, with the Live seconds billed.
func TestLiveStatusAndMetrics(t *testing.T) {
	m := startMock(t, mockai.Config{Live: mockai.LiveConfig{UsageInterval: 20 * time.Millisecond}})
	g := startGateway(t, m, nil)
	addr := g.serveAdmin(t)
	rt := g.dial(t, "model=gpt-realtime", bearer(testMasterKey))
	read(t, rt)
	c := g.dialLive(t, testMasterKey)
	send(t, c, liveStart("gpt-live-1", nil))
	read(t, c)
	var r admin.Report
	waitFor(t, "both sessions on the status page", func() bool {
		if err := json.Unmarshal([]byte(httpGet(t, "http://"+addr+"/status.json", nil)), &r); err != nil {
			t.Fatal(err)
		}
		return len(r.ByProtocol) == 2
	})
	want := []admin.NamedCount{{Name: "live", Count: 1}, {Name: "realtime", Count: 1}}
	if r.ByProtocol[0] != want[0] || r.ByProtocol[1] != want[1] {
		t.Fatalf("sessions_by_protocol %v, want %v", r.ByProtocol, want)
	}
	protocols := map[string]string{}
	for _, d := range r.Deployments {
		protocols[d.Group] = d.Protocol
	}
	if protocols["gpt-live-1"] != "live" || protocols["gpt-realtime"] != "realtime" {
		t.Fatalf("deployments' protocols %v", protocols)
	}
	if v := metricValue(t, g, `rtgate_protocol_sessions_open{protocol="live"}`); v != 1 {
		t.Fatalf("live sessions open: %v", v)
	}
	appendAudio(t, c, liveSecond)
	untilSeconds(t, c, 1)
	send(t, c, map[string]any{"type": "session.close"})
	closeOf(t, c)
	waitFor(t, "the Live session's end in the metrics", func() bool {
		return metricValue(t, g, `rtgate_protocol_sessions_open{protocol="live"}`) == 0
	})
	if v := metricValue(t, g, `rtgate_live_seconds_total{key="master",model_group="gpt-live-1"}`); v != 1 {
		t.Fatalf("live seconds: %v, want 1", v)
	}
	if v := metricValue(t, g, `rtgate_protocol_sessions_total{outcome="upstream_closed",protocol="live"}`); v != 1 {
		t.Fatalf("ended live sessions: %v", v)
	}
}

// TestLiveDrain: a Live session still open at the end of a drain gets the
// shutdown's error event, then its session.closed (the gateway asked for it
// with session.close) and close 1001; its final usage is booked.
func TestLiveDrain(t *testing.T) {
	m := startMock(t, mockai.Config{Live: mockai.LiveConfig{UsageInterval: 20 * time.Millisecond}})
	logPath := filepath.Join(t.TempDir(), "usage.jsonl")
	g := startGateway(t, m, func(c *Settings) { c.UsageLog, c.DrainGrace = logPath, 10*time.Millisecond })
	c := g.dialLive(t, testMasterKey)
	send(t, c, liveStart("gpt-live-1", nil))
	appendAudio(t, c, liveSecond)
	untilSeconds(t, c, 1)
	go g.srv.Drain(100 * time.Millisecond)
	e, _ := readUntil(t, c, "error")
	if e.str("error", "code") != "server_shutting_down" {
		t.Fatalf("error %v", e)
	}
	readUntil(t, c, "session.closed")
	if ce := closeOf(t, c); ce.Code != websocket.CloseGoingAway {
		t.Fatalf("close %v, want 1001", ce)
	}
	rec := waitRecords(t, logPath, 1)[0]
	if rec.Unconfirmed || rec.Seconds != 1 || m.LiveSessions()[0].Reason != "close_requested" {
		t.Fatalf("record %+v, mockai %+v: want 1 confirmed second, ended by session.close", rec, m.LiveSessions())
	}
}

// TestLiveAzureRoute: Azure's client route and credential header serve the
// same sessions.
func TestLiveAzureRoute(t *testing.T) {
	m := startMock(t, mockai.Config{})
	g := startGateway(t, m, nil)
	c := dialWith(t, dialer(), "ws://"+g.addr+"/openai/v1/live/sessions", http.Header{"Api-Key": {testMasterKey}})
	send(t, c, liveStart("gpt-live-1", nil))
	if e := read(t, c); e.typ() != "session.started" || e.str("session", "model") != "gpt-live-1" {
		t.Fatalf("first event %v", e)
	}
	send(t, c, map[string]any{"type": "session.close"})
	readUntil(t, c, "session.closed")
}

// TestLiveBudgetWindow: as a session's seconds cross into a new 30 s
// window, that window's cost must still fit the budget: at $0.001 a second
// and a $0.05 budget, 31 s ($0.031) leave less than the next window's $0.03,
// so the session ends though its spend is under the budget.
func TestLiveBudgetWindow(t *testing.T) {
	m := startMock(t, mockai.Config{Live: mockai.LiveConfig{UsageInterval: 20 * time.Millisecond}})
	dir := t.TempDir()
	logPath := filepath.Join(dir, "usage.jsonl")
	g := startGateway(t, nil, func(c *Settings) {
		c.RoutesFile = liveConfig(t, m, "\n    model_info: {input_cost_per_second: 0.001}",
			"\n    max_budget: 0.05\n    budget_duration: 30d")
		c.UsageLog, c.SpendState = logPath, filepath.Join(dir, "budgets.json")
	})
	c := g.dialLive(t, "sk-team-a-test")
	send(t, c, liveStart("gpt-live", nil))
	appendAudio(t, c, 31*liveSecond)
	if e, seen := readUntil(t, c, "error"); e.str("error", "code") != "budget_exceeded" {
		t.Fatalf("error %v after %v", e, seen)
	}
	if ce := closeOf(t, c); ce.Code != websocket.ClosePolicyViolation {
		t.Fatalf("close %v, want 1008", ce)
	}
	rec := waitRecords(t, logPath, 1)[0]
	if rec.Outcome != "budget_exceeded" || rec.Seconds != 31 || math.Abs(rec.CostUSD-0.031) > 1e-12 {
		t.Fatalf("record %+v, want budget_exceeded at 31 s, 0.031 USD", rec)
	}
}

// TestLiveTurns: a GPT-Live session's turns are measured from its input
// transcript and output audio deltas (it has no response events): three
// appends heard and answered are three completed turns, in the metrics and
// in the record, the first one's first audio at least mockai's delay.
func TestLiveTurns(t *testing.T) {
	overBoth(t, mockai.Config{FirstAudioDelay: 50 * time.Millisecond}, func(t *testing.T, m *mockai.Server, trust func(*Settings)) {
		g, logPath := liveGateway(t, m, trust)
		c := g.dialLive(t, "sk-team-a-test")
		send(t, c, liveStart("gpt-live", nil))
		if e := read(t, c); e.typ() != "session.started" {
			t.Fatalf("first event %v", e)
		}
		for range 3 { // each append is heard, then answered
			appendAudio(t, c, liveSecond/10)
			readUntil(t, c, "session.output_audio.delta")
		}
		send(t, c, map[string]any{"type": "session.close"})
		readUntil(t, c, "session.closed")
		rec := waitRecords(t, logPath, 1)[0]
		// The record's percentiles come from a log-bucket sketch, within
		// 9 % of the true value (server/turns).
		if rec.Turns != 3 || rec.FirstAudioP95MS < 50*0.91 {
			t.Fatalf("record: %d turns, first audio p50 %v p95 %v ms; want 3, p95 at least the 50 ms delay (less the sketch's 9 %%)",
				rec.Turns, rec.FirstAudioP50MS, rec.FirstAudioP95MS)
		}
		if got := metricWith(t, g, "rtgate_turns_total", "model_group", "gpt-live"); got != 3 {
			t.Fatalf("rtgate_turns_total for gpt-live %v, want 3 completed", got)
		}
		if got := metricWith(t, g, "rtgate_turns_total", "outcome", "completed"); got != 3 {
			t.Fatalf("completed turns %v, want 3", got)
		}
		if got := histogramCount(t, g, "rtgate_turn_first_audio_seconds"); got != 3 {
			t.Fatalf("first-audio observations %v, want 3", got)
		}
	})
}
