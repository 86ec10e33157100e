package server

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"rtgate/upstream"
)

// The settings table: every environment variable the gateway documents, in
// one place, with what FromEnv does with it. It exists so that what the
// gateway reads and what the documentation says cannot drift: FromEnv is a
// loop over the table, `make docs` writes the pages' tables from it
// (WriteSettingsTables), and TestSettingsPagesMatchTheTable fails when a
// page and the table differ.

// SettingsPage is the page (and table) of the documentation a setting is
// listed in.
type SettingsPage int

const (
	// ConfigurationPage is docs/configuration.md's table: variable, flag,
	// default, meaning.
	ConfigurationPage SettingsPage = iota
	// LimitsPage is docs/operations.md's "Limits and timeouts": variable
	// (with its flag), default, what happens at the limit.
	LimitsPage
)

// Who reads a setting that FromEnv does not.
const (
	ReadByCommand   = "cmd/gateway" // read with its flag in the gateway's main
	ReadByTracing   = "OpenTelemetry's SDK (server/tracing)"
	ReadByGoRuntime = "the Go runtime"
)

// A Setting is one row of a documentation table: the environment variables
// it names and how FromEnv reads each.
type Setting struct {
	Page SettingsPage
	// Vars are the environment variables of the row (two for pairs such as
	// TLS_CERT and TLS_KEY; none for a row of a flag alone). MoreVars adds
	// ", ..." (a family of variables, as OpenTelemetry's).
	Vars     []string
	MoreVars bool
	// Flag is the command-line flag as the page shows it (Markdown).
	Flag string
	// Default and Meaning are Markdown, as the page shows them.
	Default, Meaning string

	// read parses one of Vars into the settings; nil when someone else
	// reads the variable (ReadBy says who).
	read   func(c *Settings, name, value string) error
	ReadBy string
	// EmptyCounts: a variable set to the empty string is read too (it
	// turns something off), not taken as unset.
	EmptyCounts bool
}

