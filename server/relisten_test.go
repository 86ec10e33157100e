package server

import (
	"context"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cloudwego/netpoll"
	"golang.org/x/sys/unix"

	"rtgate/mockai"
	"rtgate/server/frontdoor"
)

// onePollerEnv marks the child process in which
// TestFrontDoorServedAgainAfterStaleHangUp runs on a single netpoll poller.
const onePollerEnv = "RTGATE_TEST_ONE_POLLER"

// TestFrontDoorServedAgainAfterStaleHangUp reproduces netpoll's race-build
// lookup of an event's handler by descriptor number (docs/known-issues.md)
// and shows the front door keeps answering. On one poller:
//
//  1. a handler holds the poller (a test event loop whose OnPrepare waits:
//     OnPrepare runs on the poller under either runner), while a second
//     connect to that loop and a hang-up of a netpoll socket X (its peer
//     closes) queue up, in that order;
//  2. released, the poller fetches both events in one batch and is held
//     again by the second connect's OnPrepare, with X's hang-up fetched
//     and not yet handled;
//  3. X is closed from the test goroutine (as the closes on the
//     closecheck allowlist do) and the gateway's listener takes its
//     descriptor number; the gateway serves it on the same poller;
//  4. released, the poller hands X's hang-up to the operator it finds
//     under that number. With -race that is the gateway's listener: netpoll
//     detaches it and its Serve returns ("listener close") while the
//     socket still listens. Without -race netpoll finds X's own freed
//     operator through the event's pointer and drops the event. A third
//     connect to the holder shows the poller is past that batch.
//
// Either way a client's upgrade must then succeed. Before serveListener, with
// -race, it went unanswered (10 of 10 runs on a single poller, as in CI's
// intermittent "upgrade not answered"); the restart count tells whether the
// stale hang-up reached the listener: 1 with -race, 0 without. The test runs
// in a child process with GOMAXPROCS=1, which makes netpoll use one poller
// under both runners (the suite's own process has one per core under
// inline handlers), so that X, the holder and the listener share it.
func TestFrontDoorServedAgainAfterStaleHangUp(t *testing.T) {
	if os.Getenv(onePollerEnv) == "" {
		runOnOnePoller(t)
		return
	}
	overBoth(t, mockai.Config{}, func(t *testing.T, mock *mockai.Server, trust func(*Settings)) {
		logs := &syncBuffer{}
		srv := newTestServer(t, mock, trust, slog.New(slog.NewTextHandler(logs, nil)))
		h := holdPoller(t)
		x, peer := dialNetpoll(t)
		xfd := x.(interface{ Fd() int }).Fd()
		pollerEpoll := onlyEpollWatching(t, xfd)

		// 1: held, a second connect and X's hang-up queue behind it.
		h.connect(t)
		h.waitHeld(t)
		h.connect(t)
		waitFor(t, "the second connect to queue", func() bool {
			// tcpi_unacked of a listening socket: connects nobody accepted yet
			info, err := unix.GetsockoptTCPInfo(h.ln.Fd(), unix.IPPROTO_TCP, unix.TCP_INFO)
			return err == nil && info.Unacked == 1
		})
		_ = peer.Close()
		waitFor(t, "X's hang-up", func() bool { return hungUp(xfd) })

		// 2: held again, X's hang-up fetched.
		h.letGo()
		h.waitHeld(t)

		// 3: X closed, its number taken by the gateway's listener.
		fillers := fillBelow(t, xfd)
		_ = x.Close()
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		closeAll(fillers)
		if err != nil {
			t.Fatal(err)
		}
		if fd := listenerFd(t, ln); fd != xfd {
			_ = ln.Close()
			t.Fatalf("setup: the listener took descriptor %d, not closed X's %d", fd, xfd)
		}
		done := serveChecked(t, srv, ln)
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = srv.Shutdown(ctx)
			<-done
		})
		t.Cleanup(h.stop) // before the gateway's Shutdown: nothing may wait on a held poller
		waitFor(t, "the gateway's listener on the held poller", func() bool {
			return watches(t, pollerEpoll, xfd)
		})

		// 4: the stale hang-up; once a third connect holds the poller, it
		// has handled the rest of that batch. Then a client.
		h.letGo()
		h.connect(t)
		h.waitHeld(t)
		h.letGo()
		g := &gateway{srv: srv, addr: ln.Addr().String(), mock: mock}
		c := g.dial(t, "model=gpt-realtime", bearer(testMasterKey))
		if e := read(t, c); e.typ() != "session.created" {
			t.Fatalf("first event %s, want session.created", e.typ())
		}
		want := 0.0
		if raceEnabled {
			want = 1
		}
		if n := metricValue(t, g, "rtgate_listener_restarts_total"); n != want {
			t.Fatalf("rtgate_listener_restarts_total %v, want %v (race build %v): the stale hang-up did not go where "+
				"netpoll's lookup sends it, so the reproduction no longer lines up", n, want, raceEnabled)
		}
		if raceEnabled && !strings.Contains(logs.String(), "listener close") {
			t.Fatalf("the restart was not logged with netpoll's error; log:\n%s", logs)
		}
	})
}

