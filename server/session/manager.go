package session

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"rtgate/poller"
	"rtgate/server/admission"
	"rtgate/server/apps"
	"rtgate/server/balance"
	"rtgate/server/cluster"
	"rtgate/server/continuity"
	"rtgate/server/frontdoor"
	"rtgate/server/internal/testhooks"
	"rtgate/server/limit"
	"rtgate/server/recording"
	"rtgate/server/routes"
	"rtgate/server/tracing"
	"rtgate/upstream"
)

// Config is what the sessions take of the gateway's settings (package
// server maps its Settings into it).
type Config struct {
	DialTimeout      time.Duration // each upstream dial attempt
	CloseTimeout     time.Duration // the close handshake's bound
	MaxMessage       int64         // MAX_MESSAGE_BYTES
	MaxPending       int           // MAX_PENDING_BYTES
	MaxConnections   int           // MAX_CONNECTIONS: client sockets with a session
	LiveStartTimeout time.Duration // GPT-Live: the wait for session.start
	NoTurnMetrics    bool          // TURN_METRICS=0

	Continuity          bool  // CONTINUITY (a key's continuity overrides it)
	ContinuityKeepAudio bool  // CONTINUITY_KEEP_AUDIO
	ContinuityMaxBytes  int   // CONTINUITY_MAX_BYTES, per session
	ContinuityGlobal    int64 // CONTINUITY_GLOBAL_MAX_BYTES, over all sessions

	// Recordings is where recorded sessions go (RECORDINGS...), and
	// RecordingMaxAudio how much of each side of one session is kept.
	Recordings        recording.ArchiveConfig
	RecordingMaxAudio time.Duration
	PoolMaxIdle       time.Duration

	TranscriptionModel string   // TRANSCRIPTION_MODEL
	AllowedOrigins     []string // ALLOWED_ORIGINS
	ClientSecretKeys   []string // CLIENT_SECRET_KEYS
	SpendState         string   // where the budgets' ledger is saved without Redis
	UsageLog           string   // USAGE_LOG
	DatabaseURL        string   // DATABASE_URL: the durable spend log
	SpendSpool         string   // the spend log's spool while Postgres is away

	Admission admission.Config // the gate's limits
}

// Deps are the parts of the gateway the sessions share with the rest of it.
type Deps struct {
	Context  context.Context // the gateway's life: dials and background work end with it
	Log      *slog.Logger
	Registry prometheus.Registerer // the sessions' metrics go here

	Routes   func() *routes.Table // the configuration in force (replaced whole on SIGHUP)
	Dialer   *upstream.Dialer
	Pool     *upstream.Pool    // the warm pool; nil when off
	LivePool *upstream.Pool    // GPT-Live's unstarted sockets; nil when off
	UpTLS    *tls.Config       // the upstream calls endpoints' HTTP client
	Balancer *balance.Balancer // every deployment's health, counts and slots
	Limiter  limit.Admitter    // the keys' limits
	Store    *cluster.Store    // nil without REDIS_URL
	Tracer   *tracing.Tracer   // nil with tracing off

	// DialFailures counts failed dials by model group (the balancer's too).
	DialFailures *prometheus.CounterVec

	// SessionsOpen counts client sockets holding a session (the front
	// door's and the pool's spare count read it); Draining and Stopping
	// are the gateway's drain states.
	SessionsOpen *atomic.Int64
	Draining     *atomic.Bool // /health answers 503
	Stopping     *atomic.Bool // past the drain timeout: connects get 503

	// The API's answers the sessions need (server/api, built after the
	// Manager: these reach it when called).
	Authenticate func(table *routes.Table, presented string) (*routes.ClientKey, *apps.Grant, *frontdoor.Refusal)
	HangUpLive   func(d *routes.Deployment, id string)
	HangUpCall   func(d *routes.Deployment, callID string)
	// OriginAdmin lets the admin page's own origin through ALLOWED_ORIGINS.
	OriginAdmin func(origin string) bool

	Hooks *testhooks.SessionSlot // tests' pauses in a session's races; nil outside tests
}

