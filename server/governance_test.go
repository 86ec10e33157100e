package server

import (
	"crypto/tls"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"rtgate/mockai"
	"rtgate/server/redistest"
	"rtgate/server/session"
)

// Issue 32: every door governed. One test per item; each failed on the
// code before the admission path (admission.Gate.Admit).

// admissionGateway is a gateway whose group gpt-realtime has a deployment
// on each of ms, with the keys of keysYAML (a routes file's keys: section,
// APP_A_KEY, APP_B_KEY and OPS_KEY set).
func admissionGateway(t *testing.T, keysYAML string, mutate func(*Settings), ms ...*mockai.Server) *gateway {
	t.Helper()
	t.Setenv("APP_A_KEY", keyA)
	t.Setenv("APP_B_KEY", keyB)
	t.Setenv("OPS_KEY", keyOps)
	body := "model_list:"
	for _, m := range ms {
		body += openaiEntry("gpt-realtime", m)
	}
	path := writeConfig(t, body+configTail+keysYAML)
	return startGateway(t, nil, func(c *Settings) {
		c.RoutesFile = path
		c.SpendState = t.TempDir() + "/budgets.json"
		if ms[0].CertPEM() != nil {
			c.UpstreamRoots = trustMock(t, ms[0])
			for _, m := range ms[1:] {
				c.UpstreamRoots.AppendCertsFromPEM(m.CertPEM())
			}
		}
		if mutate != nil {
			mutate(c)
		}
	})
}

// mockPost posts to the mock's own path p (its test controls).
func postToMock(t *testing.T, m *mockai.Server, p string) {
	t.Helper()
	hc, scheme := http.DefaultClient, "http://"
	if m.CertPEM() != nil {
		hc, scheme = &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: trustMock(t, m)}}}, "https://"
	}
	req, _ := http.NewRequest(http.MethodPost, scheme+m.Addr()+p, nil)
	req.Header.Set("Authorization", "Bearer "+testUpstreamKey)
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("POST %s: HTTP %d", p, resp.StatusCode)
	}
}

// meteringSidebands is the number of the gateway's own metering sidebands
// open now: one per call or GPT-Live WebRTC session it meters.
func meteringSidebands(t testing.TB, g *gateway) int {
	t.Helper()
	return int(gathered(t, g.srv.reg, "rtgate_metering_sidebands_open"))
}

// errorCode is the OpenAI error code of a JSON error body.
func errorCode(body []byte) string {
	var e struct{ Error struct{ Code string } }
	_ = json.Unmarshal(body, &e)
	return e.Error.Code
}

// dialCode dials the gateway and returns the refusal's status and error
// code (0 and "" when it connected: the socket is closed at the test's end).
func dialCode(t *testing.T, g *gateway, q, key string) (int, string) {
	t.Helper()
	c, resp, err := dialer().Dial(g.url(q), bearer(key))
	if err == nil {
		t.Cleanup(func() { _ = c.Close() })
		return 0, ""
	}
	if resp == nil {
		t.Fatalf("dial %s: %v", q, err)
	}
	defer resp.Body.Close()
	var e struct{ Error struct{ Code string } }
	_ = json.NewDecoder(resp.Body).Decode(&e)
	return resp.StatusCode, e.Error.Code
}