// runOnOnePoller runs the calling test again in a child process with
// GOMAXPROCS=1 and onePollerEnv set, and fails unless it passed there.
func runOnOnePoller(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-test.run=^"+t.Name()+"$", "-test.count=1", "-test.v", "-test.timeout=2m")
	cmd.Env = append(os.Environ(), onePollerEnv+"=1", "GOMAXPROCS=1")
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--- PASS: "+t.Name()) {
		t.Fatalf("on one poller (a child process with GOMAXPROCS=1): %v\n%s", err, out)
	}
	if testing.Verbose() {
		t.Logf("on one poller (a child process with GOMAXPROCS=1):\n%s", out)
	}
}

// pollerHolder is a netpoll event loop whose OnPrepare waits to be let go:
// OnPrepare runs on the poller goroutine that accepted the connection, so
// each connect to it holds that poller until letGo (or stop).
type pollerHolder struct {
	ln      netpoll.Listener
	held    chan struct{} // OnPrepare has begun to hold
	release chan struct{} // lets one OnPrepare go
	stopped chan struct{} // closed by stop: nothing holds any more
	conns   []net.Conn
}

func holdPoller(t *testing.T) *pollerHolder {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	sl, err := frontdoor.NewListener(ln)
	if err != nil {
		t.Fatal(err)
	}
	h := &pollerHolder{ln: sl, held: make(chan struct{}), release: make(chan struct{}), stopped: make(chan struct{})}
	loop, err := netpoll.NewEventLoop(func(_ context.Context, c netpoll.Connection) error {
		return c.Reader().Skip(c.Reader().Len())
	}, netpoll.WithOnPrepare(func(netpoll.Connection) context.Context {
		select {
		case h.held <- struct{}{}:
			select {
			case <-h.release:
			case <-h.stopped:
			}
		case <-h.stopped:
		}
		return context.Background()
	}))
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- loop.Serve(sl) }()
	t.Cleanup(func() {
		h.stop()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = loop.Shutdown(ctx)
		if err := <-served; err != nil {
			t.Errorf("the holder's Serve: %v", err)
		}
		closeConns(h.conns)
	})
	return h
}

