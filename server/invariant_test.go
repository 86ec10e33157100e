package server

import (
	"bufio"
	"context"
	"crypto/tls"
	"io"
	"log/slog"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cloudwego/netpoll"
	"github.com/gobwas/ws/wsutil"
	"github.com/gorilla/websocket"
	"golang.org/x/sys/unix"

	"rtgate/internal/testwait"
	"rtgate/mockai"
	"rtgate/server/internal/testhooks"
)

// These tests hold the server to the inline invariant (package poller's doc): no
// netpoll Close may land in a client socket's handler task on its poller, no
// panic may leave a handler, and no handler on a poller may wait for a lock
// another goroutine holds. Each drives its race's window with a hook, so
// that today's outcome is the same every run; under the pool runner they
// check the same sequences end as a user expects.

// echoOnce sends msg and reads it back.
func echoOnce(t *testing.T, c *websocket.Conn, msg string) error {
	t.Helper()
	_ = c.SetWriteDeadline(time.Now().Add(testwait.Timeout))
	if err := c.WriteMessage(websocket.TextMessage, []byte(msg)); err != nil {
		return err
	}
	_ = c.SetReadDeadline(time.Now().Add(testwait.Timeout))
	_, got, err := c.ReadMessage()
	if err == nil && string(got) != msg {
		t.Fatalf("echo %q, want %q", got, msg)
	}
	return err
}

// TestHandshakeTimerFiringAtTheAnswerLeavesTheSession: the handshake timer
// fires, and before its function acts the request is answered and the
// session opens (Timer.Stop cannot stop a function already running). The
// timer used to Close the socket anyway: the new session died, and under
// inline handlers the Close could land in its handler task on the poller
// (issue 20, path 2). Now the timer finds itself stopped and does nothing.
func TestHandshakeTimerFiringAtTheAnswerLeavesTheSession(t *testing.T) {
	mock := startMock(t, mockai.Config{Echo: true})
	g := startGateway(t, mock, func(s *Settings) { s.HandshakeTimeout = 300 * time.Millisecond })
	fired, release, acted := make(chan struct{}), make(chan struct{}), make(chan struct{})
	var once, doneOnce sync.Once
	g.srv.setDoorHooks(&testhooks.Door{
		HandshakeTimer: func() {
			once.Do(func() {
				close(fired)
				<-release
			})
		},
		HandshakeTimerDone: func() { doneOnce.Do(func() { close(acted) }) },
	})
	raw, err := net.Dial("tcp", g.addr)
	if err != nil {
		t.Fatal(err)
	}
	<-fired // the timer's function is running, paused before it acts
	d := dialer()
	d.NetDialContext = func(context.Context, string, string) (net.Conn, error) { return raw, nil }
	c := dialWith(t, d, g.url("model=gpt-realtime"), bearer(testMasterKey))
	defer c.Close()
	if e := read(t, c); e.typ() != "session.created" {
		t.Fatalf("first event %v, want session.created", e)
	}
	close(release)
	<-acted
	for i := range 3 {
		if err := echoOnce(t, c, `{"type":"ping","n":`+string(rune('0'+i))+`}`); err != nil {
			t.Fatalf("the session died after the late handshake timer: %v", err)
		}
	}
	if testwait.PollerSpinning() {
		t.Fatal("a poller spins in FDOperator.unused")
	}
}

