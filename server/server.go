// Server is one gateway instance: New, Serve, Reload, Drain, Shutdown; the
// client connection (clientConn) and its OnRequest dispatch.

package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cloudwego/netpoll"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/valyala/bytebufferpool"

	"rtgate/frames"
	"rtgate/poller"
	"rtgate/server/admin"
	"rtgate/server/balance"
	"rtgate/server/cluster"
	"rtgate/server/continuity"
	"rtgate/server/limit"
	"rtgate/server/protocol"
	"rtgate/server/routes"
	"rtgate/server/tracing"
	"rtgate/upstream"
)

// Server is one gateway instance.
type Server struct {
	cfg       Settings
	log       *slog.Logger
	dialer    *upstream.Dialer
	tlsConfig *tls.Config // client listener; nil for plain
	sessCfg   poller.SessionConfig

	mu       sync.Mutex
	loop     netpoll.EventLoop
	ln       net.Listener
	listener *stoppableListener // ln as netpoll accepts from it

	// ctx ends when the server shuts down; upstream dials use it.
	ctx    context.Context
	cancel context.CancelFunc

	pool       *upstream.Pool // nil when the pool is off
	livePool   *upstream.Pool // GPT-Live's unstarted sockets (newLivePool); nil when off
	metrics    *metrics
	front      frontDoor          // admission at accept
	memBudget  memoryBudget       // the global bound on bytes held for slow peers (the watchdog's)
	proto      protocol.Protocol  // what the sessions speak: OpenAI's Realtime API
	admitter   limit.Admitter     // per-key limits: limit.Local, or cluster.Limiter with REDIS_URL
	store      *cluster.Store     // nil without REDIS_URL
	contGlobal *continuity.Budget // CONTINUITY_GLOBAL_MAX_BYTES: what all sessions keep (keepContinuity)

	sessionsOpen atomic.Int64
	clientConns  atomic.Int64 // accepted client sockets not yet closed, for Drain
	// conns holds every accepted client connection until its close
	// callback, for Shutdown's hang-up of each (hangUpClients).
	connsMu  sync.Mutex
	conns    map[*clientConn]struct{}
	draining atomic.Bool // /health answers 503
	stopping atomic.Bool // past the drain timeout: new upgrades get 503

	// sessions is the registry of live sessions, for the watchdog, for
	// draining and for the record written when each ends.
	sessMu   sync.Mutex
	sessions map[*poller.Session]*sessionInfo

	routes   atomic.Pointer[routes.Table] // replaced whole on SIGHUP
	tracer   *tracing.Tracer              // OpenTelemetry spans; nil when off (server/tracing)
	balancer *balance.Balancer            // every deployment's health, counts, slots and dial latency
	records  *records                     // where ended sessions' records go
	budgets  *budgets                     // the keys' spend budgets

	appState // client secrets, calls, sidebands

	admin   *admin.Server // the admin port: metrics, status page, playground
	origins origins       // ALLOWED_ORIGINS (origins.allow)

	hooks atomic.Pointer[testHooks] // nil outside tests
}

// testHooks are pauses that tests put into the windows of races, to make
// them happen every time. All are nil outside tests.
type testHooks struct {
	handshakeTimer     func()            // the handshake timer fired, before it acts
	handshakeTimerDone func()            // and after it acted
	tlsHandshaken      func(*clientConn) // the TLS handshake is done, before the goroutine reads the request
	tlsRequest         func(*clientConn) // the TLS goroutine handled the first request, before it lets the connection go
	loopShutdown       func(open int64)  // Shutdown is about to call netpoll's, with open client connections left
	headRead           func(*clientConn) // readHead is about to read the request
	sidebandLookup     func()            // a sideband's call is about to be looked up in Redis
	request            func(*clientConn) // at the start of each read handler of an accepted connection
	serve              func()            // Serve is about to hand the listener to netpoll
}