// Manager is the sessions of one gateway instance: it turns a decided
// WebSocket request into a session (HandleRequest), keeps the registry of
// live sessions, and meters, records and ends them.
type Manager struct {
	cfg      Config
	log      *slog.Logger
	ctx      context.Context
	dialer   *upstream.Dialer
	routes   func() *routes.Table
	balancer *balance.Balancer
	admitter limit.Admitter
	tracer   *tracing.Tracer
	hooks    *testhooks.SessionSlot
	// authenticate is the API's credential check (api.Endpoints.Authenticate).
	authenticate func(table *routes.Table, presented string) (*routes.ClientKey, *apps.Grant, *frontdoor.Refusal)
	origins      origins

	gate       *admission.Gate    // the one way in (server/admission)
	metrics    *metrics           // the sessions' Prometheus metrics
	records    *records           // where ended sessions' records go
	archive    *recording.Archive // where recorded sessions go (recordings.go)
	budgets    *budgets           // the keys' spend budgets
	contGlobal *continuity.Budget // CONTINUITY_GLOBAL_MAX_BYTES: what all sessions keep (keepContinuity)
	appState                      // client secrets, calls, sidebands

	pool     *upstream.Pool // nil when the pool is off
	livePool *upstream.Pool // GPT-Live's unstarted sockets; nil when off

	sessionsOpen *atomic.Int64
	draining     *atomic.Bool
	stopping     *atomic.Bool
	sessCfg      poller.SessionConfig

	// sessions is the registry of live sessions, for the watchdog, for
	// draining and for the record written when each ends.
	sessMu   sync.Mutex
	sessions map[*poller.Session]*sessionInfo
}

// New makes the sessions' manager: its metrics, records, budgets, the
// admission gate and the apps' state. Close ends what it started.
func New(cfg Config, d Deps) (*Manager, error) {
	m := &Manager{cfg: cfg, log: d.Log, ctx: d.Context, dialer: d.Dialer, routes: d.Routes, balancer: d.Balancer,
		admitter: d.Limiter, tracer: d.Tracer, hooks: d.Hooks, authenticate: d.Authenticate, pool: d.Pool, livePool: d.LivePool,
		origins:      origins{allowed: cfg.AllowedOrigins, admin: d.OriginAdmin},
		sessionsOpen: d.SessionsOpen, draining: d.Draining, stopping: d.Stopping,
		sessions: map[*poller.Session]*sessionInfo{}}
	m.metrics = newMetrics(d.Registry, d.DialFailures)
	records, err := openRecords(cfg, m.metrics, d.Log, d.Routes)
	if err != nil {
		return nil, err
	}
	m.records = records
	if m.archive, err = recording.NewArchive(cfg.Recordings, d.Registry, d.Log); err != nil {
		m.records.close(context.Background())
		return nil, fmt.Errorf("recordings: %w", err)
	}
	if m.budgets, err = newBudgets(cfg, d.Store, d.Routes, d.Registry, d.Log); err != nil {
		m.records.close(context.Background())
		_ = m.archive.Close(context.Background())
		return nil, fmt.Errorf("budgets: %w", err)
	}
	go m.budgets.run(d.Context)
	m.gate = admission.New(cfg.Admission, admission.Deps{Limiter: d.Limiter, Balancer: d.Balancer, CheckBudget: m.budgets.check})
	m.appState = newAppState(cfg, d.Store, d.UpTLS, &callMeters{ctx: d.Context, timeout: cfg.DialTimeout, dialer: d.Dialer,
		log: d.Log, metrics: m.metrics, records: m.records, budgets: m.budgets, hangUp: d.HangUpLive, hangUpCall: d.HangUpCall}, d.Log)
	d.Registry.MustRegister(m.meters.gauges()...)
	m.contGlobal = continuity.NewBudget(cfg.ContinuityGlobal)
	m.sessCfg = sessionConfig(m)
	return m, nil
}

// Gate is the admission every entry point takes (the API's too).
func (m *Manager) Gate() *admission.Gate { return m.gate }

// CheckBudget refuses a key at its spend budget (the API's entry points).
func (m *Manager) CheckBudget(key *routes.ClientKey) *frontdoor.Refusal { return m.budgets.check(key) }

// Calls are the calls and GPT-Live sessions this gateway made, by owner.
func (m *Manager) Calls() *apps.Calls { return m.calls }

// Secrets are the client secrets this gateway minted.
func (m *Manager) Secrets() *apps.Secrets { return m.secrets }

// HTTPClient is the client for the upstream's HTTP endpoints.
func (m *Manager) HTTPClient() *http.Client { return m.httpClient }

// LiveEnded is told that a GPT-Live WebRTC session was hung up by request.
func (m *Manager) LiveEnded(id string) { m.meters.endedByRequest(id) }

// SessionsEnded is the number of sessions ended since start.
func (m *Manager) SessionsEnded() float64 { return sumCounter(m.metrics.sessionsTotal) }

// Close stops the records, the budgets' sync and the calls' meters.
func (m *Manager) Close(ctx context.Context) {
	m.records.close(ctx)
	if err := m.archive.Close(ctx); err != nil {
		m.log.Warn("recordings not all stored at shutdown", "err", err)
	}
	m.budgets.close(ctx)
	m.meters.close()
}