// TestRequestHandlerPanicDropsOnlyThatConnection: a panic in a relaying
// client's read handler used to leave the handler: on the poller it ended
// the process, on the pool netpoll's deferred Close ran and the panic was
// never reported with our log (issue 20, path 5). Now it is logged with its
// stack, that connection is dropped, and the gateway serves on.
func TestRequestHandlerPanicDropsOnlyThatConnection(t *testing.T) {
	mock := startMock(t, mockai.Config{Echo: true})
	logs := &syncBuffer{}
	g := startGatewayLog(t, mock, nil, slog.New(slog.NewTextHandler(logs, nil)))
	var victim atomic.Pointer[netpoll.Connection]
	var armed atomic.Bool
	g.srv.setDoorHooks(&testhooks.Door{Request: func(c netpoll.Connection) {
		if armed.Load() && victim.CompareAndSwap(nil, &c) {
			panic("request handler bug")
		}
	}})
	c := g.dial(t, "model=gpt-realtime", bearer(testMasterKey))
	defer c.Close()
	if e := read(t, c); e.typ() != "session.created" {
		t.Fatalf("first event %v, want session.created", e)
	}
	armed.Store(true)
	_ = c.WriteMessage(websocket.TextMessage, []byte(`{"type":"boom"}`))
	_ = c.SetReadDeadline(time.Now().Add(testwait.Timeout))
	if _, _, err := c.ReadMessage(); err == nil {
		t.Fatal("the connection whose handler panicked got a message, want it dropped")
	} else if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatal("the connection whose handler panicked was never dropped")
	}
	out := logs.String()
	if !strings.Contains(out, "request handler panicked") || !strings.Contains(out, "request handler bug") ||
		!strings.Contains(out, "invariant_test.go") {
		t.Fatalf("the panic was not logged with its stack; log:\n%s", out)
	}
	armed.Store(false)
	testwait.NoSpin(t, "the dropped session to end", func() bool { return g.srv.SessionsOpen() == 0 })
	// The gateway serves on, on every poller.
	for range 2 * runtime.GOMAXPROCS(0) {
		c2 := g.dial(t, "model=gpt-realtime", bearer(testMasterKey))
		if e := read(t, c2); e.typ() != "session.created" {
			t.Fatalf("first event %v, want session.created", e)
		}
		if err := echoOnce(t, c2, `{"type":"after"}`); err != nil {
			t.Fatalf("a session after the panic: %v", err)
		}
		_ = c2.Close()
	}
}

// pollerWaitsInOnRequest reports whether some goroutine waits for a lock
// inside onRequest, and whether that goroutine is a netpoll poller.
func pollerWaitsInOnRequest() (waiting, onPoller bool) {
	buf := make([]byte, 4<<20)
	buf = buf[:runtime.Stack(buf, true)]
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "(*Door).onRequest") && strings.Contains(g, "sync.(*Mutex).Lock") {
			waiting = true
			if strings.Contains(g, "netpoll.(*defaultPoll).Wait") {
				onPoller = true
			}
		}
	}
	return waiting, onPoller
}

// TestTLSRequestHandledOffThePollerDoesNotStallIt: on the TLS listener the
// first request is handled by the handshake's goroutine, which holds the
// connection's read lock until it is done; the session it opens used to go
// inline at once, so the client's next frame ran its handler on the poller,
// which waited there for that lock, every socket of the poller with it (the
// stall of issue 20). Now the connection turns inline only once that
// goroutine has let go: the wait is a pool goroutine's.
func TestTLSRequestHandledOffThePollerDoesNotStallIt(t *testing.T) {
	cert := newListenerCert(t)
	mock := startMock(t, mockai.Config{Echo: true})
	g := startGateway(t, mock, func(c *Settings) { c.TLSCert, c.TLSKey = cert.certFile, cert.keyFile })
	release := make(chan struct{})
	var once sync.Once
	var requestBytes, sent atomic.Int64
	g.srv.setDoorHooks(&testhooks.Door{TLSHandshaken: func(c netpoll.Connection, waitReads func()) {
		// Wait until everything the client sent, its request included, is
		// out of the kernel and netpoll and in the handshake's hands: the
		// goroutine will handle the request itself.
		fd := c.(netpoll.Conn).Fd()
		deadline := time.Now().Add(testwait.Timeout)
		for time.Now().Before(deadline) {
			info, err := unix.GetsockoptTCPInfo(fd, unix.IPPROTO_TCP, unix.TCP_INFO)
			queued, err2 := unix.IoctlGetInt(fd, unix.SIOCINQ)
			if err == nil && err2 == nil && requestBytes.Load() > 0 && int64(info.Bytes_received) == sent.Load() &&
				queued == 0 && c.Reader().Len() == 0 {
				waitReads() // a handler still moving the last bytes
				return
			}
			time.Sleep(time.Millisecond)
		}
	}, TLSRequest: func(opened bool) {
		if !opened {
			t.Errorf("the request behind the client's Finished was not handled by the handshake goroutine")
			return
		}
		once.Do(func() {
			select {
			case <-release:
			case <-time.After(testwait.Timeout):
			}
		})
	}})
	c := dialTLSRequestWithFinished(t, g, cert, &requestBytes, &sent)
	defer c.tc.Close()
	if err := c.send(`{"type":"while the request goroutine holds on"}`); err != nil {
		t.Fatal(err)
	}
	var onPoller bool
	waitFor(t, "the client's frame's handler waiting for the request goroutine", func() bool {
		var waiting bool
		waiting, onPoller = pollerWaitsInOnRequest()
		return waiting
	})
	close(release)
	if onPoller {
		t.Fatal("a poller goroutine waits in onRequest for the request goroutine's lock: every socket of that poller stalls")
	}
	for _, want := range []string{"session.created", "while the request"} {
		got, err := c.recv()
		if err != nil || !strings.Contains(got, want) {
			t.Fatalf("got %q %v, want %s", got, err, want)
		}
	}
	if err := c.send(`{"type":"inline now"}`); err != nil {
		t.Fatal(err)
	}
	if got, err := c.recv(); err != nil || !strings.Contains(got, "inline now") {
		t.Fatalf("echo %q %v", got, err)
	}
}

