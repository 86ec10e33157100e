package main

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"rtgate/bench/proc"
)

// startHAProxy runs a real HAProxy in TCP mode on a free port in front of
// the given backend ports, health-checking each on /health every 200 ms, as
// deploy/haproxy.cfg does (with faster checks). It fails the test if haproxy
// is not installed (.ci/run installs it).
func startHAProxy(t *testing.T, backends []int) string {
	t.Helper()
	bin, err := exec.LookPath("haproxy")
	if err != nil {
		t.Fatalf("haproxy is not installed (apt-get install -y haproxy; .ci/run does it): %v", err)
	}
	port := freePort(t)
	h := proc.HAProxyTCP{Bind: "127.0.0.1:" + strconv.Itoa(port), ConnectTimeout: 2 * time.Second,
		IdleTimeout: 60 * time.Second, CheckEvery: 200 * time.Millisecond, Fall: 1, Rise: 2}
	for _, p := range backends {
		h.Servers = append(h.Servers, "127.0.0.1:"+strconv.Itoa(p))
	}
	cfg := h.Config()
	dir := t.TempDir()
	file := filepath.Join(dir, "haproxy.cfg")
	if err := os.WriteFile(file, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	logf, _ := os.Create(filepath.Join(dir, "haproxy.log"))
	cmd := exec.Command(bin, "-db", "-f", file)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		logf.Close()
		if t.Failed() {
			b, _ := os.ReadFile(logf.Name())
			t.Logf("haproxy log:\n%s", b)
		}
	})
	addr := "127.0.0.1:" + strconv.Itoa(port)
	deadline := time.Now().Add(10 * time.Second)
	for {
		if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			_ = c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("haproxy did not start listening")
		}
		time.Sleep(20 * time.Millisecond)
	}
	return addr
}

// TestRollingRestartBehindHAProxy: three gateway processes behind HAProxy
// under a steady load, each with an auto pool that remembers its demand in
// its own REALTIME_POOL_STATE; each is restarted in turn (SIGTERM, wait for
// it to drain and exit, start a new one on its port). HAProxy sees /health
// turn 503 during the grace and stops sending it clients; the calls it has
// finish. The new process starts from the demand its predecessor wrote at
// drain, reports 503 warming until its pool is full, and HAProxy sends it
// no client before that. No call may fail.
//
// The load is 6 concurrent callers; ROLLING_WORKERS=n sets another number,
// for the benchmark figure (per-instance pool hit rates under real load):
//
//	ROLLING_WORKERS=300 go test -v -count=1 -run TestRollingRestartBehindHAProxy ./cmd/gateway/
func TestRollingRestartBehindHAProxy(t *testing.T) {
	workers := 6
	if v := os.Getenv("ROLLING_WORKERS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 2000 {
			t.Fatalf("ROLLING_WORKERS=%q: want 1 to 2000", v)
		}
		workers = n
	}
	up := startMockai(t)
	state := t.TempDir()
	ports := []int{freePort(t), freePort(t), freePort(t)}
	env := func(i int) []string {
		return []string{"DRAIN_GRACE_SECS=1", "DRAIN_TIMEOUT=20", "REALTIME_POOL_SIZE=auto", "REALTIME_POOL_MIN=1",
			"REALTIME_POOL_STATE=" + filepath.Join(state, "pool-"+strconv.Itoa(i)+".json"), "POOL_WARMUP_SECS=5"}
	}
	gs := make([]*gatewayProc, 3)
	for i, p := range ports {
		gs[i] = startGatewayProc(t, up, p, env(i)...)
	}
	lb := startHAProxy(t, ports)
	time.Sleep(600 * time.Millisecond) // rise 2 at 200 ms
	load := startLoad(func() string { return lb }, workers, 20000)
	time.Sleep(500 * time.Millisecond)
	for i := range gs {
		if err := gs[i].cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		select {
		case <-gs[i].exited:
			if gs[i].err != nil {
				t.Fatalf("instance %d exited with %v", i, gs[i].err)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("instance %d did not exit", i)
		}
		gs[i] = startGatewayProc(t, up, ports[i], env(i)...) // returns once /health is 200: warm
		if gs[i].logCount("starting from remembered demand") != 1 {
			t.Fatalf("restarted instance %d did not start from the demand its predecessor wrote at drain", i)
		}
		if n := gs[i].metrics(t)["rtgate_sessions_total"]; n != 0 {
			t.Fatalf("restarted instance %d had %v sessions before it reported ready: HAProxy sent clients while it warmed", i, n)
		}
		time.Sleep(600 * time.Millisecond) // back in HAProxy's rotation before the next restart
		ok, failed := load.counts()
		t.Logf("instance %d restarted: %d calls so far, %d failed", i, ok, failed)
	}
	ok, failures := load.finish()
	if len(failures) > 0 || ok == 0 {
		t.Fatalf("%d calls, %d failed: %v", ok, len(failures), failures[:min(len(failures), 10)])
	}
	for i, g := range gs {
		m := g.metrics(t)
		if m["rtgate_sessions_total"] == 0 {
			t.Fatalf("the restarted instance %d took no calls: HAProxy did not bring it back", i)
		}
		hits, misses := m["rtgate_pool_hits_total"], m["rtgate_pool_misses_total"]
		t.Logf("restarted instance %d: %v sessions, pool hit rate %.0f%% (%v hits, %v misses)", i,
			m["rtgate_sessions_total"], 100*hits/max(1, hits+misses), hits, misses)
	}
	t.Logf("%d calls through HAProxy over a rolling restart of 3 instances, 0 failed", ok)
}