// TestCallsAdmittedAndBudgeted (item 1): a WebRTC call is admitted as a
// session. It counts against max_sessions while it is live (a second call
// of a max_sessions: 1 key is refused 429; once the call ends upstream, its
// metering sideband closes and a call is admitted again), and its metered
// usage is booked into the key's budget: over it, the call is hung up and
// the next call refused 429 budget_exceeded. Before, both calls got 201 and
// the budget ledger stayed at 0.
func TestCallsAdmittedAndBudgeted(t *testing.T) {
	for _, up := range upstreams {
		t.Run(up.name, func(t *testing.T) {
			m := startMock(t, up.cfg)
			g := admissionGateway(t, `
keys:
  - name: app-a
    key: os.environ/APP_A_KEY
    max_sessions: 1
  - name: app-b
    key: os.environ/APP_B_KEY
    max_budget: 0.001
    budget_duration: 30d
`, nil, m)
			offer := []byte(sdpOffer)
			// max_sessions: the call is a session while it is live.
			id := placeCall(t, g, keyA, "app-a's first call")
			waitFor(t, "the call's metering sideband", func() bool { return meteringSidebands(t, g) == 1 })
			status, _, body := post(t, g, "/v1/realtime/calls", keyA, "application/sdp", offer, nil)
			if status != http.StatusTooManyRequests || errorCode(body) != "concurrent_sessions_exceeded" {
				t.Fatalf("app-a's second call while the first is live: HTTP %d %s, want 429 concurrent_sessions_exceeded", status, body)
			}
			postToMock(t, m, "/v1/realtime/calls/"+id+"/hangup")
			waitFor(t, "the call to end", func() bool { return meteringSidebands(t, g) == 0 })
			placeCall(t, g, keyA, "app-a's call once its first ended")

			// The budget: the call's usage (100 audio tokens, $0.0032)
			// takes app-b over $0.001.
			id = placeCall(t, g, keyB, "app-b's call")
			waitFor(t, "app-b's metering sideband", func() bool { return meteringSidebands(t, g) == 2 })
			postToMock(t, m, "/mock/calls/"+id+"/respond")
			waitFor(t, "the call's usage in app-b's budget", func() bool {
				return budgetSpent(t, g, "app-b") >= 0.0032
			})
			waitFor(t, "the call over budget to be hung up", func() bool { return meteringSidebands(t, g) == 1 })
			status, _, body = post(t, g, "/v1/realtime/calls", keyB, "application/sdp", offer, nil)
			if status != http.StatusTooManyRequests || errorCode(body) != "budget_exceeded" {
				t.Fatalf("a call over budget: HTTP %d %s, want 429 budget_exceeded", status, body)
			}
		})
	}
}

// TestOwnerLookupFailsClosed (item 1): with Redis unavailable, gone or
// frozen (every lookup past its budget), an instance that does not know a
// call refuses its sideband 503 owner_unavailable: not 403 (which blamed
// the call's own key for a Redis outage) and never as a call the gateway
// did not make.
func TestOwnerLookupFailsClosed(t *testing.T) {
	outages := []struct {
		name  string
		begin func(*redistest.Server)
	}{
		{"redis stopped", (*redistest.Server).Stop},
		{"redis frozen", (*redistest.Server).Freeze},
	}
	for _, up := range upstreams {
		for _, outage := range outages {
			t.Run(up.name+"/"+outage.name, func(t *testing.T) { ownerLookupFailsClosed(t, up.cfg, outage.begin) })
		}
	}
}

func ownerLookupFailsClosed(t *testing.T, cfg mockai.Config, outage func(*redistest.Server)) {
	rd := redistest.Start(t)
	g1, rt, tr := appsGateway(t, cfg, func(c *Settings) { c.RedisURL = rd.URL() })
	g2 := appsGatewayOn(t, rt, tr, func(c *Settings) { c.RedisURL = rd.URL() })
	q := "call_id=" + placeCall(t, g1, keyA, "call")
	outage(rd)
	for _, key := range []string{keyA, keyOps} { // the maker, and a sideband: any key
		if status, code := dialCode(t, g2, q, key); status != http.StatusServiceUnavailable || code != "owner_unavailable" {
			t.Fatalf("sideband with the owner unknowable: HTTP %d %q, want 503 owner_unavailable", status, code)
		}
	}
	// The instance that made the call still knows it.
	if status, _ := dialCode(t, g1, q, keyA); status != 0 {
		t.Fatalf("the maker's instance refused its sideband: HTTP %d", status)
	}
}

