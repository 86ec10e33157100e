package server

import (
	"bytes"
	"crypto/x509"
	"encoding/json"
	"io"
	"math"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gorilla/websocket"

	"rtgate/mockai"
	"rtgate/server/protocol"
	"rtgate/server/usage"
)

// GPT-Live WebSocket forks, metering from the app's own sideband, and the
// WebRTC floor in the budget, against mockai processes over ws:// and
// wss:// with gorilla clients.

// liveMockaiOver starts a mockai process serving scheme with args.
func liveMockaiOver(t *testing.T, scheme string, args ...string) (*mockaiProcess, *x509.CertPool) {
	t.Helper()
	if scheme == "wss" {
		return tlsMockaiProcess(t, args...)
	}
	return startMockaiProcess(t, args...), nil
}

// mockLive lists a mockai process's Live sessions (GET /mock/live/sessions).
func mockLive(t *testing.T, p *mockaiProcess, roots *x509.CertPool) []mockai.LiveSessionRecord {
	t.Helper()
	root, hc := mockHTTP(p, roots)
	resp, err := hc.Get(root + "/mock/live/sessions")
	if err != nil {
		t.Fatalf("GET mockai live sessions: %v", err)
	}
	defer resp.Body.Close()
	var out []mockai.LiveSessionRecord
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatal(err)
	}
	return out
}

// mockLiveSession is the mockai process's record of session id.
func mockLiveSession(t *testing.T, p *mockaiProcess, roots *x509.CertPool, id string) mockai.LiveSessionRecord {
	t.Helper()
	for _, s := range mockLive(t, p, roots) {
		if s.ID == id {
			return s
		}
	}
	t.Fatalf("mockai has no Live session %s", id)
	return mockai.LiveSessionRecord{}
}

// mockPost sends a POST straight to the mockai process (as an app talking
// to OpenAI without the gateway) and returns the status and body.
func mockPost(t *testing.T, p *mockaiProcess, roots *x509.CertPool, path string, body any) (int, []byte) {
	t.Helper()
	root, hc := mockHTTP(p, roots)
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(http.MethodPost, root+path, rd)
	req.Header.Set("Authorization", "Bearer "+testUpstreamKey)
	req.Header.Set("Content-Type", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", path, err)
	}
	defer resp.Body.Close()
	var out bytes.Buffer
	_, _ = out.ReadFrom(resp.Body)
	return resp.StatusCode, out.Bytes()
}

// webrtcBody is a WebRTC create's body for model.
func webrtcBody(model string, store bool) []byte {
	b, _ := json.Marshal(map[string]any{"session": map[string]any{"model": model, "store": store},
		"transport": map[string]any{"type": "webrtc", "sdp": sdpOffer}})
	return b
}

// refusedWith dials url with key and expects an HTTP refusal of status
// and error code.
func refusedWith(t *testing.T, url, key string, status int, code string) {
	t.Helper()
	c, resp, err := dialer().Dial(url, bearer(key))
	if err == nil {
		c.Close()
		t.Fatalf("%s: upgraded, want HTTP %d %s", url, status, code)
	}
	var body struct {
		Error struct{ Code string } `json:"error"`
	}
	if resp != nil {
		_ = json.NewDecoder(resp.Body).Decode(&body)
	}
	if httpStatus(resp) != status || body.Error.Code != code {
		t.Fatalf("%s: HTTP %d %q, want %d %q", url, httpStatus(resp), body.Error.Code, status, code)
	}
}

