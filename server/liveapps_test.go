package server

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"math"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"rtgate/mockai"
	"rtgate/server/usage"
)

// liveAppsConfig is a routes file with the Live alias group gpt-live
// (openai/gpt-live-1 on base), a Realtime group, and keys app-a, app-b and
// ops (sideband: any).
func liveAppsConfig(t testing.TB, base string) string {
	t.Helper()
	t.Setenv("APP_A_KEY", keyA)
	t.Setenv("APP_B_KEY", keyB)
	t.Setenv("OPS_KEY", keyOps)
	entry := func(group, model string) string {
		return "\n  - model_name: " + group + "\n    litellm_params:\n      model: openai/" + model +
			"\n      api_base: " + base + "\n      api_key: os.environ/RTGATE_TEST_UPSTREAM"
	}
	return writeConfig(t, "model_list:"+entry("gpt-realtime", "gpt-realtime")+entry("gpt-live", "gpt-live-1")+configTail+appKeys)
}

// mockHTTP is a mockai process's http(s) root, and a client trusting it.
func mockHTTP(p *mockaiProcess, roots *x509.CertPool) (string, *http.Client) {
	u := strings.Replace(strings.Replace(p.baseURL, "wss://", "https://", 1), "ws://", "http://", 1)
	return strings.TrimSuffix(u, "/v1"), &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}}, Timeout: 5 * time.Second}
}

