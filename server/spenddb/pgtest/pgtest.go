// Package pgtest runs a real PostgreSQL server for tests: initdb into a
// fresh folder, postgres on a free loopback port, stopped (and restarted)
// by its PID. PostgreSQL refuses to run as root, so as root the server runs
// as the postgres OS user, which Debian's postgresql package creates.
package pgtest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// Server is a PostgreSQL server started for a test.
type Server struct {
	// URL is the connection string of its postgres database.
	URL string

	t    testing.TB
	bin  string // folder of initdb and postgres
	dir  string // holds data/ and the socket
	port int
	cred *syscall.Credential // nil when not root
	cmd  *exec.Cmd
	exit chan error
}

// binDir finds the newest /usr/lib/postgresql/<version>/bin with initdb.
func binDir() (string, error) {
	if d := os.Getenv("PG_BIN"); d != "" {
		return d, nil
	}
	found, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb")
	if len(found) == 0 {
		if p, err := exec.LookPath("initdb"); err == nil {
			return filepath.Dir(p), nil
		}
		return "", errors.New("no PostgreSQL server binaries (initdb) under /usr/lib/postgresql/*/bin or on PATH: apt-get install -y postgresql")
	}
	sort.Slice(found, func(i, j int) bool {
		vi, _ := strconv.Atoi(filepath.Base(filepath.Dir(filepath.Dir(found[i]))))
		vj, _ := strconv.Atoi(filepath.Base(filepath.Dir(filepath.Dir(found[j]))))
		return vi > vj
	})
	return filepath.Dir(found[0]), nil
}

// Start initialises a database cluster and starts the server; it is
// stopped when the test ends.
func Start(t testing.TB) *Server {
	t.Helper()
	bin, err := binDir()
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "rtgate-pg-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	s := &Server{t: t, bin: bin, dir: dir, exit: make(chan error, 1)}
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			t.Fatalf("running as root, and PostgreSQL refuses root: no postgres user to run it as (%v)", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		s.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
		if err := os.Chmod(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(dir, uid, gid); err != nil {
			t.Fatal(err)
		}
	}
	s.port = freePort(t)
	s.URL = fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", s.port)
	initdb := s.command(filepath.Join(bin, "initdb"), "-D", s.data(), "-U", "postgres", "--auth=trust",
		"--no-sync", "-E", "UTF8", "--locale=C")
	if out, err := initdb.CombinedOutput(); err != nil {
		t.Fatalf("initdb: %v\n%s", err, out)
	}
	s.start()
	t.Cleanup(s.stop)
	return s
}

func (s *Server) data() string { return filepath.Join(s.dir, "data") }

func (s *Server) command(name string, args ...string) *exec.Cmd {
	cmd := exec.Command(name, args...)
	cmd.Dir = s.dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred}
	return cmd
}

func (s *Server) start() {
	s.t.Helper()
	logf, err := os.OpenFile(filepath.Join(s.dir, "postgres.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		s.t.Fatal(err)
	}
	defer logf.Close()
	cmd := s.command(filepath.Join(s.bin, "postgres"), "-D", s.data(), "-p", strconv.Itoa(s.port),
		"-k", s.dir, "-c", "listen_addresses=127.0.0.1", "-c", "fsync=off", "-c", "max_connections=50")
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		s.t.Fatalf("starting postgres: %v", err)
	}
	s.cmd = cmd
	exit := make(chan error, 1)
	s.exit = exit
	go func() { exit <- cmd.Wait() }()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		c, err := pgx.Connect(ctx, s.URL)
		if err == nil {
			_ = c.Close(ctx)
			cancel()
			return
		}
		cancel()
		select {
		case err := <-exit:
			log, _ := os.ReadFile(filepath.Join(s.dir, "postgres.log"))
			s.t.Fatalf("postgres exited while starting: %v\n%s", err, log)
		default:
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("postgres did not accept connections within 30 s: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Stop shuts the server down (fast shutdown: open connections are cut) and
// waits for it to exit.
func (s *Server) Stop() { s.stop() }

func (s *Server) stop() {
	if s.cmd == nil {
		return
	}
	s.Resume() // a paused server cannot shut down
	_ = s.cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-s.exit:
	case <-time.After(20 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.exit
	}
	s.cmd = nil
}

// Pause stops the server and its backends in their tracks (SIGSTOP):
// connections stay open and calls hang, as with a database that is up but
// far too slow. Resume lets it go on. Backends call setsid, so they are
// found by parent PID rather than by process group.
func (s *Server) Pause() { s.signalAll(syscall.SIGSTOP) }

// Resume undoes Pause.
func (s *Server) Resume() { s.signalAll(syscall.SIGCONT) }

func (s *Server) signalAll(sig syscall.Signal) {
	if s.cmd == nil {
		return
	}
	pid := s.cmd.Process.Pid
	_ = syscall.Kill(pid, sig)
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, st := range stats {
		b, err := os.ReadFile(st)
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...; comm may hold spaces, so cut at the last ')'.
		rest := string(b)
		if k := strings.LastIndexByte(rest, ')'); k >= 0 {
			rest = rest[k+1:]
		}
		f := strings.Fields(rest)
		if len(f) < 2 || f[1] != strconv.Itoa(pid) {
			continue
		}
		if child, err := strconv.Atoi(filepath.Base(filepath.Dir(st))); err == nil {
			_ = syscall.Kill(child, sig)
		}
	}
}

// Restart starts a stopped server again on the same port and data.
func (s *Server) Restart() {
	s.t.Helper()
	s.start()
}

// Conn opens a connection for the test's own queries.
func (s *Server) Conn(t testing.TB) *pgx.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, s.URL)
	if err != nil {
		t.Fatalf("connecting to the test postgres: %v", err)
	}
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	return c
}

func freePort(t testing.TB) int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}
