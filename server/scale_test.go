package server

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"rtgate/poller"
)

// The scale tests run a thousand sessions through one gateway. mockai runs as
// a separate process so that its goroutine per connection does not count
// against the gateway: the claim under test is that an idle session costs the
// gateway no goroutine, and that every descriptor comes back when sessions
// end.

// scaleSessions is how many sessions each scale test opens. Measured on 2
// cores, a thousand take about 1 s, and about 3 s with -race.
const scaleSessions = 1000

// scaleWorkers bounds the test client's concurrency.
const scaleWorkers = 200

// scaleSessionTimeout bounds one session's whole run, dial to close, so that
// a stuck session fails the test instead of hanging it.
const scaleSessionTimeout = 30 * time.Second

// builtTools are the commands the tests run as processes (cmd/mockai,
// cmd/wsbench), each built once per test binary into toolDir, which
// TestMain removes.
var builtTools struct {
	once sync.Once
	dir  string
	err  error
	mu   sync.Mutex
	ones map[string]*builtTool
}

// builtTool is one command's build.
type builtTool struct {
	once sync.Once
	path string
	err  error
}

// TestMain applies POLLER_HANDLERS (inline, the gateway's default, or pool)
// with the binary's 256-byte netpoll buffers, so that the whole suite runs
// with either of netpoll's runners:
//
//	POLLER_HANDLERS=pool go test -race -count=1 ./server
func TestMain(m *testing.M) {
	h, err := poller.DefaultHandlers, error(nil)
	if v := os.Getenv("POLLER_HANDLERS"); v != "" {
		h, err = poller.ParseHandlers(v)
	}
	if err == nil {
		err = poller.Tune(poller.Tuning{Handlers: h, BufferSize: 256, NodeSize: 256})
	}
	if err != nil {
		panic(err)
	}
	code := m.Run()
	if builtTools.dir != "" {
		_ = os.RemoveAll(builtTools.dir)
	}
	os.Exit(code)
}

// buildMockai builds cmd/mockai (once) and returns the binary's path.
func buildMockai(t testing.TB) string { return buildTool(t, "mockai") }

// buildTool builds rtgate/cmd/name (once per test binary) and returns the
// binary's path.
func buildTool(t testing.TB, name string) string {
	t.Helper()
	builtTools.once.Do(func() {
		builtTools.dir, builtTools.err = os.MkdirTemp("", "rtgate-tools-")
		builtTools.ones = map[string]*builtTool{}
	})
	if builtTools.err != nil {
		t.Fatalf("making a directory for the tools: %v", builtTools.err)
	}
	builtTools.mu.Lock()
	b := builtTools.ones[name]
	if b == nil {
		b = &builtTool{}
		builtTools.ones[name] = b
	}
	builtTools.mu.Unlock()
	b.once.Do(func() {
		goTool, err := exec.LookPath("go")
		if err != nil {
			b.err = fmt.Errorf("finding the go tool to build %s: %w", name, err)
			return
		}
		bin := filepath.Join(builtTools.dir, name)
		if out, err := exec.Command(goTool, "build", "-o", bin, "rtgate/cmd/"+name).CombinedOutput(); err != nil {
			b.err = fmt.Errorf("go build rtgate/cmd/%s: %w\n%s", name, err, out)
			return
		}
		b.path = bin
	})
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.path
}

// mockaiProcess is a mockai running as a child process.
type mockaiProcess struct {
	baseURL string // ws://127.0.0.1:port/v1
	cmd     *exec.Cmd
}

// startMockaiProcess starts mockai with args on a free loopback port, waits
// for its "mockai listening on" line, and stops it (by its PID) when the test
// ends.
func startMockaiProcess(t testing.TB, args ...string) *mockaiProcess {
	t.Helper()
	bin := buildMockai(t)
	cmd := exec.Command(bin, append([]string{"-addr", "127.0.0.1:0", "-key", testUpstreamKey}, args...)...)
	stderr := &cappedBuffer{max: 16 << 10}
	cmd.Stderr = stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting mockai: %v", err)
	}
	stopAtCleanup(t, cmd, func(waitErr error) {
		t.Logf("mockai (pid %d) exited: %v; stderr:\n%s", cmd.Process.Pid, waitErr, stderr.String())
	})

	lines := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(stdout).ReadString('\n')
		lines <- line
	}()
	const prefix = "mockai listening on "
	select {
	case line := <-lines:
		if !strings.HasPrefix(line, prefix) {
			t.Fatalf("mockai printed %q, want %q<base URL>", line, prefix)
		}
		return &mockaiProcess{baseURL: strings.TrimSpace(strings.TrimPrefix(line, prefix)), cmd: cmd}
	case <-time.After(30 * time.Second):
		t.Fatal("mockai did not say it was listening within 30 s")
	}
	return nil
}

