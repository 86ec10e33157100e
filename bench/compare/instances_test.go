package compare

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestCompareInstancesBehindHAProxy runs the multi-instance shape for real:
// three gateway processes behind a real HAProxy, pool off, pool auto and a
// fixed pool of c/N each; every instance takes calls, every call succeeds,
// and nothing is left running.
func TestCompareInstancesBehindHAProxy(t *testing.T) {
	if _, err := exec.LookPath("haproxy"); err != nil {
		t.Fatalf("haproxy is not installed (apt-get install -y haproxy; .ci/run does it): %v", err)
	}
	cfg := tinyConfig(t, LegPoolOff, LegPoolOn)
	cfg.GatewayBin = requireBinary(t, "gateway")
	cfg.Instances, cfg.N, cfg.Concurrency, cfg.Runs = 3, 30, 6, 1
	out, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, leg := range out.Legs {
		ids = append(ids, leg.ID)
		if leg.Combined.OK != cfg.N {
			t.Errorf("%s: %d of %d calls succeeded", leg.ID, leg.Combined.OK, cfg.N)
		}
		if leg.ID == LegPoolOff {
			continue
		}
		if len(leg.InstanceHitRates) != cfg.Instances {
			t.Fatalf("%s: %d per-instance hit rates, want %d", leg.ID, len(leg.InstanceHitRates), cfg.Instances)
		}
		for i, r := range leg.InstanceHitRates {
			if r == nil {
				t.Errorf("%s: instance %d took no calls (HAProxy did not spread them)", leg.ID, i+1)
			}
		}
	}
	if strings.Join(ids, ",") != "pool-off,pool-on,pool-fixed" {
		t.Fatalf("legs %v, want pool-off, pool-on, pool-fixed", ids)
	}
	if table := out.Comparison.Markdown(); !strings.Contains(table, "Gateway pool on (fixed c/N)") {
		t.Errorf("the table lacks the fixed-pool leg:\n%s", table)
	}
	if md := out.InstancesMarkdown(); strings.Count(md, "\n") != 4 || strings.Contains(md, "pool off") {
		t.Errorf("per-instance hit rates:\n%s", md)
	}
	if pids := runningChildren(t, cfg.GatewayBin); len(pids) > 0 {
		t.Errorf("gateways still running: %v", pids)
	}
	if pids := ownHAProxies(t); len(pids) > 0 {
		t.Errorf("haproxy still running: %v", pids)
	}
}

// ownHAProxies lists haproxy processes whose parent is this test process
// (other tests and other users may run their own).
func ownHAProxies(t *testing.T) []int {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...
		end := strings.LastIndexByte(string(stat), ')')
		fields := strings.Fields(string(stat)[end+1:])
		if len(fields) > 1 && fields[1] == strconv.Itoa(os.Getpid()) && strings.Contains(string(stat[:end]), "haproxy") {
			pids = append(pids, pid)
		}
	}
	return pids
}

func TestHAProxyConfigBalancesByFewestConnections(t *testing.T) {
	cfg := haproxyConfig("127.0.0.1:1", nil)
	for _, want := range []string{"mode tcp", "balance leastconn", "uri /health", "bind 127.0.0.1:1"} {
		if !strings.Contains(cfg, want) {
			t.Errorf("config lacks %q:\n%s", want, cfg)
		}
	}
}
