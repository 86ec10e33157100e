package server

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"rtgate/mockai"
	"rtgate/server/internal/testhooks"
)

// headStyle is one way a client's upgrade request reaches the gateway: whole,
// or in pieces at awkward moments.
type headStyle struct {
	name  string
	write func(conn net.Conn, head []byte) error
}

// headStyles are the ways a request head may arrive that the front door must
// all answer: in one write; split anywhere, with or without a pause between
// the pieces (a piece may land while the previous one is being handled, or
// after its handler returned); its last bytes alone; a byte at a time; and
// followed at once by a frame the client did not wait to send.
var headStyles = []headStyle{
	{"whole", func(conn net.Conn, head []byte) error { _, err := conn.Write(head); return err }},
	{"split in two", func(conn net.Conn, head []byte) error { return writePieces(conn, head, 0, len(head)/2) }},
	{"split in two, paused", func(conn net.Conn, head []byte) error {
		return writePieces(conn, head, time.Millisecond, len(head)/2)
	}},
	{"last CRLF alone", func(conn net.Conn, head []byte) error { return writePieces(conn, head, 0, len(head)-2) }},
	{"last byte alone, paused", func(conn net.Conn, head []byte) error {
		return writePieces(conn, head, time.Millisecond, len(head)-1)
	}},
	{"in many pieces", func(conn net.Conn, head []byte) error {
		return writePieces(conn, head, 0, 1, 7, 40, 41, 90, len(head)-3, len(head)-1)
	}},
	{"with a frame behind it", func(conn net.Conn, head []byte) error {
		_, err := conn.Write(append(append([]byte(nil), head...), clientFrame(0x81, sessionUpdate(1), true)...))
		return err
	}},
}

// writePieces writes head cut at the given offsets, pausing between pieces.
func writePieces(conn net.Conn, head []byte, pause time.Duration, cuts ...int) error {
	prev := 0
	for _, c := range append(cuts, len(head)) {
		if _, err := conn.Write(head[prev:c]); err != nil {
			return err
		}
		prev = c
		if pause > 0 && c < len(head) {
			time.Sleep(pause)
		}
	}
	return nil
}

// Every upgrade request is answered, however its head arrives and however
// many arrive at once: rounds of connections opened together, each sending its
// head in one of headStyles, each waiting (bounded, generously: a hang, not
// speed, is what fails) for its 101. An answer that never comes is the
// front door losing a request (a read event nobody handled, a connection
// nobody accepted).
func TestFrontDoorAnswersEveryUpgrade(t *testing.T) {
	const rounds, perRound = 6, 40
	mock := startMock(t, mockai.Config{})
	g := startGateway(t, mock, nil)
	head := requestHead("GET /v1/realtime?model=gpt-realtime HTTP/1.1", upgradeHeaders...)

	for round := range rounds {
		var wg sync.WaitGroup
		failures := make(chan string, perRound)
		var conns []net.Conn
		var mu sync.Mutex
		for i := range perRound {
			style := headStyles[(round+i)%len(headStyles)]
			wg.Add(1)
			go func() {
				defer wg.Done()
				conn, err := net.Dial("tcp", g.addr)
				if err != nil {
					failures <- fmt.Sprintf("%s: connect: %v", style.name, err)
					return
				}
				mu.Lock()
				conns = append(conns, conn)
				mu.Unlock()
				_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
				if err := style.write(conn, head); err != nil {
					failures <- fmt.Sprintf("%s: writing the head: %v", style.name, err)
					return
				}
				resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
				switch {
				case err != nil:
					failures <- fmt.Sprintf("%s (local %s): no answer: %v", style.name, conn.LocalAddr(), err)
				case resp.StatusCode != http.StatusSwitchingProtocols:
					failures <- fmt.Sprintf("%s: HTTP %d, want 101", style.name, resp.StatusCode)
				}
			}()
		}
		wg.Wait()
		if msgs := collected(failures); len(msgs) > 0 {
			t.Fatalf("round %d: %d of %d upgrades failed:\n%s", round, len(msgs), perRound, strings.Join(msgs, "\n"))
		}
		for _, c := range conns {
			_ = c.Close()
		}
		waitFor(t, "the round's sessions to end", func() bool { return g.srv.SessionsOpen() == 0 })
	}
}

