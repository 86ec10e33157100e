package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// binaries builds the gateway and mockai once per test binary.
var binaries = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "rtgate-bin-")
	if err != nil {
		return "", err
	}
	for _, pkg := range []string{"rtgate/cmd/gateway", "rtgate/cmd/mockai"} {
		out := filepath.Join(dir, filepath.Base(pkg))
		if b, err := exec.Command("go", "build", "-o", out, pkg).CombinedOutput(); err != nil {
			return "", &buildError{pkg, err, string(b)}
		}
	}
	return dir, nil
})

type buildError struct {
	pkg string
	err error
	out string
}

func (e *buildError) Error() string { return "go build " + e.pkg + ": " + e.err.Error() + "\n" + e.out }

func binDir(t *testing.T) string {
	t.Helper()
	dir, err := binaries()
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// upstreamProc is a mockai process serving wss:// with its certificate in a file.
type upstreamProc struct {
	base, caFile string
}

func startMockai(t *testing.T, args ...string) upstreamProc {
	t.Helper()
	ca := filepath.Join(t.TempDir(), "mockai.pem")
	return upstreamProc{base: startMockaiProc(t, append([]string{"-tls", "-cert-out", ca}, args...)...), caFile: ca}
}

// startMockaiProc starts mockai with args on a free loopback port, killed
// by its PID when the test ends, and returns the base URL it announces.
func startMockaiProc(t *testing.T, args ...string) string {
	t.Helper()
	m := exec.Command(filepath.Join(binDir(t), "mockai"), append([]string{"-addr", "127.0.0.1:0"}, args...)...)
	stdout, _ := m.StdoutPipe()
	if err := m.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Process.Kill(); _ = m.Wait() })
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatalf("mockai did not start: %v", err)
	}
	return strings.TrimSpace(strings.TrimPrefix(line, "mockai listening on "))
}

// gatewayProc is one gateway process on loopback.
type gatewayProc struct {
	cmd    *exec.Cmd
	port   int
	admin  string
	logf   string
	exited chan struct{} // closed when the process has exited; err is then set
	err    error
}

// startGatewayProc starts a gateway in front of up with the test key sk-test
// and env on top, on port (0: a free one), and waits until /health is 200.
func startGatewayProc(t *testing.T, up upstreamProc, port int, env ...string) *gatewayProc {
	t.Helper()
	if port == 0 {
		port = freePort(t)
	}
	p := &gatewayProc{port: port, admin: "127.0.0.1:" + strconv.Itoa(freePort(t)),
		logf: filepath.Join(t.TempDir(), "gateway.log"), exited: make(chan struct{})}
	logFile, err := os.Create(p.logf)
	if err != nil {
		t.Fatal(err)
	}
	p.cmd = gatewayCmd(t, up, port, append([]string{"ADMIN_ADDR=" + p.admin}, env...)...)
	p.cmd.Stdout, p.cmd.Stderr = logFile, logFile
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.err = p.cmd.Wait(); logFile.Close(); close(p.exited) }()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		<-p.exited
		if t.Failed() {
			b, _ := os.ReadFile(p.logf)
			lines := strings.Split(strings.TrimSpace(string(b)), "\n")
			var warned []string // what the gateway warned of, which the last lines may not hold
			for _, l := range lines {
				if strings.Contains(l, "level=WARN") || strings.Contains(l, "level=ERROR") {
					warned = append(warned, l)
				}
			}
			t.Logf("gateway on %d (pid %d), its warnings and errors:\n%s\nlast lines of its log:\n%s", port, p.cmd.Process.Pid,
				strings.Join(warned[:min(len(warned), 30)], "\n"), strings.Join(lines[max(0, len(lines)-30):], "\n"))
		}
	})
	deadline := time.Now().Add(10 * time.Second)
	// On a shared port /health may be answered by another process: the log
	// line says this one listens.
	for p.health() != 200 || p.metrics(t) == nil || p.logCount("gateway listening") == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("gateway on port %d did not become healthy", port)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return p
}

// gatewayCmd is the command for a gateway in front of up on port, with env
// on top of the test defaults.
func gatewayCmd(t *testing.T, up upstreamProc, port int, env ...string) *exec.Cmd {
	cmd := exec.Command(filepath.Join(binDir(t), "gateway"))
	cmd.Env = append(os.Environ(), "LITELLM_MASTER_KEY=sk-test", "OPENAI_API_KEY=sk-up",
		"OPENAI_API_BASE="+up.base, "UPSTREAM_CA_FILE="+up.caFile, "PORT="+strconv.Itoa(port),
		"REALTIME_POOL_SIZE=0", "LOG_LEVEL=info")
	cmd.Env = append(cmd.Env, env...)
	return cmd
}

func (p *gatewayProc) addr() string { return "127.0.0.1:" + strconv.Itoa(p.port) }

// health is this process's /health status (0 if it did not answer).
func (p *gatewayProc) health() int { return healthOf(p.addr()) }

