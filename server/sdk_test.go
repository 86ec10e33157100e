package server

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"rtgate/mockai"
	"rtgate/server/usage"
)

// The official SDK and a real browser against the gateway, with mockai as a
// separate process (-tls: a wss:// upstream). CI installs node, npm and
// Debian's chromium (.ci/run); the tests install the SDK themselves.

var nodeModules struct {
	once sync.Once
	err  error
}

// ensureNodeModules installs server/testdata/node's locked dependencies
// when they are missing.
func ensureNodeModules(t *testing.T) string {
	t.Helper()
	dir, _ := filepath.Abs(filepath.Join("testdata", "node"))
	nodeModules.once.Do(func() {
		if _, err := os.Stat(filepath.Join(dir, "node_modules", "@openai", "agents-realtime", "package.json")); err == nil {
			return
		}
		npm, err := exec.LookPath("npm")
		if err != nil {
			nodeModules.err = fmt.Errorf("npm is not installed (apt-get install -y nodejs npm): %w", err)
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, npm, "ci", "--no-audit", "--no-fund")
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			nodeModules.err = fmt.Errorf("npm ci in %s: %w\n%s", dir, err, out)
		}
	})
	if nodeModules.err != nil {
		t.Fatal(nodeModules.err)
	}
	return dir
}

// tlsMockaiProcess starts mockai -tls as a process and returns it with a
// pool trusting its certificate; args are more mockai flags.
func tlsMockaiProcess(t testing.TB, args ...string) (*mockaiProcess, *x509.CertPool) {
	t.Helper()
	certFile := filepath.Join(t.TempDir(), "mockai.pem")
	p := startMockaiProcess(t, append([]string{"-tls", "-cert-out", certFile}, args...)...)
	pem, err := os.ReadFile(certFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	return p, pool
}

// mockEvents reads the client events a mockai process received.
func mockEvents(t *testing.T, p *mockaiProcess, roots *x509.CertPool) []mockai.EventRecord {
	t.Helper()
	u := strings.Replace(strings.Replace(p.baseURL, "wss://", "https://", 1), "ws://", "http://", 1)
	u = strings.TrimSuffix(u, "/v1") + "/mock/events"
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}}, Timeout: 5 * time.Second}
	resp, err := hc.Get(u)
	if err != nil {
		t.Fatalf("GET mockai events: %v", err)
	}
	defer resp.Body.Close()
	var evs []mockai.EventRecord
	if err := json.NewDecoder(resp.Body).Decode(&evs); err != nil {
		t.Fatal(err)
	}
	return evs
}

