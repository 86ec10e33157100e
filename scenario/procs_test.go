package scenario

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"rtgate/bench/harness"
	"rtgate/bench/proc"
)

// The keys of every scenario: clients present clientKey, the gateway sends
// upstreamKey to mockai.
const (
	clientKey   = "sk-scenario"
	upstreamKey = "sk-scenario-upstream"
)

// upstreams are the two ways mockai serves the gateway: plain ws:// and
// wss:// (mockai -tls, trusted through UPSTREAM_CA_FILE), OpenAI's way.
var upstreams = []proc.Upstream{proc.UpstreamPlain, proc.UpstreamTLS}

// overBoth runs f as a subtest per upstream, named "ws" and "wss".
func overBoth(t *testing.T, f func(t *testing.T, up proc.Upstream)) {
	for _, up := range upstreams {
		t.Run(up.Scheme(), func(t *testing.T) { f(t, up) })
	}
}

// startMockai runs bin/mockai with args over up, stopped by PID when the
// test ends (its log's tail shown if the test failed).
func startMockai(t *testing.T, up proc.Upstream, args ...string) *proc.Mockai {
	t.Helper()
	m, err := proc.StartMockai(context.Background(), filepath.Join(binDir, "mockai"), up, args, t.TempDir(), 10*time.Second)
	if err != nil {
		t.Fatalf("start mockai: %v", err)
	}
	t.Cleanup(func() { stopProc(t, m.Proc) })
	return m
}

// startGateway runs bin/gateway in front of mock on free loopback ports,
// with the scenario keys, LOG_LEVEL=warn and settings on top, and returns
// once its /health answers 200. It is stopped by PID when the test ends,
// with no drain grace (nobody is left to warn: the load is over).
func startGateway(t *testing.T, mock *proc.Mockai, settings map[string]string) *proc.Gateway {
	t.Helper()
	set := proc.GatewaySettings(mock, upstreamKey, clientKey, "warn")
	set["DRAIN_GRACE_SECS"], set["DRAIN_TIMEOUT"] = "0", "5"
	maps.Copy(set, settings)
	g, err := proc.StartGateway(context.Background(), filepath.Join(binDir, "gateway"), nil, set,
		filepath.Join(t.TempDir(), "gateway.log"))
	if err != nil {
		t.Fatalf("start gateway: %v", err)
	}
	t.Cleanup(func() { stopProc(t, g.Proc) })
	return g
}

// stopProc stops p by its PID; a panic or race report in its log fails the
// test, and a failed test shows the log's last lines.
func stopProc(t *testing.T, p *proc.Proc) {
	_ = p.Stop(5 * time.Second)
	if problems, _ := proc.LogProblems(p.LogPath(), 5); len(problems) > 0 {
		t.Errorf("%s (pid %d) broke: %v", p.Name(), p.PID(), problems)
	}
	if t.Failed() {
		t.Logf("%s (pid %d), last lines of its log:\n%s", p.Name(), p.PID(), proc.Tail(p.LogPath(), 20))
	}
}

// scrape reads the gateway's /metrics.
func scrape(g *proc.Gateway) (harness.Metrics, error) {
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(g.MetricsURL())
	if err != nil {
		return nil, fmt.Errorf("gateway metrics: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("gateway metrics: %s", resp.Status)
	}
	return harness.ParseMetrics(resp.Body)
}

// counter is the sum of a counter's series (0 while it has none).
func counter(m harness.Metrics, name string) float64 {
	v, _ := m.Sum(name)
	return v
}

// mockStats reads mockai's counters.
func mockStats(t *testing.T, m *proc.Mockai) proc.MockStats {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := m.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return st
}