// socketOf is descriptor fd's socket as /proc names it ("socket:[inode]").
func socketOf(t *testing.T, fd int) string {
	t.Helper()
	target, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(fd))
	if err != nil || !strings.HasPrefix(target, "socket:") {
		t.Fatalf("descriptor %d: %q, %v; want a socket", fd, target, err)
	}
	return target
}

// socketsOf counts the process's descriptors that refer to the same socket
// as descriptor fd.
func socketsOf(t *testing.T, fd int) int { return descriptorsOf(t, socketOf(t, fd)) }

// descriptorsOf counts the process's descriptors that refer to target.
func descriptorsOf(t *testing.T, target string) int {
	t.Helper()
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range entries {
		if l, err := os.Readlink("/proc/self/fd/" + e.Name()); err == nil && l == target {
			n++
		}
	}
	return n
}

// The listening socket is held by one descriptor, closed once at Shutdown.
// netpoll's own listener polled a duplicate and closed that number twice,
// closing whatever descriptor the process had opened in between (a client
// socket, a dial, the spend log's connection) under its owner.
func TestFrontDoorListenerHeldOnce(t *testing.T) {
	srv, ln := newUnservedGateway(t)
	fd, addr := listenerFd(t, ln), ln.Addr().String()
	done := serveChecked(t, srv, ln)
	waitServing(t, srv)
	if n := socketsOf(t, fd); n != 1 {
		t.Fatalf("%d descriptors hold the listening socket, want 1 (netpoll's duplicate is closed twice at Shutdown)", n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	<-done
	if _, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(fd)); err == nil {
		// The number may have been reused since: only a listening socket
		// on the gateway's port would be the listener left open.
		if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			_ = c.Close()
			t.Fatal("the listening socket is still open after Shutdown")
		}
	}
}