func healthOf(addr string) int {
	c := http.Client{Timeout: time.Second}
	resp, err := c.Get("http://" + addr + "/health")
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// metrics reads the process's /metrics; nil if it did not answer.
func (p *gatewayProc) metrics(t *testing.T) map[string]float64 {
	t.Helper()
	c := http.Client{Timeout: time.Second}
	resp, err := c.Get("http://" + p.admin + "/metrics")
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parsing /metrics: %v", err)
	}
	out := map[string]float64{}
	for name, f := range families {
		for _, m := range f.GetMetric() {
			switch {
			case m.GetGauge() != nil:
				out[name] += m.GetGauge().GetValue()
			case m.GetCounter() != nil:
				out[name] += m.GetCounter().GetValue()
			}
		}
	}
	return out
}

// logCount counts the lines of the process's log that contain s.
func (p *gatewayProc) logCount(s string) int {
	b, _ := os.ReadFile(p.logf)
	return strings.Count(string(b), s)
}

// dialResult is the outcome of one connect: a session (conn) or a refusal.
type dialResult struct {
	conn    *websocket.Conn
	status  int    // HTTP status of a refusal
	code    string // its JSON error code
	message string // and message, which says why
	err     error  // anything else: the connect failed
}

// connect opens a session through addr and waits for session.created.
func connect(ctx context.Context, addr string) dialResult {
	d := websocket.Dialer{HandshakeTimeout: 5 * time.Second}
	c, resp, err := d.DialContext(ctx, "ws://"+addr+"/v1/realtime?model=gpt-realtime",
		http.Header{"Authorization": {"Bearer sk-test"}})
	if err != nil {
		if resp == nil {
			return dialResult{err: err}
		}
		defer resp.Body.Close()
		var e struct {
			Error struct{ Code, Message string }
		}
		_ = json.NewDecoder(resp.Body).Decode(&e)
		return dialResult{status: resp.StatusCode, code: e.Error.Code, message: e.Error.Message, err: err}
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, msg, err := c.ReadMessage()
	if err != nil || !strings.Contains(string(msg), `"session.created"`) {
		_ = c.Close()
		return dialResult{err: &net.OpError{Op: "read session.created", Err: err}}
	}
	_ = c.SetReadDeadline(time.Time{})
	return dialResult{conn: c}
}

// closeNormally ends a session the way a client does: close 1000, then wait
// for the gateway's close.
func closeNormally(c *websocket.Conn) {
	_ = c.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(1000, "done"), time.Now().Add(time.Second))
	_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
	for {
		if _, _, err := c.ReadMessage(); err != nil {
			break
		}
	}
	_ = c.Close()
}

// callLoad runs calls (connect, session.update, session.updated, close 1000)
// through addr from workers goroutines until stop is closed or each worker
// has made max calls, and counts what failed and why.
type callLoad struct {
	mu       sync.Mutex
	ok       int
	failures []string
	wg       sync.WaitGroup
	stop     chan struct{}
}

func startLoad(addr func() string, workers, max int) *callLoad {
	l := &callLoad{stop: make(chan struct{})}
	for range workers {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			for n := 0; n < max; n++ {
				select {
				case <-l.stop:
					return
				default:
				}
				err := oneCall(addr())
				l.mu.Lock()
				if err == nil {
					l.ok++
				} else {
					l.failures = append(l.failures, err.Error())
				}
				l.mu.Unlock()
			}
		}()
	}
	return l
}

// counts returns the calls so far that succeeded and failed.
func (l *callLoad) counts() (ok, failed int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.ok, len(l.failures)
}

// finish stops the load and returns the successes and the failures.
func (l *callLoad) finish() (int, []string) {
	close(l.stop)
	l.wg.Wait()
	return l.ok, l.failures
}

func oneCall(addr string) error {
	r := connect(context.Background(), addr)
	if r.conn == nil {
		return &net.OpError{Op: "connect", Err: errorf("%d %s %v", r.status, r.code, r.err)}
	}
	c := r.conn
	defer c.Close()
	if err := c.WriteMessage(websocket.TextMessage, []byte(`{"type":"session.update","session":{"type":"realtime"}}`)); err != nil {
		return err
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	for {
		_, msg, err := c.ReadMessage()
		if err != nil {
			return &net.OpError{Op: "read session.updated", Err: err}
		}
		if strings.Contains(string(msg), `"session.updated"`) {
			break
		}
	}
	if err := c.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(1000, "done"), time.Now().Add(time.Second)); err != nil {
		return err
	}
	for {
		if _, _, err := c.ReadMessage(); err != nil {
			var ce *websocket.CloseError
			if errors.As(err, &ce) && ce.Code == 1000 {
				return nil
			}
			return &net.OpError{Op: "close", Err: err}
		}
	}
}

func errorf(format string, args ...any) error { return fmt.Errorf(format, args...) }