// TestNodeSDKLiveApps: the official SDK's GPT-Live WebRTC surface through
// the gateway (TLS to the client) to a mockai process over ws:// and wss://:
// client.live.create routed by the alias group and rewritten to the
// deployment's model, SidebandWS through the gateway (session.started,
// reflected audio, session.close, graceful close 1000), the recording
// streamed, a fork (POST, and ForksWS over WebSocket), and an inbound SIP call the gateway never saw accepted
// by its model, then referred and hung up. The gateway's own sideband
// metered each session: records of protocol live, at least the 15 s floor,
// priced at $0.05 a minute.
func TestNodeSDKLiveApps(t *testing.T) {
	for _, up := range []string{"ws", "wss"} {
		t.Run(up, func(t *testing.T) {
			mock, roots := mockaiOver(t, up)
			hooks, hc := mockHTTP(mock, roots)
			logPath := filepath.Join(t.TempDir(), "usage.jsonl")
			lc := newListenerCert(t)
			g := startGateway(t, nil, func(c *Settings) {
				c.RoutesFile, c.UsageLog = liveAppsConfig(t, mock.baseURL), logPath
				c.UpstreamRoots = roots
				c.TLSCert, c.TLSKey = lc.certFile, lc.keyFile
			})
			resp, err := hc.Post(hooks+"/mock/live/incoming", "application/json", nil)
			if err != nil {
				t.Fatal(err)
			}
			var incoming struct{ ID string }
			_ = json.NewDecoder(resp.Body).Decode(&incoming)
			resp.Body.Close()

			out := runNode(t, "liveapps.mjs", "GATEWAY_BASE=https://"+g.addr+"/v1", "GATEWAY_KEY="+testMasterKey,
				"NODE_EXTRA_CA_CERTS="+lc.certFile, "SDP_OFFER="+sdpOffer, "SIP_CALL="+incoming.ID)
			var got struct {
				WebRTC struct {
					ID           string `json:"id"`
					AnswerStarts string `json:"answer_starts"`
				} `json:"webrtc"`
				SidebandPath    string `json:"sideband_path"`
				SidebandStarted string `json:"sideband_started"`
				Reflected       bool
				Closed          struct {
					Reason  string
					Seconds float64
				}
				SidebandClose int `json:"sideband_close"`
				Recording     struct {
					Type  string
					Bytes int
				}
				Fork struct {
					IDPrefix     string `json:"id_prefix"`
					AnswerStarts string `json:"answer_starts"`
				}
				WSFork struct {
					IDPrefix string `json:"id_prefix"`
					Distinct bool
					Closed   string
				} `json:"ws_fork"`
				SIPOK bool `json:"sip_ok"`
				Error string
			}
			if err := json.Unmarshal(out, &got); err != nil {
				t.Fatalf("liveapps.mjs printed %q: %v", out, err)
			}
			id := got.WebRTC.ID
			switch {
			case got.Error != "":
				t.Fatalf("the SDK failed: %s", got.Error)
			case !strings.HasPrefix(id, "live_") || got.WebRTC.AnswerStarts != "v=0\r\n":
				t.Fatalf("live.create: %s", out)
			case got.SidebandPath != "/v1/live/sessions/"+id+"/attach" || got.SidebandStarted != id || !got.Reflected ||
				got.Closed.Reason != "close_requested" || got.SidebandClose != 1000:
				t.Fatalf("SidebandWS through the gateway: %s", out)
			case got.Recording.Type != "audio/wav" || got.Recording.Bytes <= 44:
				t.Fatalf("downloadRecording: %s", out)
			case got.Fork.IDPrefix != "live_" || got.Fork.AnswerStarts != "v=0\r\n" || !got.SIPOK:
				t.Fatalf("fork or SIP: %s", out)
			case got.WSFork.IDPrefix != "live_" || !got.WSFork.Distinct || got.WSFork.Closed != "close_requested":
				t.Fatalf("ForksWS through the gateway: %s", out)
			}

			// Upstream: the alias rewritten to the deployment's model, the
			// SIP call accepted and controlled through the gateway.
			resp, err = hc.Get(hooks + "/mock/live/sessions")
			if err != nil {
				t.Fatal(err)
			}
			var sessions []mockai.LiveSessionRecord
			_ = json.NewDecoder(resp.Body).Decode(&sessions)
			resp.Body.Close()
			for _, s := range sessions {
				if s.ID == id && (s.Model != "gpt-live-1" || s.Key != testUpstreamKey) {
					t.Fatalf("upstream session %s: model %q, the upstream key %v", id, s.Model, s.Key == testUpstreamKey)
				}
				if s.ID == incoming.ID && strings.Join(s.Actions, ",") != "accept,refer,hangup" {
					t.Fatalf("SIP call actions upstream: %v", s.Actions)
				}
			}

			// The gateway's own metering: one record per session it made
			// or accepted (create, fork, SIP call), each billed at least
			// 15 s; the WebRTC one its closed seconds.
			waitFor(t, "three metered Live sessions", func() bool { return len(liveRecords(t, logPath)) >= 3 })
			recs := liveRecords(t, logPath)
			var rtc *usage.Record
			for i := range recs {
				r := &recs[i]
				if r.Seconds < 15 || r.KeyName != "master" || r.ModelGroup != "gpt-live" || r.Unmetered {
					t.Fatalf("metered record %+v: want the key, the group, at least 15 s", r)
				}
				if want := r.Seconds * 0.05 / 60; math.Abs(r.CostUSD-want) > 1e-9 {
					t.Fatalf("record cost %v, want %v for %v s", r.CostUSD, want, r.Seconds)
				}
				if r.Outcome == "call_ended" && math.Abs(r.Seconds-math.Max(got.Closed.Seconds, 15)) < 1e-9 {
					rtc = r
				}
			}
			if rtc == nil {
				t.Fatalf("no record bills the WebRTC session's %v s (floor 15): %+v", got.Closed.Seconds, recs)
			}
		})
	}
}

// liveRecords reads the metered Live session records in USAGE_LOG so far.
func liveRecords(t *testing.T, path string) []usage.Record {
	t.Helper()
	var out []usage.Record
	for _, r := range readRecordsSoFar(path) {
		if r.Protocol == "live" && r.Outcome == "call_ended" {
			out = append(out, r)
		}
	}
	return out
}
