// Package s3test runs a real S3-compatible server as a process for tests:
// s3rver (MIT; github.com/jamhall/s3rver), a Node.js server that keeps its
// objects as files and checks AWS Signature V4 with its fixed key pair. It
// is installed into testdata/node with npm; a test that needs it and finds
// it missing fails (never skips) and says how to install it:
//
//	(cd server/recording/s3test/testdata/node && npm ci --no-audit --no-fund)
//
// (MinIO's server is AGPL and not used here; minio-go, the client, is
// Apache-2.0.)
package s3test

import (
	"bytes"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"
)

// InstallCommand installs the server (what CI runs, from the repository's root).
const InstallCommand = "(cd server/recording/s3test/testdata/node && npm ci --no-audit --no-fund)"

// Server is one s3rver process on a loopback port with one bucket.
type Server struct {
	Endpoint  string // http://127.0.0.1:PORT
	Region    string
	Bucket    string
	AccessKey string
	SecretKey string
	Dir       string // where it keeps the objects

	t      testing.TB
	script string
	port   int

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{}
	out    *lockedBuffer
}

// Start runs s3rver on a free loopback port with its data in a temporary
// directory, waits until it answers, with bucket "recordings" created, and
// stops it when the test ends.
func Start(t testing.TB) *Server {
	t.Helper()
	script := scriptPath()
	if _, err := os.Stat(script); err != nil {
		t.Fatalf("s3test: the S3 server (s3rver) is not installed (%v); install it with: %s", err, InstallCommand)
	}
	if _, err := exec.LookPath("node"); err != nil {
		t.Fatalf("s3test: node is not installed (apt-get install nodejs npm), then: %s", InstallCommand)
	}
	s := &Server{Region: "us-east-1", Bucket: "recordings", AccessKey: "S3RVER", SecretKey: "S3RVER",
		Dir: t.TempDir(), t: t, script: script}
	var err error
	for range 3 { // a port picked free may be taken before the server binds it
		if s.port, err = freePort(); err != nil {
			t.Fatalf("s3test: %v", err)
		}
		if err = s.start(); err == nil {
			break
		}
	}
	if err != nil {
		t.Fatalf("s3test: %v", err)
	}
	s.Endpoint = "http://127.0.0.1:" + strconv.Itoa(s.port)
	t.Cleanup(s.Stop)
	return s
}

// scriptPath is s3rver's entry point under this package's testdata,
// wherever the test runs from.
func scriptPath() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "testdata", "node", "node_modules", "s3rver", "bin", "s3rver.js")
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("a free port: %w", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// start runs the process on s.port and waits until it answers.
func (s *Server) start() error {
	out := &lockedBuffer{}
	cmd := exec.Command("node", s.script, "-d", s.Dir, "-a", "127.0.0.1", "-p", strconv.Itoa(s.port),
		"--no-vhost-buckets", "--configure-bucket", s.Bucket)
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting s3rver: %w", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	s.mu.Lock()
	s.cmd, s.exited, s.out = cmd, exited, out
	s.mu.Unlock()

	url := "http://127.0.0.1:" + strconv.Itoa(s.port) + "/" + s.Bucket
	client := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-exited:
			return fmt.Errorf("s3rver exited at start: %s", out.String())
		default:
		}
		// Any HTTP answer will do: it is listening, and the bucket is
		// created before it listens.
		if resp, err := client.Get(url); err == nil {
			resp.Body.Close()
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	s.kill()
	return fmt.Errorf("s3rver did not answer on port %d within 20s: %s", s.port, out.String())
}

// Stop kills the server (by its PID) and waits for it; the objects stay in
// Dir for a Restart.
func (s *Server) Stop() { s.kill() }

func (s *Server) kill() {
	s.mu.Lock()
	cmd, exited := s.cmd, s.exited
	s.cmd = nil
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Kill()
	<-exited
}

// Restart starts the server again on the same port with the same objects.
func (s *Server) Restart() {
	s.t.Helper()
	s.kill()
	var err error
	for range 20 { // the port may take a moment to be free again
		if err = s.start(); err == nil {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	s.t.Fatalf("s3test: restart on port %d: %v", s.port, err)
}

// Output is what the server printed (for a failing test's message).
func (s *Server) Output() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.out == nil {
		return ""
	}
	return s.out.String()
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.b.Len() > 1<<20 {
		return len(p), nil // enough to tell what went wrong
	}
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
