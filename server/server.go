// Package server is the gateway's front door: the client listener, the HTTP
// upgrade with its authentication and routing, and each session's lifecycle
// from accept to the end of its relay.
//
// A client connection moves through three phases, all driven by netpoll's
// OnRequest for that connection, so no goroutine waits on a client:
//
//	tls  (TLS listeners only) OnRequest collects the ClientHello; a goroutine
//	     runs the handshake once it is whole (tlsaccept.go), at most
//	     MAX_HANDSHAKES at once, each bounded by the handshake timeout;
//	     every connection counts against MAX_CONNECTIONS from accept
//	     (accept.go);
//	http the request head is collected (bounded in size and time), checked,
//	     and answered with a JSON refusal or a 101;
//	relay the poller.Session forwards frames; the upstream is dialed in a
//	     goroutine that exits once the upstream socket is handed to netpoll.
package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cloudwego/netpoll"
	"github.com/gobwas/ws"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/valyala/bytebufferpool"

	"rtgate/frames"
	"rtgate/poller"
	"rtgate/server/routes"
	"rtgate/server/spenddb"
	"rtgate/server/usage"
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

	pool      *upstream.Pool // nil when the pool is off
	metrics   *metrics
	front     frontDoor    // admission at accept (accept.go)
	memBudget memoryBudget // the global bound on bytes held for slow peers (watchdog.go)
	limiter   *keyLimiter
	store     *ClusterStore   // nil without REDIS_URL
	cluster   *clusterLimiter // nil without REDIS_URL; replaces limiter then

	sessionsOpen atomic.Int64
	clientConns  atomic.Int64 // accepted client sockets not yet closed, for Drain
	draining     atomic.Bool  // /health answers 503
	stopping     atomic.Bool  // past the drain timeout: new upgrades get 503

	// sessions is the registry of live sessions, for the watchdog, for
	// draining and for the record written when each ends.
	sessMu   sync.Mutex
	sessions map[*poller.Session]*sessionInfo

	routes    atomic.Pointer[routes.Table] // replaced whole on SIGHUP
	live      *router
	usageLog  *usage.Log        // nil without USAGE_LOG
	spendDB   *spenddb.Writer   // nil without DATABASE_URL
	budgets   *budgets          // budget.go
	depLimits deploymentLimiter // deplimits.go

	apps // client secrets, calls, sidebands (apps.go)

	admin adminState // the admin port's status page and playground (admin.go)
}

