package frontdoor

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cloudwego/netpoll"
	"golang.org/x/sys/unix"
)

// Admission at accept. A client connection costs a descriptor, netpoll's
// buffers and a timer from the moment it is accepted, long before its
// request says who it is, so the front door counts it from accept:
//
//   - A connection in its handshake (TLS handshake and HTTP request head,
//     from accept until its request is answered) holds one of the
//     MaxConnections slots, like a session. A connection accepted when
//     sessions and handshakes fill them is refused at once, before any byte
//     of it is read, so a flood cannot turn refusals into work. On a plain
//     listener the refusal is the same 503 too_many_connections with
//     Retry-After that admit gives, so a client can back off (refuseAtAccept):
//     rendered once, and written as soon as the request's first bytes
//     arrive, not at accept, because an HTTP client need not read a response
//     that comes before its request (Go's net/http, and so coder/websocket,
//     drops it as "unsolicited" and reports no response). Until then the
//     connection holds a descriptor and no slot; at most MaxRefusing wait at
//     once, each at most refusalWait, and a connection beyond that is closed
//     at once. On a TLS listener nothing readable can be sent without a
//     handshake, the cost the refusal is there to avoid, so the connection
//     is only closed: the client sees EOF or a reset in its handshake.
//   - A connection that has not finished its handshake costs no goroutine
//     (OnRequest only moves its bytes) and is closed at the handshake
//     timeout. Only a TLS handshake that is actually running (from a whole
//     ClientHello to the end of the handshake) has a goroutine; at most
//     MaxHandshakes run at once, and a ClientHello that completes beyond
//     that is closed at once (refuseNotTLS).
//
// Descriptors: sessions hold two each and handshakes one, so
// MaxConnections slots never need more than 2*MaxConnections + fdReserve,
// and refusals waiting for their request at most MaxRefusing more.

// The reasons of rtgate_connections_refused_total.
const (
	refusedHandshakes  = "handshakes"
	refusedConnections = "connections"
)

// accept counts a new connection, or refuses it (false). A connection
// accepted must later call leave exactly once.
func (f *Door) accept() bool {
	n := f.unanswered.Add(1)
	if max := f.cfg.MaxConnections; max > 0 && n+f.deps.SessionsOpen.Load() > int64(max) {
		f.unanswered.Add(-1)
		f.refused.WithLabelValues(refusedConnections).Inc()
		return false
	}
	f.deps.Demand.Expect()
	return true
}

// TooManyConnections is the refusal of a connection that finds the
// MaxConnections slots full, at accept or when its request arrives.
func TooManyConnections() *Refusal {
	return &Refusal{Status: http.StatusServiceUnavailable, Type: "server_error", Code: "too_many_connections",
		Message: "this gateway instance is at its connection limit; try again shortly", Header: http.Header{"Retry-After": {"1"}}}
}

const (
	// MaxRefusing bounds the refused plain connections that wait for their
	// request to be answered with the 503; more are closed at once.
	MaxRefusing = 64
	// refusalWait is how long a refused connection may take to send its
	// request's first bytes: one round trip for a client that sends its
	// request as it connects, as every WebSocket client does.
	refusalWait = time.Second
)

// refusedKey marks the context of a refused plain connection waiting for
// its request; onRequest answers it with answerRefused.
type refusedKey struct{}

// refuseAtAccept handles a connection that accept refused, in OnPrepare: a
// TLS one, or one beyond MaxRefusing, is closed now; a plain one waits up to
// refusalWait for its request's first bytes, which answerRefused answers.
func (f *Door) refuseAtAccept(conn netpoll.Connection) context.Context {
	if f.cfg.TLS != nil || !f.takeRefusalSlot() {
		_ = conn.Close() // netpoll allows closing in OnPrepare; nothing is registered yet
		return context.WithValue(context.Background(), ctxKey{}, (*Conn)(nil))
	}
	timer := time.AfterFunc(refusalWait, func() { _ = conn.Close() })
	_ = conn.AddCloseCallback(func(netpoll.Connection) error {
		timer.Stop()
		f.refusing.Add(-1)
		if h := f.testHooks(); h != nil && h.RefusalGivenBack != nil {
			h.RefusalGivenBack()
		}
		return nil
	})
	// No Inliner (a nil *Conn says "not inline"): a refused connection
	// closes itself in its handler, which netpoll cannot do on the poller.
	ctx := context.WithValue(context.Background(), ctxKey{}, (*Conn)(nil))
	return context.WithValue(ctx, refusedKey{}, true)
}

