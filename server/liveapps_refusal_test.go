package server

import (
	"bytes"
	"crypto/tls"
	"encoding/json"
	"io"
	"math"
	"net/http"
	"os"
	"rtgate/server/protocol"
	"strings"
	"testing"
	"time"

	"rtgate/mockai"
	"rtgate/server/redistest"
	"rtgate/server/usage"
)

// liveAppsGateway is a gateway in front of mock with liveAppsConfig's
// groups and keys (and Redis when redisURL is set).
func liveAppsGateway(t *testing.T, mock *mockai.Server, redisURL string) *gateway {
	t.Helper()
	path := liveAppsConfig(t, mock.BaseURL())
	return startAppGateway(t, mock, func(c *Settings) { c.RoutesFile, c.RedisURL = path, redisURL })
}

// createLive makes a WebRTC session through g with key; instructions pad
// the body.
func createLive(t *testing.T, g *gateway, key, instructions string) (int, []byte) {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"session": map[string]any{"model": "gpt-live", "instructions": instructions},
		"transport": map[string]any{"type": "webrtc", "sdp": sdpOffer}})
	status, _, b := post(t, g, "/v1/live/sessions", key, "application/json", body, nil)
	return status, b
}

// newWebRTCSession creates a session with key and returns its id.
func newWebRTCSession(t *testing.T, g *gateway, key string) string {
	t.Helper()
	status, b := createLive(t, g, key, "")
	id := protocol.LiveSessionID(b)
	if status != http.StatusCreated || id == "" {
		t.Fatalf("create: HTTP %d %s", status, b)
	}
	return id
}

// attachStatus is the HTTP status of a sideband attach through g (101 when
// admitted) and the refusal's code.
func attachStatus(t *testing.T, g *gateway, id, key, query string) (int, string) {
	t.Helper()
	u := "ws://" + g.addr + "/v1/live/sessions/" + id + "/attach"
	if query != "" {
		u += "?" + query
	}
	c, resp, err := dialer().Dial(u, bearer(key))
	if err == nil {
		c.Close()
		return http.StatusSwitchingProtocols, ""
	}
	var body struct {
		Error struct{ Code string } `json:"error"`
	}
	if resp != nil {
		_ = json.NewDecoder(resp.Body).Decode(&body)
	}
	return httpStatus(resp), body.Error.Code
}

