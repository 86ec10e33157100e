package server

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"rtgate/mockai"
)

// setFirstAudioDelay turns mockai's run-time knob (POST /mock/config).
func setFirstAudioDelay(t *testing.T, m *mockai.Server, roots *x509.CertPool, d time.Duration) {
	t.Helper()
	base := strings.Replace(strings.Replace(m.BaseURL(), "wss://", "https://", 1), "ws://", "http://", 1)
	base = strings.TrimSuffix(base, "/v1")
	c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}}}
	resp, err := c.Post(base+"/mock/config?first_audio_delay="+d.String(), "", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("POST /mock/config: %s", resp.Status)
	}
}

// TestLatencyBasedRouting: two deployments, one answering with its first
// audio after 20 ms, the other after 300 ms. With latency-based routing
// most sessions go to the faster one; when the two swap speeds (mockai's
// run-time knob), traffic moves to the one that is now faster. Plain and
// TLS upstreams.
func TestLatencyBasedRouting(t *testing.T) {
	const fast, slow = 20 * time.Millisecond, 300 * time.Millisecond
	poolSchemes(t, func(t *testing.T, tlsUp bool) {
		p := twoDeployments(t, tlsUp, mockai.Config{FirstAudioDelay: fast}, mockai.Config{FirstAudioDelay: slow},
			"{max_latency_list_size: 3, lowest_latency_buffer: 0.5}", nil)
		g, a, b, roots := p.g, p.a, p.b, p.roots
		// sessions runs n one-turn sessions, one after another, and
		// returns how many of the last `last` went to a.
		sessions := func(n, last int) int {
			onA := 0
			for i := range n {
				before := a.Stats().Sessions
				c := g.dial(t, "model=gpt-realtime", bearer(testMasterKey))
				readUntil(t, c, "session.created")
				send(t, c, map[string]any{"type": "response.create"})
				readUntil(t, c, "response.done")
				if i >= n-last && a.Stats().Sessions > before {
					onA++
				}
				_ = c.Close()
				waitFor(t, "the session to end", func() bool { return g.srv.SessionsOpen() == 0 })
			}
			return onA
		}
		before := sessions(30, 30)
		t.Logf("before the swap: %d of 30 sessions (%.0f%%) on the faster deployment", before, 100*float64(before)/30)
		if before < 22 {
			t.Fatalf("%d of 30 sessions on the faster deployment, want most (at least 22)", before)
		}
		setFirstAudioDelay(t, a, roots, slow)
		setFirstAudioDelay(t, b, roots, fast)
		after := 20 - sessions(40, 20)
		t.Logf("after the swap: %d of the last 20 of 40 sessions (%.0f%%) on the now faster deployment", after, 100*float64(after)/20)
		if after < 14 {
			t.Fatalf("after the swap, %d of the last 20 sessions on the deployment now faster, want at least 14", after)
		}
		// The status page's first-audio columns: every turn, on both.
		var status struct {
			Deployments []struct {
				Name  string   `json:"name"`
				P50   *float64 `json:"first_audio_ms_p50_5m"`
				P95   *float64 `json:"first_audio_ms_p95_5m"`
				Turns int      `json:"turns_5m"`
			} `json:"deployments"`
		}
		if err := json.Unmarshal([]byte(httpGet(t, "http://"+g.serveAdmin(t)+"/status.json", nil)), &status); err != nil {
			t.Fatal(err)
		}
		turns := 0
		for _, d := range status.Deployments {
			if d.P50 == nil || d.P95 == nil || *d.P50 < float64(fast.Milliseconds()) || *d.P95 < *d.P50 {
				t.Errorf("status.json deployment %s: p50 %v p95 %v", d.Name, d.P50, d.P95)
			}
			turns += d.Turns
		}
		if len(status.Deployments) != 2 || turns != 70 {
			t.Errorf("status.json: %d deployments, %d turns in 5 minutes, want 2 and 70", len(status.Deployments), turns)
		}
	})
}