// New prepares a server; Serve starts it.
func New(cfg Settings, log *slog.Logger) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, log: log, sessions: map[*poller.Session]*sessionInfo{}, proto: protocol.Realtime{},
		conns: map[*clientConn]struct{}{}}
	s.ctx, s.cancel = context.WithCancel(context.Background())

	upTLS := &tls.Config{MinVersion: tls.VersionTLS12}
	if cfg.UpstreamCAFile != "" {
		pool, err := upstream.LoadCAFile(cfg.UpstreamCAFile)
		if err != nil {
			return nil, fmt.Errorf("UPSTREAM_CA_FILE: %w", err)
		}
		upTLS.RootCAs = pool
	}
	s.dialer = &upstream.Dialer{TLSConfig: upTLS, Timeout: cfg.DialTimeout, WriteTimeout: cfg.WriteTimeout,
		CloseTimeout: cfg.CloseTimeout, SourceIPs: cfg.UpstreamSourceIPs,
		NoResumption: cfg.NoUpstreamTLSResumption}

	if cfg.TLSCert != "" {
		certs, err := newCertReloader(cfg.TLSCert, cfg.TLSKey, log)
		if err != nil {
			return nil, fmt.Errorf("loading TLS_CERT/TLS_KEY: %w", err)
		}
		s.tlsConfig = serverTLSConfig(certs)
	}
	if cfg.UpstreamRoots != nil {
		upTLS.RootCAs = cfg.UpstreamRoots
	}
	table := routesFromSettings(cfg)
	if cfg.RoutesFile != "" {
		t, err := routes.Load(cfg.RoutesFile, os.LookupEnv)
		if err != nil {
			return nil, err
		}
		table = t
	}
	s.routes.Store(table)
	logTableNotices(log, table)
	s.metrics = newMetrics()
	s.admin = admin.New(adminView{s}, s.metrics.reg, cfg.AdminHosts, cfg.Port)
	s.origins = origins{allowed: cfg.AllowedOrigins, admin: s.admin}
	s.front.init(cfg, s.tlsConfig != nil, &s.sessionsOpen, s.metrics.reg)
	s.memBudget.init(cfg, s.metrics.reg)
	tracer, err := tracing.FromEnv(s.ctx, s.metrics.reg, log)
	if err != nil {
		return nil, err
	}
	s.tracer = tracer
	s.balancer = balance.New(balance.Config{Registerer: s.metrics.reg, Log: log, ProbeTimeout: cfg.DialTimeout,
		HedgeDelay: cfg.HedgeDelay, DialFailures: s.metrics.dialFailures,
		Router: func() routes.Router { return s.routes.Load().Router }})
	records, err := openRecords(cfg, s.metrics, log, s.routes.Load)
	if err != nil {
		return nil, err
	}
	s.records = records
	if s.admitter, s.store, err = newAdmitter(cfg, log, s.metrics.reg); err != nil {
		return nil, err
	}
	if s.budgets, err = newBudgets(cfg, s.store, s.routes.Load, s.metrics.reg, log); err != nil {
		return nil, err
	}
	go s.budgets.run(s.ctx)
	s.appState = newAppState(cfg, s.store, upTLS, &callMeters{ctx: s.ctx, timeout: cfg.DialTimeout, dialer: s.dialer,
		log: log, metrics: s.metrics, records: s.records, budgets: s.budgets, hangUp: liveAPI{s}.hangUp,
		hangUpCall: s.hangUpCall}, log)
	if cfg.Pool.Enabled() {
		pc := cfg.Pool
		fdLimit := openFileLimit()
		pc.Spare = func() int {
			// Two sockets per session, and some for listeners and files.
			return fdLimit - fdReserve - 2*int(s.sessionsOpen.Load())
		}
		pc.Memory = poolMemory(cfg, s.store)
		s.pool = upstream.NewPool(s.dialer, pc, log, upstream.NewPoolMetrics(s.admin.Tee(s.metrics.reg)))
		s.front.pool = s.pool
	}
	s.livePool = newLivePool(cfg, s.dialer, &s.sessionsOpen, log, s.metrics.reg)
	s.metrics.warmRedials = prometheus.NewCounter(prometheus.CounterOpts{Name: "rtgate_pool_warm_redials_total",
		Help: "Taken warm sockets that proved dead before the client sent anything, replaced by a fresh dial."})
	s.metrics.reg.MustRegister(s.metrics.warmRedials)
	s.contGlobal = continuity.NewBudget(cfg.ContinuityGlobalMaxBytes)
	upstream.RegisterDialerMetrics(s.metrics.reg, s.dialer)
	s.sessCfg = sessionConfig(s)
	return s, nil
}