// takeRefusalSlot counts one more refused connection waiting for its
// request, unless MaxRefusing already wait. A compare-and-swap rather than
// an add and a take-back: the count never shows more than MaxRefusing, even
// for the moment between the two.
func (f *Door) takeRefusalSlot() bool {
	for {
		n := f.refusing.Load()
		if n >= MaxRefusing {
			return false
		}
		if f.refusing.CompareAndSwap(n, n+1) {
			if h := f.testHooks(); h != nil && h.RefusalTaken != nil {
				h.RefusalTaken(n + 1)
			}
			return true
		}
	}
}

// answerRefused writes the precomputed 503 to a refused connection whose
// request has begun to arrive, and closes it. The request is not parsed.
// netpoll has read what arrived, so the close is a FIN after the response,
// not a reset that could overtake it.
func (f *Door) answerRefused(conn netpoll.Connection) error {
	w := conn.Writer()
	if _, err := w.WriteBinary(f.fullResponse); err == nil {
		_ = w.Flush()
	}
	return conn.Close()
}

// leave gives back a connection's handshake count.
func (f *Door) leave() {
	f.unanswered.Add(-1)
	f.deps.Demand.Settle()
}

// startTLSHandshake reserves one of the MaxHandshakes running handshakes, or
// refuses (false); endTLSHandshake gives it back.
func (f *Door) startTLSHandshake() bool {
	n := f.tlsRunning.Add(1)
	if max := f.cfg.MaxHandshakes; max > 0 && n > int64(max) {
		f.tlsRunning.Add(-1)
		f.refused.WithLabelValues(refusedHandshakes).Inc()
		return false
	}
	return true
}

func (f *Door) endTLSHandshake() { f.tlsRunning.Add(-1) }

// listen opens the client listener on addr, with SO_REUSEPORT when
// reusePort (REUSEPORT) is set so that several gateway processes can share
// HOST:PORT (the kernel spreads new connections over them by a hash of the
// client's address).
func Listen(addr string, reusePort bool) (net.Listener, error) {
	var lc net.ListenConfig
	if reusePort {
		lc.Control = func(_, _ string, c syscall.RawConn) error {
			var serr error
			if err := c.Control(func(fd uintptr) {
				serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEPORT, 1)
			}); err != nil {
				return err
			}
			if serr != nil {
				return fmt.Errorf("SO_REUSEPORT: %w", serr)
			}
			return nil
		}
	}
	return lc.Listen(context.Background(), "tcp", addr)
}

// stoppableListener is the client listener as netpoll sees it: the listening
// socket itself (netpoll polls its descriptor and calls Accept when it is
// readable), plus a way to stop accepting without closing the descriptor
// netpoll watches. shutdown(SHUT_RD) on a listening socket takes it out of
// the listening hash (and out of its SO_REUSEPORT group), so the kernel sends
// new connections elsewhere or refuses them, while the descriptor stays ours
// until netpoll's Shutdown, having stopped polling it, calls Close.
//
// It is netpoll.Listener written here rather than netpoll.ConvertListener's,
// which (v0.7.2) does two things a front door must not:
//   - It polls a duplicate of the socket (os.File) and its Close closes that
//     number twice (syscall.Close of the number, then the File's Close: seen
//     with strace as close(6) = 0, close(6) = EBADF). Whatever descriptor the
//     process opens between the two (a client socket just accepted, a dial,
//     the spend log's database connection) gets that number and is closed
//     under its owner: at every gateway's Shutdown. Here the socket is closed
//     once, by the net.Listener that opened it.
//   - It accepts without SOCK_CLOEXEC, so every client socket open when the
//     process starts a child (the tests' mockai, redis-server, PostgreSQL) is
//     inherited by it and outlives the gateway's close: the client never
//     sees its FIN. Here accept4 sets SOCK_CLOEXEC (and SOCK_NONBLOCK).
//
// Who closes it: netpoll's Shutdown, after it stopped polling it; but a
// Shutdown that comes before netpoll's Serve has taken the listener (Serve
// runs in its own goroutine, and a test may end at once) finds nothing to
// close, and that Serve then polls the socket, sees it shut and returns. Left
// open, the socket would be closed by its finalizer at some garbage
// collection, by number, long after that number went to another socket. So
// whichever of the two ends last (shutDown, served) closes it then.
type stoppableListener struct {
	ln      net.Listener    // the socket as opened; Close closes it, once
	raw     syscall.RawConn // ln's descriptor, for shutdown and TCP_INFO
	fd      int             // ln's descriptor number, which netpoll polls
	stopped atomic.Bool

	mu       sync.Mutex
	closed   bool // Close ran
	served   bool // netpoll's Serve returned: it polls the descriptor no more
	orphaned bool // netpoll's Shutdown ran and did not close it

	serveDone chan struct{} // closed when netpoll's Serve returned
}