// TestLiveForkWebSocket: WS /v1/live/sessions/{id}/fork (and Azure's
// /openai/v1/…) through the gateway to mockai processes over ws:// and
// wss://. The key that made a stored session forks it: its session.start
// (no model) is relayed, the fork runs as a new session upstream with the
// upstream's key, and is metered as a Live session of the forking key
// (seconds, confirmed, $0.05 a minute). Another key is refused 403 before
// the upgrade; a key with `sideband: any` forks a session the gateway never
// saw by naming its group; an unknown session is 404.
func TestLiveForkWebSocket(t *testing.T) {
	for _, up := range []string{"ws", "wss"} {
		t.Run(up, func(t *testing.T) {
			mock, roots := liveMockaiOver(t, up, "-live-usage-interval", "50ms")
			logPath := filepath.Join(t.TempDir(), "usage.jsonl")
			g := startGateway(t, nil, func(c *Settings) {
				c.RoutesFile, c.UsageLog, c.UpstreamRoots = liveAppsConfig(t, mock.baseURL), logPath, roots
			})
			// A stored session made through the gateway by app-a, ended.
			status, _, b := post(t, g, "/v1/live/sessions", keyA, "application/json", webrtcBody("gpt-live", true), nil)
			parent := protocol.LiveSessionID(b)
			if status != http.StatusCreated || parent == "" {
				t.Fatalf("create: HTTP %d %s", status, b)
			}
			if status, _, b := post(t, g, "/v1/live/sessions/"+parent+"/hangup", keyA, "application/json", nil, nil); status != http.StatusOK {
				t.Fatalf("hangup: HTTP %d %s", status, b)
			}
			waitFor(t, "the stored session to close", func() bool { return mockLiveSession(t, mock, roots, parent).State == "closed" })
			// And one the gateway never saw, made and ended upstream.
			status, b = mockPost(t, mock, roots, "/v1/live/sessions", json.RawMessage(webrtcBody("gpt-live-1", true)))
			elsewhere := protocol.LiveSessionID(b)
			if status != http.StatusCreated || elsewhere == "" {
				t.Fatalf("create upstream: HTTP %d %s", status, b)
			}
			if status, b := mockPost(t, mock, roots, "/v1/live/sessions/"+elsewhere+"/hangup", nil); status != http.StatusOK {
				t.Fatalf("hangup upstream: HTTP %d %s", status, b)
			}

			// And a stored WebSocket session app-a ran through the gateway.
			c := g.dialLive(t, keyA)
			send(t, c, liveStart("gpt-live", map[string]any{"store": true}))
			wsParent := read(t, c).str("session", "id")
			appendAudio(t, c, 2*liveSecond)
			untilSeconds(t, c, 2)
			send(t, c, map[string]any{"type": "session.close"})
			readUntil(t, c, "session.closed")
			closeOf(t, c)

			base := "ws://" + g.addr
			refusedWith(t, base+"/v1/live/sessions/"+parent+"/fork", keyB, http.StatusForbidden, "call_not_allowed")
			refusedWith(t, base+"/v1/live/sessions/"+elsewhere+"/fork", keyA, http.StatusForbidden, "call_not_allowed")
			refusedWith(t, base+"/v1/live/sessions/live_nosuch/fork", testMasterKey, http.StatusNotFound, "session_not_found")
			before := len(mockLive(t, mock, roots))

			var forks []string // the forks app-a made
			for _, tc := range []struct {
				url, key, name string
			}{
				{base + "/v1/live/sessions/" + parent + "/fork", keyA, "app-a"},
				{base + "/v1/live/sessions/" + wsParent + "/fork", keyA, "app-a"},
				{base + "/openai/v1/live/sessions/" + elsewhere + "/fork?model=gpt-live", keyOps, "ops"},
			} {
				c := dialWith(t, dialer(), tc.url, bearer(tc.key))
				send(t, c, map[string]any{"type": "session.start", "event_id": "evt_fork", "session": map[string]any{}})
				started := read(t, c)
				id := started.str("session", "id")
				if started.typ() != "session.started" || !strings.HasPrefix(id, "live_") || id == parent ||
					started.str("client_event_id") != "evt_fork" {
					t.Fatalf("%s: first event %v, want a new session started", tc.name, started)
				}
				appendAudio(t, c, liveSecond)
				untilSeconds(t, c, 1)
				send(t, c, map[string]any{"type": "session.close"})
				closed, _ := readUntil(t, c, "session.closed")
				if closed.str("reason") != "close_requested" {
					t.Fatalf("%s: session.closed %v", tc.name, closed)
				}
				if ce := closeOf(t, c); ce.Code != websocket.CloseNormalClosure {
					t.Fatalf("%s: close %v, want 1000", tc.name, ce)
				}
				s := mockLiveSession(t, mock, roots, id)
				if s.ForkedOf == "" || s.Key != testUpstreamKey || s.Transport != "websocket" || s.Model != "gpt-live-1" {
					t.Fatalf("%s: upstream fork %+v, want a WebSocket fork with the upstream's key", tc.name, s)
				}
				if tc.key == keyA {
					forks = append(forks, id)
				}
			}
			if n := len(mockLive(t, mock, roots)); n != before+3 {
				t.Fatalf("upstream has %d sessions, want the %d before and the three forks (refusals reach nothing)", n, before)
			}
			// Each fork is metered as a Live session of the key that forked.
			want := map[string]int{"app-a": 2, "ops": 1}
			waitFor(t, "the forks' records", func() bool {
				got := map[string]int{}
				for _, r := range readRecordsSoFar(logPath) {
					if r.Protocol == "live" && r.Seconds == 1 && r.Outcome != "call_ended" {
						if r.Unconfirmed || r.ModelGroup != "gpt-live" || math.Abs(r.CostUSD-0.05/60) > 1e-12 {
							t.Fatalf("fork record %+v, want 1 s confirmed at $0.05 a minute", r)
						}
						got[r.KeyName]++
					}
				}
				return got["app-a"] == want["app-a"] && got["ops"] == want["ops"]
			})
			// A fork made over WebSocket is its key's: that key may fork
			// it again (here over WebRTC), another may not.
			for _, f := range forks {
				if status, _, b := post(t, g, "/v1/live/sessions/"+f+"/fork", keyB, "application/json", webrtcBody("gpt-live", false), nil); status != http.StatusForbidden {
					t.Fatalf("app-b forking app-a's fork: HTTP %d %s", status, b)
				}
				if status, _, b := post(t, g, "/v1/live/sessions/"+f+"/fork", keyA, "application/json",
					[]byte(`{"transport":{"type":"webrtc","sdp":`+strconvQuote(sdpOffer)+`}}`), nil); status != http.StatusCreated {
					t.Fatalf("app-a forking its own fork: HTTP %d %s", status, b)
				}
			}
		})
	}
}