// ListenAndServe listens on the configured address and serves until Shutdown.
func (s *Server) ListenAndServe() error {
	ln, err := listen(s.cfg)
	if err != nil {
		return fmt.Errorf("listening on %s: %w", s.cfg.Addr(), err)
	}
	return s.Serve(ln)
}

// Serve accepts client connections on ln until Shutdown.
//
// It returns nil once StopAccepting (Drain, Shutdown) has stopped the
// listener, and an error only when the listener stopped being served for
// another reason and could not be served again (serveListener): then the
// gateway no longer accepts clients, and cmd/gateway exits non-zero.
func (s *Server) Serve(ln net.Listener) error {
	loop, err := s.newEventLoop()
	if err != nil {
		return err
	}
	sl, err := newStoppableListener(ln) // Drain stops accepting through it
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.loop, s.ln, s.listener = loop, ln, sl
	s.mu.Unlock()
	go s.newWatchdog().run(s.ctx)
	s.log.Info("gateway listening", "addr", ln.Addr().String(), "tls", s.tlsConfig != nil,
		"upstream", redactedURL(s.cfg.APIBase), "model", s.cfg.Model, "pool", poolDesc(s.cfg.Pool))
	if s.pool != nil {
		// The configured model's key is known now: warm it before the
		// first client arrives.
		primePool(s.pool, s.routes.Load())
	}
	primeLivePool(s.livePool, s.routes.Load())
	if h := s.hooks.Load(); h != nil && h.serve != nil {
		h.serve() // a Shutdown that comes before netpoll's Serve
	}
	err = s.serveListener(loop, sl)
	sl.serveEnded() // the socket's closer, if Shutdown came first
	return err
}

// newEventLoop is a netpoll event loop for the client listener.
func (s *Server) newEventLoop() (netpoll.EventLoop, error) {
	loop, err := netpoll.NewEventLoop(s.onRequest,
		netpoll.WithOnPrepare(s.onPrepare),
		netpoll.WithWriteTimeout(s.cfg.WriteTimeout),
	)
	if err != nil {
		return nil, fmt.Errorf("creating event loop: %w", err)
	}
	return loop, nil
}

// Pool returns the warm pool, or nil when it is off.
func (s *Server) Pool() *upstream.Pool { return s.pool }

func poolDesc(c upstream.PoolConfig) string {
	switch {
	case c.Auto:
		return fmt.Sprintf("auto(%d-%d)", c.Min, c.Max)
	case c.Size > 0:
		return fmt.Sprintf("%d", c.Size)
	}
	return "off"
}

// Shutdown stops accepting connections, ends every client connection and
// closes the warm pool's sockets with close 1000.
func (s *Server) Shutdown(ctx context.Context) error {
	closePools(s.pool, s.livePool)
	s.cancel()
	s.mu.Lock()
	loop, sl := s.loop, s.listener
	s.mu.Unlock()
	var err error
	if loop != nil {
		// netpoll's own Shutdown would Close each connection it finds idle,
		// not atomically with the poller (package poller's doc, the inline
		// invariant): hang them all up first, and let it find none.
		s.StopAccepting()
		s.hangUpClients()
		s.waitConns(ctx)
		if h := s.hooks.Load(); h != nil && h.loopShutdown != nil {
			h.loopShutdown(s.clientConns.Load())
		}
		err = loop.Shutdown(ctx)
		sl.shutDown()
	}
	s.records.close(ctx)
	s.budgets.close(ctx)
	s.meters.close()
	s.admitter.Close()
	if terr := s.tracer.Shutdown(ctx); terr != nil {
		s.log.Warn("tracing: spans not exported at shutdown", "err", terr)
	}
	return err
}

