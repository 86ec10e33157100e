// Package proc starts and stops the child processes the benchmarks run
// (mockai and the gateway): by PID, with their output in log files, waiting
// for mockai's ready line or the gateway's /health, and killed with the
// benchmark if it dies (Pdeathsig on Linux).
package proc

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// Proc is a child process a benchmark started: mockai or the gateway.
type Proc struct {
	name   string
	cmd    *exec.Cmd
	log    *os.File
	exited chan struct{} // closed once the process has exited
	err    error         // its exit status, valid once exited is closed
}

// Start starts bin with args and env (nil: inherit), its output going
// to logPath; stdout, if not nil, receives stdout instead.
func Start(name, bin string, args, env []string, logPath string, stdout io.Writer) (*Proc, error) {
	if _, err := os.Stat(bin); err != nil {
		return nil, fmt.Errorf("%s binary: %w", name, err)
	}
	log, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("%s log: %w", name, err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = log, log
	if stdout != nil {
		cmd.Stdout = stdout
	}
	cmd.SysProcAttr = childAttr()
	if err := cmd.Start(); err != nil {
		log.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &Proc{name: name, cmd: cmd, log: log, exited: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.exited)
	}()
	return p, nil
}

// Running reports whether the process is still alive.
func (p *Proc) Running() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// Stop ends the process by its PID: SIGTERM, then SIGKILL after grace.
// It returns the exit status; it is safe to call more than once.
func (p *Proc) Stop(grace time.Duration) error {
	if p.Running() {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		t := time.NewTimer(grace)
		select {
		case <-p.exited:
		case <-t.C:
			_ = p.cmd.Process.Kill()
			<-p.exited
		}
		t.Stop()
	}
	_ = p.log.Close()
	return p.err
}

func (p *Proc) ExitError() error {
	return fmt.Errorf("%s exited early (%v); last log lines:\n%s", p.name, p.err, Tail(p.log.Name(), 20))
}

// Tail returns the last n lines of a file, for error messages.
func Tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "(no log)"
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// LogProblems returns the lines of a Go program's log that show it broke:
// a panic, a fatal runtime error, a data race report (for a gateway built
// with -race). At most max lines are returned.
func LogProblems(path string, max int) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() && len(out) < max {
		line := sc.Text()
		if strings.HasPrefix(line, "panic:") || strings.HasPrefix(line, "fatal error:") ||
			strings.Contains(line, "WARNING: DATA RACE") {
			out = append(out, line)
		}
	}
	return out, sc.Err()
}

const mockaiReadyPrefix = "mockai listening on "

// StartMockai runs mockai on a kernel-chosen loopback port and returns it
// with its base URL once it prints its ready line.
func StartMockai(ctx context.Context, bin string, args []string, logPath string, wait time.Duration) (*Proc, string, error) {
	pr, pw := io.Pipe()
	p, err := Start("mockai", bin, append([]string{"-addr", "127.0.0.1:0"}, args...), nil, logPath, pw)
	if err != nil {
		return nil, "", err
	}
	ready := make(chan string, 1)
	go func() {
		// The first line is the address; the rest goes to the log, so the
		// child never blocks on a full pipe.
		sc := bufio.NewScanner(pr)
		sent := false
		for sc.Scan() {
			line := sc.Text()
			if !sent && strings.HasPrefix(line, mockaiReadyPrefix) {
				ready <- strings.TrimSpace(strings.TrimPrefix(line, mockaiReadyPrefix))
				sent = true
				continue
			}
			fmt.Fprintln(p.log, line)
		}
		_, _ = io.Copy(io.Discard, pr)
	}()
	go func() {
		<-p.exited
		pw.Close()
	}()
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case base := <-ready:
		return p, base, nil
	case <-p.exited:
		return nil, "", p.ExitError()
	case <-ctx.Done():
		p.Stop(2 * time.Second)
		return nil, "", ctx.Err()
	case <-t.C:
		p.Stop(2 * time.Second)
		return nil, "", fmt.Errorf("mockai printed no %q line within %v", mockaiReadyPrefix, wait)
	}
}

// WaitHealthy polls url until it answers 200, the process exits, ctx ends
// or wait passes.
func WaitHealthy(ctx context.Context, p *Proc, url string, wait time.Duration) error {
	client := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(wait)
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		if resp, err := client.Do(req); err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-p.exited:
			return p.ExitError()
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: %s did not answer 200 within %v; last log lines:\n%s", p.name, url, wait, Tail(p.log.Name(), 20))
		}
	}
}

// FreePort asks the kernel for an unused loopback port. Another process
// could take it before the gateway binds it; the caller retries then.
func FreePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// Exited is closed once the process has exited.
func (p *Proc) Exited() <-chan struct{} { return p.exited }

// LogPath is the file the process's output goes to.
func (p *Proc) LogPath() string { return p.log.Name() }

// PID is the process's id.
func (p *Proc) PID() int { return p.cmd.Process.Pid }