var _ netpoll.Listener = (*stoppableListener)(nil)

func newStoppableListener(ln net.Listener) (*stoppableListener, error) {
	sc, ok := ln.(syscall.Conn)
	if !ok {
		return nil, fmt.Errorf("listener %T has no descriptor", ln)
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return nil, err
	}
	fd := -1
	if err := raw.Control(func(f uintptr) { fd = int(f) }); err != nil {
		return nil, fmt.Errorf("adopting the listener: %w", err)
	}
	// The number stays this socket's until Close: only Close closes it,
	// and netpoll calls Close after it stopped polling it.
	return &stoppableListener{ln: ln, raw: raw, fd: fd, serveDone: make(chan struct{})}, nil
}

// Fd is the descriptor netpoll polls for incoming connections.
func (l *stoppableListener) Fd() int { return l.fd }

// Addr is the address the listener is bound to.
func (l *stoppableListener) Addr() net.Addr { return l.ln.Addr() }

// Close closes the listening socket, once. netpoll's Shutdown calls it once
// it stopped polling the descriptor.
func (l *stoppableListener) Close() error {
	l.mu.Lock()
	already := l.closed
	l.closed = true
	l.mu.Unlock()
	if already {
		return nil
	}
	return l.ln.Close()
}

// serveEnded says netpoll's Serve returned; shutDown says the server's
// Shutdown has run netpoll's. The later of the two closes the socket if
// netpoll did not.
func (l *stoppableListener) serveEnded() {
	close(l.serveDone)
	l.end(func() { l.served = true })
}
func (l *stoppableListener) shutDown() { l.end(func() { l.orphaned = !l.closed }) }

func (l *stoppableListener) end(mark func()) {
	l.mu.Lock()
	mark()
	orphan := l.served && l.orphaned && !l.closed
	l.mu.Unlock()
	if orphan {
		_ = l.Close()
	}
}

// Accept takes one connection the kernel completed, or returns nil and no
// error when there is none (netpoll waits for the next readiness) or the
// listener is stopped (so that netpoll does not log the shut socket's
// EINVAL). Errors go to netpoll, which backs off on EMFILE and ENFILE.
func (l *stoppableListener) Accept() (net.Conn, error) {
	for !l.stopped.Load() {
		fd, sa, err := unix.Accept4(l.fd, unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC)
		switch err {
		case nil:
			// What netpoll sets on the sockets its own listener accepts.
			_ = unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_NODELAY, 1)
			return &acceptedConn{fd: fd, local: l.ln.Addr(), remote: sockaddrTCP(sa)}, nil
		case unix.EINTR, unix.ECONNABORTED:
			continue // a signal, or a client that reset while queued: the next one
		case unix.EAGAIN:
			return nil, nil
		}
		return nil, err
	}
	return nil, nil
}

// listening says why the socket cannot accept any more (nil if it still
// listens): closed, or shut by anything but StopAccepting (SO_ACCEPTCONN is
// 0 once a listening socket is shut).
func (l *stoppableListener) listening() error {
	var on int
	var serr error
	if err := l.raw.Control(func(fd uintptr) {
		on, serr = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_ACCEPTCONN)
	}); err != nil {
		return fmt.Errorf("the socket is closed: %w", err)
	}
	if serr != nil {
		return fmt.Errorf("reading SO_ACCEPTCONN: %w", serr)
	}
	if on == 0 {
		return errors.New("the socket no longer listens")
	}
	return nil
}

