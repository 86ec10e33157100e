package frontdoor

// The front door as a whole: Handler, Config and Deps (its seam with the
// rest of the gateway), Door (the listener, accept, the connections' registry
// and their hang-ups), and netpoll's OnPrepare and OnRequest.

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cloudwego/netpoll"
	"github.com/prometheus/client_golang/prometheus"

	"rtgate/poller"
	"rtgate/server/internal/testhooks"
)

// Handler is what the front door hands a request to once it is read.
// Except for NewConn and Route, its methods own the connection's answer:
// they end in a refusal, an answer, or a relay (Conn.StartRelay).
type Handler interface {
	// NewConn allocates an accepted connection: the front door's Conn,
	// in one allocation with what the handler keeps beside it for a session
	// (Conn.SetOwner).
	NewConn() *Conn
	// Route names the API endpoint of a request head and the bound of its
	// body; "" for any other request (an upgrade, health, an unknown path).
	Route(req *http.Request) (endpoint string, bodyLimit int)
	// HandleRequest acts on a request that is not an API request, on the
	// connection's handler, which must not block (I/O goes to a goroutine:
	// Conn.OffLoopStep); rest is what the client sent behind the head.
	HandleRequest(c *Conn, req *http.Request, rest []byte)
	// HandleAPI answers an API request whose body is whole, in a goroutine
	// of its own (Conn.AnswerNow, or a stream of its own).
	HandleAPI(c *Conn, req *http.Request, endpoint string, body []byte)
	// CORSHeaders are the headers every answer to req carries
	// (ALLOWED_ORIGINS).
	CORSHeaders(req *http.Request) http.Header
	// ClientLeft says that the socket of a relaying connection closed.
	ClientLeft(sess *poller.Session)
}

// Config is the front door's share of the settings.
type Config struct {
	MaxConnections   int           // MAX_CONNECTIONS: sessions and connections awaiting their answer
	MaxHandshakes    int           // MAX_HANDSHAKES: TLS handshakes running at once
	HandshakeTimeout time.Duration // HANDSHAKE_TIMEOUT_SECS: from accept to the request's answer
	WriteTimeout     time.Duration // WRITE_TIMEOUT_SECS: netpoll's, for every client socket
	MaxHeaderBytes   int           // MAX_HEADER_BYTES: the request head's bound
	MaxPending       int           // MAX_PENDING_BYTES: what a client may send while its request is decided off the loop
	TLS              *tls.Config   // the client listener's TLS; nil for plain
}

// Deps is what the front door needs from the rest of the gateway.
type Deps struct {
	// Context is the gateway's life: TLS handshakes end with it.
	Context context.Context
	Log     *slog.Logger
	// Registerer takes the front door's metrics.
	Registerer prometheus.Registerer
	// SessionsOpen is the gateway's admitted sessions, which share the
	// MaxConnections slots with connections awaiting their answer.
	SessionsOpen *atomic.Int64
	// Demand hears of each connection accepted (Expect) and answered
	// (Settle): the warm pool dials ahead of requests while it is short.
	Demand interface {
		Expect()
		Settle()
	}
}

// Door is the client listener and the connections it accepted until
// their request is answered (admission at accept: Door.accept).
type Door struct {
	cfg  Config
	deps Deps
	h    Handler
	log  *slog.Logger

	// unanswered counts connections from accept until their request is
	// answered (they become a session, are refused, or close).
	unanswered atomic.Int64
	// tlsRunning counts TLS handshake goroutines.
	tlsRunning atomic.Int64
	// refusing counts refused plain connections waiting for their request.
	refusing atomic.Int64

	refused *prometheus.CounterVec // connections refused at once, by reason
	// restarts counts the listener served again after netpoll let go of it
	// while the gateway ran (serveListener).
	restarts prometheus.Counter

	// fullResponse is TooManyConnections rendered once, for refuseAtAccept.
	fullResponse []byte

	mu       sync.Mutex
	loop     netpoll.EventLoop
	ln       net.Listener
	listener *stoppableListener // ln as netpoll accepts from it
	closing  bool               // shutdown has begun (serveListener serves no new loop)

	open atomic.Int64 // accepted client sockets not yet closed, for Drain
	// conns holds every accepted client connection until its close
	// callback, for shutdown's hang-up of each (hangUpClients).
	connsMu sync.Mutex
	conns   map[*Conn]struct{}

	// hooks are tests' pauses in the windows of races (package testhooks,
	// through Deps.Context); nil in production.
	hooks *testhooks.Slot
}

