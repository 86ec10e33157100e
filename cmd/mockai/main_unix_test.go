//go:build unix

package main

import (
	"bufio"
	"io"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gorilla/websocket"
)

// run prints its listening line, serves, and exits 0 on SIGTERM.
func TestRunServesUntilSignal(t *testing.T) {
	pr, pw := io.Pipe()
	done := make(chan int, 1)
	go func() {
		done <- run([]string{"-addr", "127.0.0.1:0", "-key", "sk-run"}, pw, io.Discard)
		pw.Close()
	}()
	line, err := bufio.NewReader(pr).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	base, ok := strings.CutPrefix(strings.TrimSpace(line), "mockai listening on ")
	if !ok || !strings.HasPrefix(base, "ws://127.0.0.1:") {
		t.Fatalf("first line %q", line)
	}
	go io.Copy(io.Discard, pr)

	d := websocket.Dialer{HandshakeTimeout: 5 * time.Second}
	c, _, err := d.Dial(base+"/realtime?model=gpt-realtime", map[string][]string{"Authorization": {"Bearer sk-run"}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, data, err := c.ReadMessage(); err != nil || !strings.Contains(string(data), "session.created") {
		t.Fatalf("first event %.60s %v", data, err)
	}
	// The same port speaks xAI's dialect under /xai/v1.
	xai, _, err := d.Dial(strings.TrimSuffix(base, "/v1")+"/xai/v1/realtime?model=grok-voice-latest",
		map[string][]string{"Authorization": {"Bearer sk-run"}})
	if err != nil {
		t.Fatal(err)
	}
	defer xai.Close()
	xai.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, data, err := xai.ReadMessage(); err != nil || !strings.HasPrefix(string(data), `{"type":"conversation.created"`) {
		t.Fatalf("first xAI event %.60s %v", data, err)
	}

	if err := syscall.Kill(syscall.Getpid(), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case code := <-done:
		if code != 0 {
			t.Errorf("exit code %d after SIGTERM, want 0", code)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("run did not return after SIGTERM")
	}
}