// TestNodeSDK: the official openai package unchanged against the gateway's
// base URL (TLS, since the SDK only dials wss://): clientSecrets.create mints,
// OpenAIRealtimeWebSocket connects with the ek_ key and sees a configured
// session.created, asks for a response and closes after three of its audio
// deltas, and is billed that response (the cancelled response.done's usage:
// the walked-away response of estimateFlights); calls.create({sdp}) gets 201,
// the answer and Location.
func TestNodeSDK(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatal("node is not installed (apt-get install -y nodejs npm)")
	}
	dir := ensureNodeModules(t)
	mock, roots := tlsMockaiProcess(t, "-deltas", "50", "-delta-interval", "20ms") // a response of a second
	lc := newListenerCert(t)
	logPath := filepath.Join(t.TempDir(), "usage.jsonl")
	g := startGateway(t, nil, func(c *Settings) {
		c.APIBase, _ = ParseAPIBase(mock.baseURL)
		c.UpstreamRoots = roots
		c.TLSCert, c.TLSKey = lc.certFile, lc.keyFile
		c.UsageLog = logPath
	})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "sdk.mjs")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GATEWAY_BASE=https://"+g.addr+"/v1", "GATEWAY_KEY="+testMasterKey,
		"NODE_EXTRA_CA_CERTS="+lc.certFile, "SDP_OFFER="+sdpOffer)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("node sdk.mjs: %v", err)
	}
	var got struct {
		SecretIsEK          bool    `json:"secret_is_ek"`
		ExpiresIn           float64 `json:"expires_in"`
		SessionInstructions string  `json:"session_instructions"`
		RealtimeURLScheme   string  `json:"realtime_url_scheme"`
		FirstEvent          string  `json:"first_event"`
		FirstInstructions   string  `json:"first_instructions"`
		DeltasBeforeClose   int     `json:"deltas_before_close"`
		CallStatus          int     `json:"call_status"`
		CallLocation        string  `json:"call_location"`
		CallAnswerStarts    string  `json:"call_answer_starts"`
		Error               string  `json:"error"`
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("sdk.mjs printed %q: %v", out, err)
	}
	switch {
	case got.Error != "":
		t.Fatalf("the SDK failed: %s", got.Error)
	case !got.SecretIsEK || got.ExpiresIn < 110 || got.ExpiresIn > 121 || got.SessionInstructions != "From the SDK.":
		t.Fatalf("clientSecrets.create: %+v", got)
	case got.RealtimeURLScheme != "wss:" || got.FirstEvent != "session.created" || got.FirstInstructions != "From the SDK.":
		t.Fatalf("OpenAIRealtimeWebSocket: %+v", got)
	case got.CallStatus != 201 || !strings.HasPrefix(got.CallLocation, "/v1/realtime/calls/rtc_") || got.CallAnswerStarts != "v=0\r\n":
		t.Fatalf("calls.create: %+v", got)
	}
	evs := mockEvents(t, mock, roots)
	if len(evs) == 0 || evs[0].Type != "session.update" || !strings.Contains(string(evs[0].Event), "From the SDK.") {
		t.Fatalf("the upstream did not get the secret's config first: %+v", evs)
	}
	// The walked-away response: cancelled upstream and billed from its
	// cancelled response.done (mockai: 10 output audio tokens a delta
	// sent), confirmed, not estimated.
	var rec *usage.Record
	waitFor(t, "the SDK session's record", func() bool {
		for _, r := range readRecordsSoFar(logPath) {
			if r.Protocol != "live" && r.Usage.Responses > 0 {
				rec = &r
				return true
			}
		}
		return false
	})
	if got.DeltasBeforeClose != 3 || rec.Usage.Responses != 1 || rec.Unconfirmed || rec.Estimated != nil ||
		rec.Usage.OutputTokenDetails.AudioTokens < 30 || rec.Usage.OutputTokenDetails.AudioTokens >= 500 || rec.CostUSD == 0 {
		t.Fatalf("the SDK session's record (after %d deltas): %d responses, %d output audio tokens, cost %v, unconfirmed %v; "+
			"want the walked-away response billed from its cancelled response.done", got.DeltasBeforeClose, rec.Usage.Responses,
			rec.Usage.OutputTokenDetails.AudioTokens, rec.CostUSD, rec.Unconfirmed)
	}
}