// TestSidebandGoesToItsCallsDeployment (item 5): with two deployments in
// the group, every call's sideband is relayed to the deployment that made
// the call (before, the balancer chose, and about half went to the other
// one, where the call does not exist).
func TestSidebandGoesToItsCallsDeployment(t *testing.T) {
	for _, up := range upstreams {
		t.Run(up.name, func(t *testing.T) {
			m1, m2 := startMock(t, up.cfg), startMock(t, up.cfg)
			g := admissionGateway(t, appKeys, nil, m1, m2)
			owner := map[string]*mockai.Server{}
			for range 6 {
				id := placeCall(t, g, keyA, "call")
				for _, m := range []*mockai.Server{m1, m2} {
					for _, c := range m.Calls() {
						if c.ID == id {
							owner[id] = m
						}
					}
				}
			}
			sidebands := func(m *mockai.Server, id string) int {
				n := 0
				for _, r := range m.Records() {
					if strings.Contains(r.Query, "call_id="+id) {
						n++
					}
				}
				return n
			}
			for id, m := range owner {
				other := m1
				if m == m1 {
					other = m2
				}
				waitFor(t, "the gateway's own sideband", func() bool { return sidebands(m, id) == 1 })
				c := g.dial(t, "call_id="+id, bearer(keyA))
				if e := read(t, c); e.typ() != "session.created" {
					t.Fatalf("sideband's first event %s", e.typ())
				}
				_ = c.Close()
				if sidebands(m, id) != 2 || sidebands(other, id) != 0 {
					t.Fatalf("call %s: %d sidebands on its deployment (want the gateway's and the app's), %d on the other (want 0)",
						id, sidebands(m, id), sidebands(other, id))
				}
			}
		})
	}
}

// TestSecretSidebandReachesOnlyItsCalls (item 6): a client secret's
// sideband reaches the calls made with that secret only: not another
// secret's call of the same key, not the key's own calls, and not a call
// the gateway did not make even when its minting key has `sideband: any`.
func TestSecretSidebandReachesOnlyItsCalls(t *testing.T) {
	for _, up := range upstreams {
		t.Run(up.name, func(t *testing.T) {
			g, _, _ := appsGateway(t, up.cfg, nil)
			ek1, _ := mint(t, g, keyA, map[string]any{})
			ek2, _ := mint(t, g, keyA, map[string]any{})
			ekOps, _ := mint(t, g, keyOps, map[string]any{})
			bySecret := placeCall(t, g, ek1, "call made with a secret")
			byKey := placeCall(t, g, keyA, "call made with the key")
			for _, tc := range []struct {
				name, key, call string
				want            int
			}{
				{"its secret", ek1, bySecret, 0},
				{"the key that minted it", keyA, bySecret, 0},
				{"another secret of the key", ek2, bySecret, 403},
				{"a secret on the key's own call", ek1, byKey, 403},
				{"a sideband-any key's secret on a foreign call", ekOps, "rtc_sip_foreign", 403},
				{"the sideband-any key itself", keyOps, "rtc_sip_foreign", 0},
			} {
				if status, _ := dialCode(t, g, "call_id="+tc.call, tc.key); status != tc.want {
					t.Errorf("%s: HTTP %d, want %d (0: connected)", tc.name, status, tc.want)
				}
			}
		})
	}
}