// SettingsTable is the table, in the pages' order. It is built on each call,
// so nothing can change it for the rest of the process.
func SettingsTable() []Setting {
	return []Setting{
		{Page: ConfigurationPage, Vars: []string{"LITELLM_MASTER_KEY"},
			Default: "(none)",
			Meaning: "the key clients must present; with none set every request is refused (401)",
			read: func(c *Settings, _, v string) error {
				return text(&c.MasterKey, v)
			},
		},
		{Page: ConfigurationPage, Vars: []string{"OPENAI_API_KEY"},
			Default: "(none)",
			Meaning: "sent upstream as `Authorization: Bearer`",
			read: func(c *Settings, _, v string) error {
				return text(&c.UpstreamKey, v)
			},
		},
		{Page: ConfigurationPage, Vars: []string{"OPENAI_REALTIME_MODEL"}, Flag: "`-model`",
			Default: "`gpt-realtime`",
			Meaning: "the model name clients ask for (and the one sent upstream)",
			read: func(c *Settings, _, v string) error {
				return text(&c.Model, v)
			},
		},
		{Page: ConfigurationPage, Vars: []string{"OPENAI_API_BASE"}, Flag: "`-api-base`",
			Default: "`wss://api.openai.com/v1`",
			Meaning: "upstream base URL; `/realtime` is appended (GPT-Live: `/live/sessions`). `ws://`, `wss://`, `http://`, `https://` accepted",
			read: func(c *Settings, _, v string) error {
				u, err := ParseAPIBase(v)
				c.APIBase = u
				return err
			},
		},
		{Page: ConfigurationPage, Vars: []string{"LIVE_MODEL"},
			Default: "`gpt-live-1`",
			Meaning: "the [GPT-Live](gpt-live.md#gpt-live) model of the environment-only setup: the model `session.start` names at `/v1/live/sessions`, sent upstream to `OPENAI_API_BASE` + `/live/sessions`. Empty: no GPT-Live without a `CONFIG_FILE`. (This adds a second model group, `gpt-live-1`, to the status page and the metrics of an environment-only gateway)",
			read: func(c *Settings, _, v string) error {
				return text(&c.LiveModel, strings.TrimSpace(v)) // empty: no GPT-Live on the environment path
			},
			EmptyCounts: true,
		},
		{Page: ConfigurationPage, Vars: []string{"UPSTREAM_CA_FILE"}, Flag: "`-upstream-ca`",
			Default: "",
			Meaning: "extra CA (PEM) trusted for `wss://` upstreams, besides the system roots",
			read: func(c *Settings, _, v string) error {
				return text(&c.UpstreamCAFile, v)
			},
		},
		{Page: ConfigurationPage, Vars: []string{"UPSTREAM_TLS_RESUMPTION"},
			Default: "`1`",
			Meaning: "`wss://` upstream dials resume TLS sessions (one ticket cache per upstream address; the certificate is still checked against the current roots each time, and a replaced upstream gets a full handshake). Measured: gateway CPU per warm socket 0.69 → 0.59 ms, mockai's 0.55 → 0.46 ms. `rtgate_upstream_tls_handshakes_total`, `rtgate_upstream_tls_resumed_total`",
			read: func(c *Settings, _, v string) error {
				return boolean(v, func(b bool) { c.NoUpstreamTLSResumption = !b })
			},
		},
		{Page: ConfigurationPage, Vars: []string{"UPSTREAM_SOURCE_IPS"},
			Default: "",
			Meaning: "local addresses (`127.0.0.2,10.0.0.5-10.0.0.8`) upstream sockets bind to in turn (see bare-metal tuning)",
			read: func(c *Settings, _, v string) error {
				ips, err := upstream.ParseSourceIPs(v)
				c.UpstreamSourceIPs = ips
				return err
			},
		},
		{Page: ConfigurationPage, Vars: []string{"HOST"}, Flag: "`-host`",
			Default: "`127.0.0.1`",
			Meaning: "listen address",
			read: func(c *Settings, _, v string) error {
				return text(&c.Host, v)
			},
		},
		{Page: ConfigurationPage, Vars: []string{"PORT"}, Flag: "`-port`",
			Default: "`4001`",
			Meaning: "listen port",
			read: func(c *Settings, _, v string) error {
				p, err := strconv.Atoi(v)
				if err != nil || p < 0 || p > 65535 {
					return fmt.Errorf("%q is not a port number", v)
				}
				c.Port = p
				return nil
			},
		},
		{Page: ConfigurationPage, Vars: []string{"REUSEPORT"}, Flag: "`-reuseport`",
			Default: "off",
			Meaning: "`1`/`true`: listen with `SO_REUSEPORT`, so several processes share `HOST:PORT` (see [Running many instances](operations.md#running-many-instances))",
			read: func(c *Settings, _, v string) error {
				return boolean(v, func(b bool) { c.ReusePort = b })
			},
		},
		{Page: ConfigurationPage, Vars: []string{"TLS_CERT", "TLS_KEY"}, Flag: "`-tls-cert`, `-tls-key`",
			Default: "",
			Meaning: "serve `wss://` to clients (the official OpenAI SDKs only dial `wss://`)",
			read: func(c *Settings, name, v string) error {
				if name == "TLS_CERT" {
					return text(&c.TLSCert, v)
				}
				return text(&c.TLSKey, v)
			},
		},
		{Page: ConfigurationPage, Vars: []string{"REALTIME_POOL_SIZE"},
			Default: "`4`",
			Meaning: "warm upstream sockets per key; `0` turns the pool off (nothing is dialed ahead); `auto` sizes it from demand",
			read: func(c *Settings, _, v string) error {
				if strings.EqualFold(v, "auto") {
					c.Pool.Auto = true
					return nil
				}
				return count(v, 0, &c.Pool.Size)
			},
		},
		{Page: ConfigurationPage, Vars: []string{"REALTIME_POOL_MIN", "REALTIME_POOL_MAX"},
			Default: "`2`, `512`",
			Meaning: "bounds for `auto`",
			read: func(c *Settings, name, v string) error {
				if name == "REALTIME_POOL_MIN" {
					return count(v, 0, &c.Pool.Min)
				}
				return count(v, 1, &c.Pool.Max)
			},
		},
		{Page: ConfigurationPage, Vars: []string{"REALTIME_POOL_MAX_IDLE_SECS"},
			Default: "`30`",
			Meaning: "a warm socket older than this (spread over 75-100% of it) is closed and replaced",
			read: func(c *Settings, _, v string) error {
				return seconds(v, 1, &c.Pool.MaxIdle)
			},
		},
		{Page: ConfigurationPage, Vars: []string{"REALTIME_POOL_MAX_TOTAL"},
			Default: "`2048`",
			Meaning: "cap on warm and warming sockets across all keys, shared fairly: each configured deployment's pool is owed the cap ÷ pools, up to its target",
			read: func(c *Settings, _, v string) error {
				return count(v, 1, &c.Pool.MaxTotal)
			},
		},
		{Page: ConfigurationPage, Vars: []string{"REALTIME_POOL_MAX_INFLIGHT"},
			Default: "`1024`",
			Meaning: "ceiling on concurrent warm-up dials per key; the working limit is 2 × peak connect rate × refill time (Little's law), at least 64",
			read: func(c *Settings, _, v string) error {
				return count(v, 1, &c.Pool.MaxInflight)
			},
		},
		{Page: ConfigurationPage, Vars: []string{"REALTIME_POOL_STATE"},
			Default: "(none)",
			Meaning: "file where `auto` remembers each key's recent peak connect rate and refill time (written every 5 s and at drain: temporary file, fsync, rename); a restart starts sized from it. A missing or unreadable file is a cold start with one log line. With `REDIS_URL` the instances also share their peaks in Redis (see [The warm pool](warm-pool.md#the-warm-pool))",
			read: func(c *Settings, _, v string) error {
				return text(&c.PoolState, v)
			},
		},
		{Page: ConfigurationPage, Vars: []string{"LIVE_POOL_SIZE"},
			Default: "`0` (off)",
			Meaning: "GPT-Live's warm pool: upgraded, unstarted upstream sockets kept per upstream URL and key (see [GPT-Live's warm pool](warm-pool.md#gpt-lives-warm-pool-opt-in)); off by default because how long OpenAI keeps an unstarted socket, and whether it counts against the per-model session cap, cannot be measured offline",
			read: func(c *Settings, _, v string) error {
				return count(v, 0, &c.LivePool.Size)
			},
		},
		{Page: ConfigurationPage, Vars: []string{"LIVE_POOL_MAX_IDLE_SECS"},
			Default: "`30`",
			Meaning: "an unstarted Live socket older than this (75-100% of it) is closed and replaced; keep it below how long the upstream waits for `session.start`",
			read: func(c *Settings, _, v string) error {
				return seconds(v, 1, &c.LivePool.MaxIdle)
			},
		},
		{Page: ConfigurationPage, Vars: []string{"POOL_WARMUP_SECS"},
			Default: "`10`",
			Meaning: "with remembered demand, how long at most `/health` answers 503 `{\"status\":\"warming\"}` at start-up while the pool fills to its restored target",
			read: func(c *Settings, _, v string) error {
				return seconds(v, 1, &c.Pool.WarmupBound)
			},
		},
		{Page: ConfigurationPage, Vars: []string{"REALTIME_POOL_PING_SECS"},
			Default: "`5`",
			Meaning: "idle warm sockets are pinged this often (each at its own phase); no pong within 2 s retires and replaces the socket; `0` turns pings off",
			read: func(c *Settings, _, v string) error {
				if err := seconds(v, 0, &c.Pool.PingInterval); err != nil {
					return err
				}
				if c.Pool.PingInterval == 0 {
					c.Pool.PingInterval = -1 // 0 turns the checks off
				}
				return nil
			},
		},
		{Page: ConfigurationPage, Vars: []string{"ADMIN_ADDR"}, Flag: "`-admin-addr`",
			Default: "`127.0.0.1:4002`",
			Meaning: "`/metrics` (Prometheus), `/debug/pprof/`, `/status` and `/playground` (below); empty turns it off",
			read: func(c *Settings, _, v string) error {
				return text(&c.AdminAddr, v) // empty turns the admin listener off
			},
			EmptyCounts: true,
		},
		{Page: ConfigurationPage, Vars: []string{"ADMIN_HOSTS"},
			Default: "(none)",
			Meaning: "extra host names the admin port answers to (loopback names and addresses always; other `Host`s get 421, against DNS rebinding)",
			read: func(c *Settings, _, v string) error {
				for _, h := range strings.Split(v, ",") {
					if h = strings.TrimSpace(h); h != "" {
						c.AdminHosts = append(c.AdminHosts, strings.ToLower(h))
					}
				}
				return nil
			},
		},
		{Page: ConfigurationPage, Vars: []string{"GOGC", "GOMEMLIMIT"},
			Default: "Go's defaults (100, none)",
			Meaning: "kept on purpose. Measured 2026-12-01 (2-core shared dev box, 3,000 idle sessions): GOGC=50 cuts RSS per idle plain session 19.2 → 15.9 KiB (TLS 40.0 → 31.7) but GC CPU per 100k round trips rises 0.012 → 0.039 s plain and 0.047 → 0.238 s over TLS; `GOMEMLIMIT` at about 80% of the container's memory costs nothing until the heap nears it and then holds RSS near the live heap (13.3 KiB per plain session at 48 MiB). The gateway sets neither itself",
			ReadBy:  ReadByGoRuntime,
		},
		{Page: ConfigurationPage, Vars: []string{"LOG_LEVEL"}, Flag: "`-log-level`",
			Default: "`info`",
			Meaning: "`debug`, `info`, `warn`, `error`",
			ReadBy:  ReadByCommand,
		},
		{Page: ConfigurationPage, Flag: "`-buffer-size`",
			Default: "`256`",
			Meaning: "netpoll's initial input buffer per connection (it doubles on demand for large frames)",
			ReadBy:  ReadByCommand,
		},
		{Page: ConfigurationPage, Flag: "`-node-size`",
			Default: "`256`",
			Meaning: "netpoll's smallest buffer node; each connection keeps one on its output side",
			ReadBy:  ReadByCommand,
		},
		{Page: ConfigurationPage, Vars: []string{"POLLER_NUM"}, Flag: "`-pollers`",
			Default: "0: one per core (GOMAXPROCS) with `inline` (the default runner); netpoll's GOMAXPROCS/20 + 1 with `pool`",
			Meaning: "netpoll's epoll loops. Inline, a poller does its sockets' work itself, so one per core is what nginx's `worker_processes auto` and HAProxy's `nbthread` do",
			ReadBy:  ReadByCommand,
		},
		{Page: ConfigurationPage, Vars: []string{"POLLER_HANDLERS"}, Flag: "`-handlers`",
			Default: "`inline`",
			Meaning: "where read handlers run: `inline` (relayed sockets' handlers on their poller goroutine; an accepted socket still in its HTTP phase, or whose request another goroutine is handling, runs on the pool) or `pool` (every read event handed to a goroutine of a pool). Inline measured faster (2026-12-01, 2-core shared dev box, A/B interleaved: ~40 µs less added rtt p50, 15-30% less CPU per round trip on the plain rows, voice 10-18% cheaper per core; slower on saturated TLS echo of audio-sized frames; see \"How it compares\"). It is the default since the paths that let a netpoll `Close` land in a socket's task on its poller (which spun the poller in `FDOperator.unused`) were found and closed (issue #20; the rule is in `poller/doc.go`, and `internal/closecheck` fails on any new `Close`). `pool` is the setting for a relay that only streams bulk TLS",
			ReadBy:  ReadByCommand,
		},
		{Page: ConfigurationPage, Vars: []string{"TURN_METRICS"},
			Default: "`1`",
			Meaning: "`0` turns per-turn measurement off (the turn metrics, the record's `turns` and first-audio percentiles, latency-based routing's data, generation spans): for an A/B of its cost (see [Turns, traces and routing on latency](turns-and-traces.md#turns-traces-and-routing-on-latency))",
			read: func(c *Settings, _, v string) error {
				return boolean(v, func(b bool) { c.NoTurnMetrics = !b })
			},
		},
		{Page: ConfigurationPage, Vars: []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_SERVICE_NAME", "OTEL_TRACES_SAMPLER", "OTEL_BSP_*"}, MoreVars: true,
			Default: "(none: tracing off)",
			Meaning: "OpenTelemetry traces, the SDK's standard environment; on when an exporter other than `none` or an OTLP endpoint is set (see [Tracing](turns-and-traces.md#tracing-opentelemetry))",
			ReadBy:  ReadByTracing,
		},
		{Page: ConfigurationPage, Vars: []string{"CONFIG_FILE"}, Flag: "`-config`",
			Default: "",
			Meaning: "a LiteLLM-style YAML file of model groups, deployments and client keys (below)",
			read: func(c *Settings, _, v string) error {
				return text(&c.RoutesFile, v)
			},
		},
		{Page: ConfigurationPage, Vars: []string{"USAGE_LOG"},
			Default: "",
			Meaning: "append one JSON line per ended session (the record below) to this file; `SIGHUP` reopens it",
			read: func(c *Settings, _, v string) error {
				return text(&c.UsageLog, v)
			},
		},
		{Page: ConfigurationPage, Vars: []string{"DATABASE_URL"},
			Default: "",
			Meaning: "Postgres for the durable spend log (see [Spend](accounting-and-spend.md#spend)); needs `SPEND_SPOOL` or `USAGE_LOG`",
			read: func(c *Settings, _, v string) error {
				return text(&c.DatabaseURL, v)
			},
		},
		{Page: ConfigurationPage, Vars: []string{"SPEND_SPOOL"},
			Default: "`USAGE_LOG` + `.pg-spool`",
			Meaning: "where records wait while Postgres is unreachable",
			read: func(c *Settings, _, v string) error {
				return text(&c.SpendSpool, v)
			},
		},
		{Page: ConfigurationPage, Vars: []string{"RECORDINGS"},
			Default: "`recordings`",
			Meaning: "where sessions with `record_sessions` are recorded (audio and events, see [Recordings](recordings.md)): a directory, or `s3://bucket/prefix` for an S3-compatible bucket",
			read: func(c *Settings, _, v string) error {
				return text(&c.Recordings, v)
			},
		},
		{Page: ConfigurationPage, Vars: []string{"RECORDINGS_S3_ENDPOINT"},
			Default: "(AWS)",
			Meaning: "the S3-compatible server's URL (`http://127.0.0.1:9000`); set, requests are path-style",
			read: func(c *Settings, _, v string) error {
				return text(&c.RecordingsS3Endpoint, v)
			},
		},
		{Page: ConfigurationPage, Vars: []string{"RECORDINGS_S3_REGION", "AWS_REGION"},
			Default: "`us-east-1`",
			Meaning: "the bucket's region",
			read: func(c *Settings, _, v string) error {
				return text(&c.RecordingsS3Region, v)
			},
		},
		{Page: ConfigurationPage, Vars: []string{"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"},
			Default: "",
			Meaning: "the bucket's credentials",
			read: func(c *Settings, name, v string) error {
				if name == "AWS_ACCESS_KEY_ID" {
					return text(&c.RecordingsS3AccessKey, v)
				}
				return text(&c.RecordingsS3SecretKey, v)
			},
		},
		{Page: ConfigurationPage, Vars: []string{"RECORDINGS_RETENTION_DAYS"},
			Default: "0 (kept)",
			Meaning: "recordings older than this many days are deleted, and the conversation records in Postgres with them (checked at start and then at most hourly)",
			read: func(c *Settings, _, v string) error {
				days, err := strconv.ParseFloat(v, 64)
				if err != nil || days < 0 || days > 1e5 {
					return fmt.Errorf("%q is not a number of days of at least 0", v)
				}
				c.RecordingsRetention = time.Duration(days * 24 * float64(time.Hour))
				return nil
			},
		},
		{Page: ConfigurationPage, Vars: []string{"RECORDINGS_MAX_BUFFER"},
			Default: "268435456 (256 MiB)",
			Meaning: "recordings held in memory while their store is unreachable; past it they are dropped and counted (`rtgate_recordings_dropped_total`)",
			read: func(c *Settings, _, v string) error {
				return byteCount(v, "0: the default", &c.RecordingsMaxBuffer)
			},
		},
		{Page: ConfigurationPage, Vars: []string{"RECORDINGS_MAX_MINUTES"},
			Default: "30",
			Meaning: "how much audio of each side of one session is recorded; a recording is held in memory until its session ends (about 5.8 MB a minute)",
			read: func(c *Settings, _, v string) error {
				n := 0
				if err := count(v, 1, &n); err != nil {
					return err
				}
				c.RecordingsMaxAudio = time.Duration(n) * time.Minute
				return nil
			},
		},
		{Page: ConfigurationPage, Vars: []string{"SPEND_STATE"},
			Default: "`USAGE_LOG` + `.budgets.json`",
			Meaning: "the file budget spend is kept in when there is no `REDIS_URL`",
			read: func(c *Settings, _, v string) error {
				return text(&c.SpendState, v)
			},
		},
		{Page: ConfigurationPage, Vars: []string{"REDIS_URL"},
			Default: "",
			Meaning: "`redis://[user:pass@]host:port/db` (or `rediss://`): per-key limits, budgets, client-secret configs and call owners shared by every instance",
			read: func(c *Settings, _, v string) error {
				return text(&c.RedisURL, v)
			},
		},
		{Page: ConfigurationPage, Vars: []string{"REDIS_TIMEOUT_MS"},
			Default: "`100`",
			Meaning: "budget of one Redis call on the connect path; past it this instance decides alone, by its share of the limits once the others count it so (see [Running many instances](operations.md#running-many-instances)); 100 ms is above the call's p99.9 on a busy 2-core host, a burst of 200 connects included (`make redis-latency`, figures in [Limits and timeouts](operations.md#limits-and-timeouts))",
			read: func(c *Settings, _, v string) error {
				var ms int
				if err := count(v, 1, &ms); err != nil {
					return err
				}
				c.RedisTimeout = time.Duration(ms) * time.Millisecond
				return nil
			},
		},
		{Page: ConfigurationPage, Vars: []string{"REDIS_LEASE_SECS"},
			Default: "`10`",
			Meaning: "a killed instance's sessions stop counting this long after its last lease refresh (every lease / 5, at most 1 s)",
			read: func(c *Settings, _, v string) error {
				return seconds(v, 1, &c.ClusterLease)
			},
		},
		{Page: ConfigurationPage, Vars: []string{"CLUSTER_INSTANCES"},
			Default: "`1`",
			Meaning: "optional upper bound on an instance's share while Redis is unreachable: shares are taken over at least this many instances (limit ÷ this at most). The instance count itself is learned from Redis's leases; nobody needs to keep it by hand (before 2026-12-04 it was that count, and its default 1 let each instance admit the whole limit)",
			read: func(c *Settings, _, v string) error {
				return count(v, 1, &c.ClusterInstances)
			},
		},
		{Page: ConfigurationPage, Vars: []string{"CLIENT_SECRET_KEY"},
			Default: "random per process (a warning is logged)",
			Meaning: "HMAC keys that sign client secrets, comma-separated (the first signs, all verify); see [Browser and phone apps](apps.md#browser-and-phone-apps-client-secrets-webrtc-calls-sidebands-transcription-translation)",
			read: func(c *Settings, _, v string) error {
				return commaList(v, &c.ClientSecretKeys)
			},
		},
		{Page: ConfigurationPage, Vars: []string{"TRANSCRIPTION_MODEL"},
			Default: "the default model group",
			Meaning: "the model group of `?intent=transcription` connects that name no `model`",
			read: func(c *Settings, _, v string) error {
				return text(&c.TranscriptionModel, v)
			},
		},
		{Page: LimitsPage, Vars: []string{"MAX_CONNECTIONS"},
			Default: "(open-file limit − 256) / 2",
			Meaning: "sessions plus connections still in their handshake, counted from accept; beyond it a plain-listener connection gets 503 `too_many_connections` (a TLS one is closed at once; see [What a client sees](what-a-client-sees.md#what-a-client-sees)); live sessions are untouched",
			read: func(c *Settings, _, v string) error {
				return count(v, 1, &c.MaxConnections)
			},
		},
		{Page: LimitsPage, Vars: []string{"MAX_HANDSHAKES"},
			Default: "1024 (0 = no limit)",
			Meaning: "client TLS handshakes running at once (from a whole ClientHello to the end of the handshake, a goroutine each); a ClientHello beyond it is closed at once",
			read: func(c *Settings, _, v string) error {
				return count(v, 0, &c.MaxHandshakes)
			},
		},
		{Page: LimitsPage, Vars: []string{"MAX_SESSIONS_PER_KEY"},
			Default: "0 (none)",
			Meaning: "429 `concurrent_sessions_exceeded`",
			read: func(c *Settings, _, v string) error {
				return count(v, 0, &c.MaxSessionsPerKey)
			},
		},
		{Page: LimitsPage, Vars: []string{"CONNECT_RATE_PER_KEY"},
			Default: "0 (none)",
			Meaning: "connects per second, burst of the same size; 429 `rate_limit_exceeded` with `Retry-After`",
			read: func(c *Settings, _, v string) error {
				f, err := strconv.ParseFloat(v, 64)
				if err != nil || f < 0 {
					return fmt.Errorf("%q is not a rate of connects per second", v)
				}
				c.ConnectRatePerKey = f
				return nil
			},
		},
		{Page: LimitsPage, Vars: []string{"HANDSHAKE_TIMEOUT_SECS"},
			Default: "10",
			Meaning: "a client that has not completed its upgrade request (or its TLS handshake) is dropped",
			read: func(c *Settings, _, v string) error {
				return seconds(v, 1, &c.HandshakeTimeout)
			},
		},
		{Page: LimitsPage, Vars: []string{"LIVE_START_TIMEOUT_SECS"},
			Default: "15",
			Meaning: "a [GPT-Live](gpt-live.md#gpt-live) client that has not sent its first event (`session.start`) this long after its upgrade gets an `error` event `session_start_timeout` and close 4000",
			read: func(c *Settings, _, v string) error {
				return seconds(v, 1, &c.LiveStartTimeout)
			},
		},
		{Page: LimitsPage, Vars: []string{"MAX_HEADER_BYTES"},
			Default: "8192",
			Meaning: "431",
			read: func(c *Settings, _, v string) error {
				return count(v, 1024, &c.MaxHeaderBytes)
			},
		},
		{Page: LimitsPage, Vars: []string{"MAX_MESSAGE_BYTES"},
			Default: "15728640 (15 MiB, OpenAI's limit)",
			Meaning: "that session closes with 1009",
			read: func(c *Settings, _, v string) error {
				var n int
				if err := count(v, 1024, &n); err != nil {
					return err
				}
				c.MaxMessage = int64(n)
				return nil
			},
		},
		{Page: LimitsPage, Vars: []string{"MAX_PENDING_BYTES"},
			Default: "1048576",
			Meaning: "client bytes queued while the upstream connects; over it, 1009",
			read: func(c *Settings, _, v string) error {
				return count(v, 0, &c.MaxPending)
			},
		},
		{Page: LimitsPage, Vars: []string{"IDLE_TIMEOUT_SECS"},
			Default: "900 (0 = off)",
			Meaning: "no frame either way: an `error` event `session_idle_timeout`, then close 1000 `idle timeout`",
			read: func(c *Settings, _, v string) error {
				return seconds(v, 0, &c.IdleTimeout)
			},
		},
		{Page: LimitsPage, Vars: []string{"MAX_SESSION_SECS"},
			Default: "14400 (4 hours) with continuity, 3660 without (0 = off); a key's `max_session_secs` replaces it",
			Meaning: "the gateway's own cap on a client's session: `error` event `session_max_duration`, close 1001. With continuity the upstream's 60-minute cap is rolled over, so this is the only cap; without, 3660 is a minute past the upstream's own",
			read: func(c *Settings, _, v string) error {
				return seconds(v, 0, &c.MaxSessionDuration)
			},
		},
		{Page: LimitsPage, Vars: []string{"SESSION_CONTINUITY"},
			Default: "1 (0 = off; a key's `continuity: false` turns it off for that key)",
			Meaning: "a session whose upstream is lost or reaches its cap goes on over a fresh upstream session ([Session continuity](continuity.md#session-continuity-a-session-outlives-its-upstream))",
			read: func(c *Settings, _, v string) error {
				b, err := strconv.ParseBool(v)
				if err != nil {
					return fmt.Errorf("%q is not 1 or 0 (true or false)", v)
				}
				c.Continuity = b
				return nil
			},
		},
		{Page: LimitsPage, Vars: []string{"CONTINUITY_KEEP_AUDIO"},
			Default: "0 (1 = on; a key's `continuity_keep_audio` overrides it)",
			Meaning: "a user's audio turn is replayed as its own audio (`input_audio`, from the client's appends), not by its transcript; the audio counts against `CONTINUITY_MAX_BYTES` ([Keeping the user's audio](continuity.md#session-continuity-a-session-outlives-its-upstream))",
			read: func(c *Settings, _, v string) error {
				return boolean(v, func(b bool) { c.ContinuityKeepAudio = b })
			},
		},
		{Page: LimitsPage, Vars: []string{"CONTINUITY_MAX_BYTES"},
			Default: "262144 (256 KiB; at least 1024)",
			Meaning: "what one session keeps of its conversation for a resume; the oldest items are dropped first, as the upstream truncates",
			read: func(c *Settings, _, v string) error {
				return count(v, 1024, &c.ContinuityMaxBytes)
			},
		},
		{Page: LimitsPage, Vars: []string{"CONTINUITY_GLOBAL_MAX_BYTES"},
			Default: "1073741824 (1 GiB; 0 = no cap)",
			Meaning: "what all sessions keep together; past it a session drops its own oldest items to keep a new one",
			read: func(c *Settings, _, v string) error {
				return byteCount(v, "0: no global cap", &c.ContinuityGlobalMaxBytes)
			},
		},
		{Page: LimitsPage, Vars: []string{"MAX_STALLED_BYTES"},
			Default: "67108864 (64 MiB; at least 65536)",
			Meaning: "the ceiling for a side that is still reading, only slower than the other side sends: past this much waiting behind it the session is dropped. 64 MiB fits a long answer on a slow link (a two-minute answer is about 7.7 MB). Until 2026-12-01 it was 4 MiB and also acted on clients that kept reading (see below)",
			read: func(c *Settings, _, v string) error {
				return count(v, 64<<10, &c.MaxStalledBytes)
			},
		},
		{Page: LimitsPage, Vars: []string{"MAX_BUFFERED_BYTES"},
			Default: "`GOMEMLIMIT` / 4 if set, else RAM (or the cgroup limit, if lower) / 8; 0 = off",
			Meaning: "total bytes waiting behind writes to slow peers (reading or not), over all sessions; above it the sessions holding the most are ended first (see below)",
			read: func(c *Settings, _, v string) error {
				return byteCount(v, "0 turns the budget off", &c.MaxBufferedBytes)
			},
		},
		{Page: LimitsPage, Vars: []string{"UPSTREAM_DIAL_TIMEOUT_SECS"},
			Default: "10",
			Meaning: "a connect's whole upstream attempt (every dial, hedge and failover: connect + TLS + upgrade); then the client gets `upstream_unavailable` and 1011",
			read: func(c *Settings, _, v string) error {
				return seconds(v, 1, &c.DialTimeout)
			},
		},
		{Page: LimitsPage, Vars: []string{"UPSTREAM_HEDGE_MS"},
			Default: "500 (0 = off)",
			Meaning: "a dial that has not completed its upgrade by then gets a second dial to the next healthy deployment beside it; the first to complete wins",
			read: func(c *Settings, _, v string) error {
				n, err := strconv.Atoi(v)
				if err != nil || n < 0 {
					return fmt.Errorf("%q is not a whole number of milliseconds of at least 0 (0 turns hedging off)", v)
				}
				c.HedgeDelay = time.Duration(n) * time.Millisecond
				return nil
			},
		},
		{Page: LimitsPage, Vars: []string{"WRITE_TIMEOUT_SECS"},
			Default: "10 (at least 1)",
			Meaning: "a socket the kernel took nothing from for this long (its backlog writer waiting for the first 1 KiB to go) is closed and its session ended: the rule for a side that stopped reading",
			read: func(c *Settings, _, v string) error {
				return seconds(v, 1, &c.WriteTimeout)
			},
		},
		{Page: LimitsPage, Vars: []string{"CLOSE_TIMEOUT_SECS"},
			Default: "5",
			Meaning: "how long a socket may take to answer a close frame (and an upstream to close its TCP connection after the close handshake) before it is closed anyway",
			read: func(c *Settings, _, v string) error {
				return seconds(v, 1, &c.CloseTimeout)
			},
		},
		{Page: LimitsPage, Vars: []string{"DRAIN_GRACE_SECS"}, Flag: "`-drain-grace 5s`",
			Default: "5",
			Meaning: "after SIGTERM, how long `/health` says 503 while connects are still served",
			read: func(c *Settings, _, v string) error {
				return seconds(v, 0, &c.DrainGrace)
			},
		},
		{Page: LimitsPage, Vars: []string{"DRAIN_TIMEOUT"}, Flag: "`-drain-timeout 60s`",
			Default: "60",
			Meaning: "then, seconds live sessions may continue",
			read: func(c *Settings, _, v string) error {
				return seconds(v, 0, &c.DrainTimeout)
			},
		},
		{Page: LimitsPage, Vars: []string{"ALLOWED_ORIGINS"},
			Default: "(any)",
			Meaning: "comma-separated browser `Origin`s; others get 403 (requests without `Origin` are allowed)",
			read: func(c *Settings, _, v string) error {
				return commaList(v, &c.AllowedOrigins)
			},
		},
	}
}

