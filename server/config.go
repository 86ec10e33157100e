package server

import (
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"syscall"
	"time"

	"rtgate/server/routes"
	"rtgate/upstream"
)

// Settings is everything the gateway needs to start, from its environment
// variables (the ones our users already set for LiteLLM's proxy) and flags;
// FromEnv fills it. Where sessions go and who may open them is the routes
// config, a separate YAML file (RoutesFile, read by package routes), or, on
// the zero-config path, the single model and keys of these settings.
type Settings struct {
	Host string
	Port int

	// MasterKey is the key clients must present. Empty refuses everyone.
	MasterKey string

	// Model is the model name clients ask for (and the one sent upstream).
	Model string
	// LiveModel is the GPT-Live model of the environment-only setup
	// (LIVE_MODEL): the model session.start names, served at
	// /v1/live/sessions and dialed at OPENAI_API_BASE + /live/sessions.
	// Empty serves no GPT-Live (a routes file's model_list decides instead).
	LiveModel string
	// APIBase is the upstream's base URL, e.g. wss://api.openai.com/v1;
	// /realtime is appended.
	APIBase *url.URL
	// UpstreamKey is sent upstream as Authorization: Bearer.
	UpstreamKey string
	// UpstreamCAFile adds a CA to the system roots for wss:// upstreams.
	UpstreamCAFile string
	// UpstreamSourceIPs spreads upstream sockets over these local
	// addresses, to exceed one address's ephemeral ports.
	UpstreamSourceIPs []net.IP
	// NoUpstreamTLSResumption turns off TLS session resumption for wss://
	// upstream dials (UPSTREAM_TLS_RESUMPTION=0); resumption is on by default.
	NoUpstreamTLSResumption bool
	// NoTurnMetrics turns per-turn measurement off (TURN_METRICS=0): no
	// turn metrics, first-audio routing data, record percentiles or
	// generation spans; for an A/B of its cost.
	NoTurnMetrics bool
	// UpstreamRoots, if set, replaces the roots for wss:// upstreams (tests
	// use it to trust mockai's certificate without a file).
	UpstreamRoots *x509.CertPool

	// TLSCert and TLSKey, both set, serve the client listener over TLS.
	TLSCert, TLSKey string

	HandshakeTimeout time.Duration // client TCP accept to complete upgrade request
	// LiveStartTimeout is how long a GPT-Live client has after its upgrade
	// to send session.start (LIVE_START_TIMEOUT_SECS).
	LiveStartTimeout time.Duration
	DialTimeout      time.Duration // a client's whole upstream attempt: every dial, hedge and failover
	WriteTimeout     time.Duration // a socket whose kernel takes nothing for this long is closed (the rule for a side that stopped reading)
	CloseTimeout     time.Duration // wait for a close frame's answer
	MaxHeaderBytes   int           // the client's HTTP request head
	MaxMessage       int64         // one client message's payload
	MaxPending       int           // client bytes queued while the upstream connects
	// HedgeDelay is how long an upstream dial may go without completing its
	// upgrade before a second dial, to the next deployment of the group,
	// starts beside it; the first upgrade to complete wins. 0 turns hedging
	// off.
	HedgeDelay time.Duration

	// MaxConnections caps concurrent sessions, counting connections still in
	// their handshake from accept; further upgrades get 503 (frontdoor.Door).
	MaxConnections int
	// MaxHandshakes caps client TLS handshakes running at once (from a whole
	// ClientHello to the end of the handshake, a goroutine each); a
	// ClientHello beyond it is closed at once. 0 means no limit.
	MaxHandshakes int
	// MaxBufferedBytes bounds, over all sessions, the bytes waiting behind
	// writes to slow peers; above it the sessions holding
	// the most are ended (watchdog.enforceBudget). 0 turns the budget off.
	MaxBufferedBytes int64
	// IdleTimeout ends a session in which neither side sent anything for
	// this long; 0 disables it.
	IdleTimeout time.Duration
	// MaxSessionDuration ends a session this long after it started; 0
	// disables it. With continuity it is the gateway's own cap on a
	// client's session (default 4 hours: the upstream's own cap is rolled
	// over); without, 61 minutes (past OpenAI's 60). A key's
	// max_session_secs replaces it for the key's sessions.
	MaxSessionDuration time.Duration
	// Continuity (SESSION_CONTINUITY, on by default) carries a session
	// onto a fresh upstream session when its upstream is lost or reaches
	// its cap (server/session's armRollover); ContinuityMaxBytes (CONTINUITY_MAX_BYTES) is
	// what one session keeps for it, ContinuityGlobalMaxBytes
	// (CONTINUITY_GLOBAL_MAX_BYTES) what all keep together.
	Continuity               bool
	ContinuityMaxBytes       int
	ContinuityGlobalMaxBytes int64
	// ContinuityKeepAudio (CONTINUITY_KEEP_AUDIO, off by default) keeps
	// the user's audio turns themselves, from the client's appends, to
	// replay them as audio rather than by their transcript; a key's
	// continuity_keep_audio overrides it.
	ContinuityKeepAudio bool
	// MaxStalledBytes is the ceiling on what may wait behind writes to one
	// side that is still reading, only slower than the other side sends
	// (a slow link in front of a long answer): past it the session is
	// dropped. A side that reads nothing is WriteTimeout's, not this.
	MaxStalledBytes int
	// MaxSessionsPerKey and ConnectRatePerKey limit each client key
	// (concurrent sessions; connects per second, with a burst of the same
	// size); 0 means no limit.
	MaxSessionsPerKey int
	ConnectRatePerKey float64
	// AllowedOrigins, if not empty, are the browser Origins allowed to
	// connect; requests without an Origin header (non-browser clients) are
	// always allowed.
	AllowedOrigins []string
	// DrainTimeout is how long live sessions may continue after SIGTERM.
	DrainTimeout time.Duration

	// Pool configures the warm upstream pool; see upstream.PoolConfig.
	Pool upstream.PoolConfig
	// LivePool configures GPT-Live's warm pool of upgraded, unstarted
	// sockets (LIVE_POOL_SIZE, off by default; LIVE_POOL_MAX_IDLE_SECS);
	// see upstream.NewLivePool and newLivePool.
	LivePool upstream.LivePoolConfig
	// PoolState (REALTIME_POOL_STATE), if set, is the file where `auto`
	// remembers each key's demand across restarts (upstream.DemandMemory).
	PoolState string

	// AdminAddr serves /metrics and /debug/pprof/; empty turns it off.
	AdminAddr string
	// AdminHosts (ADMIN_HOSTS) are host names, besides loopback ones, that
	// the admin server answers to (server/admin).
	AdminHosts []string

	// RoutesFile (CONFIG_FILE), if set, is the routes config: a
	// LiteLLM-style YAML file of model groups, deployments and client keys.
	// It replaces the single model and keys of the environment (see
	// routes.Load).
	RoutesFile string
	// UsageLog, if set, is a file each ended session is appended to as one
	// JSON line.
	UsageLog string
	// DatabaseURL, if set, is the Postgres of the durable spend log (one
	// row per ended session in session_usage; see server/spenddb).
	DatabaseURL string
	// SpendSpool is where session records wait while that Postgres is
	// unreachable (default: USAGE_LOG with ".pg-spool" appended).
	SpendSpool string
	// Recordings is where recorded sessions (record_sessions) are stored:
	// a directory, or s3://bucket/prefix (RECORDINGS); the bucket's
	// endpoint, region and credentials, how long recordings are kept, what
	// is buffered while the store is down, and how long a side of one
	// session may run.
	Recordings            string
	RecordingsS3Endpoint  string
	RecordingsS3Region    string
	RecordingsS3AccessKey string
	RecordingsS3SecretKey string
	RecordingsRetention   time.Duration
	RecordingsMaxBuffer   int64
	RecordingsMaxAudio    time.Duration
	// SpendState is the file budget spend is saved to without REDIS_URL
	// (default: USAGE_LOG with ".budgets.json" appended).
	SpendState string

	// Scale-out (server/cluster, listen's REUSEPORT, Drain).
	// RedisURL, if set, makes per-key limits hold across every instance
	// sharing that Redis.
	RedisURL string
	// RedisTimeout is the budget of one Redis call on the connect path;
	// past it this instance decides alone, by its share of the limits
	// (server/cluster). The default sits above the admission call's p99.9
	// on a busy 2-core host (make redis-latency; docs/operations.md, "Limits
	// and timeouts"): a budget a busy host misses makes outages of its own.
	RedisTimeout time.Duration
	// ClusterLease is how long an instance that stopped refreshing (killed,
	// partitioned) keeps its sessions counted.
	ClusterLease time.Duration
	// ClusterInstances is the fewest instances a share of a key's limits
	// is ever taken over while Redis is unreachable (an upper bound on each
	// instance's share: limit ÷ this). The shares come from the live
	// instances each learned from Redis; 1 (the default) leaves them so.
	ClusterInstances int
	// ReusePort listens with SO_REUSEPORT so several processes share the port.
	ReusePort bool
	// DrainGrace is how long after SIGTERM /health says 503 while connects
	// are still served, before the listener closes.
	DrainGrace time.Duration

	// Browser and phone apps (server/api, server/session's startApp, admission.Gate.PickGroup).
	// ClientSecretKeys (CLIENT_SECRET_KEY, comma-separated) sign client
	// secrets: the first signs, all verify. Empty means a random key per
	// process.
	ClientSecretKeys []string
	// TranscriptionModel is the model group of ?intent=transcription
	// connects that name no model (TRANSCRIPTION_MODEL); empty means the
	// default group.
	TranscriptionModel string
}

