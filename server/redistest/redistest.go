// Package redistest runs a real redis-server for tests: its own temp folder,
// a free loopback port, no persistence, stopped by PID. A test that needs
// Redis fails (never skips) when redis-server is not installed: .ci/run
// installs it.
package redistest

import (
	"bufio"
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Server is one redis-server process; Stop and Start may be called in turn
// to take it away and bring it back on the same port (empty again).
type Server struct {
	t    testing.TB
	bin  string
	dir  string
	Port int
	cmd  *exec.Cmd
}

// Start starts redis-server on a free port and stops it when the test ends.
func Start(t testing.TB) *Server {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatalf("redis-server is not installed (apt-get install -y redis-server; .ci/run does it): %v", err)
	}
	s := &Server{t: t, bin: bin, dir: t.TempDir(), Port: freePort(t)}
	s.Start()
	t.Cleanup(s.Stop)
	return s
}

// Addr is host:port.
func (s *Server) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.Port)) }

// URL is the REDIS_URL for this server.
func (s *Server) URL() string { return "redis://" + s.Addr() + "/0" }

// Start (re)starts the process on the same port and waits until it answers.
func (s *Server) Start() {
	s.t.Helper()
	if s.cmd != nil {
		return
	}
	cmd := exec.Command(s.bin, "--port", strconv.Itoa(s.Port), "--bind", "127.0.0.1", "--dir", s.dir,
		"--save", "", "--appendonly", "no", "--daemonize", "no", "--loglevel", "warning")
	if err := cmd.Start(); err != nil {
		s.t.Fatalf("starting redis-server: %v", err)
	}
	s.cmd = cmd
	deadline := time.Now().Add(10 * time.Second)
	for {
		if s.ping() == nil {
			return
		}
		if time.Now().After(deadline) {
			s.Stop()
			s.t.Fatalf("redis-server on %s did not answer PING within 10s", s.Addr())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Stop kills the process (SIGKILL, by PID) and waits for it.
func (s *Server) Stop() {
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	_ = s.cmd.Wait()
	s.cmd = nil
}

// Flush empties the server (FLUSHALL), for tests that share one.
func (s *Server) Flush() {
	s.t.Helper()
	if err := s.do("FLUSHALL", "+OK"); err != nil {
		s.t.Fatalf("FLUSHALL: %v", err)
	}
}

// Pause makes Redis hold every client's commands for d (CLIENT PAUSE), as a
// slow Redis would.
func (s *Server) Pause(d time.Duration) {
	s.t.Helper()
	if err := s.do(fmt.Sprintf("CLIENT PAUSE %d ALL", d.Milliseconds()), "+OK"); err != nil {
		s.t.Fatalf("CLIENT PAUSE: %v", err)
	}
}

// Freeze stops the process (SIGSTOP) without closing its sockets: every
// call waits, as on a Redis too slow to answer, until Thaw. The test's
// cleanup kills it even while frozen.
func (s *Server) Freeze() {
	s.t.Helper()
	if err := s.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		s.t.Fatalf("SIGSTOP redis-server: %v", err)
	}
}

// Thaw lets a frozen process go on (SIGCONT).
func (s *Server) Thaw() {
	s.t.Helper()
	if err := s.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		s.t.Fatalf("SIGCONT redis-server: %v", err)
	}
}

func (s *Server) ping() error { return s.do("PING", "+PONG") }

// do sends one inline command and checks the start of its one-line answer.
func (s *Server) do(cmd, want string) error {
	c, err := net.DialTimeout("tcp", s.Addr(), time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte(cmd + "\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if !strings.HasPrefix(line, want) {
		return fmt.Errorf("%s answered %q", cmd, line)
	}
	return nil
}

func freePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}