// text sets a string setting.
func text(dst *string, v string) error { *dst = v; return nil }

// count reads a whole number of at least min.
func count(v string, min int, dst *int) error {
	n, err := strconv.Atoi(v)
	if err != nil || n < min {
		return fmt.Errorf("%q is not a whole number of at least %d", v, min)
	}
	*dst = n
	return nil
}

// seconds reads a (fractional) number of seconds of at least min.
func seconds(v string, min int, dst *time.Duration) error {
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || f < float64(min) {
		return fmt.Errorf("%q is not a number of seconds of at least %d", v, min)
	}
	*dst = time.Duration(f * float64(time.Second))
	return nil
}

// byteCount reads a byte count where 0 means what zero says.
func byteCount(v, zero string, dst *int64) error {
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return fmt.Errorf("%q is not a whole number of bytes (%s)", v, zero)
	}
	*dst = n
	return nil
}

// commaList reads a comma-separated list, dropping blanks around and
// between the items.
func commaList(v string, dst *[]string) error {
	for _, item := range strings.Split(v, ",") {
		if item = strings.TrimSpace(item); item != "" {
			*dst = append(*dst, item)
		}
	}
	return nil
}

// boolean reads a 1/0/true/false setting into set.
func boolean(v string, set func(bool)) error {
	b, err := strconv.ParseBool(v)
	if err != nil {
		return fmt.Errorf("%q is not 1, 0, true or false", v)
	}
	set(b)
	return nil
}
