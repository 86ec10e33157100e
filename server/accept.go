package server

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cloudwego/netpoll"
	"github.com/prometheus/client_golang/prometheus"
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
//     connection holds a descriptor and no slot; at most maxRefusing wait at
//     once, each at most refusalWait, and a connection beyond that is closed
//     at once. On a TLS listener nothing readable can be sent without a
//     handshake, the cost the refusal is there to avoid, so the connection
//     is only closed: the client sees EOF or a reset in its handshake.
//   - A connection that has not finished its handshake costs no goroutine
//     (OnRequest only moves its bytes) and is closed at the handshake
//     timeout. Only a TLS handshake that is actually running (from a whole
//     ClientHello to the end of the handshake) has a goroutine; at most
//     MaxHandshakes run at once, and a ClientHello that completes beyond
//     that is closed at once (tlsaccept.go).
//
// Descriptors: sessions hold two each and handshakes one, so
// MaxConnections slots never need more than 2*MaxConnections + fdReserve,
// and refusals waiting for their request at most maxRefusing more.
type frontDoor struct {
	// unanswered counts connections from accept until their request is
	// answered (they become a session, are refused, or close).
	unanswered atomic.Int64
	// tlsRunning counts TLS handshake goroutines.
	tlsRunning atomic.Int64
	// refusing counts refused plain connections waiting for their request.
	refusing atomic.Int64

	refused *prometheus.CounterVec // connections refused at once, by reason

	maxConnections, maxHandshakes int           // MAX_CONNECTIONS, MAX_HANDSHAKES
	tls                           bool          // a TLS listener
	sessionsOpen                  *atomic.Int64 // the server's admitted sessions

	// fullResponse is tooManyConnections rendered once, for refuseAtAccept.
	fullResponse []byte
}

func (f *frontDoor) init(cfg Settings, tlsListener bool, sessionsOpen *atomic.Int64, reg prometheus.Registerer) {
	f.maxConnections, f.maxHandshakes, f.tls, f.sessionsOpen = cfg.MaxConnections, cfg.MaxHandshakes, tlsListener, sessionsOpen
	f.fullResponse = tooManyConnections().response()
	f.refused = newReasonCounter("rtgate_connections_refused_total",
		"Client connections closed at once: at accept when sessions and handshakes filled MAX_CONNECTIONS "+
			"(connections), or on a whole ClientHello when MAX_HANDSHAKES TLS handshakes were running (handshakes).",
		refusedHandshakes, refusedConnections)
	reg.MustRegister(f.refused,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "rtgate_client_handshakes",
			Help: "Client connections between accept and the answer to their request (they hold MAX_CONNECTIONS slots)."},
			func() float64 { return float64(f.unanswered.Load()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "rtgate_client_tls_handshakes_running",
			Help: "Client TLS handshakes in progress, a goroutine each (at most MAX_HANDSHAKES)."},
			func() float64 { return float64(f.tlsRunning.Load()) }))
}

const (
	refusedHandshakes  = "handshakes"
	refusedConnections = "connections"
)

// accept counts a new connection, or refuses it (false). A connection
// accepted must later call leave exactly once.
func (f *frontDoor) accept() bool {
	n := f.unanswered.Add(1)
	if max := f.maxConnections; max > 0 && n+f.sessionsOpen.Load() > int64(max) {
		f.unanswered.Add(-1)
		f.refused.WithLabelValues(refusedConnections).Inc()
		return false
	}
	return true
}

// tooManyConnections is the refusal of a connection that finds the
// MaxConnections slots full, at accept or when its request arrives.
func tooManyConnections() *refusal {
	return &refusal{status: http.StatusServiceUnavailable, errType: "server_error", code: "too_many_connections",
		message: "this gateway instance is at its connection limit; try again shortly", header: http.Header{"Retry-After": {"1"}}}
}

const (
	// maxRefusing bounds the refused plain connections that wait for their
	// request to be answered with the 503; more are closed at once.
	maxRefusing = 64
	// refusalWait is how long a refused connection may take to send its
	// request's first bytes: one round trip for a client that sends its
	// request as it connects, as every WebSocket client does.
	refusalWait = time.Second
)

// refusedKey marks the context of a refused plain connection waiting for
// its request; onRequest answers it with answerRefused.
type refusedKey struct{}