// TestReloadRevokesLiveSessions (item 7): a reload that removes a key ends
// its live sessions with an error event key_revoked and close 1008, while
// another key's session goes on, under the budget the reload set: lowered
// below what its next response costs, that response ends it (budget_exceeded,
// 1008). Before, a reload reached no live session.
func TestReloadRevokesLiveSessions(t *testing.T) {
	for _, up := range upstreams {
		t.Run(up.name, func(t *testing.T) {
			cfg := up.cfg
			cfg.AudioDeltas, cfg.AudioDeltaBytes = 4, 9600 // a response costs $0.00556 (responseCost)
			m := startMock(t, cfg)
			keys := func(budget string) string {
				return `
keys:
  - name: app-a
    key: os.environ/APP_A_KEY
  - name: app-b
    key: os.environ/APP_B_KEY
    max_budget: ` + budget + `
    budget_duration: 30d
`
			}
			g := admissionGateway(t, keys("1"), nil, m)
			revoked, kept := g.dial(t, "", bearer(keyA)), g.dial(t, "", bearer(keyB))
			read(t, revoked)
			read(t, kept)
			withoutA := strings.Replace(keys("0.001"), "  - name: app-a\n    key: os.environ/APP_A_KEY\n", "", 1)
			if err := os.WriteFile(g.srv.cfg.RoutesFile, []byte("model_list:"+openaiEntry("gpt-realtime", m)+configTail+withoutA), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := g.srv.Reload(); err != nil {
				t.Fatal(err)
			}
			if e := read(t, revoked); e.typ() != "error" || e.str("error", "code") != "key_revoked" {
				t.Fatalf("the revoked key's session got %s %s, want an error key_revoked", e.typ(), e.str("error", "code"))
			}
			if ce := closeOf(t, revoked); ce.Code != websocket.ClosePolicyViolation {
				t.Fatalf("the revoked key's session closed %d, want 1008", ce.Code)
			}
			respond(t, kept) // the session goes on; its response takes app-b over the lowered budget
			if e, _ := readUntil(t, kept, "error"); e.str("error", "code") != "budget_exceeded" {
				t.Fatalf("the kept session's error %s, want budget_exceeded", e.str("error", "code"))
			}
			if ce := closeOf(t, kept); ce.Code != websocket.ClosePolicyViolation {
				t.Fatalf("the session over its lowered budget closed %d, want 1008", ce.Code)
			}
		})
	}
}

// TestCallErrorsInGatewaysWords (item 8): a call no deployment answers is
// refused in the gateway's words, naming no upstream host, and so is a
// WebSocket session's unreachable upstream; an upstream's
// absolute Location (with Azure's query) reaches the client as the
// gateway's own path, and the call is remembered by its bare id.
func TestCallErrorsInGatewaysWords(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadPort := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	_ = ln.Close() // nothing listens there now
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || !strings.HasSuffix(r.URL.Path, "/realtime/calls") {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Location", "https://res.upstream.test/openai/v1/realtime/calls/rtc_abc123?api-version=2025-08-28")
		w.Header().Set("Content-Type", "application/sdp")
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte("v=0\r\n"))
	}))
	t.Cleanup(up.Close)
	upURL, _ := url.Parse(up.URL)
	entry := func(group, base string) string {
		return "\n  - model_name: " + group + "\n    litellm_params:\n      model: openai/gpt-realtime\n      api_base: " + base +
			"\n      api_key: os.environ/RTGATE_TEST_UPSTREAM"
	}
	path := writeConfig(t, "model_list:"+entry("dead", "http://127.0.0.1:"+deadPort+"/v1")+
		entry("gpt-realtime", "http://"+upURL.Host+"/v1")+configTail)
	g := startGateway(t, nil, func(c *Settings) { c.RoutesFile = path })

	status, _, body := post(t, g, "/v1/realtime/calls?model=dead", testMasterKey, "application/sdp", []byte(sdpOffer), nil)
	if status != http.StatusBadGateway || errorCode(body) != "upstream_unavailable" ||
		strings.Contains(string(body), deadPort) || strings.Contains(string(body), "127.0.0.1") || strings.Contains(string(body), "http") {
		t.Fatalf("unreachable upstream: HTTP %d %s, want 502 upstream_unavailable naming no upstream", status, body)
	}
	// A WebSocket session whose upstream cannot be reached is told so in
	// the gateway's words too.
	c := g.dial(t, "model=dead", bearer(testMasterKey))
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, ev, err := c.ReadMessage()
	if err != nil || !strings.Contains(string(ev), `"upstream_unavailable"`) ||
		strings.Contains(string(ev), deadPort) || strings.Contains(string(ev), "127.0.0.1") || strings.Contains(string(ev), "http") {
		t.Fatalf("WebSocket session with its upstream unreachable: %s (%v), want an error event upstream_unavailable naming no upstream", ev, err)
	}
	_ = c.Close()
	status, h, _ := post(t, g, "/v1/realtime/calls?model=gpt-realtime", testMasterKey, "application/sdp", []byte(sdpOffer), nil)
	if status != http.StatusCreated || h.Get("Location") != "/v1/realtime/calls/rtc_abc123" {
		t.Fatalf("HTTP %d, Location %q; want 201 with the gateway's own path", status, h.Get("Location"))
	}
	if _, ok := g.srv.sessions.Calls().Known("rtc_abc123"); !ok {
		t.Fatal("the call is not remembered by its bare id")
	}
}