// Defaults returns the configuration with every default filled in.
// MAX_SESSION_SECS' defaults: with continuity the gateway's own cap, well
// past the upstream's 60 minutes; without, just past them.
const (
	continuityMaxSession = 4 * time.Hour
	plainMaxSession      = 61 * time.Minute
)

func Defaults() Settings {
	base, _ := url.Parse("wss://api.openai.com/v1")
	return Settings{
		Host:             "127.0.0.1",
		Port:             4001,
		Model:            "gpt-realtime",
		LiveModel:        "gpt-live-1",
		APIBase:          base,
		HandshakeTimeout: 10 * time.Second,
		LiveStartTimeout: 15 * time.Second,
		DialTimeout:      10 * time.Second,
		HedgeDelay:       500 * time.Millisecond,
		WriteTimeout:     10 * time.Second,
		CloseTimeout:     5 * time.Second,
		MaxHeaderBytes:   8 << 10,
		MaxMessage:       15 << 20,
		MaxPending:       1 << 20,

		MaxConnections:     defaultMaxConnections(),
		MaxHandshakes:      defaultMaxHandshakes,
		MaxBufferedBytes:   defaultMaxBufferedBytes(),
		IdleTimeout:        15 * time.Minute,
		MaxSessionDuration: continuityMaxSession,
		Continuity:         true,
		ContinuityMaxBytes: 256 << 10,

		ContinuityGlobalMaxBytes: 1 << 30,
		Recordings:               "recordings",
		RecordingsS3Region:       "us-east-1",
		RecordingsMaxBuffer:      256 << 20,
		RecordingsMaxAudio:       30 * time.Minute,
		MaxStalledBytes:          defaultMaxStalledBytes,
		DrainTimeout:             60 * time.Second,
		Pool: upstream.PoolConfig{
			Size: 4, Min: 2, Max: 512, MaxIdle: 30 * time.Second, MaxTotal: 2048, MaxInflight: 1024,
			PingInterval: 5 * time.Second,
		},
		LivePool:  upstream.LivePoolConfig{MaxIdle: 30 * time.Second, MaxTotal: 2048},
		AdminAddr: "127.0.0.1:4002",

		RedisTimeout:     defaultRedisTimeout,
		ClusterLease:     10 * time.Second,
		ClusterInstances: 1,
		DrainGrace:       5 * time.Second,
	}
}

