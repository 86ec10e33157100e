package peers

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// child is a process the benchmark started: a proxy, the gateway or mockai. It is
// stopped by its PID, and so are the descendants it was seen with (nginx's workers),
// each identified by PID and start time so a reused PID is never signalled.
type child struct {
	name string
	cmd  *exec.Cmd
	logf *os.File
	proc ProcFS
	log  *slog.Logger
	done chan struct{} // closed once the process has been waited for
	err  error         // its exit status, valid after done

	mu   sync.Mutex
	seen map[int]uint64 // descendants seen: pid -> start time
}

// childSpec says how to start a child.
type childSpec struct {
	name, logPath string
	env           []string // added to the benchmark's own environment
	// deathSig is what the kernel sends the child if the benchmark dies without
	// stopping it (0: SIGKILL). nginx gets SIGTERM: its workers outlive a killed
	// master, while on SIGTERM the master takes them down.
	deathSig syscall.Signal
	bin      string
	args     []string
}

// startChild runs a child with its output going to its log file.
func startChild(spec childSpec, log *slog.Logger) (*child, error) {
	name, bin, args := spec.name, spec.bin, spec.args
	logf, err := os.Create(spec.logPath)
	if err != nil {
		return nil, fmt.Errorf("%s: log file: %w", name, err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), spec.env...)
	cmd.Stdout, cmd.Stderr = logf, logf
	sig := spec.deathSig
	if sig == 0 {
		sig = syscall.SIGKILL
	}
	cmd.SysProcAttr = childAttr(sig)
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("%s: start %s: %w", name, bin, err)
	}
	c := &child{name: name, cmd: cmd, logf: logf, proc: ProcFS{Root: "/proc"}, log: log,
		done: make(chan struct{}), seen: map[int]uint64{}}
	go func() {
		c.err = cmd.Wait()
		close(c.done)
	}()
	log.Debug("started", "process", name, "pid", cmd.Process.Pid, "args", args)
	return c, nil
}

func (c *child) pid() int { return c.cmd.Process.Pid }

// exited reports whether the process has ended, with its status.
func (c *child) exited() (bool, error) {
	select {
	case <-c.done:
		return true, c.err
	default:
		return false, nil
	}
}

// usage samples the process tree's RSS and CPU and remembers its members for stop.
func (c *child) usage() (Usage, error) {
	if done, err := c.exited(); done {
		return Usage{}, fmt.Errorf("%s exited: %v", c.name, err)
	}
	u, err := c.proc.Usage(c.pid())
	if err != nil {
		return Usage{}, fmt.Errorf("%s: %w", c.name, err)
	}
	c.mu.Lock()
	for _, p := range u.Procs[1:] {
		c.seen[p.PID] = p.StartTime
	}
	c.mu.Unlock()
	return u, nil
}

// stop ends the process: SIGTERM, then SIGKILL after grace; then SIGKILL for any
// descendant it was seen with that is still the same process.
func (c *child) stop(grace time.Duration) {
	defer c.logf.Close()
	if done, _ := c.exited(); !done {
		_, _ = c.usage() // learn the current descendants before the root goes
		_ = c.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-c.done:
		case <-time.After(grace):
			c.log.Warn("did not stop in time; killing", "process", c.name, "pid", c.pid())
			_ = c.cmd.Process.Kill()
			<-c.done
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for pid, start := range c.seen {
		if st, err := c.proc.Stat(pid); err == nil && st.StartTime == start {
			c.log.Warn("killing a leftover child process", "process", c.name, "pid", pid)
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// freePort asks the kernel for a free loopback port. Another process could take it
// before the child binds it; the readiness check then fails with a clear error.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

func loopback(port int) string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)) }

var errExited = errors.New("process exited")