// New prepares the front door; serve starts it.
func New(cfg Config, deps Deps, h Handler) *Door {
	f := &Door{cfg: cfg, deps: deps, h: h, log: deps.Log, conns: map[*Conn]struct{}{}, hooks: testhooks.From(deps.Context)}
	f.fullResponse = TooManyConnections().response()
	f.refused = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "rtgate_connections_refused_total",
		Help: "Client connections closed at once: at accept when sessions and handshakes filled MAX_CONNECTIONS " +
			"(connections), or on a whole ClientHello when MAX_HANDSHAKES TLS handshakes were running (handshakes)."},
		[]string{"reason"})
	f.refused.WithLabelValues(refusedHandshakes) // both reasons show from the start, at 0
	f.refused.WithLabelValues(refusedConnections)
	f.restarts = prometheus.NewCounter(prometheus.CounterOpts{Name: "rtgate_listener_restarts_total",
		Help: "Times netpoll stopped serving the client listener while the gateway ran and it was served again " +
			"(netpoll's race build, docs/known-issues.md); a listener that cannot be served again ends the process."})
	deps.Registerer.MustRegister(f.refused, f.restarts,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "rtgate_client_handshakes",
			Help: "Client connections between accept and the answer to their request (they hold MAX_CONNECTIONS slots)."},
			func() float64 { return float64(f.unanswered.Load()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "rtgate_client_tls_handshakes_running",
			Help: "Client TLS handshakes in progress, a goroutine each (at most MAX_HANDSHAKES)."},
			func() float64 { return float64(f.tlsRunning.Load()) }))
	return f
}

// serve accepts client connections on ln until stopAccepting; ready runs
// once the listener is adopted, before netpoll serves it.
//
// It returns nil once stopAccepting has stopped the listener, and an error
// only when the listener stopped being served for another reason and could
// not be served again (serveListener).
func (f *Door) Serve(ln net.Listener, ready func()) error {
	loop, err := f.newEventLoop()
	if err != nil {
		return err
	}
	sl, err := newStoppableListener(ln) // Drain stops accepting through it
	if err != nil {
		return err
	}
	f.mu.Lock()
	f.loop, f.ln, f.listener = loop, ln, sl
	f.mu.Unlock()
	ready()
	if h := f.testHooks(); h != nil && h.Serve != nil {
		h.Serve() // a shutdown that comes before netpoll's Serve
	}
	err = f.serveListener(loop, sl)
	sl.serveEnded() // the socket's closer, if shutdown came first
	return err
}

// newEventLoop is a netpoll event loop for the client listener.
func (f *Door) newEventLoop() (netpoll.EventLoop, error) {
	loop, err := netpoll.NewEventLoop(f.onRequest,
		netpoll.WithOnPrepare(f.onPrepare),
		netpoll.WithWriteTimeout(f.cfg.WriteTimeout),
	)
	if err != nil {
		return nil, fmt.Errorf("creating event loop: %w", err)
	}
	return loop, nil
}

// addr is the client listener's address; nil before serve.
func (f *Door) Addr() net.Addr {
	f.mu.Lock()
	ln := f.ln
	f.mu.Unlock()
	if ln == nil {
		return nil
	}
	return ln.Addr()
}

// stopAccepting stops the client listener (after netpoll has accepted what
// the kernel had queued, waiting up to a second for that); connections
// already accepted carry on. Safe to call more than once.
func (f *Door) StopAccepting() {
	f.mu.Lock()
	l := f.listener
	f.mu.Unlock()
	if l == nil || l.stopped.Load() {
		return
	}
	queued, err := l.stop(time.Second)
	if err != nil || queued > 0 {
		f.log.Warn("stopping the listener", "err", err, "still_queued", queued)
	}
}

