package main

import (
	"context"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gorilla/websocket"
)

// TestReusePortTwoProcessesShareAPort: two gateway processes with REUSEPORT=1
// on one port both take sessions (the kernel spreads connects), each with
// its own admin port.
func TestReusePortTwoProcessesShareAPort(t *testing.T) {
	up := startMockai(t)
	port := freePort(t)
	a := startGatewayProc(t, up, port, "REUSEPORT=1")
	b := startGatewayProc(t, up, port, "REUSEPORT=true")
	var live []*websocket.Conn
	defer func() {
		for _, c := range live {
			_ = c.Close()
		}
	}()
	const n = 60
	for i := range n {
		r := connect(context.Background(), a.addr())
		if r.conn == nil {
			t.Fatalf("session %d: %d %q %v", i, r.status, r.code, r.err)
		}
		live = append(live, r.conn)
	}
	sa, sb := a.metrics(t)["rtgate_sessions_open"], b.metrics(t)["rtgate_sessions_open"]
	if sa+sb != n || sa == 0 || sb == 0 {
		t.Fatalf("sessions open: %v on one process, %v on the other; want %d spread over both", sa, sb, n)
	}
	t.Logf("%d sessions on one port: %v and %v", n, sa, sb)

	// Without REUSEPORT a third process cannot take the port.
	if out := startFails(t, up, port); !strings.Contains(out, "address already in use") {
		t.Fatalf("a process without REUSEPORT on the shared port: %q", out)
	}
}

// startFails starts a gateway without REUSEPORT on port and returns its
// output once it has exited (it must).
func startFails(t *testing.T, up upstreamProc, port int) string {
	t.Helper()
	cmd := gatewayCmd(t, up, port, "ADMIN_ADDR=")
	done := make(chan []byte, 1)
	go func() { out, _ := cmd.CombinedOutput(); done <- out }()
	select {
	case out := <-done:
		return string(out)
	case <-time.After(10 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatal("a gateway without REUSEPORT started on a port two others share")
		return ""
	}
}

// TestReusePortHandOver replaces a gateway process by a new one on the same
// port under steady load, twice, the way a REUSEPORT deployment upgrades:
// start the new process, then SIGTERM the old one, which keeps serving
// through its grace, stops accepting once its accept queue is empty, and
// exits when its last call ends. No load balancer; no call may fail.
func TestReusePortHandOver(t *testing.T) {
	up := startMockai(t)
	port := freePort(t)
	env := []string{"REUSEPORT=1", "DRAIN_GRACE_SECS=1", "DRAIN_TIMEOUT=20"}
	old := startGatewayProc(t, up, port, env...)
	load := startLoad(old.addr, 4, 20000)
	time.Sleep(500 * time.Millisecond)
	for round := range 2 {
		next := startGatewayProc(t, up, port, env...)
		if err := old.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		select {
		case <-old.exited:
			if old.err != nil {
				t.Fatalf("round %d: the old process exited with %v", round, old.err)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("round %d: the old process did not exit", round)
		}
		ok, failed := load.counts()
		t.Logf("hand-over %d done: %d calls so far, %d failed", round+1, ok, failed)
		old = next
		time.Sleep(500 * time.Millisecond)
	}
	ok, failures := load.finish()
	if len(failures) > 0 || ok == 0 {
		t.Fatalf("%d calls, %d failed: %v", ok, len(failures), failures[:min(len(failures), 10)])
	}
	t.Logf("%d calls over two REUSEPORT hand-overs, 0 failed", ok)
}
