package server

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"rtgate/mockai"
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
func tlsMockaiProcess(t *testing.T, args ...string) (*mockaiProcess, *x509.CertPool) {
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
// session.created, calls.create({sdp}) gets 201, the answer and Location.
func TestNodeSDK(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatal("node is not installed (apt-get install -y nodejs npm)")
	}
	dir := ensureNodeModules(t)
	mock, roots := tlsMockaiProcess(t)
	lc := newListenerCert(t)
	g := startGateway(t, nil, func(c *Settings) {
		c.APIBase, _ = ParseAPIBase(mock.baseURL)
		c.UpstreamRoots = roots
		c.TLSCert, c.TLSKey = lc.certFile, lc.keyFile
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
}
