// Server is one gateway instance: New, Serve, Reload, Drain, Shutdown.

package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"rtgate/poller"
	"rtgate/server/admin"
	"rtgate/server/admission"
	"rtgate/server/api"
	"rtgate/server/balance"
	"rtgate/server/cluster"
	"rtgate/server/continuity"
	"rtgate/server/frontdoor"
	"rtgate/server/internal/testhooks"
	"rtgate/server/limit"
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

	// ctx ends when the server shuts down; upstream dials use it.
	ctx    context.Context
	cancel context.CancelFunc

	pool       *upstream.Pool // nil when the pool is off
	livePool   *upstream.Pool // GPT-Live's unstarted sockets (newLivePool); nil when off
	metrics    *metrics
	front      *frontdoor.Door    // the client listener, accept, TLS, request heads and bodies (Handler)
	memBudget  memoryBudget       // the global bound on bytes held for slow peers (the watchdog's)
	admitter   limit.Admitter     // per-key limits: limit.Local, or cluster.Limiter with REDIS_URL
	gate       *admission.Gate    // the one way in: models, budget, key limits, deployment slots (server/admission)
	store      *cluster.Store     // nil without REDIS_URL
	contGlobal *continuity.Budget // CONTINUITY_GLOBAL_MAX_BYTES: what all sessions keep (keepContinuity)

	sessionsOpen atomic.Int64
	draining     atomic.Bool // /health answers 503
	stopping     atomic.Bool // past the drain timeout: new upgrades get 503

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

	admin   *admin.Server  // the admin port: metrics, status page, playground
	origins origins        // ALLOWED_ORIGINS (origins.allow)
	api     *api.Endpoints // the HTTP endpoints: client secrets, calls, GPT-Live's controls (server/api)

	hooks *testhooks.SessionSlot // tests' pauses in a session's races (package testhooks); nil outside tests
}

// New prepares a server; Serve starts it.
func New(cfg Settings, log *slog.Logger) (*Server, error) {
	return newServer(context.Background(), cfg, log)
}

// newServer is New with the context the server's life derives from: tests
// put their pauses into it (package testhooks).
func newServer(base context.Context, cfg Settings, log *slog.Logger) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, log: log, sessions: map[*poller.Session]*sessionInfo{}}
	s.ctx, s.cancel = context.WithCancel(base)
	s.hooks = testhooks.SessionFrom(base)

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
		tlsConfig, err := frontdoor.TLSConfig(cfg.TLSCert, cfg.TLSKey, log)
		if err != nil {
			return nil, fmt.Errorf("loading TLS_CERT/TLS_KEY: %w", err)
		}
		s.tlsConfig = tlsConfig
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
	s.admin = admin.New(adminGateway(s), s.metrics.reg, cfg.AdminHosts, cfg.Port)
	s.origins = origins{allowed: cfg.AllowedOrigins, admin: s.admin}
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
	s.gate = admission.New(admission.Config{MaxSessionsPerKey: cfg.MaxSessionsPerKey, ConnectRatePerKey: cfg.ConnectRatePerKey,
		TranscriptionModel: cfg.TranscriptionModel},
		admission.Deps{Limiter: s.admitter, Balancer: s.balancer, CheckBudget: s.budgets.check})
	s.appState = newAppState(cfg, s.store, upTLS, &callMeters{ctx: s.ctx, timeout: cfg.DialTimeout, dialer: s.dialer,
		log: log, metrics: s.metrics, records: s.records, budgets: s.budgets, hangUp: func(d *routes.Deployment, id string) { s.api.HangUpLive(d, id) },
		hangUpCall: func(d *routes.Deployment, callID string) { s.api.HangUpCall(d, callID) }}, log)
	s.api = newEndpoints(s)
	if cfg.Pool.Enabled() {
		pc := cfg.Pool
		fdLimit := openFileLimit()
		pc.Spare = func() int {
			// Two sockets per session, and some for listeners and files.
			return fdLimit - fdReserve - 2*int(s.sessionsOpen.Load())
		}
		pc.Memory = poolMemory(cfg, s.store)
		s.pool = upstream.NewPool(s.dialer, pc, log, upstream.NewPoolMetrics(s.admin.Tee(s.metrics.reg)))
	}
	// A nil pool hears of demand and does nothing (upstream.Pool.Expect).
	s.front = frontdoor.New(doorSettings(cfg, s.tlsConfig), frontdoor.Deps{Context: s.ctx, Log: log,
		Registerer: s.metrics.reg, SessionsOpen: &s.sessionsOpen, Demand: s.pool}, s)
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
	ln, err := frontdoor.Listen(s.cfg.Addr(), s.cfg.ReusePort)
	if err != nil {
		return fmt.Errorf("listening on %s: %w", s.cfg.Addr(), err)
	}
	return s.Serve(ln)
}

// Serve accepts client connections on ln until Shutdown.
//
// It returns nil once StopAccepting (Drain, Shutdown) has stopped the
// listener, and an error only when the listener stopped being served for
// another reason and could not be served again (frontdoor.Door.Serve): then the
// gateway no longer accepts clients, and cmd/gateway exits non-zero.
func (s *Server) Serve(ln net.Listener) error {
	return s.front.Serve(ln, func() {
		go s.newWatchdog().run(s.ctx)
		s.log.Info("gateway listening", "addr", ln.Addr().String(), "tls", s.tlsConfig != nil,
			"upstream", routes.RedactedURL(s.cfg.APIBase), "model", s.cfg.Model, "pool", poolDesc(s.cfg.Pool))
		if s.pool != nil {
			// The configured model's key is known now: warm it before the
			// first client arrives.
			primePool(s.pool, s.routes.Load())
		}
		primeLivePool(s.livePool, s.routes.Load())
	})
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
	err := s.front.Shutdown(ctx)
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