// Reload rereads CONFIG_FILE (on SIGHUP): new sessions use the new routes
// and keys; live sessions keep the deployment they have, but a resume or a
// rollover goes only to the new table's deployments, budgets are read from
// it, and a session whose key it revoked ends (key_revoked, close 1008). A
// file that does not load is reported and the old configuration kept.
func (s *Server) Reload() error {
	if s.cfg.RoutesFile == "" {
		return errors.New("no CONFIG_FILE to reload")
	}
	r, err := routes.Load(s.cfg.RoutesFile, os.LookupEnv)
	if err != nil {
		s.log.Error("config reload failed; keeping the previous configuration", "err", err)
		return err
	}
	s.routes.Store(r)
	s.reachLive(r) // revoked keys' sessions end
	logTableNotices(s.log, r)
	primePool(s.pool, r)
	primeLivePool(s.livePool, r)
	groups := make([]string, 0, len(r.Groups))
	for g := range r.Groups {
		groups = append(groups, g)
	}
	s.log.Info("config reloaded", "model_groups", groups, "keys", len(r.Keys))
	return nil
}

// SessionsOpen is the number of sessions relaying now.
func (s *Server) SessionsOpen() int64 { return s.sessionsOpen.Load() }

// ctxKey is where a connection's netpoll context keeps its *clientConn:
// poller's InlineKey, so that the inline runner asks the clientConn.
type ctxKey = poller.InlineKey

// connPhase is where a client connection is; OnRequest reads it to know
// what the bytes that arrived are, and only setPhase moves it:
//
//	phase  what arrives                        next
//	tls    the ClientHello, then the handshake http (handshake done), done (refused)
//	http   the request head                    body (API request), relay (101), done (answered or refused)
//	body   an API request's body               done (answered)
//	relay  WebSocket frames for the session    (until the socket closes)
//	done   anything: dropped                   (until the socket closes)
type connPhase uint8

const (
	phaseTLS   connPhase = iota // collectTLS, tlsHandshake
	phaseHTTP                   // readHead, then handle
	phaseBody                   // readBody, then serveAPI
	phaseRelay                  // poller.Session
	phaseDone
)

// setPhase moves the connection to phase p. Callers are the connection's
// handler or a goroutine that holds the request (the TLS handshake, the
// off-loop step, an API request's answer) while the handler may still read
// the phase: hence an atomic.
func (c *clientConn) setPhase(p connPhase) { c.phase.Store(uint32(p)) }

// clientConn is the gateway's state for one accepted connection.
type clientConn struct {
	srv      *Server
	conn     netpoll.Connection
	ep       *poller.Endpoint
	phase    atomic.Uint32              // a connPhase: setPhase
	head     *bytebufferpool.ByteBuffer // request bytes so far, during phaseHTTP
	sess     *poller.Session            // set under mu: onClose reads it from another goroutine
	accepted time.Time

	// TLS listeners only (collectTLS): the handshake's connection, whether
	// its goroutine started, and the lock that keeps OnRequest and the
	// goroutine's hand-off from reading at the same time.
	hs        *handshakeConn
	hsStarted bool
	readMu    sync.Mutex

	mu    sync.Mutex
	timer *time.Timer // handshake deadline; nil once upgraded
	left  bool        // the handshake count was given back (Server.leave)

	wait pendingStep // the off-loop step of the decision in flight (decideOffLoop)
	api  *apiRequest // an API request's body being collected (readBody)

	relaying atomic.Bool // phase is phaseRelay, for netpoll's runner (poller.Inliner)
	offLoop  atomic.Bool // a goroutine other than netpoll's handler is handling the request (startRelay)

	// The state a plain session keeps for its whole life lives here, in
	// the connection's one allocation, rather than in five of its own
	// (each allocation rounds up to a size class and is one more object
	// for the collector). Only pointers to them are handed out (ep,
	// sess, the registry's *sessionInfo), and a clientConn is never copied.
	// What outlives the client socket (a session still closing its
	// upstream) keeps the whole struct alive, which costs nothing more than
	// before: the connection's netpoll context held it anyway.
	plainEP poller.Endpoint // ep on a plain listener
	session poller.Session  // sess, once upgraded
	info    sessionInfo
	watch   setupWatch
	cwatch  clientWatch // continuity's inspector on the client's frames (watchClient)
}