// strconvQuote is s as a JSON string.
func strconvQuote(s string) string { b, _ := json.Marshal(s); return string(b) }

// liveFloorUSD is the 15 s WebRTC floor at gpt-live-1's $0.05 a minute.
const liveFloorUSD = 15 * 0.05 / 60

// TestLiveWebRTCMeteredFromAppSideband: an upstream that allows one
// sideband per session (mockai -live-max-sidebands 1), ws:// and wss://.
// The gateway's own metering sideband attaches first; the app's sideband
// through the gateway is not refused: the gateway's makes way, and the
// app's meters the session. When the app closes the session from it, the
// record has the seconds of its session.closed (past the 15 s floor: mockai
// runs its media ten times faster than real time), confirmed, not
// unmetered. When the app's sideband leaves first, the gateway's own
// attaches again and books the final usage.
func TestLiveWebRTCMeteredFromAppSideband(t *testing.T) {
	for _, up := range []string{"ws", "wss"} {
		for _, how := range []string{"app closes the session", "app's sideband leaves first"} {
			t.Run(up+"/"+how, func(t *testing.T) {
				mock, roots := liveMockaiOver(t, up, "-live-max-sidebands", "1", "-live-usage-interval", "100ms",
					"-live-media-chunk", "1s")
				logPath := filepath.Join(t.TempDir(), "usage.jsonl")
				g := startGateway(t, nil, func(c *Settings) {
					c.RoutesFile, c.UsageLog, c.UpstreamRoots = liveAppsConfig(t, mock.baseURL), logPath, roots
				})
				id := newWebRTCSession(t, g, keyA)
				waitFor(t, "the gateway's own sideband", func() bool { return meteringSidebands(t, g) == 1 })

				sb := dialWith(t, dialer(), "ws://"+g.addr+"/v1/live/sessions/"+id+"/attach?graceful_close=true", bearer(keyA))
				if e := read(t, sb); e.typ() != "session.started" || e.str("session", "id") != id {
					t.Fatalf("the app's sideband: first event %v", e)
				}
				untilSeconds(t, sb, 20)
				if n := mockLiveSession(t, mock, roots, id).Sidebands; n != 1 {
					t.Fatalf("%d sidebands upstream, want the app's alone", n)
				}
				var final float64
				if how == "app closes the session" {
					send(t, sb, map[string]any{"type": "session.close"})
					closed, _ := readUntil(t, sb, "session.closed")
					final = closed["usage"].(map[string]any)["seconds"].(float64)
					if ce := closeOf(t, sb); ce.Code != websocket.CloseNormalClosure {
						t.Fatalf("the app's sideband closed %v, want 1000", ce)
					}
				} else {
					_ = sb.WriteMessage(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""))
					sb.Close()
					waitFor(t, "the app's sideband record", func() bool {
						for _, r := range readRecordsSoFar(logPath) {
							if r.Protocol == "live" && r.Outcome != "call_ended" {
								return true
							}
						}
						return false
					})
					waitFor(t, "the gateway's own sideband again", func() bool { return meteringSidebands(t, g) == 1 })
					if status, _, b := post(t, g, "/v1/live/sessions/"+id+"/hangup", keyA, "application/json", nil, nil); status != http.StatusOK {
						t.Fatalf("hangup: HTTP %d %s", status, b)
					}
					waitFor(t, "the session to close", func() bool { return mockLiveSession(t, mock, roots, id).State == "closed" })
					final = mockLiveSession(t, mock, roots, id).Seconds
				}
				waitFor(t, "the session's record", func() bool { return len(liveRecords(t, logPath)) == 1 })
				rec := liveRecords(t, logPath)[0]
				if rec.Unmetered || rec.Unconfirmed || rec.KeyName != "app-a" || rec.Seconds != final || final < 20 ||
					math.Abs(rec.CostUSD-final*0.05/60) > 1e-9 {
					t.Fatalf("record %+v: want metered and confirmed, %v s (past the floor), app-a", rec, final)
				}
				t.Logf("record: %v s, %v USD, unmetered %v", rec.Seconds, rec.CostUSD, rec.Unmetered)
			})
		}
	}
}