// TestLiveAppsRefusals: with independent clients (gorilla, net/http), over
// ws:// and wss:// upstreams: the owner check on sidebands and call
// controls (another key 403 call_not_allowed, a `sideband: any` key
// admitted, a session the gateway never saw 404 for the master key), no
// client secrets on Live routes, and the create's body bound (a config
// past 64 KiB accepted, past 1 MiB refused 413).
func TestLiveAppsRefusals(t *testing.T) {
	for _, up := range upstreams {
		t.Run(up.name, func(t *testing.T) {
			mock := startMock(t, up.cfg)
			g := liveAppsGateway(t, mock, "")
			id := newWebRTCSession(t, g, keyA)

			for _, tc := range []struct {
				name, key, id, query string
				status               int
				code                 string
			}{
				{"the owner", keyA, id, "graceful_close=true", http.StatusSwitchingProtocols, ""},
				{"another key", keyB, id, "", http.StatusForbidden, "call_not_allowed"},
				{"a sideband: any key on a session the gateway made", keyOps, id, "", http.StatusForbidden, "call_not_allowed"},
				{"the master key on another key's session", testMasterKey, id, "", http.StatusForbidden, "call_not_allowed"},
				{"a session never seen, no model", testMasterKey, "live_unknown1", "", http.StatusNotFound, "session_not_found"},
				{"a session never seen, by a key of its own", keyA, "live_unknown1", "", http.StatusForbidden, "call_not_allowed"},
			} {
				if status, code := attachStatus(t, g, tc.id, tc.key, tc.query); status != tc.status || code != tc.code {
					t.Errorf("attach, %s: HTTP %d %q, want %d %q", tc.name, status, code, tc.status, tc.code)
				}
			}
			// A session made elsewhere (directly upstream): a `sideband: any`
			// key attaches by naming its model group; a key of its own may not.
			elsewhere := createUpstream(t, mock)
			c := dialWith(t, dialer(), "ws://"+g.addr+"/v1/live/sessions/"+elsewhere+"/attach?model=gpt-live", bearer(keyOps))
			if e := read(t, c); e.typ() != "session.started" || e.str("session", "id") != elsewhere {
				t.Errorf("a sideband: any key on a session made elsewhere: first event %v", e)
			}
			if status, code := attachStatus(t, g, elsewhere, keyA, "model=gpt-live"); status != http.StatusForbidden || code != "call_not_allowed" {
				t.Errorf("an ordinary key on a session made elsewhere: HTTP %d %q", status, code)
			}

			for _, tc := range []struct {
				name, key, path string
				status          int
			}{
				{"hangup by another key", keyB, "/v1/live/sessions/" + id + "/hangup", http.StatusForbidden},
				{"refer of a session never seen", testMasterKey, "/v1/live/sessions/live_unknown1/refer", http.StatusNotFound},
				{"accept of an unknown call without a model", testMasterKey, "/v1/live/sessions/live_unknown1/accept", http.StatusBadRequest},
				{"no key", "", "/v1/live/sessions/" + id + "/hangup", http.StatusUnauthorized},
			} {
				if status, _, b := post(t, g, tc.path, tc.key, "application/json", []byte(`{}`), nil); status != tc.status {
					t.Errorf("%s: HTTP %d %s, want %d", tc.name, status, b, tc.status)
				}
			}
			if status, _, b := post(t, g, "/v1/live/sessions/"+id+"/hangup", keyA, "application/json", nil, nil); status != http.StatusOK {
				t.Errorf("hangup by the owner: HTTP %d %s", status, b)
			}

			// Bodies: a config past the API's 64 KiB is a Live create's
			// right; past 1 MiB it is refused before it is read.
			if status, b := createLive(t, g, keyA, strings.Repeat("Be brief. ", 10_000)); status != http.StatusCreated {
				t.Errorf("a 100 KB create: HTTP %d %.200s", status, b)
			}
			if status, b := createLive(t, g, keyA, strings.Repeat("x", 1<<20)); status != http.StatusRequestEntityTooLarge {
				t.Errorf("a 1 MiB create: HTTP %d %.200s", status, b)
			}

			// GPT-Live has no client secrets.
			ek, _ := mint(t, g, keyA, map[string]any{"session": map[string]any{"type": "realtime", "model": "gpt-realtime"}})
			if status, b := createLive(t, g, ek, ""); status != http.StatusForbidden || !bytes.Contains(b, []byte("client_secret_not_supported")) {
				t.Errorf("a client secret's create: HTTP %d %s", status, b)
			}
			if status, code := attachStatus(t, g, id, ek, ""); status != http.StatusForbidden || code != "client_secret_not_supported" {
				t.Errorf("a client secret's attach: HTTP %d %q", status, code)
			}

			// The recording of an unknown session is not fetched for anyone.
			req, _ := http.NewRequest(http.MethodGet, "http://"+g.addr+"/v1/live/sessions/live_unknown1/content", nil)
			req.Header.Set("Authorization", "Bearer "+testMasterKey)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusNotFound {
				t.Errorf("content of a session never seen: HTTP %d, want 404", resp.StatusCode)
			}
		})
	}
}