// refuseAtAccept handles a connection that accept refused, in OnPrepare: a
// TLS one, or one beyond maxRefusing, is closed now; a plain one waits up to
// refusalWait for its request's first bytes, which answerRefused answers.
func (f *frontDoor) refuseAtAccept(conn netpoll.Connection) context.Context {
	if f.tls || !f.takeRefusalSlot() {
		_ = conn.Close() // netpoll allows closing in OnPrepare; nothing is registered yet
		return context.WithValue(context.Background(), ctxKey{}, (*clientConn)(nil))
	}
	timer := time.AfterFunc(refusalWait, func() { _ = conn.Close() })
	_ = conn.AddCloseCallback(func(netpoll.Connection) error {
		timer.Stop()
		f.refusing.Add(-1)
		return nil
	})
	// No Inliner (a nil *clientConn says "not inline"): a refused connection
	// closes itself in its handler, which netpoll cannot do on the poller.
	ctx := context.WithValue(context.Background(), ctxKey{}, (*clientConn)(nil))
	return context.WithValue(ctx, refusedKey{}, true)
}

// takeRefusalSlot counts one more refused connection waiting for its
// request, unless maxRefusing already wait. A compare-and-swap rather than
// an add and a take-back: the count never shows more than maxRefusing, even
// for the moment between the two.
func (f *frontDoor) takeRefusalSlot() bool {
	for {
		n := f.refusing.Load()
		if n >= maxRefusing {
			return false
		}
		if f.refusing.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

// answerRefused writes the precomputed 503 to a refused connection whose
// request has begun to arrive, and closes it. The request is not parsed.
// netpoll has read what arrived, so the close is a FIN after the response,
// not a reset that could overtake it.
func (f *frontDoor) answerRefused(conn netpoll.Connection) error {
	w := conn.Writer()
	if _, err := w.WriteBinary(f.fullResponse); err == nil {
		_ = w.Flush()
	}
	return conn.Close()
}

// leave gives back a connection's handshake count.
func (f *frontDoor) leave() { f.unanswered.Add(-1) }

// startTLSHandshake reserves one of the MaxHandshakes running handshakes, or
// refuses (false); endTLSHandshake gives it back.
func (f *frontDoor) startTLSHandshake() bool {
	n := f.tlsRunning.Add(1)
	if max := f.maxHandshakes; max > 0 && n > int64(max) {
		f.tlsRunning.Add(-1)
		f.refused.WithLabelValues(refusedHandshakes).Inc()
		return false
	}
	return true
}

func (f *frontDoor) endTLSHandshake() { f.tlsRunning.Add(-1) }

// listen opens the client listener, with SO_REUSEPORT when REUSEPORT is
// set so that several gateway processes can share HOST:PORT (the kernel
// spreads new connections over them by a hash of the client's address).
func listen(cfg Settings) (net.Listener, error) {
	var lc net.ListenConfig
	if cfg.ReusePort {
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
	return lc.Listen(context.Background(), "tcp", cfg.Addr())
}

// stoppableListener is the client listener as netpoll sees it, plus a way to
// stop accepting without closing the descriptor netpoll watches: closing it
// under netpoll (which keeps a duplicate and later detaches and closes that
// number) risks acting on a reused descriptor, and netpoll's own Shutdown
// would also close live sessions. shutdown(SHUT_RD) on a listening socket
// takes it out of the listening hash (and out of its SO_REUSEPORT group), so
// the kernel sends new connections elsewhere or refuses them, while the
// descriptor stays ours until Shutdown closes it.
type stoppableListener struct {
	netpoll.Listener // netpoll's conversion of the socket
	raw              syscall.RawConn
	stopped          atomic.Bool
}

func newStoppableListener(ln net.Listener) (*stoppableListener, error) {
	sc, ok := ln.(syscall.Conn)
	if !ok {
		return nil, fmt.Errorf("listener %T has no descriptor", ln)
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return nil, err
	}
	npln, err := netpoll.ConvertListener(ln)
	if err != nil {
		return nil, fmt.Errorf("adopting the listener: %w", err)
	}
	return &stoppableListener{Listener: npln, raw: raw}, nil
}

// Accept is netpoll's, until the listener is stopped (then "nothing to
// accept", so netpoll does not log the shut socket's EINVAL).
func (l *stoppableListener) Accept() (net.Conn, error) {
	if l.stopped.Load() {
		return nil, nil
	}
	return l.Listener.Accept()
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
	return queued, errors.Join(err, serr)
}
