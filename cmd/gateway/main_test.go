package main

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"rtgate/bench/proc"
)

// build compiles a command of this module into dir.
func build(t *testing.T, dir, pkg string) string {
	t.Helper()
	out := filepath.Join(dir, filepath.Base(pkg))
	cmd := exec.Command("go", "build", "-o", out, pkg)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", pkg, err, b)
	}
	return out
}

func freePort(t *testing.T) int {
	t.Helper()
	port, err := proc.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	return port
}

func TestInvalidSettingIsAStartupError(t *testing.T) {
	bin := build(t, t.TempDir(), "rtgate/cmd/gateway")
	for _, tc := range []struct{ env, want string }{
		{"PORT=http", "PORT"},
		{"OPENAI_API_BASE=ftp://x", "OPENAI_API_BASE"},
		{"REALTIME_POOL_SIZE=lots", "REALTIME_POOL_SIZE"},
		{"IDLE_TIMEOUT_SECS=-3", "IDLE_TIMEOUT_SECS"},
		{"REUSEPORT=maybe", "REUSEPORT"},
		{"DRAIN_GRACE_SECS=-1", "DRAIN_GRACE_SECS"},
		{"REDIS_URL=ftp://user:hunter2@x", "REDIS_URL"},
		{"REDIS_TIMEOUT_MS=0", "REDIS_TIMEOUT_MS"},
		{"CLUSTER_INSTANCES=0", "CLUSTER_INSTANCES"},
		{"POLLER_NUM=many", "POLLER_NUM"},
		{"POLLER_NUM=-2", "POLLER_NUM"},
		{"POLLER_HANDLERS=threads", "handlers"},
	} {
		// Bounded: a gateway that takes the setting and starts serving
		// is killed, and fails the check below.
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		cmd := exec.CommandContext(ctx, bin)
		cmd.Env = append(os.Environ(), "LITELLM_MASTER_KEY=k", "PORT=0", "ADMIN_ADDR=", tc.env)
		out, err := cmd.CombinedOutput()
		cancel()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 2 || !strings.Contains(string(out), tc.want) || strings.Contains(string(out), "hunter2") {
			t.Fatalf("%s: exit %v, output %q; want exit 2 naming %s", tc.env, err, out, tc.want)
		}
	}
}

// TestSIGTERMDrainsLiveSessions runs the real binaries: a live session
// survives SIGTERM, /health turns 503, and the gateway exits 0 once the
// session ends.
func TestSIGTERMDrainsLiveSessions(t *testing.T) {
	dir := t.TempDir()
	gw := build(t, dir, "rtgate/cmd/gateway")
	base := startMockaiProc(t) // plain ws://

	port := freePort(t)
	g := exec.Command(gw)
	g.Env = append(os.Environ(), "LITELLM_MASTER_KEY=sk-test", "OPENAI_API_KEY=sk-up", "OPENAI_API_BASE="+base,
		"PORT="+strconv.Itoa(port), "ADMIN_ADDR=", "DRAIN_TIMEOUT=30", "DRAIN_GRACE_SECS=1", "LOG_LEVEL=warn")
	if err := g.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- g.Wait() }()
	t.Cleanup(func() { _ = g.Process.Kill() })

	addr := "127.0.0.1:" + strconv.Itoa(port)
	health := func() int {
		resp, err := http.Get("http://" + addr + "/health")
		if err != nil {
			return 0
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	deadline := time.Now().Add(10 * time.Second)
	for health() != 200 {
		if time.Now().After(deadline) {
			t.Fatal("gateway did not become healthy")
		}
		time.Sleep(20 * time.Millisecond)
	}
	c, _, err := websocket.DefaultDialer.Dial("ws://"+addr+"/v1/realtime?model=gpt-realtime",
		http.Header{"Authorization": {"Bearer sk-test"}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	readType := func() string {
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, p, err := c.ReadMessage()
		if err != nil {
			t.Fatalf("read: %v", err)
		}
		var e struct{ Type string }
		_ = json.Unmarshal(p, &e)
		return e.Type
	}
	if typ := readType(); typ != "session.created" {
		t.Fatalf("got %s", typ)
	}

	if err := g.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	deadline = time.Now().Add(5 * time.Second)
	for health() != 503 {
		if time.Now().After(deadline) {
			t.Fatal("/health did not turn 503 after SIGTERM")
		}
		time.Sleep(20 * time.Millisecond)
	}
	_ = c.WriteMessage(websocket.TextMessage, []byte(`{"type":"session.update","session":{"type":"realtime"}}`))
	if typ := readType(); typ != "session.updated" {
		t.Fatalf("live session got %s during the drain", typ)
	}
	select {
	case err := <-exited:
		t.Fatalf("the gateway exited (%v) while a session was live", err)
	case <-time.After(300 * time.Millisecond):
	}
	_ = c.WriteMessage(websocket.CloseMessage, websocket.FormatCloseMessage(1000, "done"))
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("gateway exited with %v after a clean drain, want status 0", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the gateway did not exit after its last session ended")
	}
}

// TestSIGHUPReopensUsageLog rotates USAGE_LOG as logrotate does: rename the
// file, send SIGHUP (postrotate), and the next session's record lands in a
// new file at the old path while the renamed one keeps the first.
func TestSIGHUPReopensUsageLog(t *testing.T) {
	dir := t.TempDir()
	gw := build(t, dir, "rtgate/cmd/gateway")
	base := startMockaiProc(t) // plain ws://

	logPath := filepath.Join(dir, "usage.jsonl")
	port := freePort(t)
	g := exec.Command(gw)
	g.Env = append(os.Environ(), "LITELLM_MASTER_KEY=sk-test", "OPENAI_API_KEY=sk-up", "OPENAI_API_BASE="+base,
		"PORT="+strconv.Itoa(port), "ADMIN_ADDR=", "LOG_LEVEL=warn", "USAGE_LOG="+logPath)
	if err := g.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = g.Process.Kill(); _ = g.Wait() })
	addr := "127.0.0.1:" + strconv.Itoa(port)

	// session runs one session to a clean close.
	session := func() {
		t.Helper()
		var c *websocket.Conn
		var err error
		deadline := time.Now().Add(10 * time.Second)
		for {
			c, _, err = websocket.DefaultDialer.Dial("ws://"+addr+"/v1/realtime?model=gpt-realtime",
				http.Header{"Authorization": {"Bearer sk-test"}})
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("dial: %v", err)
			}
			time.Sleep(20 * time.Millisecond)
		}
		defer c.Close()
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, _, err := c.ReadMessage(); err != nil {
			t.Fatal(err)
		}
		_ = c.WriteMessage(websocket.CloseMessage, websocket.FormatCloseMessage(1000, ""))
		for {
			if _, _, err := c.ReadMessage(); err != nil {
				return
			}
		}
	}
	// lines waits for the file at path to hold n lines.
	lines := func(path string, n int) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			b, _ := os.ReadFile(path)
			if got := strings.Count(string(b), "\n"); got == n {
				return
			} else if got > n || time.Now().After(deadline) {
				t.Fatalf("%s holds %d lines, want %d", filepath.Base(path), got, n)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	session()
	lines(logPath, 1) // the log syncs within a second
	if err := os.Rename(logPath, logPath+".1"); err != nil {
		t.Fatal(err)
	}
	if err := g.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for { // the new file appears once the gateway has reopened
		if _, err := os.Stat(logPath); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no new USAGE_LOG after SIGHUP")
		}
		time.Sleep(20 * time.Millisecond)
	}
	session()
	lines(logPath, 1)
	lines(logPath+".1", 1)
}
