package poller_test

import (
	"bytes"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cloudwego/netpoll"

	"rtgate/internal/testwait"
	"rtgate/poller"
)

// These tests hold the reactor to the inline invariant (the package doc): no netpoll
// Close may land inside a socket's handler task, and no panic may leave a
// handler. Under HandlersInline a breach spins the socket's poller in
// FDOperator.unused, which testwait.NoSpin names; under the pool they check
// that the same sequence still ends the socket cleanly.

// blockingOwner is an Owner whose first read from netpoll's handler (not
// Start's read by hand) waits, inside the handler task, for release.
type blockingOwner struct {
	h       *poller.Handle
	started bool // Start has returned: later reads come from the handler
	mu      sync.Mutex
	inRead  chan struct{}
	release chan struct{}
	gone    chan struct{}
	goneOne sync.Once
}

func (o *blockingOwner) UpstreamReadable() {
	o.mu.Lock()
	first := o.started && o.inRead != nil
	in := o.inRead
	if first {
		o.inRead = nil
	}
	o.mu.Unlock()
	if first {
		close(in)
		select {
		case <-o.release:
		case <-time.After(5 * time.Second):
		}
	}
	o.h.Endpoint().DiscardInput()
}

func (o *blockingOwner) UpstreamGone() { o.goneOne.Do(func() { close(o.gone) }) }

// heldClose is a netpoll connection whose Close runs at first, before
// netpoll's own.
type heldClose struct {
	netpoll.Connection
	at func()
}

func (c heldClose) Close() error {
	c.at()
	return c.Connection.Close()
}

// Fd is the socket's descriptor (the endpoint reads it through netpoll.Conn).
func (c heldClose) Fd() int { return c.Connection.(netpoll.Conn).Fd() }

// TestCloseChosenWhileDialedNeverLandsInAHandler: closeConn chooses
// netpoll's Close for a dialed socket whose handler is not installed; if
// Handle.Start installs it before that Close lands, the Close used to land
// in the handler's task (issue 20, path 3). Now Start installs no handler on
// a socket the gateway has closed, and the Close finds none.
func TestCloseChosenWhileDialedNeverLandsInAHandler(t *testing.T) {
	side, peer := netpollPair(t)
	defer peer.Close()
	// The endpoint's Close is held at netpoll's Close, after closeConn chose
	// it: the window a racing Handle.Start used to fall into.
	atClose, proceed := make(chan struct{}), make(chan struct{})
	ep := poller.NewPlainEndpoint(heldClose{Connection: side, at: func() {
		close(atClose)
		<-proceed
	}})
	ep.MarkDialed()
	h := poller.NewHandle(ep)
	inRead := make(chan struct{})
	o := &blockingOwner{h: h, inRead: inRead, release: make(chan struct{}), gone: make(chan struct{})}

	closed := make(chan struct{})
	go func() { ep.Close(); close(closed) }()
	<-atClose // the Close is chosen and not yet made

	h.Start(o, nil)
	o.mu.Lock()
	o.started = true
	o.mu.Unlock()
	if _, err := peer.Write([]byte("bytes for the handler")); err != nil {
		t.Fatal(err)
	}
	// With a handler installed, its task is now waiting inside the read;
	// without one, nothing reads.
	select {
	case <-inRead:
	case <-time.After(300 * time.Millisecond):
	}
	close(proceed)
	<-closed
	close(o.release)
	seesClose(t, peer, o.gone)
}

// seesClose waits for the socket's close callback and for its peer to see
// it end; a spinning poller never gets that far.
func seesClose(t *testing.T, peer net.Conn, gone <-chan struct{}) {
	t.Helper()
	peerErr := make(chan error, 1)
	go func() {
		_ = peer.SetReadDeadline(time.Now().Add(testwait.Timeout))
		_, err := io.Copy(io.Discard, peer)
		peerErr <- err
	}()
	var err error
	testwait.NoSpin(t, "the socket's close callback and its peer's EOF", func() bool {
		select {
		case <-gone:
		default:
			return false
		}
		select {
		case err = <-peerErr:
			return true
		default:
			return false
		}
	})
	if err != nil {
		t.Fatalf("the peer did not see the socket close: %v", err)
	}
}

// panicOwner panics on every read from the handler, once armed (after
// Start's read by hand).
type panicOwner struct {
	armed   atomic.Bool
	gone    chan struct{}
	goneOne sync.Once
}

func (o *panicOwner) UpstreamReadable() {
	if o.armed.Load() {
		panic("owner bug")
	}
}
func (o *panicOwner) UpstreamGone() { o.goneOne.Do(func() { close(o.gone) }) }

// TestHandlerPanicIsRecoveredAndDropsTheSocket: a panic in an upstream
// socket's read handler used to leave it: netpoll's task then closed the
// socket from the poller (a spin under inline handlers), or the process
// ended (a panic on the poller goroutine). Now it is logged with its stack,
// the socket dropped, and the process and poller go on (issue 20, path 5).
func TestHandlerPanicIsRecoveredAndDropsTheSocket(t *testing.T) {
	var logged bytes.Buffer
	var logMu sync.Mutex
	prev := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(lockedWriter{&logMu, &logged}, nil)))
	t.Cleanup(func() { slog.SetDefault(prev) })

	side, peer := netpollPair(t)
	defer peer.Close()
	ep := poller.NewPlainEndpoint(side)
	ep.MarkDialed()
	h := poller.NewHandle(ep)
	o := &panicOwner{gone: make(chan struct{})}
	h.Start(o, nil)
	o.armed.Store(true)
	if _, err := peer.Write([]byte("bytes that make the owner panic")); err != nil {
		t.Fatal(err)
	}
	seesClose(t, peer, o.gone)
	logMu.Lock()
	out := logged.String()
	logMu.Unlock()
	if !strings.Contains(out, "read handler panicked") || !strings.Contains(out, "owner bug") || !strings.Contains(out, "invariant_test.go") {
		t.Fatalf("the panic was not logged with its stack; log:\n%s", out)
	}

	// The poller still serves: a new socket relays.
	side2, peer2 := netpollPair(t)
	defer peer2.Close()
	defer side2.Close()
	if _, err := peer2.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	testwait.NoSpin(t, "a new socket's bytes", func() bool { return side2.Reader().Len() == 1 })
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