// TestLiveOwnerAcrossInstances: a session created on one instance is its
// key's on another (owners shared through Redis): the owner attaches there,
// another key is refused.
func TestLiveOwnerAcrossInstances(t *testing.T) {
	rd := redistest.Start(t)
	mock := startMock(t, mockai.Config{})
	g1 := liveAppsGateway(t, mock, rd.URL())
	g2 := liveAppsGateway(t, mock, rd.URL())
	id := newWebRTCSession(t, g1, keyA)
	if status, code := attachStatus(t, g2, id, keyB, ""); status != http.StatusForbidden || code != "call_not_allowed" {
		t.Fatalf("another key on the other instance: HTTP %d %q", status, code)
	}
	if status, _ := attachStatus(t, g2, id, keyA, ""); status != http.StatusSwitchingProtocols {
		t.Fatalf("the owner on the other instance: HTTP %d", status)
	}
	if status, _, b := post(t, g2, "/v1/live/sessions/"+id+"/hangup", keyA, "application/json", nil, nil); status != http.StatusOK {
		t.Fatalf("the owner's hangup on the other instance: HTTP %d %s", status, b)
	}
}

// createUpstream makes a WebRTC session directly on mock, as an app talking
// to OpenAI without the gateway would, and returns its id.
func createUpstream(t *testing.T, mock *mockai.Server) string {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"session": map[string]any{"model": "gpt-live-1"},
		"transport": map[string]any{"type": "webrtc", "sdp": sdpOffer}})
	base := strings.Replace(strings.Replace(mock.BaseURL(), "wss://", "https://", 1), "ws://", "http://", 1)
	req, _ := http.NewRequest(http.MethodPost, base+"/live/sessions", bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+testUpstreamKey)
	req.Header.Set("Content-Type", "application/json")
	hc := http.DefaultClient
	if pem := mock.CertPEM(); pem != nil {
		hc = &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: trustMock(t, mock)}}}
	}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	id := protocol.LiveSessionID(b)
	if id == "" {
		t.Fatalf("creating a session upstream: HTTP %d %s", resp.StatusCode, b)
	}
	return id
}

// TestLiveWebRTCUnmetered: an upstream that refuses the gateway's own
// sideband (mockai's MaxSidebands < 0) leaves the session unmetered: it is
// billed the 15 s floor at once, marked unmetered (not unconfirmed), at the
// Live price; ws:// and wss:// upstreams.
func TestLiveWebRTCUnmetered(t *testing.T) {
	for _, up := range upstreams {
		t.Run(up.name, func(t *testing.T) {
			cfg := up.cfg
			cfg.Live.MaxSidebands = -1
			mock := startMock(t, cfg)
			path := liveAppsConfig(t, mock.BaseURL())
			logPath := t.TempDir() + "/usage.jsonl"
			g := startAppGateway(t, mock, func(c *Settings) { c.RoutesFile, c.UsageLog = path, logPath })
			newWebRTCSession(t, g, keyA)
			var rec *usage.Record
			waitFor(t, "the floor record", func() bool {
				for _, r := range readRecordsSoFar(logPath) {
					if r.Protocol == "live" {
						rec = &r
						return true
					}
				}
				return false
			})
			if !rec.Unmetered || rec.Unconfirmed || rec.Seconds != 15 || rec.KeyName != "app-a" || rec.Outcome != "unmetered" {
				t.Fatalf("record %+v: want unmetered, 15 s, app-a", rec)
			}
			if want := 15 * 0.05 / 60; math.Abs(rec.CostUSD-want) > 1e-12 {
				t.Fatalf("cost %v, want %v", rec.CostUSD, want)
			}
		})
	}
}

// readRecordsSoFar reads USAGE_LOG's records without waiting for the end.
func readRecordsSoFar(path string) []usage.Record {
	var out []usage.Record
	b, _ := os.ReadFile(path)
	for _, line := range strings.Split(string(b), "\n") {
		var r usage.Record
		if json.Unmarshal([]byte(line), &r) == nil && r.SessionID != "" {
			out = append(out, r)
		}
	}
	return out
}