// connect opens a connection to the holder (closed by the holder's cleanup).
func (h *pollerHolder) connect(t *testing.T) {
	t.Helper()
	c, err := net.Dial("tcp", h.ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	h.conns = append(h.conns, c)
}

// waitHeld waits until an OnPrepare holds the poller.
func (h *pollerHolder) waitHeld(t *testing.T) {
	t.Helper()
	select {
	case <-h.held:
	case <-time.After(10 * time.Second):
		t.Fatal("setup: the holder's OnPrepare did not run")
	}
}

// letGo lets the holding OnPrepare return.
func (h *pollerHolder) letGo() { h.release <- struct{}{} }

// stop lets every OnPrepare, now and later, return at once.
func (h *pollerHolder) stop() {
	select {
	case <-h.stopped:
	default:
		close(h.stopped)
	}
}

func closeConns(cs []net.Conn) {
	for _, c := range cs {
		_ = c.Close()
	}
}

// dialNetpoll opens a netpoll client connection (registered on a poller,
// no read handler) to a plain loopback listener, and returns it with the
// listener's side of it; both close when the test ends.
func dialNetpoll(t *testing.T) (netpoll.Connection, net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	x, err := netpoll.DialConnection("tcp", ln.Addr().String(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = x.Close() })
	peer, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = peer.Close() })
	return x, peer
}

// hungUp says whether socket fd has seen its peer's FIN (poll(2) only
// looks: it takes nothing from the socket or from any epoll set).
func hungUp(fd int) bool {
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLRDHUP}}
	n, err := unix.Poll(fds, 0)
	return err == nil && n == 1 && fds[0].Revents&unix.POLLRDHUP != 0
}

// fillBelow opens /dev/null until every descriptor number below fd is in
// use, so that fd, once closed, is the lowest free number: the next socket
// takes it. The caller closes what it returns.
func fillBelow(t *testing.T, fd int) []int {
	t.Helper()
	var fillers []int
	for range fd + 1 {
		f, err := unix.Open(os.DevNull, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			closeAll(fillers)
			t.Fatal(err)
		}
		if f > fd {
			_ = unix.Close(f)
			return fillers
		}
		fillers = append(fillers, f)
	}
	closeAll(fillers)
	t.Fatalf("setup: could not fill the descriptors below %d", fd)
	return nil
}

func closeAll(fds []int) {
	for _, fd := range fds {
		_ = unix.Close(fd)
	}
}

// onlyEpollWatching is the one epoll descriptor of the process that watches
// fd: the netpoll poller that fd is registered on.
func onlyEpollWatching(t *testing.T, fd int) int {
	t.Helper()
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	var found []int
	for _, e := range entries {
		ep, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if link, _ := os.Readlink("/proc/self/fd/" + e.Name()); link == "anon_inode:[eventpoll]" && watches(t, ep, fd) {
			found = append(found, ep)
		}
	}
	if len(found) != 1 {
		t.Fatalf("setup: descriptor %d is watched by epoll descriptors %v, want one netpoll poller", fd, found)
	}
	return found[0]
}

// watches says whether epoll descriptor ep watches fd, from its fdinfo.
func watches(t *testing.T, ep, fd int) bool {
	t.Helper()
	f, err := os.Open("/proc/self/fdinfo/" + strconv.Itoa(ep))
	if err != nil {
		return false
	}
	defer f.Close()
	info, err := io.ReadAll(f)
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(info), "\n") {
		if fields := strings.Fields(line); len(fields) >= 2 && fields[0] == "tfd:" && fields[1] == strconv.Itoa(fd) {
			return true
		}
	}
	return false
}

// A listener that netpoll lets go of and that no longer listens cannot be
// served again: Serve returns the error (cmd/gateway then exits non-zero,
// for a supervisor to start a fresh process) instead of leaving a gateway
// that accepts nothing. Here the socket is shut from outside, not by
// StopAccepting: the poller reports the hang-up and netpoll's Serve returns.
func TestFrontDoorLostListenerEndsServe(t *testing.T) {
	srv, ln := newUnservedGateway(t)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	})
	waitServing(t, srv)
	if err := unix.Shutdown(listenerFd(t, ln), unix.SHUT_RD); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-served:
		if err == nil || !strings.Contains(err.Error(), "no longer listens") {
			t.Fatalf("Serve returned %v, want the listener's loss", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not return: the lost listener passed in silence")
	}
	if n := gathered(t, srv.reg, "rtgate_listener_restarts_total"); n != 0 {
		t.Fatalf("rtgate_listener_restarts_total %v, want 0: a socket that no longer listens was served again", n)
	}
}