// FromEnv reads the configuration through lookup (os.LookupEnv in the
// binary), starting from Defaults, one SettingsTable row at a time. An
// invalid value is an error naming the variable.
func FromEnv(lookup func(string) (string, bool)) (Settings, error) {
	c := Defaults()
	var errs []error
	for _, row := range SettingsTable() {
		if row.read == nil {
			continue
		}
		for _, name := range row.Vars {
			v, ok := lookup(name)
			if !ok || (v == "" && !row.EmptyCounts) {
				continue
			}
			if err := row.read(&c, name, v); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", name, err))
			}
		}
	}
	if v, _ := lookup("MAX_SESSION_SECS"); v == "" && !c.Continuity {
		c.MaxSessionDuration = plainMaxSession // without continuity, the upstream's cap ends a session anyway
	}
	return c, errors.Join(append(errs, c.Validate())...)
}

// ParseAPIBase accepts ws://, wss://, http:// and https:// base URLs and
// returns the WebSocket form; see routes.ParseAPIBase.
func ParseAPIBase(v string) (*url.URL, error) { return routes.ParseAPIBase(v) }

// routesFromSettings is the zero-config routing table: the single model,
// upstream and master key of the environment.
func routesFromSettings(c Settings) *routes.Table {
	return routes.Single(c.Model, c.LiveModel, c.APIBase, c.UpstreamKey, c.MasterKey)
}