// TestLiveNodeSDK: the official SDK's LiveWS unchanged against the gateway,
// over plain ws:// (gateway and mockai) and over TLS (the gateway's
// listener and a mockai -tls upstream): testdata/node/live.mjs. A session
// routed by its session.start reaches mockai with the upstream key, audio
// and a delegated response come back, session.close gets session.closed and
// close 1000, and the usage record holds the seconds, the backend tokens
// and their cost; the upstream's strict-config error and the gateway's
// model_not_found refusal reach the SDK as error events.
func TestLiveNodeSDK(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatal("node is not installed (apt-get install -y nodejs npm)")
	}
	dir := ensureNodeModules(t)
	for _, tlsOn := range []bool{false, true} {
		name := "ws"
		if tlsOn {
			name = "wss"
		}
		t.Run(name, func(t *testing.T) {
			logPath := filepath.Join(t.TempDir(), "usage.jsonl")
			var mock *mockaiProcess
			var roots *x509.CertPool
			var lc listenerCert
			if tlsOn {
				mock, roots = tlsMockaiProcess(t)
				lc = newListenerCert(t)
			} else {
				mock = startMockaiProcess(t)
			}
			g := startGateway(t, nil, func(c *Settings) {
				c.APIBase, _ = ParseAPIBase(mock.baseURL)
				c.UpstreamRoots = roots
				c.UsageLog = logPath
				if tlsOn {
					c.TLSCert, c.TLSKey = lc.certFile, lc.keyFile
				}
			})
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, node, "live.mjs")
			cmd.Dir = dir
			base := "http://" + g.addr + "/v1"
			cmd.Env = append(os.Environ(), "GATEWAY_KEY="+testMasterKey)
			if tlsOn {
				base = "https://" + g.addr + "/v1"
				cmd.Env = append(cmd.Env, "NODE_EXTRA_CA_CERTS="+lc.certFile)
			}
			cmd.Env = append(cmd.Env, "GATEWAY_BASE="+base)
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("node live.mjs: %v (%s)", err, out)
			}
			var got struct {
				LiveURL            string `json:"live_url"`
				SessionID          string `json:"session_id"`
				Model              string `json:"model"`
				ClientEventID      string `json:"client_event_id"`
				OutputAudioBytes   int    `json:"output_audio_bytes"`
				BackendTotalTokens int    `json:"backend_total_tokens"`
				Closed             struct {
					Reason  string  `json:"reason"`
					Seconds float64 `json:"seconds"`
				} `json:"closed"`
				LiveClose int `json:"live_close"`
				Strict    struct {
					Code  string `json:"code"`
					Param string `json:"param"`
				} `json:"strict"`
				Unknown struct {
					Code  string `json:"code"`
					Close int    `json:"close"`
				} `json:"unknown"`
				Error string `json:"error"`
			}
			if err := json.Unmarshal(out, &got); err != nil {
				t.Fatalf("live.mjs printed %q: %v", out, err)
			}
			scheme := map[bool]string{false: "ws://", true: "wss://"}[tlsOn]
			switch {
			case got.Error != "":
				t.Fatalf("the SDK failed: %s", got.Error)
			case got.LiveURL != scheme+"HOST/v1/live/sessions" || !strings.HasPrefix(got.SessionID, "live_") ||
				got.Model != "gpt-live-1" || got.ClientEventID != "evt_sdk":
				t.Fatalf("LiveWS session.started: %+v", got)
			case got.OutputAudioBytes == 0 || got.BackendTotalTokens != 150:
				t.Fatalf("audio and response.event: %+v", got)
			case got.Closed.Reason != "close_requested" || got.Closed.Seconds != 0.1 || got.LiveClose != 1000:
				t.Fatalf("session.close: %+v", got)
			case got.Strict.Code != "unknown_parameter" || got.Strict.Param != "session.voice":
				t.Fatalf("strict config: %+v", got.Strict)
			case got.Unknown.Code != "model_not_found" || got.Unknown.Close != 1008:
				t.Fatalf("unknown model: %+v", got.Unknown)
			}
			// Three sessions: the metered one, the strict-config one (no
			// seconds), the refused one (no upstream).
			recs := waitRecords(t, logPath, 3)
			var metered *usage.Record
			for i := range recs {
				if recs[i].Seconds > 0 {
					metered = &recs[i]
				}
			}
			// 0.1 s at $0.05 a minute; 120 backend input tokens (20
			// cached) and 30 output at gpt-realtime-mini's text prices
			// ($0.60, $0.06, $2.40 a million).
			want := 0.1*0.05/60 + 100*0.60e-6 + 20*0.06e-6 + 30*2.40e-6
			if metered == nil || metered.Protocol != "live" || metered.Unconfirmed || metered.Usage.TotalTokens != 150 ||
				math.Abs(metered.CostUSD-want) > 1e-12 {
				t.Fatalf("records %+v, want a confirmed live record of 0.1 s and 150 backend tokens costing %v", recs, want)
			}
			t.Logf("the SDK's session: %v s, %d backend tokens, %v USD", metered.Seconds, metered.Usage.TotalTokens, metered.CostUSD)
		})
	}
}