// activeSessions asks the mockai process how many upgraded connections it
// holds open now.
func (p *mockaiProcess) activeSessions(t *testing.T) int64 {
	t.Helper()
	u := strings.Replace(p.baseURL, "ws://", "http://", 1)
	u = strings.TrimSuffix(u, "/v1") + "/mock/stats"
	resp, err := http.Get(u)
	if err != nil {
		t.Fatalf("GET mockai stats: %v", err)
	}
	defer resp.Body.Close()
	var st struct {
		Active int64 `json:"active"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		t.Fatalf("mockai stats: %v", err)
	}
	return st.Active
}

// stopAtCleanup waits for a started cmd in the background and stops it by
// its PID when the test ends: SIGTERM, then SIGKILL after 10 s. If the test
// failed, onFail is given how the process exited.
func stopAtCleanup(t testing.TB, cmd *exec.Cmd, onFail func(waitErr error)) {
	exited := make(chan struct{})
	var waitErr error
	go func() {
		waitErr = cmd.Wait()
		close(exited)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			onFail(waitErr)
		}
	})
}

// cappedBuffer keeps the first max bytes written to it.
type cappedBuffer struct {
	mu  sync.Mutex
	max int
	b   bytes.Buffer
}

func (c *cappedBuffer) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if room := c.max - c.b.Len(); room > 0 {
		c.b.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

func (c *cappedBuffer) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.b.String()
}

// startScaleGateway starts mockai as a process and a gateway in front of it.
func startScaleGateway(t *testing.T) (*gateway, *mockaiProcess) {
	t.Helper()
	if testing.Short() {
		t.Skip("opens a thousand sessions; skipped with -short")
	}
	mock := startMockaiProcess(t, "-deltas", "2", "-delta-bytes", "4800")
	g := startGateway(t, nil, func(c *Settings) {
		u, err := ParseAPIBase(mock.baseURL)
		if err != nil {
			t.Fatalf("mockai's base URL %q: %v", mock.baseURL, err)
		}
		c.APIBase = u
	})
	return g, mock
}

// scaleDial connects one gorilla client to the gateway and reads its
// session.created. It does not use t: it runs on worker goroutines.
func scaleDial(g *gateway) (*websocket.Conn, error) {
	c, resp, err := dialer().Dial(g.url("model=gpt-realtime"), bearer(testMasterKey))
	if err != nil {
		return nil, fmt.Errorf("dial (HTTP %d): %w", httpStatus(resp), err)
	}
	_ = c.SetReadDeadline(time.Now().Add(scaleSessionTimeout))
	ev, err := readEvent(c)
	if err == nil && ev.Type != "session.created" {
		err = fmt.Errorf("first event %s, want session.created", ev)
	}
	if err != nil {
		_ = c.Close()
		return nil, err
	}
	return c, nil
}

// scaleEvent is the part of a server event the scale tests look at.
type scaleEvent struct {
	Type  string `json:"type"`
	Error *struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

func (e scaleEvent) String() string {
	if e.Error != nil {
		return fmt.Sprintf("%s (%s: %s)", e.Type, e.Error.Code, e.Error.Message)
	}
	return e.Type
}

// readEvent reads one text message and decodes it.
func readEvent(c *websocket.Conn) (scaleEvent, error) {
	var ev scaleEvent
	mt, p, err := c.ReadMessage()
	if err != nil {
		return ev, err
	}
	if mt != websocket.TextMessage {
		return ev, fmt.Errorf("message type %d, want text", mt)
	}
	if err := json.Unmarshal(p, &ev); err != nil {
		return ev, fmt.Errorf("event is not JSON: %w", err)
	}
	return ev, nil
}

// closeAndWait sends close 1000 and reads until the echo arrives.
func closeAndWait(c *websocket.Conn) error {
	_ = c.SetReadDeadline(time.Now().Add(scaleSessionTimeout))
	if err := c.WriteMessage(websocket.CloseMessage, websocket.FormatCloseMessage(1000, "done")); err != nil {
		return fmt.Errorf("sending close: %w", err)
	}
	for {
		_, _, err := c.ReadMessage()
		if err == nil {
			continue
		}
		var ce *websocket.CloseError
		if !errors.As(err, &ce) {
			return fmt.Errorf("connection ended without a close frame: %w", err)
		}
		if ce.Code != 1000 {
			return fmt.Errorf("close %d %q, want 1000 echoed", ce.Code, ce.Text)
		}
		return nil
	}
}

// scaleSession runs one short session end to end: session.created, a
// response, and a close handshake.
func scaleSession(g *gateway) error {
	c, err := scaleRespond(g)
	if err != nil {
		return err
	}
	defer c.Close()
	return closeAndWait(c)
}

// scaleRespond opens a session and has the upstream answer one
// response.create; the connection is left open.
func scaleRespond(g *gateway) (*websocket.Conn, error) {
	c, err := scaleDial(g)
	if err != nil {
		return nil, err
	}
	if err := c.WriteMessage(websocket.TextMessage, []byte(`{"type":"response.create"}`)); err != nil {
		_ = c.Close()
		return nil, fmt.Errorf("sending response.create: %w", err)
	}
	for i := 0; ; i++ {
		ev, err := readEvent(c)
		if err == nil && ev.Type == "error" {
			err = fmt.Errorf("response.create answered with %s", ev)
		}
		if err == nil && i > 100 {
			err = errors.New("no response.done in 100 events")
		}
		if err != nil {
			_ = c.Close()
			return nil, fmt.Errorf("waiting for response.done: %w", err)
		}
		if ev.Type == "response.done" {
			return c, nil
		}
	}
}

// forEach runs fn(i) for i in [0, n) on scaleWorkers goroutines and returns
// how many calls failed and the first few errors.
func forEach(n int, fn func(i int) error) (failed int, first []error) {
	var (
		next atomic.Int64
		mu   sync.Mutex
		wg   sync.WaitGroup
	)
	for range min(scaleWorkers, n) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				if err := fn(i); err != nil {
					mu.Lock()
					failed++
					if len(first) < 5 {
						first = append(first, fmt.Errorf("session %d: %w", i, err))
					}
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	return failed, first
}

// settledGoroutines waits until runtime.NumGoroutine has not changed for
// half a second (or five seconds pass) and returns the count.
func settledGoroutines() (n int, settled bool) {
	const (
		interval = 50 * time.Millisecond
		stable   = 10 // samples in a row
	)
	deadline := time.Now().Add(5 * time.Second)
	last, same := runtime.NumGoroutine(), 0
	for time.Now().Before(deadline) {
		time.Sleep(interval)
		cur := runtime.NumGoroutine()
		if cur == last {
			same++
			if same >= stable {
				return cur, true
			}
			continue
		}
		last, same = cur, 0
	}
	return last, false
}

// openFDs counts this process's open file descriptors.
func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("cannot count open descriptors here: %v", err)
	}
	return len(ents)
}

// TestScaleManyConcurrentSessions runs a thousand complete sessions, two
// hundred at a time, so that sessions end while others are being accepted
// and dialed.
//
// Under -race the sessions run in two waves instead: all open and answered,
// then all closed. netpoll's race build (poll_default_linux_race.go) finds
// the operator for an epoll event by fd number, not by the pointer stored
// with the event, so an event still pending for a socket that was just
// closed is delivered to whatever new socket got the same fd number. With
// sessions ending while others dial, that now and then fails a fresh
// upstream dial ("operator has critical problem! event=8193" in the log,
// then an upstream_unavailable error event). Normal builds are not affected.
// Separating the closes from the dials keeps the race build's test about
// the gateway.
func TestScaleManyConcurrentSessions(t *testing.T) {
	g, mock := startScaleGateway(t)
	n := scaleSessions

	start := time.Now()
	var failed int
	var errs []error
	if !raceEnabled {
		failed, errs = forEach(n, func(int) error { return scaleSession(g) })
	} else {
		conns := make([]*websocket.Conn, n)
		failed, errs = forEach(n, func(i int) (err error) {
			conns[i], err = scaleRespond(g)
			return err
		})
		closeFailed, closeErrs := forEach(n, func(i int) error {
			if conns[i] == nil {
				return nil // failed above
			}
			defer conns[i].Close()
			return closeAndWait(conns[i])
		})
		failed, errs = failed+closeFailed, append(errs, closeErrs...)
	}
	t.Logf("%d sessions on %d client goroutines in %v (race build: %v); %d failed",
		n, scaleWorkers, time.Since(start).Round(time.Millisecond), raceEnabled, failed)
	if failed > 0 {
		t.Fatalf("%d of %d sessions failed, first: %v", failed, n, errors.Join(errs...))
	}
	waitFor(t, "every session to end at the gateway", func() bool { return g.srv.SessionsOpen() == 0 })
	waitFor(t, "every upstream connection to close", func() bool { return mock.activeSessions(t) == 0 })
}

func TestScaleIdleSessionsHoldNoGoroutines(t *testing.T) {
	g, mock := startScaleGateway(t)
	n := scaleSessions

	// Warm up: one session end to end, so that the gateway's lazily started
	// machinery (pollers, worker pool) exists before the baseline.
	if err := scaleSession(g); err != nil {
		t.Fatalf("warm-up session: %v", err)
	}
	waitFor(t, "the warm-up session to end", func() bool { return g.srv.SessionsOpen() == 0 })

	baseG, ok := settledGoroutines()
	if !ok {
		t.Logf("goroutine count still moving before the sessions opened; using %d", baseG)
	}
	baseFD := openFDs(t)

	conns := make([]*websocket.Conn, n)
	failed, errs := forEach(n, func(i int) error {
		c, err := scaleDial(g)
		conns[i] = c
		return err
	})
	t.Cleanup(func() {
		for _, c := range conns {
			if c != nil {
				_ = c.Close()
			}
		}
	})
	if failed > 0 {
		t.Fatalf("%d of %d sessions failed to open, first: %v", failed, n, errors.Join(errs...))
	}
	if open := g.srv.SessionsOpen(); open != int64(n) {
		t.Fatalf("gateway reports %d sessions open, want %d", open, n)
	}
	waitFor(t, "mockai to hold every upstream session", func() bool { return mock.activeSessions(t) == int64(n) })

	// No reader runs on the client side now: every goroutine left in this
	// process belongs to the gateway or the test's own bookkeeping.
	idleG, ok := settledGoroutines()
	if !ok {
		t.Logf("goroutine count still moving with the sessions idle; using %d", idleG)
	}
	idleFD := openFDs(t)
	t.Logf("goroutines: %d with no session open, %d with %d idle sessions (%+d)", baseG, idleG, n, idleG-baseG)
	t.Logf("open descriptors: %d with no session open, %d with %d idle sessions (%+d, %.2f per session)",
		baseFD, idleFD, n, idleFD-baseFD, float64(idleFD-baseFD)/float64(n))
	const slack = 50
	if idleG > baseG+slack {
		t.Errorf("%d idle sessions raised the goroutine count from %d to %d; want at most %+d", n, baseG, idleG, slack)
	}

	// Close them all: half with a close handshake, half by dropping the TCP
	// connection, which the gateway must clean up as well.
	failed, errs = forEach(n, func(i int) error {
		c := conns[i]
		if i%2 == 1 {
			return c.Close()
		}
		defer c.Close()
		return closeAndWait(c)
	})
	if failed > 0 {
		t.Errorf("%d of %d sessions did not close cleanly, first: %v", failed, n, errors.Join(errs...))
	}

	waitFor(t, "every session to end at the gateway", func() bool { return g.srv.SessionsOpen() == 0 })
	const fdSlack = 5
	var endFD int
	deadline := time.Now().Add(10 * time.Second)
	for {
		endFD = openFDs(t)
		if endFD <= baseFD+fdSlack || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	endG, _ := settledGoroutines()
	t.Logf("after closing: %d open descriptors (started with %d), %d goroutines (started with %d)", endFD, baseFD, endG, baseG)
	if endFD > baseFD+fdSlack {
		t.Errorf("%d descriptors open after every session closed, %d before they opened: descriptors leak", endFD, baseFD)
	}
	waitFor(t, "every upstream connection to close", func() bool { return mock.activeSessions(t) == 0 })
}
