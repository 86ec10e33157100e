// Package proc starts and stops the child processes the benchmarks run
// (mockai, the gateway and the peer proxies): by PID, with their output in
// log files, waiting for mockai's ready line or the gateway's /health, and
// killed with the benchmark if it dies (Pdeathsig on Linux). It also reads
// what a child's process tree uses (RSS and CPU, from /proc) and remembers
// the descendants it saw, so that Stop can end a proxy's workers too. And it
// says the open-file limit those processes run under (FileLimit), which
// wsbench and mockai raise for themselves at start (fdlimit.Raise).
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
	"sync"
	"syscall"
	"time"
)

// Proc is a child process a benchmark started.
type Proc struct {
	name   string
	cmd    *exec.Cmd
	log    *os.File
	exited chan struct{} // closed once the process has exited
	err    error         // its exit status, valid once exited is closed

	mu   sync.Mutex
	seen map[int]uint64 // descendants seen by Usage: pid -> start time
}

// Spec says how to start a child.
type Spec struct {
	Name, Bin string
	Args      []string
	// Env is the child's whole environment (nil: this process's own).
	Env []string
	// LogPath receives the child's stdout and stderr; Stdout, if not nil,
	// receives stdout instead.
	LogPath string
	Stdout  io.Writer
	// DeathSignal is what the kernel sends the child if the benchmark dies
	// without stopping it (0: SIGKILL). nginx gets SIGTERM: its workers
	// outlive a killed master, while on SIGTERM the master takes them down.
	DeathSignal syscall.Signal
}

// Start starts the child described by s.
func Start(s Spec) (*Proc, error) {
	if _, err := os.Stat(s.Bin); err != nil {
		return nil, fmt.Errorf("%s binary: %w", s.Name, err)
	}
	log, err := os.Create(s.LogPath)
	if err != nil {
		return nil, fmt.Errorf("%s log: %w", s.Name, err)
	}
	cmd := exec.Command(s.Bin, s.Args...)
	cmd.Env = s.Env
	cmd.Stdout, cmd.Stderr = log, log
	if s.Stdout != nil {
		cmd.Stdout = s.Stdout
	}
	sig := s.DeathSignal
	if sig == 0 {
		sig = syscall.SIGKILL
	}
	cmd.SysProcAttr = childAttr(sig)
	if err := cmd.Start(); err != nil {
		log.Close()
		return nil, fmt.Errorf("start %s: %w", s.Name, err)
	}
	p := &Proc{name: s.Name, cmd: cmd, log: log, exited: make(chan struct{}), seen: map[int]uint64{}}
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

// Stop ends the process by its PID: SIGTERM, then SIGKILL after grace;
// then SIGKILL for every descendant Usage saw that is still the same
// process (same PID and start time, so a reused PID is never signalled).
// It returns the exit status; it is safe to call more than once.
func (p *Proc) Stop(grace time.Duration) error {
	if p.Running() {
		_, _ = p.Usage() // learn the current descendants before the root goes
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
	p.mu.Lock()
	for pid, start := range p.seen {
		if st, err := procStat(pid); err == nil && st.Starttime == start {
			if d, err := os.FindProcess(pid); err == nil { // not syscall.Kill: proc builds off Unix too
				_ = d.Kill()
				_ = d.Release()
			}
		}
		delete(p.seen, pid)
	}
	p.mu.Unlock()
	_ = p.log.Close()
	return p.err
}

// Usage is the RSS and CPU of the process and its descendants now.
func (p *Proc) Usage() (Usage, error) {
	if !p.Running() {
		return Usage{}, fmt.Errorf("%s exited: %v", p.name, p.err)
	}
	u, err := treeUsage(procRoot, p.PID())
	if err != nil {
		return Usage{}, fmt.Errorf("%s: %w", p.name, err)
	}
	p.mu.Lock()
	for _, c := range u.Procs[1:] {
		p.seen[c.PID] = c.Starttime
	}
	p.mu.Unlock()
	return u, nil
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

// WaitHealthy polls url until it answers 200, the process exits, ctx ends
// or wait passes.
func WaitHealthy(ctx context.Context, p *Proc, url string, wait time.Duration) error {
	client := &http.Client{Timeout: time.Second}
	return WaitReady(ctx, p, wait, func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("%s answered %s", url, resp.Status)
		}
		return nil
	})
}

// WaitReady retries probe (each try bounded to 2 s) every 50 ms until it
// succeeds, the process exits, ctx ends or wait passes.
func WaitReady(ctx context.Context, p *Proc, wait time.Duration, probe func(context.Context) error) error {
	deadline := time.Now().Add(wait)
	for {
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		err := probe(pctx)
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-p.exited:
			return p.ExitError()
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not ready within %v (%v); last log lines:\n%s", p.name, wait, err, Tail(p.log.Name(), 20))
		}
	}
}

// FreePort asks the kernel for an unused loopback port. Another process
// could take it before the child binds it; the caller retries then.
func FreePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// Name is the name the process was started with.
func (p *Proc) Name() string { return p.name }

// Exited is closed once the process has exited.
func (p *Proc) Exited() <-chan struct{} { return p.exited }

// LogPath is the file the process's output goes to.
func (p *Proc) LogPath() string { return p.log.Name() }

// PID is the process's id.
func (p *Proc) PID() int { return p.cmd.Process.Pid }