// TestLiveCreateAdmitted (item 1, GPT-Live): a WebRTC create is admitted
// as a session: with MAX_SESSIONS_PER_KEY 1 a second create of the key is
// refused 429 while the first session is live, and admitted once it was
// hung up (before, the create checked the budget only). With Redis gone, a
// control of a session this instance does not know fails closed: 503
// owner_unavailable.
func TestLiveCreateAdmitted(t *testing.T) {
	for _, up := range upstreams {
		t.Run(up.name, func(t *testing.T) {
			rd := redistest.Start(t)
			mock := startMock(t, up.cfg)
			path := liveAppsConfig(t, mock.BaseURL())
			settings := func(c *Settings) { c.RoutesFile, c.RedisURL, c.MaxSessionsPerKey = path, rd.URL(), 1 }
			g, other := startAppGateway(t, mock, settings), startAppGateway(t, mock, settings)
			id := newWebRTCSession(t, g, keyA)
			if status, b := createLive(t, g, keyA, ""); status != http.StatusTooManyRequests || errorCode(b) != "concurrent_sessions_exceeded" {
				t.Fatalf("a second create while the first session is live: HTTP %d %s, want 429 concurrent_sessions_exceeded", status, b)
			}
			if status, _, b := post(t, g, "/v1/live/sessions/"+id+"/hangup", keyA, "application/json", nil, nil); status != http.StatusOK {
				t.Fatalf("hangup: HTTP %d %s", status, b)
			}
			waitFor(t, "the session's end to give its admission back", func() bool {
				return gathered(t, g.srv.reg, "rtgate_live_webrtc_sessions_metered") == 0
			})
			id = newWebRTCSession(t, g, keyA)
			rd.Stop()
			status, _, b := post(t, other, "/v1/live/sessions/"+id+"/hangup", keyA, "application/json", nil, nil)
			if status != http.StatusServiceUnavailable || errorCode(b) != "owner_unavailable" {
				t.Fatalf("a control with the owner unknowable: HTTP %d %s, want 503 owner_unavailable", status, b)
			}
		})
	}
}

// TestResumeNeverOntoARemovedDeployment (item 7): a reload that replaces a
// group's deployment leaves the live session on it, but when that upstream
// is lost the session resumes on the group's deployment now, never on the
// removed one (before, the resume used the routes of the connect and went
// back to it).
func TestResumeNeverOntoARemovedDeployment(t *testing.T) {
	for _, up := range upstreams {
		t.Run(up.name, func(t *testing.T) {
			cut := up.cfg
			cut.Cut = mockai.Cut{Kind: mockai.CutDrop, AfterResponses: 1, Times: 1}
			removed, kept := startMock(t, cut), startMock(t, up.cfg)
			g := admissionGateway(t, appKeys, func(c *Settings) {
				if kept.CertPEM() != nil {
					c.UpstreamRoots.AppendCertsFromPEM(kept.CertPEM())
				}
			}, removed)
			c := g.dial(t, "model=gpt-realtime", bearer(keyA))
			read(t, c)
			if err := os.WriteFile(g.srv.cfg.RoutesFile, []byte("model_list:"+openaiEntry("gpt-realtime", kept)+configTail+appKeys), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := g.srv.Reload(); err != nil {
				t.Fatal(err)
			}
			send(t, c, map[string]any{"type": "response.create"})
			readUntil(t, c, session.EventResumed) // the removed deployment's upstream dropped after the answer
			if len(kept.Records()) != 1 || len(removed.Records()) != 1 {
				t.Fatalf("the resume went to the removed deployment (%d connects) and not the group's now (%d), want 1 and 1",
					len(removed.Records()), len(kept.Records()))
			}
		})
	}
}