// acceptedConn hands netpoll an accepted socket. netpoll keeps only its
// descriptor and addresses (and owns the descriptor from then on: its
// connection closes it); nothing reads, writes or closes through this value.
type acceptedConn struct {
	fd            int
	local, remote net.Addr
}

// errAdopted answers any use of an acceptedConn other than netpoll's
// adoption of its descriptor.
var errAdopted = errors.New("accepted socket: owned by its netpoll connection")

func (a *acceptedConn) Fd() int                          { return a.fd }
func (a *acceptedConn) LocalAddr() net.Addr              { return a.local }
func (a *acceptedConn) RemoteAddr() net.Addr             { return a.remote }
func (a *acceptedConn) Read([]byte) (int, error)         { return 0, errAdopted }
func (a *acceptedConn) Write([]byte) (int, error)        { return 0, errAdopted }
func (a *acceptedConn) Close() error                     { return errAdopted }
func (a *acceptedConn) SetDeadline(time.Time) error      { return errAdopted }
func (a *acceptedConn) SetReadDeadline(time.Time) error  { return errAdopted }
func (a *acceptedConn) SetWriteDeadline(time.Time) error { return errAdopted }

// sockaddrTCP is an accepted peer's address as net reports it.
func sockaddrTCP(sa unix.Sockaddr) net.Addr {
	switch sa := sa.(type) {
	case *unix.SockaddrInet4:
		return &net.TCPAddr{IP: net.IP(sa.Addr[:]).To16(), Port: sa.Port}
	case *unix.SockaddrInet6:
		var zone string
		if sa.ZoneId != 0 {
			if ifi, err := net.InterfaceByIndex(int(sa.ZoneId)); err == nil {
				zone = ifi.Name
			}
		}
		return &net.TCPAddr{IP: net.IP(sa.Addr[:]), Port: sa.Port, Zone: zone}
	}
	return &net.TCPAddr{}
}

// acceptQueueLen is the number of connections the kernel has completed and
// nobody has accepted yet (tcpi_unacked of a listening socket).
func (l *stoppableListener) acceptQueueLen() (int, error) {
	var n int
	var serr error
	err := l.raw.Control(func(fd uintptr) {
		var info *unix.TCPInfo
		info, serr = unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO)
		if serr == nil {
			n = int(info.Unacked)
		}
	})
	return n, errors.Join(err, serr)
}

// stop waits (up to wait) until netpoll has accepted everything queued, then
// stops listening. A connection that completes its handshake in the
// microseconds between the last check and the shutdown is reset, unless
// net.ipv4.tcp_migrate_req=1 moves it to another socket of the same
// SO_REUSEPORT group. It returns how many were still queued when it gave up
// waiting (0 normally).
func (l *stoppableListener) stop(wait time.Duration) (int, error) {
	deadline := time.Now().Add(wait)
	queued, err := l.acceptQueueLen()
	for err == nil && queued > 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
		queued, err = l.acceptQueueLen()
	}
	l.stopped.Store(true)
	var serr error
	if cerr := l.raw.Control(func(fd uintptr) { serr = unix.Shutdown(int(fd), unix.SHUT_RD) }); cerr != nil {
		return queued, cerr
	}
	// The poller reports the shut socket as a hang-up and netpoll's Serve
	// returns once it has handled it. Until then the socket is not closed:
	// with the race detector netpoll finds a socket's handler by descriptor
	// number, so a hang-up still on its way when the number went to a new
	// client socket would be taken as that client's and end it.
	select {
	case <-l.serveDone:
	case <-time.After(serveEndWait):
	}
	return queued, errors.Join(err, serr)
}

// serveEndWait bounds stop's wait for netpoll's Serve to see the shut
// socket: Serve may not have handed it to netpoll yet (serveEnded).
const serveEndWait = time.Second

// NewListener is ln as netpoll accepts from it (stoppableListener), for an
// event loop of one's own: netpoll's ConvertListener closes the socket's
// number twice and accepts without SOCK_CLOEXEC.
func NewListener(ln net.Listener) (netpoll.Listener, error) { return newStoppableListener(ln) }