// Validate checks the combination of settings.
func (c Settings) Validate() error {
	var errs []error
	if c.Host == "" {
		errs = append(errs, errors.New("HOST is empty"))
	} else if net.ParseIP(c.Host) == nil && c.Host != "localhost" {
		errs = append(errs, fmt.Errorf("HOST: %q is not an IP address", c.Host))
	}
	if c.Model == "" {
		errs = append(errs, errors.New("OPENAI_REALTIME_MODEL is empty"))
	}
	if c.LiveModel != "" && c.LiveModel == c.Model {
		errs = append(errs, fmt.Errorf("LIVE_MODEL and OPENAI_REALTIME_MODEL are both %q: a model group speaks one protocol", c.Model))
	}
	if c.APIBase == nil {
		errs = append(errs, errors.New("OPENAI_API_BASE is not set"))
	}
	if (c.TLSCert == "") != (c.TLSKey == "") {
		errs = append(errs, errors.New("TLS_CERT and TLS_KEY must be set together"))
	}
	if c.Pool.Auto && c.Pool.Min > c.Pool.Max {
		errs = append(errs, fmt.Errorf("REALTIME_POOL_MIN (%d) is above REALTIME_POOL_MAX (%d)", c.Pool.Min, c.Pool.Max))
	}
	if c.AdminAddr != "" {
		if _, _, err := net.SplitHostPort(c.AdminAddr); err != nil {
			errs = append(errs, fmt.Errorf("ADMIN_ADDR: %w", err))
		}
	}
	if c.DatabaseURL != "" && c.SpendSpool == "" && c.UsageLog == "" {
		errs = append(errs, errors.New("DATABASE_URL needs SPEND_SPOOL or USAGE_LOG: records wait in a file while Postgres is down"))
	}
	if c.MaxHeaderBytes < 1024 {
		errs = append(errs, errors.New("the header size limit must be at least 1024 bytes"))
	}
	return errors.Join(errs...)
}

// Addr is the listen address.
func (c Settings) Addr() string { return net.JoinHostPort(c.Host, strconv.Itoa(c.Port)) }

// fdReserve is the descriptors kept for listeners, the admin server, logs
// and the like.
const fdReserve = 256

// openFileLimit is the process's hard open-file limit (Go raises the soft
// limit to it at start).
func openFileLimit() int {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil || lim.Max == 0 {
		return 20000
	}
	return int(min(lim.Max, 1<<22))
}

// defaultMaxHandshakes bounds running client TLS handshakes (frontdoor.Door.startTLSHandshake).
const defaultMaxHandshakes = 1024

// defaultMaxStalledBytes fits a long answer on a slow link: a two-minute
// spoken answer is about 7.7 MB of base64 audio, which the upstream sends
// in seconds, and a client on a slow link takes minutes to read it. What
// it costs in memory is bounded by MaxBufferedBytes over all sessions.
const defaultMaxStalledBytes = 64 << 20

// defaultMaxConnections fits the open-file limit: each session holds two
// sockets (a connection in its handshake, which also takes a slot, one).
// Warm pool sockets live in what sessions leave free (the pool
// stops refilling when descriptors run short), so sessions are never
// refused for the pool's sake.
func defaultMaxConnections() int {
	return max((openFileLimit()-fdReserve)/2, 1)
}

// defaultRedisTimeout is REDIS_TIMEOUT_MS's default: above the p99.9 of the
// shared limits' admission call on a busy 2-core host, a burst included
// (make redis-latency, docs/operations.md, "Limits and timeouts": two CPU burners, 4
// admissions in flight, p99.9 8-22 ms; 200 in flight, p99.9 62 ms). The
// 5 ms it replaces was missed by 0.3-0.9 % of calls there, and 50 ms by a
// burst of 200 GPT-Live connects on one instance (make bench's Redis leg:
// 1,881 of 2,000 refused), each miss an outage in which the instances decide
// alone. It costs a connect nothing while Redis answers in time; only a
// call that Redis answers late waits this long.
const defaultRedisTimeout = 100 * time.Millisecond