// A client socket is the gateway's alone: a child process the gateway's
// process starts (the tests' mockai, redis-server, PostgreSQL, or anything an
// operator's wrapper runs) does not inherit it, so when the gateway closes
// it the client sees the end. netpoll's listener accepted without
// SOCK_CLOEXEC: the child kept the socket open and the refused client waited
// for a FIN that came only when the child exited.
func TestFrontDoorSocketsNotInherited(t *testing.T) {
	g := startGateway(t, nil, nil)
	conn := g.rawDial(t)
	if _, err := conn.Write([]byte("GET /no-such-endpoint HTTP/1.1\r\nHost: gateway\r\n")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the connection to be accepted", func() bool { return g.srv.Handshaking() == 1 })
	child := exec.Command("sleep", "30")
	if err := child.Start(); err != nil {
		t.Fatalf("starting a child process: %v", err)
	}
	t.Cleanup(func() { _ = child.Process.Kill(); _ = child.Wait() })

	if _, err := conn.Write([]byte("\r\n")); err != nil {
		t.Fatal(err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("reading the refusal: %v", err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != http.StatusNotFound {
		t.Fatalf("HTTP %d, want 404", resp.StatusCode)
	}
	if n, err := br.Read(make([]byte, 1)); n > 0 || !connEnded(err) {
		t.Fatalf("after the 404 the connection stayed open (%d bytes, %v): a child process holds the gateway's socket", n, err)
	}
}

// A gateway shut down before netpoll's Serve has taken its listener (Serve
// runs in its own goroutine; a test, or a drain, may end at once) still
// closes the listening socket: netpoll's Shutdown finds nothing to close
// then, and the socket, left open, would be closed by its finalizer at some
// later garbage collection, by number, when that number belongs to another
// socket.
func TestFrontDoorShutdownBeforeServeClosesListener(t *testing.T) {
	srv, ln := newUnservedGateway(t)
	sock := socketOf(t, listenerFd(t, ln))
	shutDown, serving := make(chan struct{}), make(chan struct{})
	srv.setDoorHooks(&testhooks.Door{Serve: func() { close(serving); <-shutDown }})
	done := serveChecked(t, srv, ln)
	<-serving
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = srv.Shutdown(ctx)
	close(shutDown)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not return after Shutdown")
	}
	if n := descriptorsOf(t, sock); n != 0 {
		t.Fatalf("after Shutdown and Serve's return %d descriptors still hold the listening socket", n)
	}
}

// waitServing waits until srv's front door has adopted its listener (its
// descriptor, listenerFd, is the one netpoll polls).
func waitServing(t *testing.T, srv *Server) {
	t.Helper()
	waitFor(t, "the gateway to serve", func() bool { return srv.front.Addr() != nil })
}

// listenerFd is ln's descriptor number.
func listenerFd(t *testing.T, ln net.Listener) int {
	t.Helper()
	raw, err := ln.(*net.TCPListener).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	fd := -1
	if err := raw.Control(func(f uintptr) { fd = int(f) }); err != nil {
		t.Fatal(err)
	}
	return fd
}

// A gateway's start and shutdown touch no socket but its own: a gateway
// keeps answering every request while others in the same process start and
// shut down beside it (the tests run hundreds in one process). Before, each
// shutdown could close or steal a socket another had just accepted (netpoll's
// listener closed a descriptor number twice; with the race detector a
// listener's late hang-up was dispatched by number): measured 23 of 29,243
// requests lost to 3,000 neighbour shutdowns, as EOF, resets and an
// unanswered request.
func TestFrontDoorNeighbourShutdowns(t *testing.T) {
	const neighbours, clients = 600, 4
	g := startGateway(t, nil, nil)
	stop := make(chan struct{})
	failures := make(chan string, 64)
	var requests atomic.Int64
	var wg sync.WaitGroup
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				if err := healthOnce(g.addr); err != nil {
					select {
					case failures <- err.Error():
					default:
					}
				}
				requests.Add(1)
			}
		}()
	}
	for range neighbours {
		startAndShutDown(t)
	}
	close(stop)
	wg.Wait()
	// With the race detector netpoll dispatches a socket's late hang-up by
	// its descriptor number (docs/known-issues.md), which now and then ends
	// a connection another gateway of the process has just accepted under
	// that number: 1 of 10,398 requests once, with the two runners' suites
	// side by side. That is netpoll's race build, not the gateways' own
	// closes (before the fix, 23 of 29,243: 8 in 10,000), so it is allowed
	// there up to 1 in 10,000, rounded up (a loaded box makes fewer than
	// 10,000 requests in the run: 1 of 7,339 failed so on 2026-12-05 with
	// an allowance rounded down to 0), and never without -race.
	allowed := 0
	if raceEnabled {
		allowed = int((requests.Load() + 9999) / 10000)
	}
	if msgs := collected(failures); len(msgs) > allowed {
		t.Fatalf("%d of %d requests failed while %d gateways started and shut down beside it (race build: %v, allowed %d):\n%s",
			len(msgs), requests.Load(), neighbours, raceEnabled, allowed, strings.Join(msgs, "\n"))
	}
}

// healthOnce asks addr's /health on a fresh connection.
func healthOnce(addr string) error {
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		return err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := conn.Write([]byte("GET /health HTTP/1.1\r\nHost: gateway\r\n\r\n")); err != nil {
		return err
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		return fmt.Errorf("local %s: %w", conn.LocalAddr(), err)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("HTTP %d", resp.StatusCode)
	}
	return nil
}

// startAndShutDown starts a gateway on a fresh listener and shuts it down
// as soon as it serves.
func startAndShutDown(t *testing.T) {
	t.Helper()
	srv, ln := newUnservedGateway(t)
	done := serveChecked(t, srv, ln)
	waitServing(t, srv)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = srv.Shutdown(ctx)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("a neighbour's Serve did not return after Shutdown")
	}
}

// newUnservedGateway is a gateway with no upstream and a fresh loopback
// listener, not yet serving; the caller serves it and shuts it down.
func newUnservedGateway(t *testing.T) (*Server, net.Listener) {
	t.Helper()
	cfg := Defaults()
	cfg.MasterKey, cfg.UpstreamKey, cfg.AdminAddr = testMasterKey, testUpstreamKey, ""
	cfg.Pool.Size = 0
	srv, err := newServer(testContext(), cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return srv, ln
}

// collected closes ch, whose senders are done, and returns what it holds.
func collected(ch chan string) []string {
	close(ch)
	var out []string
	for m := range ch {
		out = append(out, m)
	}
	return out
}