// TestLiveWebRTCFloorInBudget: a WebRTC session's 15 s floor is booked
// against its key's budget when the session is created, so a key whose
// budget the floor uses up is refused its next create at once (429, the
// floor's spend in the message); and once the metered seconds pass the
// floor, the budget holds the session's cost exactly once (the record's
// cost), not the floor on top; ws:// and wss://.
func TestLiveWebRTCFloorInBudget(t *testing.T) {
	for _, up := range []string{"ws", "wss"} {
		t.Run(up, func(t *testing.T) {
			mock, roots := liveMockaiOver(t, up, "-live-usage-interval", "100ms", "-live-media-chunk", "1s")
			t.Setenv("APP_A_KEY", keyA)
			t.Setenv("APP_B_KEY", keyB)
			path := writeConfig(t, "model_list:\n  - model_name: gpt-live\n    litellm_params:\n      model: openai/gpt-live-1\n      api_base: "+
				mock.baseURL+"\n      api_key: os.environ/RTGATE_TEST_UPSTREAM"+configTail+`
keys:
  - name: app-a
    key: os.environ/APP_A_KEY
    max_budget: 0.01
  - name: app-b
    key: os.environ/APP_B_KEY
    max_budget: 1
`)
			logPath := filepath.Join(t.TempDir(), "usage.jsonl")
			g := startGateway(t, nil, func(c *Settings) { c.RoutesFile, c.UsageLog, c.UpstreamRoots = path, logPath, roots })
			spent := func(key string) float64 {
				for _, k := range g.srv.routes.Load().Keys {
					if k.Name == key {
						return budgetSpent(t, g, key)
					}
				}
				t.Fatalf("no key %s", key)
				return 0
			}

			// The floor takes app-a ($0.01) past its budget at once.
			newWebRTCSession(t, g, keyA)
			if got := spent("app-a"); math.Abs(got-liveFloorUSD) > 1e-12 {
				t.Fatalf("app-a spent %v right after the create, want the floor %v", got, liveFloorUSD)
			}
			status, _, b := post(t, g, "/v1/live/sessions", keyA, "application/json", webrtcBody("gpt-live", false), nil)
			if status != http.StatusTooManyRequests || !bytes.Contains(b, []byte("budget_exceeded")) || !bytes.Contains(b, []byte("$0.0125 spent")) {
				t.Fatalf("a create after the floor: HTTP %d %s, want 429 budget_exceeded with $0.0125 spent", status, b)
			}

			// app-b's session runs past the floor: the budget holds its
			// cost once.
			id := newWebRTCSession(t, g, keyB)
			waitFor(t, "the metered seconds past the floor", func() bool { return spent("app-b") > liveFloorUSD+0.002 })
			if status, _, b := post(t, g, "/v1/live/sessions/"+id+"/hangup", keyB, "application/json", nil, nil); status != http.StatusOK {
				t.Fatalf("hangup: HTTP %d %s", status, b)
			}
			var rec *usage.Record
			waitFor(t, "app-b's record", func() bool {
				for _, r := range liveRecords(t, logPath) {
					if r.KeyName == "app-b" {
						rec = &r
						return true
					}
				}
				return false
			})
			if rec.Seconds <= 15 || rec.Unconfirmed || rec.Unmetered {
				t.Fatalf("app-b's record %+v: want confirmed seconds past the floor", rec)
			}
			if got := spent("app-b"); math.Abs(got-rec.CostUSD) > 1e-9 {
				t.Fatalf("app-b spent %v in the budget, want the record's cost %v once (the floor not on top)", got, rec.CostUSD)
			}
		})
	}
}