func (s *Server) onPrepare(conn netpoll.Connection) context.Context {
	if !s.front.accept() {
		return s.front.refuseAtAccept(conn)
	}
	c := &clientConn{srv: s, conn: conn, accepted: time.Now()}
	c.setPhase(phaseHTTP)
	s.clientConns.Add(1)
	s.connsMu.Lock()
	s.conns[c] = struct{}{}
	s.connsMu.Unlock()
	if s.tlsConfig != nil {
		c.setPhase(phaseTLS)
		nb := poller.NewNBConn(conn)
		c.hs = newHandshakeConn(nb)
	} else {
		c.ep = &c.plainEP
		poller.InitPlainEndpoint(c.ep, conn)
	}
	c.mu.Lock() // the timer's function reads c.timer under c.mu, and may run before AfterFunc returns
	c.timer = time.AfterFunc(s.cfg.HandshakeTimeout, c.handshakeExpired)
	c.mu.Unlock()
	_ = conn.AddCloseCallback(c.onClose)
	return c
}

// A clientConn is its own netpoll context, which holds nothing but the
// clientConn under ctxKey: context.WithValue would be one more allocation
// per connection (48 B). It is never cancelled and has no deadline.

func (c *clientConn) Deadline() (time.Time, bool) { return time.Time{}, false }
func (c *clientConn) Done() <-chan struct{}       { return nil }
func (c *clientConn) Err() error                  { return nil }

var _ context.Context = (*clientConn)(nil)

// Value answers ctxKey with the clientConn.
func (c *clientConn) Value(key any) any {
	if key == (ctxKey{}) {
		return c
	}
	return nil
}

