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
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"rtgate/server/admin"
	"rtgate/server/api"
	"rtgate/server/apps"
	"rtgate/server/balance"
	"rtgate/server/cluster"
	"rtgate/server/frontdoor"
	"rtgate/server/internal/testhooks"
	"rtgate/server/limit"
	"rtgate/server/routes"
	"rtgate/server/session"
	"rtgate/server/tracing"
	"rtgate/upstream"
)

// Server is one gateway instance: the wiring of its parts. A request comes
// in through the front door (server/frontdoor), which hands it to the API
// (server/api) or to the sessions (server/session).
type Server struct {
	cfg       Settings
	log       *slog.Logger
	dialer    *upstream.Dialer
	tlsConfig *tls.Config // client listener; nil for plain

	// ctx ends when the server shuts down; upstream dials use it.
	ctx    context.Context
	cancel context.CancelFunc

	reg       *prometheus.Registry // every metric of the instance (/metrics)
	pool      *upstream.Pool       // nil when the pool is off
	livePool  *upstream.Pool       // GPT-Live's unstarted sockets (newLivePool); nil when off
	front     *frontdoor.Door      // the client listener, accept, TLS, request heads and bodies (Handler)
	sessions  *session.Manager     // the sessions: connects, the registry, metering and records
	api       *api.Endpoints       // the HTTP endpoints: client secrets, calls, GPT-Live's controls
	admin     *admin.Server        // the admin port: metrics, status page, playground
	memBudget memoryBudget         // the global bound on bytes held for slow peers (the watchdog's)
	admitter  limit.Admitter       // per-key limits: limit.Local, or cluster.Limiter with REDIS_URL
	store     *cluster.Store       // nil without REDIS_URL
	tracer    *tracing.Tracer      // OpenTelemetry spans; nil when off (server/tracing)
	balancer  *balance.Balancer    // every deployment's health, counts, slots and dial latency

	sessionsOpen atomic.Int64
	draining     atomic.Bool // /health answers 503
	stopping     atomic.Bool // past the drain timeout: new upgrades get 503

	routes atomic.Pointer[routes.Table] // replaced whole on SIGHUP
	hooks  *testhooks.SessionSlot       // tests' pauses in a session's races (package testhooks); nil outside tests
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
	s := &Server{cfg: cfg, log: log}
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
	session.LogTableNotices(log, table)
	s.reg = newRegistry()
	s.admin = admin.New(adminGateway(s), s.reg, cfg.AdminHosts, cfg.Port)
	s.memBudget.init(cfg, s.reg)
	tracer, err := tracing.FromEnv(s.ctx, s.reg, log)
	if err != nil {
		return nil, err
	}
	s.tracer = tracer
	dialFailures := newDialFailures(s.reg)
	s.balancer = balance.New(balance.Config{Registerer: s.reg, Log: log, ProbeTimeout: cfg.DialTimeout,
		HedgeDelay: cfg.HedgeDelay, DialFailures: dialFailures,
		Router: func() routes.Router { return s.routes.Load().Router }})
	if s.admitter, s.store, err = newAdmitter(cfg, log, s.reg); err != nil {
		return nil, err
	}
	if cfg.Pool.Enabled() {
		pc := cfg.Pool
		fdLimit := openFileLimit()
		pc.Spare = func() int {
			// Two sockets per session, and some for listeners and files.
			return fdLimit - fdReserve - 2*int(s.sessionsOpen.Load())
		}
		pc.Memory = poolMemory(cfg, s.store)
		s.pool = upstream.NewPool(s.dialer, pc, log, upstream.NewPoolMetrics(s.admin.Tee(s.reg)))
	}
	s.livePool = newLivePool(cfg, s.dialer, &s.sessionsOpen, log, s.reg)
	s.sessions, err = session.New(sessionSettings(cfg), session.Deps{
		Context: s.ctx, Log: log, Registry: s.reg, Routes: s.routes.Load, Dialer: s.dialer, Pool: s.pool,
		LivePool: s.livePool, UpTLS: upTLS, Balancer: s.balancer, Limiter: s.admitter, Store: s.store,
		Tracer: s.tracer, DialFailures: dialFailures,
		SessionsOpen: &s.sessionsOpen, Draining: &s.draining, Stopping: &s.stopping,
		// The API is made next, from the sessions' answers; these reach it when called.
		Authenticate: func(t *routes.Table, presented string) (*routes.ClientKey, *apps.Grant, *frontdoor.Refusal) {
			return s.api.Authenticate(t, presented)
		},
		HangUpLive:  func(d *routes.Deployment, id string) { s.api.HangUpLive(d, id) },
		HangUpCall:  func(d *routes.Deployment, callID string) { s.api.HangUpCall(d, callID) },
		OriginAdmin: s.admin.IsOrigin,
		Hooks:       s.hooks,
	})
	if err != nil {
		// What New started so far stops: the pools (not yet primed), the
		// limiter (with REDIS_URL, its lease would shrink the other
		// instances' shares until it ran out), the tracer.
		closePools(s.pool, s.livePool)
		s.admitter.Close()
		s.cancel()
		_ = s.tracer.Shutdown(context.Background())
		return nil, err
	}
	s.api = newEndpoints(s)
	// A nil pool hears of demand and does nothing (upstream.Pool.Expect).
	s.front = frontdoor.New(doorSettings(cfg, s.tlsConfig), frontdoor.Deps{Context: s.ctx, Log: log,
		Registerer: s.reg, SessionsOpen: &s.sessionsOpen, Demand: s.pool}, s)
	upstream.RegisterDialerMetrics(s.reg, s.dialer)
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
		// The configured deployments' keys are known now: warm them
		// before the first client arrives.
		s.sessions.PrimePools(s.routes.Load())
		s.sessions.PrepareGuardrails(s.routes.Load())
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
	s.sessions.Close(ctx)
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
	s.sessions.Revoke(r) // revoked keys' sessions end
	session.LogTableNotices(s.log, r)
	s.sessions.PrimePools(r)
	s.sessions.PrepareGuardrails(r)
	groups := make([]string, 0, len(r.Groups))
	for g := range r.Groups {
		groups = append(groups, g)
	}
	s.log.Info("config reloaded", "model_groups", groups, "keys", len(r.Keys))
	return nil
}

// ReopenLogs reopens the files the gateway writes (USAGE_LOG), on SIGHUP,
// so that logrotate's postrotate `kill -HUP` starts new ones
// (session.Manager.ReopenLogs).
func (s *Server) ReopenLogs() error { return s.sessions.ReopenLogs() }

// SessionsOpen is the number of sessions relaying now.
func (s *Server) SessionsOpen() int64 { return s.sessionsOpen.Load() }