// shutdown stops accepting, hangs up every client connection, waits (until
// ctx ends) for their close callbacks and shuts netpoll's loop down.
func (f *Door) Shutdown(ctx context.Context) error {
	f.mu.Lock()
	f.closing = true
	loop, sl := f.loop, f.listener
	f.mu.Unlock()
	if loop == nil {
		return nil
	}
	// netpoll's own Shutdown would Close each connection it finds idle,
	// not atomically with the poller (package poller's doc, the inline
	// invariant): hang them all up first, and let it find none.
	f.StopAccepting()
	f.hangUpClients()
	f.WaitConns(ctx)
	if h := f.testHooks(); h != nil && h.LoopShutdown != nil {
		h.LoopShutdown(f.open.Load())
	}
	err := loop.Shutdown(ctx)
	sl.shutDown()
	return err
}

// hangUpClients hangs up every accepted client connection, for shutdown.
func (f *Door) hangUpClients() {
	f.connsMu.Lock()
	defer f.connsMu.Unlock()
	for c := range f.conns {
		hangUp(c.conn)
	}
}

// waitConns waits until every accepted client socket is closed, or ctx
// ends.
func (f *Door) WaitConns(ctx context.Context) {
	for f.open.Load() > 0 && ctx.Err() == nil {
		time.Sleep(5 * time.Millisecond)
	}
}

// onPrepare is netpoll's OnPrepare: a connection just accepted is counted
// or refused (accept), and gets its Conn, its handshake deadline and
// its close callback.
func (f *Door) onPrepare(conn netpoll.Connection) context.Context {
	if !f.accept() {
		return f.refuseAtAccept(conn)
	}
	c := f.h.NewConn()
	c.door, c.conn, c.accepted = f, conn, time.Now()
	c.setPhase(phaseHTTP)
	f.open.Add(1)
	f.connsMu.Lock()
	f.conns[c] = struct{}{}
	f.connsMu.Unlock()
	if f.cfg.TLS != nil {
		c.setPhase(phaseTLS)
		nb := poller.NewNBConn(conn)
		c.hs = newHandshakeConn(nb)
	} else {
		c.ep = &c.plainEP
		poller.InitPlainEndpoint(c.ep, conn)
	}
	c.mu.Lock() // the timer's function reads c.timer under c.mu, and may run before AfterFunc returns
	c.timer = time.AfterFunc(f.cfg.HandshakeTimeout, c.handshakeExpired)
	c.mu.Unlock()
	_ = conn.AddCloseCallback(c.onClose)
	return c
}

// onRequest is netpoll's OnRequest: it dispatches on the connection's
// phase, and never blocks: during the TLS handshake it only moves bytes to
// the handshake goroutine (tlsHandshake).
func (f *Door) onRequest(ctx context.Context, conn netpoll.Connection) error {
	c, _ := ctx.Value(ctxKey{}).(*Conn)
	defer recoverRequest(f.log, conn)
	if h := f.testHooks(); h != nil && h.Request != nil && c != nil {
		h.Request(conn)
	}
	if c == nil {
		if ctx.Value(refusedKey{}) != nil {
			return f.answerRefused(conn)
		}
		return conn.Close()
	}
	if c.hs != nil {
		c.readMu.Lock()
		defer c.readMu.Unlock()
	}
	if c.wait.pending.Load() && c.bufferWhilePending() {
		return nil
	}
	switch connPhase(c.phase.Load()) {
	case phaseRelay:
		c.sess.ClientReadable()
		return nil
	case phaseBody:
		return c.readBody()
	case phaseDone:
		r := conn.Reader()
		_ = r.Skip(r.Len())
		return r.Release()
	case phaseTLS:
		return c.collectTLS()
	}
	return c.readHead()
}

// testHooks are the pauses a test has set (package testhooks); nil in
// production.
func (f *Door) testHooks() *testhooks.Door {
	if f.hooks == nil {
		return nil
	}
	return f.hooks.Load()
}