// New prepares a server; Serve starts it.
func New(cfg Settings, log *slog.Logger) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, log: log, sessions: map[*poller.Session]*sessionInfo{},
		limiter: newKeyLimiter()}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.admin.init()

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
	s.logTableNotices(table)
	s.metrics = newMetrics()
	s.front.init(s.metrics.reg)
	s.memBudget.init(cfg, s.metrics.reg)
	if cfg.UsageLog != "" {
		ul, err := usage.Open(cfg.UsageLog, log, s.metrics.usageLogErrors)
		if err != nil {
			return nil, fmt.Errorf("USAGE_LOG: %w", err)
		}
		s.usageLog = ul
	}
	s.live = newRouter(s.metrics.reg, log, cfg.DialTimeout)
	if err := s.openSpendDB(); err != nil {
		return nil, err
	}
	if err := s.setupCluster(); err != nil {
		return nil, err
	}
	if err := s.setupBudgets(); err != nil {
		return nil, err
	}
	go s.runBudgets(s.ctx)
	s.setupApps(upTLS)
	if cfg.Pool.Enabled() {
		pc := cfg.Pool
		fdLimit := openFileLimit()
		pc.Spare = func() int {
			// Two sockets per session, and some for listeners and files.
			return fdLimit - fdReserve - 2*int(s.sessionsOpen.Load())
		}
		pc.Memory = s.poolMemory()
		s.pool = upstream.NewPool(s.dialer, pc, log, upstream.NewPoolMetrics(s.admin.tee(s.metrics.reg)))
	}
	s.metrics.warmRedials = prometheus.NewCounter(prometheus.CounterOpts{Name: "rtgate_pool_warm_redials_total",
		Help: "Taken warm sockets that proved dead before the client sent anything, replaced by a fresh dial."})
	s.metrics.reg.MustRegister(s.metrics.warmRedials)
	upstream.RegisterDialerMetrics(s.metrics.reg, s.dialer)
	s.sessCfg = poller.SessionConfig{
		MaxMessage:      cfg.MaxMessage,
		MaxPending:      cfg.MaxPending,
		CloseTimeout:    cfg.CloseTimeout,
		OnEnd:           s.sessionEnded,
		UpstreamInvalid: upstreamInvalidNotice,
		Redial:          s.redial,
		SameFirstFrame:  isSessionCreated,
	}
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
func (s *Server) Serve(ln net.Listener) error {
	loop, err := netpoll.NewEventLoop(s.onRequest,
		netpoll.WithOnPrepare(s.onPrepare),
		netpoll.WithWriteTimeout(s.cfg.WriteTimeout),
	)
	if err != nil {
		return fmt.Errorf("creating event loop: %w", err)
	}
	sl, err := newStoppableListener(ln) // listener.go: Drain stops accepting through it
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.loop, s.ln, s.listener = loop, ln, sl
	s.mu.Unlock()
	go s.watchdog(s.ctx)
	s.log.Info("gateway listening", "addr", ln.Addr().String(), "tls", s.tlsConfig != nil,
		"upstream", redactedURL(s.cfg.APIBase), "model", s.cfg.Model, "pool", poolDesc(s.cfg.Pool))
	if s.pool != nil {
		// The configured model's key is known now: warm it before the
		// first client arrives.
		s.primePool(s.routes.Load())
	}
	err = loop.Serve(sl)
	if sl.stopped.Load() {
		return nil // Drain stopped accepting: that is how serving ends
	}
	return err
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

// Shutdown stops accepting connections and closes the warm pool's sockets
// with close 1000.
func (s *Server) Shutdown(ctx context.Context) error {
	if s.pool != nil {
		s.pool.Close()
	}
	s.cancel()
	s.mu.Lock()
	loop := s.loop
	s.mu.Unlock()
	var err error
	if loop != nil {
		err = loop.Shutdown(ctx)
	}
	s.closeSpend(ctx)
	s.closeBudgets(ctx)
	s.closeMeters()
	s.closeCluster()
	return err
}

// Reload rereads CONFIG_FILE (on SIGHUP): new sessions use the new routes
// and keys, live sessions keep the deployment they have, and a file that
// does not load is reported and the old configuration kept.
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
	s.logTableNotices(r)
	s.primePool(r)
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

// phases of a client connection
const (
	phaseTLS = iota
	phaseHTTP
	phaseRelay
	phaseDone // refused or answered: input is dropped until the socket closes
)

// clientConn is the gateway's state for one accepted connection.
type clientConn struct {
	srv      *Server
	conn     netpoll.Connection
	ep       *poller.Endpoint
	phase    int
	head     *bytebufferpool.ByteBuffer // request bytes so far, during phaseHTTP
	sess     *poller.Session            // set under mu: onClose reads it from another goroutine
	accepted time.Time

	// TLS listeners only (tlsaccept.go): the handshake's connection, whether
	// its goroutine started, and the lock that keeps OnRequest and the
	// goroutine's hand-off from reading at the same time.
	hs        *handshakeConn
	hsStarted bool
	left      bool        // the handshake count was given back (Server.leave); guarded by mu
	relaying  atomic.Bool // phase is phaseRelay, for netpoll's runner (poller.Inliner); beside hsStarted: one word
	readMu    sync.Mutex

	mu    sync.Mutex
	timer *time.Timer // handshake deadline; nil once upgraded

	wait clusterWait // a Redis admission check in flight (cluster_admit.go)
	api  *apiRequest // an API request's body being collected (httpapi.go)

	// The state a plain session keeps for its whole life lives here, in
	// the connection's one allocation, rather than in five of its own
	// (issue 12: each allocation rounds up to a size class and is one more
	// object for the collector). Only pointers to them are handed out (ep,
	// sess, the registry's *sessionInfo), and a clientConn is never copied.
	// What outlives the client socket (a session still closing its
	// upstream) keeps the whole struct alive, which costs nothing more than
	// before: the connection's netpoll context held it anyway.
	plainEP poller.Endpoint // ep on a plain listener
	session poller.Session  // sess, once upgraded
	info    sessionInfo
	watch   setupWatch
}

func (s *Server) onPrepare(conn netpoll.Connection) context.Context {
	if !s.accept() {
		return s.refuseAtAccept(conn)
	}
	c := &clientConn{srv: s, conn: conn, phase: phaseHTTP, accepted: time.Now()}
	s.clientConns.Add(1)
	if s.tlsConfig != nil {
		c.phase = phaseTLS
		nb := poller.NewNBConn(conn)
		c.hs = newHandshakeConn(nb)
	} else {
		c.ep = &c.plainEP
		poller.InitPlainEndpoint(c.ep, conn)
	}
	c.timer = time.AfterFunc(s.cfg.HandshakeTimeout, func() { _ = conn.Close() })
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
// the handshake goroutine (tlsaccept.go).
func (s *Server) onRequest(ctx context.Context, conn netpoll.Connection) error {
	c, _ := ctx.Value(ctxKey{}).(*clientConn)
	if c == nil {
		if ctx.Value(refusedKey{}) != nil {
			return s.answerRefused(conn)
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
	switch c.phase {
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
	err := c.ep.Read(func(src frames.Source) error {
		p, err := src.Next(src.Len())
		c.head.B = append(c.head.B, p...)
		return err
	})
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
			c.refuse(&httpError{status: http.StatusRequestHeaderFieldsTooLarge, errType: "invalid_request_error",
				code: "headers_too_large", message: "request head too large"})
		}
		return nil
	}
	if end > c.srv.cfg.MaxHeaderBytes {
		c.refuse(&httpError{status: http.StatusRequestHeaderFieldsTooLarge, errType: "invalid_request_error",
			code: "headers_too_large", message: "request head too large"})
		return nil
	}
	head, rest := c.head.B[:end], c.head.B[end:]
	c.srv.handle(c, head, rest)
	return nil
}

// refuse answers the request with an HTTP error and closes the connection.
func (c *clientConn) refuse(e *httpError) {
	c.phase = phaseDone
	_ = c.ep.Send(e.response())
	c.ep.Close()
}

// stopTimer ends the handshake deadline and lets the timer go: a long-lived
// session should not carry it. The connection's handshake is over, so it
// also gives back its handshake count.
func (c *clientConn) stopTimer() {
	c.mu.Lock()
	if c.timer != nil {
		c.timer.Stop()
		c.timer = nil
	}
	left := c.left
	c.left = true
	c.mu.Unlock()
	if !left {
		c.srv.leave()
	}
}

// startRelay makes the connection a session's client side. Under mu, so
// that onClose, which may run on another goroutine (the TLS handshake's
// hand-off runs outside netpoll's handler), sees either no session or this
// one; a client gone before this sees its 101 fail.
func (c *clientConn) startRelay(sess *poller.Session) {
	c.mu.Lock()
	c.sess, c.phase = sess, phaseRelay
	c.mu.Unlock()
	c.relaying.Store(true)
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
	c.stopTimer()
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

// handle acts on a complete request head; rest holds bytes the client sent
// behind it (frames, for a client that did not wait for the 101).
func (s *Server) handle(c *clientConn, head, rest []byte) {
	req, herr := parseRequest(head)
	if herr != nil {
		c.refuse(herr)
		return
	}
	if s.startAPI(c, req, rest) {
		return
	}
	switch req.URL.Path {
	case "/health", "/health/liveliness", "/health/readiness":
		c.phase = phaseDone
		if s.draining.Load() {
			_ = c.ep.Send(httpResponse(http.StatusServiceUnavailable, http.Header{"Retry-After": {"5"}},
				map[string]any{"status": "draining"}))
		} else if req.URL.Path != "/health/liveliness" && s.pool.Warming() {
			// Not ready until the pool holds its remembered demand
			// (upstream/warming.go); alive all the same.
			_ = c.ep.Send(httpResponse(http.StatusServiceUnavailable, http.Header{"Retry-After": {"1"}},
				map[string]any{"status": "warming"}))
		} else {
			_ = c.ep.Send(httpResponse(http.StatusOK, nil, map[string]any{"status": "ok"}))
		}
		c.ep.Close()
		return
	case "/v1/realtime", "/realtime":
	default:
		c.refuse(&httpError{status: http.StatusNotFound, errType: "invalid_request_error", code: "not_found",
			message: "no such endpoint: " + req.URL.Path})
		return
	}
	if req.Method != http.MethodGet {
		c.refuse(&httpError{status: http.StatusMethodNotAllowed, errType: "invalid_request_error", code: "method_not_allowed",
			message: "use GET with a WebSocket upgrade", header: http.Header{"Allow": {"GET"}}})
		return
	}
	if !s.originAllowed(req.Header.Get("Origin")) {
		c.refuse(&httpError{status: http.StatusForbidden, errType: "invalid_request_error", code: "origin_not_allowed",
			message: "this Origin may not connect"})
		return
	}
	routes := s.routes.Load()
	creds := credentials(req.Header)
	key, grant, herr := s.authenticateConnect(routes, creds.key)
	if herr != nil {
		c.refuse(herr)
		return
	}
	accept, herr := checkUpgrade(req)
	if herr != nil {
		c.refuse(herr)
		return
	}
	q := req.URL.Query()
	group, herr := s.connectGroup(routes, q, grant)
	if herr == nil {
		herr = s.checkSideband(key, q)
	}
	if herr != nil {
		c.refuse(herr)
		return
	}
	// The session keeps its group for its whole life; from the query it
	// would keep the whole request line it points into.
	group = strings.Clone(group)
	if !key.Allows(group) {
		c.refuse(&httpError{status: http.StatusForbidden, errType: "invalid_request_error", code: "model_not_allowed",
			message: fmt.Sprintf("This key may not use the model '%s'.", group)})
		return
	}
	if herr := s.checkBudget(key); herr != nil {
		c.refuse(herr)
		return
	}
	if herr := s.admit(c, key); herr != nil {
		if herr != errAdmitPending {
			c.refuse(herr)
		}
		return
	}
	cands, reserved, herr := s.reserveDeployment(routes.Groups[group])
	if herr != nil {
		s.unadmit(key)
		c.refuse(herr)
		return
	}

	protocol := ""
	if creds.offeredRealtime {
		protocol = subprotocolRealtime
	}
	c.stopTimer()
	info := &c.info
	info.id, info.key, info.group, info.reserved, info.start, info.grant = usage.NewSessionID(), key, group, reserved, time.Now(), grant
	sess := &c.session
	sess.Init(&s.sessCfg, c.ep)
	s.meterBudget(sess, info)
	c.watch = setupWatch{sessionInfo: info, srv: s}
	sess.InspectUpstream(&c.watch)
	c.startRelay(sess)
	s.sessMu.Lock()
	s.sessions[sess] = info
	s.sessMu.Unlock()
	s.metrics.sessionsOpen.Inc()
	if err := c.ep.Send(upgradeResponse(accept, protocol)); err != nil {
		sess.Cancel() // the client is gone before its 101: no upstream
		// Its close callback may have run before the session existed (the
		// TLS listener's first request is read off netpoll's handlers): end
		// the client side here; ClientGone is idempotent.
		sess.ClientGone()
		c.ep.Close()
		return
	}
	if len(rest) > 0 {
		sess.ClientBytes(rest)
	}
	bytebufferpool.Put(c.head)
	c.head = nil
	if s.startApp(sess, info, routes, q, req.Header) {
		return // a client secret's, a sideband's or a transcription session's own start (apps.go)
	}
	// Only the headers that go upstream outlive the handshake: the redial
	// closure lives as long as the session, and the whole parsed header
	// (about 1 KB) would too. Likewise the query is kept as its string and
	// parsed again for a redial, which is rare: the parsed url.Values (a
	// map, ~420 B) and the request line it points into would stay too.
	upHeader := passThrough(req.Header)
	rawQuery := strings.Clone(req.URL.RawQuery)
	info.redial = func() {
		defer s.pool.ClientDialing()()   // a client waits on this dial too
		q, _ := url.ParseQuery(rawQuery) // it parsed once already, through req.URL.Query
		s.connectUpstream(sess, info, s.live.order(routes.Groups[group]), q, upHeader)
	}
	hit, dialDone := s.tryWarm(sess, info, cands[0], target(cands[0], q, upHeader))
	if hit {
		return
	}
	// Only a warm socket is ever redialed (Session.redial): a fresh dial's
	// session drops the closure, and with it the query and headers it
	// keeps (~120 B per plain idle session, MemProfileRate=1 heap profile).
	// Nothing else reads it yet: no warm socket, no close callback asking.
	info.redial = nil
	go func() {
		defer dialDone() // the pool's refill yields until this dial ends
		s.connectUpstream(sess, info, cands, q, upHeader)
	}()
}

// admit applies the instance-wide and per-key limits, reserving a session
// slot; sessionEnded gives it back. A key's own limits win over the
// gateway-wide defaults.
func (s *Server) admit(c *clientConn, key *routes.ClientKey) *httpError {
	if herr, ok := c.takeVerdict(); ok {
		return herr // the cluster check's answer, reserved already
	}
	if s.stopping.Load() {
		return &httpError{status: http.StatusServiceUnavailable, errType: "server_error", code: "draining",
			message: "this gateway instance is shutting down; connect again", header: http.Header{"Retry-After": {"1"}}}
	}
	if n := s.sessionsOpen.Add(1); s.cfg.MaxConnections > 0 && n > int64(s.cfg.MaxConnections) {
		s.sessionsOpen.Add(-1)
		return tooManyConnections()
	}
	maxSessions, rate := s.cfg.MaxSessionsPerKey, s.cfg.ConnectRatePerKey
	if key.MaxSessions > 0 {
		maxSessions = key.MaxSessions
	}
	if key.ConnectRate > 0 {
		rate = key.ConnectRate
	}
	if s.cluster != nil {
		herr := s.admitCluster(c, key.Name, maxSessions, rate)
		if herr != nil && herr != errAdmitPending {
			s.sessionsOpen.Add(-1)
		}
		return herr
	}
	if herr := s.limiter.admit(key.Name, maxSessions, rate, time.Now()); herr != nil {
		s.sessionsOpen.Add(-1)
		return herr
	}
	return nil
}

func (s *Server) originAllowed(origin string) bool {
	if origin == "" || len(s.cfg.AllowedOrigins) == 0 || s.isAdminOrigin(origin) {
		return true
	}
	for _, o := range s.cfg.AllowedOrigins {
		if strings.EqualFold(o, origin) {
			return true
		}
	}
	return false
}

func (s *Server) sessionEnded(sess *poller.Session) {
	s.sessMu.Lock()
	info := s.sessions[sess]
	delete(s.sessions, sess)
	s.sessMu.Unlock()
	if info == nil {
		s.sessionsOpen.Add(-1)
		return
	}
	if s.cluster != nil {
		s.cluster.release(info.key.Name)
	} else {
		s.limiter.release(info.key.Name)
	}
	s.releaseDeployment(info)
	deployment := ""
	dep := s.uncount(info, false)
	if dep != nil {
		deployment = dep.Name
	}
	m := s.metrics
	m.sessionsOpen.Dec()
	fin, bin, fout, bout := sess.Counters()
	m.frames.WithLabelValues("client_to_upstream").Add(float64(fin))
	m.bytes.WithLabelValues("client_to_upstream").Add(float64(bin))
	m.frames.WithLabelValues("upstream_to_client").Add(float64(fout))
	m.bytes.WithLabelValues("upstream_to_client").Add(float64(bout))

	cl, from, ok := sess.FirstClose()
	outcome := sessionOutcome(sess, cl, from, ok)
	if dep == nil && info.left() {
		outcome = "client_lost" // it left while its upstream was being dialed
	}
	m.sessionsTotal.WithLabelValues(outcome, info.key.Name).Inc()
	u := info.meter.Usage
	s.countTokens(info.group, info.key.Name, u)

	rec := usage.Record{
		SessionID: info.id, KeyName: info.key.Name, ModelGroup: info.group, Deployment: deployment,
		StartedAt: info.start.UTC(), EndedAt: time.Now().UTC(), DurationMS: time.Since(info.start).Milliseconds(),
		PoolHit: info.poolHit, Outcome: outcome,
		FramesIn: fin, BytesIn: bin, FramesOut: fout, BytesOut: bout,
		Usage: u,
	}
	if ok {
		rec.CloseCode, rec.CloseReason, rec.CloseSide = int(cl.Code), cl.Reason, from.String()
	}
	s.recordSession(info, &rec)
	s.explainBeta(rec)
	s.sessionsOpen.Add(-1) // last: tests and Drain take 0 to mean all is done
}

// sessionOutcome classifies how a session ended, for metrics.
func sessionOutcome(sess *poller.Session, cl frames.Close, from poller.Side, ok bool) string {
	switch {
	case sess.UpstreamUnavailable():
		return "upstream_unavailable"
	case !ok:
		return "unknown"
	case cl.Code == ws.StatusAbnormalClosure: // the socket dropped without a close frame
		return from.String() + "_lost"
	case cl.Code == ws.StatusProtocolError || cl.Code == ws.StatusInvalidFramePayloadData || cl.Code == ws.StatusMessageTooBig:
		return from.String() + "_protocol_error"
	}
	return from.String() + "_closed"
}

// redactedURL is a URL fit for logs: no user info, no query (which may carry
// identifiers).
func redactedURL(u *url.URL) string {
	r := *u
	r.User = nil
	r.RawQuery = ""
	return r.String()
}