// TestShutdownWithSendingSessionsNeverSpins: netpoll's EventLoop.Shutdown
// Closes each connection it finds idle, not atomically with the poller: a
// frame arriving in between starts an inline task and the Close lands in it
// (issue 20, path 1). Shutdown now hangs every client connection up and
// waits for them to close before it calls netpoll's, which then finds none:
// that is checked every round, deterministically, at the moment netpoll's
// Shutdown is called (the old code left all of them to it). The spin itself
// is rare in this harness (measured on the 2-core box under load: about one
// round in 100 with the old code, so no affordable number of rounds catches
// it with certainty); each round still checks that every client saw its
// connection end and no poller spins, with 64 sessions that keep sending.
func TestShutdownWithSendingSessionsNeverSpins(t *testing.T) {
	const rounds, sessions = 8, 64
	mock := startMock(t, mockai.Config{Echo: true})
	for round := range rounds {
		g := startGateway(t, mock, nil)
		var leftForNetpoll atomic.Int64
		leftForNetpoll.Store(-1)
		g.srv.setDoorHooks(&testhooks.Door{LoopShutdown: func(open int64) { leftForNetpoll.Store(open) }})
		var wg sync.WaitGroup
		var ended atomic.Int32
		stop := make(chan struct{})
		conns := make([]*websocket.Conn, sessions)
		for i := range conns {
			conns[i] = g.dial(t, "model=gpt-realtime", bearer(testMasterKey))
		}
		for _, c := range conns {
			wg.Add(2)
			go func() { // keeps sending until the connection ends
				defer wg.Done()
				for {
					select {
					case <-stop:
						return
					default:
					}
					_ = c.SetWriteDeadline(time.Now().Add(testwait.Timeout))
					if c.WriteMessage(websocket.TextMessage, []byte(`{"type":"x"}`)) != nil {
						return
					}
				}
			}()
			go func() { // reads until it ends
				defer wg.Done()
				_ = c.SetReadDeadline(time.Now().Add(testwait.Timeout))
				for {
					if _, _, err := c.ReadMessage(); err != nil {
						ended.Add(1)
						return
					}
				}
			}()
		}
		ctx, cancel := context.WithTimeout(context.Background(), testwait.Timeout)
		_ = g.srv.Shutdown(ctx)
		cancel()
		if n := leftForNetpoll.Load(); n != 0 {
			t.Fatalf("round %d: netpoll's Shutdown found %d client connections to Close itself, want none", round, n)
		}
		testwait.NoSpin(t, "every client to see its connection end", func() bool { return ended.Load() == sessions })
		close(stop)
		for _, c := range conns {
			_ = c.Close()
		}
		wg.Wait()
		// Every poller still serves: a spin left behind shows here, before
		// the next round's dials would wait on it.
		testwait.NoSpin(t, "no goroutine left in FDOperator.unused", func() bool { return !testwait.PollerSpinning() })
		if t.Failed() {
			t.Fatalf("round %d", round)
		}
	}
}

// releasingConn passes its first write (the ClientHello) through and holds
// later ones until the write after flushAfter is set, which goes out with
// them: a TLS 1.3 client's Finished and its upgrade request in one segment.
type releasingConn struct {
	net.Conn
	mu         sync.Mutex
	writes     int
	flushAfter bool
	released   bool
	held       []byte
	lastWrite  *atomic.Int64 // the size of the write that released the held ones
	sent       *atomic.Int64 // bytes written to the socket
}

func (c *releasingConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.writes++
	if c.writes == 1 || c.released {
		n, err := c.Conn.Write(p)
		c.sent.Add(int64(n))
		return n, err
	}
	c.held = append(c.held, p...)
	if !c.flushAfter {
		return len(p), nil
	}
	c.flushAfter, c.released = false, true
	n, err := c.Conn.Write(c.held)
	c.sent.Add(int64(n))
	c.lastWrite.Store(int64(len(p)))
	c.held = nil
	return len(p), err
}

func (c *releasingConn) sendHeldWithNext() {
	c.mu.Lock()
	c.flushAfter = true
	c.mu.Unlock()
}