// TestLiveWebRTCBudget: a WebRTC session's seconds, read by the gateway's
// own sideband, are booked against its key as they grow; a key that
// reaches its budget mid-session has the session hung up upstream, its
// final usage booked (outcome budget_exceeded), and its next create is
// refused 429 before anything reaches the upstream; ws:// and wss://.
func TestLiveWebRTCBudget(t *testing.T) {
	for _, up := range upstreams {
		t.Run(up.name, func(t *testing.T) {
			cfg := up.cfg
			cfg.Live.UsageInterval = 100 * time.Millisecond // media: 100 ms of audio every 100 ms
			mock := startMock(t, cfg)
			t.Setenv("APP_A_KEY", keyA)
			entry := "\n  - model_name: gpt-live\n    litellm_params:\n      model: openai/gpt-live-1\n      api_base: " +
				mock.BaseURL() + "\n      api_key: os.environ/RTGATE_TEST_UPSTREAM"
			path := writeConfig(t, "model_list:"+entry+configTail+`
keys:
  - name: app-a
    key: os.environ/APP_A_KEY
    max_budget: 0.001
`)
			logPath := t.TempDir() + "/usage.jsonl"
			g := startAppGateway(t, mock, func(c *Settings) { c.RoutesFile, c.UsageLog = path, logPath })
			id := newWebRTCSession(t, g, keyA)
			var rec *usage.Record
			waitFor(t, "the session over budget to be hung up and booked", func() bool {
				for _, r := range readRecordsSoFar(logPath) {
					if r.Protocol == "live" && r.Outcome == "budget_exceeded" {
						rec = &r
						return true
					}
				}
				return false
			})
			if rec.Unconfirmed || rec.Seconds < 15 {
				t.Fatalf("record %+v: want its final usage confirmed, billed at least 15 s", rec)
			}
			for _, s := range mock.LiveSessions() {
				if s.ID == id && (s.State != "closed" || s.Reason != "close_requested") {
					t.Fatalf("upstream session %s: %s %s, want closed by the hangup", id, s.State, s.Reason)
				}
			}
			before := len(mock.LiveSessions())
			if status, b := createLive(t, g, keyA, ""); status != http.StatusTooManyRequests || !bytes.Contains(b, []byte("budget_exceeded")) {
				t.Fatalf("a create over budget: HTTP %d %s", status, b)
			}
			if len(mock.LiveSessions()) != before {
				t.Fatal("a create over budget reached the upstream")
			}
		})
	}
}

// TestLiveWebRTCHungUpBeforeMetering: a WebRTC session the app hangs up
// through the gateway before the gateway's own sideband could attach (the
// upstream then refuses the attach: 409 session_closed) is billed its 15 s
// floor as an ended call, not marked unmetered: its end is known. mockai's
// slow upgrades (the attach is one) make the hang-up come first.
func TestLiveWebRTCHungUpBeforeMetering(t *testing.T) {
	for _, up := range upstreams {
		t.Run(up.name, func(t *testing.T) {
			cfg := up.cfg
			cfg.UpgradeDelay = 400 * time.Millisecond
			mock := startMock(t, cfg)
			path := liveAppsConfig(t, mock.BaseURL())
			logPath := t.TempDir() + "/usage.jsonl"
			g := startAppGateway(t, mock, func(c *Settings) { c.RoutesFile, c.UsageLog = path, logPath })
			id := newWebRTCSession(t, g, keyA)
			if status, _, b := post(t, g, "/v1/live/sessions/"+id+"/hangup", keyA, "application/json", nil, nil); status != http.StatusOK {
				t.Fatalf("hangup: HTTP %d %s", status, b)
			}
			var rec *usage.Record
			waitFor(t, "the session's record", func() bool {
				for _, r := range readRecordsSoFar(logPath) {
					if r.Protocol == "live" {
						rec = &r
						return true
					}
				}
				return false
			})
			if rec.Unmetered || rec.Outcome != "call_ended" || rec.Seconds != 15 || rec.KeyName != "app-a" {
				t.Fatalf("record %+v: want an ended call billed the 15 s floor, not unmetered", rec)
			}
		})
	}
}