// onRequest never blocks: during the TLS handshake it only moves bytes to
// the handshake goroutine (tlsHandshake).
func (s *Server) onRequest(ctx context.Context, conn netpoll.Connection) error {
	c, _ := ctx.Value(ctxKey{}).(*clientConn)
	defer recoverRequest(s.log, conn)
	if h := s.hooks.Load(); h != nil && h.request != nil {
		h.request(c)
	}
	if c == nil {
		if ctx.Value(refusedKey{}) != nil {
			return s.front.answerRefused(conn)
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

// readHead collects the request head and acts on it once complete.
func (c *clientConn) readHead() error {
	if c.head == nil {
		c.head = bytebufferpool.Get()
	}
	var err error
	read := func() {
		if h := c.srv.hooks.Load(); h != nil && h.headRead != nil {
			h.headRead(c)
		}
		err = c.ep.Read(func(src frames.Source) error {
			p, err := src.Next(src.Len())
			c.head.B = append(c.head.B, p...)
			return err
		})
	}
	if c.offLoop.Load() {
		// The TLS goroutine, outside netpoll's handler: a hang-up now
		// would free the buffer under the read.
		c.ep.ByHand(read)
	} else {
		read()
	}
	if err != nil && !errors.Is(err, net.ErrClosed) {
		return c.conn.Close()
	}
	if c.hs == nil && tlsRecordStart(c.head.B) {
		c.refuseTLS() // a wss:// client on the plain listener: answer now, not at the timeout
		return nil
	}
	end := headEnd(c.head.B)
	if end < 0 {
		if len(c.head.B) > c.srv.cfg.MaxHeaderBytes {
			c.refuse(&refusal{status: http.StatusRequestHeaderFieldsTooLarge, errType: "invalid_request_error",
				code: "headers_too_large", message: "request head too large"})
		}
		return nil
	}
	if end > c.srv.cfg.MaxHeaderBytes {
		c.refuse(&refusal{status: http.StatusRequestHeaderFieldsTooLarge, errType: "invalid_request_error",
			code: "headers_too_large", message: "request head too large"})
		return nil
	}
	head, rest := c.head.B[:end], c.head.B[end:]
	c.srv.handle(c, head, rest)
	return nil
}

// refuse answers the request with an HTTP error and closes the connection.
func (c *clientConn) refuse(e *refusal) {
	c.setPhase(phaseDone)
	_ = c.ep.Send(e.response())
	c.ep.Close()
}

// answered marks the connection's request as answered (a session opened,
// an API request's body complete, or the socket closed): the deadline
// timer (HANDSHAKE_TIMEOUT) stops and lets go, since a long-lived session
// should not carry it, and the front door's count of connections awaiting
// their answer (frontDoor.refuseAtAccept) is given back, once.
func (c *clientConn) answered() {
	c.mu.Lock()
	if c.timer != nil {
		c.timer.Stop()
		c.timer = nil
	}
	left := c.left
	c.left = true
	c.mu.Unlock()
	if !left {
		c.srv.front.leave()
	}
}

// startRelay makes the connection a session's client side. Under mu, so
// that onClose, which may run on another goroutine (the TLS handshake's
// hand-off runs outside netpoll's handler), sees either no session or this
// one; a client gone before this sees its 101 fail.
//
// A request handled off netpoll's handlers (the TLS goroutine's first
// request, a Redis admission's verdict) leaves the connection on the pool
// until that goroutine lets it go (goInline): an inline handler would wait
// on the poller for the locks that goroutine holds, stalling every socket of
// that poller meanwhile.
func (c *clientConn) startRelay(sess *poller.Session) {
	c.mu.Lock()
	c.sess = sess
	c.setPhase(phaseRelay)
	c.mu.Unlock()
	if !c.offLoop.Load() {
		c.relaying.Store(true)
	}
}

// goInline ends a goroutine's handling of the connection outside netpoll's
// handlers (see startRelay), once it holds none of the connection's locks:
// a session it opened may now run its handlers on the poller.
func (c *clientConn) goInline() {
	c.offLoop.Store(false)
	c.mu.Lock()
	relay := c.sess != nil
	c.mu.Unlock()
	if relay {
		c.relaying.Store(true)
	}
}

// InlineEndpoint implements poller.Inliner: once relaying, the connection's
// handler (Session.ClientReadable) never blocks and may run on the poller;
// before, the HTTP phase may wait (auth, admission, API bodies).
// A refused connection (nil) closes itself in its handler, which netpoll
// cannot do on the poller. c.ep is set before relaying is.
func (c *clientConn) InlineEndpoint() *poller.Endpoint {
	if c == nil || !c.relaying.Load() {
		return nil
	}
	return c.ep
}

func (c *clientConn) onClose(netpoll.Connection) error {
	c.srv.connsMu.Lock()
	delete(c.srv.conns, c)
	c.srv.connsMu.Unlock()
	c.answered()
	if c.hs != nil {
		c.hs.shut()
	}
	c.srv.clientConns.Add(-1)
	if c.wait.clientGone() {
		return nil // a cluster admission is out; its goroutine tells the session
	}
	c.mu.Lock()
	sess := c.sess
	c.mu.Unlock()
	if sess != nil {
		c.srv.clientLeft(sess)
	}
	return nil
}