// rawWS is a client WebSocket over a TLS connection the test upgraded by
// hand, framed with gobwas's client helpers.
type rawWS struct {
	tc *tls.Conn
	br *bufio.Reader
}

func (w *rawWS) send(msg string) error {
	_ = w.tc.SetWriteDeadline(time.Now().Add(testwait.Timeout))
	return wsutil.WriteClientText(w.tc, []byte(msg))
}

func (w *rawWS) recv() (string, error) {
	_ = w.tc.SetReadDeadline(time.Now().Add(testwait.Timeout))
	b, _, err := wsutil.ReadServerData(struct {
		io.Reader
		io.Writer
	}{w.br, w.tc})
	return string(b), err
}

// dialTLSRequestWithFinished opens a wss:// session whose upgrade request
// reaches the gateway in one segment with the TLS Finished, so that the
// handshake's goroutine handles it (off netpoll's handlers). requestBytes is
// set to the size of the write that carried them, sent to every byte
// written.
func dialTLSRequestWithFinished(t *testing.T, g *gateway, cert listenerCert, requestBytes, sent *atomic.Int64) *rawWS {
	t.Helper()
	raw := g.rawDial(t)
	rc := &releasingConn{Conn: raw, lastWrite: requestBytes, sent: sent}
	tc := tls.Client(rc, &tls.Config{RootCAs: cert.roots, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS13})
	_ = raw.SetDeadline(time.Now().Add(testwait.Timeout))
	if err := tc.Handshake(); err != nil { // TLS 1.3: done once the Finished is written (held)
		t.Fatal(err)
	}
	rc.sendHeldWithNext()
	req := requestHead("GET /v1/realtime?model=gpt-realtime HTTP/1.1", upgradeHeaders...)
	if _, err := tc.Write(req); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(tc)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("upgrade: %v", err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade answered %d, want 101", resp.StatusCode)
	}
	_ = raw.SetDeadline(time.Time{})
	return &rawWS{tc: tc, br: br}
}

// TestTLSRequestReadHoldsOffAHangUp: the TLS listener's first request is
// read by the handshake's goroutine, outside netpoll's handler, and a
// hang-up at that moment made netpoll run the close callbacks on the poller
// and free the input buffer under that read (issue 20, item 3). Now the read
// is guarded: the close callbacks wait for it. The client hangs up while the
// read is paused; the test waits until the poller either is held off (a
// close callback waiting in the endpoint's guard) or has closed the
// connection under the read.
func TestTLSRequestReadHoldsOffAHangUp(t *testing.T) {
	cert := newListenerCert(t)
	mock := startMock(t, mockai.Config{Echo: true})
	g := startGateway(t, mock, func(c *Settings) { c.TLSCert, c.TLSKey = cert.certFile, cert.keyFile })
	raw := g.rawDial(t)
	var once sync.Once
	heldOff := make(chan bool, 1)
	g.srv.setDoorHooks(&testhooks.Door{HeadRead: func(offLoop bool) {
		if !offLoop {
			return // a read from netpoll's handler: not the one under test
		}
		once.Do(func() {
			_ = raw.Close() // the client hangs up now
			deadline := time.Now().Add(testwait.Timeout)
			for time.Now().Before(deadline) {
				if g.srv.Handshaking() == 0 {
					heldOff <- false // the close callbacks ran under the read (onClose gives the count back)
					return
				}
				if closeCallbackWaitsForRead() {
					heldOff <- true
					return
				}
				time.Sleep(time.Millisecond)
			}
		})
	}})
	tc := tls.Client(raw, &tls.Config{RootCAs: cert.roots, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS13})
	_ = raw.SetDeadline(time.Now().Add(testwait.Timeout))
	if err := tc.Handshake(); err != nil {
		t.Fatal(err)
	}
	select {
	case ok := <-heldOff:
		if !ok {
			t.Fatal("the hang-up's close callbacks ran (and netpoll freed the input buffer) during the request's read")
		}
	case <-time.After(testwait.Timeout):
		t.Fatal("the poller neither held off the hang-up nor closed the connection")
	}
	waitFor(t, "the hung-up connection to close after the read", func() bool { return g.srv.Handshaking() == 0 })
}

// closeCallbackWaitsForRead reports whether a netpoll close callback waits
// in an endpoint's guard for a read by hand.
func closeCallbackWaitsForRead() bool {
	buf := make([]byte, 4<<20)
	buf = buf[:runtime.Stack(buf, true)]
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "(*Endpoint).guard.func1") && strings.Contains(g, "sync.(*Mutex).Lock") {
			return true
		}
	}
	return false
}
