package compare

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

// proc is a child process this package started: a mockai or a gateway.
type proc struct {
	name   string
	cmd    *exec.Cmd
	log    *os.File
	exited chan struct{} // closed when the process has exited
	err    error         // its exit status, valid once exited is closed
}

// startProc starts bin with args and env (nil: inherit), its output going
// to logPath. stdout, if not nil, receives stdout instead of the log.
func startProc(name, bin string, args, env []string, logPath string, stdout io.Writer) (*proc, error) {
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
	p := &proc{name: name, cmd: cmd, log: log, exited: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.exited)
	}()
	return p, nil
}

// stop ends the process by its PID: SIGTERM, then SIGKILL after grace.
// It is safe to call more than once.
func (p *proc) stop(grace time.Duration) {
	select {
	case <-p.exited:
	default:
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
}

// exitError describes an early exit, with the end of the process's log.
func (p *proc) exitError() error {
	return fmt.Errorf("%s exited early (%v); last log lines:\n%s", p.name, p.err, tail(p.log.Name(), 20))
}

// tail returns the last n lines of a file, for error messages.
func tail(path string, n int) string {
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

const mockaiReadyPrefix = "mockai listening on "

// startMockai runs the mockai binary on a kernel-chosen loopback port and
// returns it with its base URL once it has printed its ready line.
func startMockai(ctx context.Context, bin string, args []string, logPath string, wait time.Duration) (*proc, string, error) {
	pr, pw := io.Pipe()
	p, err := startProc("mockai", bin, append([]string{"-addr", "127.0.0.1:0"}, args...), nil, logPath, pw)
	if err != nil {
		return nil, "", err
	}
	ready := make(chan string, 1)
	go func() {
		// First line: the address; the rest goes to the log, so the
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
		return nil, "", p.exitError()
	case <-ctx.Done():
		p.stop(2 * time.Second)
		return nil, "", ctx.Err()
	case <-t.C:
		p.stop(2 * time.Second)
		return nil, "", fmt.Errorf("mockai printed no %q line within %v", mockaiReadyPrefix, wait)
	}
}

// waitHealthy polls url until it answers 200, the process exits, ctx ends
// or wait passes.
func waitHealthy(ctx context.Context, p *proc, url string, wait time.Duration) error {
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
			return p.exitError()
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: %s did not answer 200 within %v; last log lines:\n%s", p.name, url, wait, tail(p.log.Name(), 20))
		}
	}
}

// freePort asks the kernel for an unused loopback port. Another process
// could take it before the gateway binds it; startGateway retries then.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}
