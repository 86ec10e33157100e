package server

// What the settings make before the sessions exist: where the keys' limits
// are kept, the warm pools, and the sessions' own Config.

import (
	"log/slog"
	"strings"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"rtgate/server/admission"
	"rtgate/server/cluster"
	"rtgate/server/limit"
	"rtgate/server/recording"
	"rtgate/server/session"
	"rtgate/upstream"
)

// sessionSettings maps the settings to the sessions' Config.
func sessionSettings(cfg Settings) session.Config {
	return session.Config{
		DialTimeout: cfg.DialTimeout, CloseTimeout: cfg.CloseTimeout, MaxMessage: cfg.MaxMessage, MaxPending: cfg.MaxPending,
		MaxConnections: cfg.MaxConnections, LiveStartTimeout: cfg.LiveStartTimeout, NoTurnMetrics: cfg.NoTurnMetrics,
		Continuity: cfg.Continuity, ContinuityKeepAudio: cfg.ContinuityKeepAudio, ContinuityMaxBytes: cfg.ContinuityMaxBytes,
		ContinuityGlobal: cfg.ContinuityGlobalMaxBytes, PoolMaxIdle: cfg.Pool.MaxIdle,
		TranscriptionModel: cfg.TranscriptionModel, AllowedOrigins: cfg.AllowedOrigins, ClientSecretKeys: cfg.ClientSecretKeys,
		SpendState: cfg.SpendState, UsageLog: cfg.UsageLog, DatabaseURL: cfg.DatabaseURL, SpendSpool: cfg.SpendSpool,
		Recordings: archiveConfig(cfg), RecordingMaxAudio: cfg.RecordingsMaxAudio,
		Admission: admission.Config{MaxSessionsPerKey: cfg.MaxSessionsPerKey, ConnectRatePerKey: cfg.ConnectRatePerKey,
			TranscriptionModel: cfg.TranscriptionModel},
	}
}

// newAdmitter decides where the per-key limits are kept: in Redis, shared
// by the instances, when REDIS_URL is set (with the store, nil otherwise),
// else on this instance.
func newAdmitter(cfg Settings, log *slog.Logger, reg prometheus.Registerer) (limit.Admitter, *cluster.Store, error) {
	if cfg.RedisURL == "" {
		return limit.NewLocal(nil), nil, nil
	}
	st, err := cluster.NewStore(cfg.RedisURL, cfg.RedisTimeout)
	if err != nil {
		return nil, nil, err
	}
	log.Info("per-key limits are cluster-wide", "redis", cluster.RedactURL(cfg.RedisURL),
		"instance", st.Instance, "lease", cfg.ClusterLease, "timeout", cfg.RedisTimeout)
	return cluster.NewLimiter(st, cfg.ClusterLease, cfg.ClusterInstances, log, reg), st, nil
}

// poolMemory is where the warm pool remembers demand across restarts: the
// REALTIME_POOL_STATE file, and with REDIS_URL the instances' shared peaks
// (upstream.DemandMemory); nil for neither.
func poolMemory(cfg Settings, store *cluster.Store) upstream.DemandMemory {
	var ms upstream.Memories
	if cfg.PoolState != "" {
		ms = append(ms, upstream.FileMemory{Path: cfg.PoolState})
	}
	if store != nil {
		ms = append(ms, &upstream.RedisMemory{Client: store.Client, Instance: store.Instance,
			InstancesKey: store.InstancesKey(), Prefix: store.Key("pool", "demand") + ":"})
	}
	if len(ms) == 0 {
		return nil
	}
	return ms
}

// newLivePool makes the Live pool when LIVE_POOL_SIZE is set (nil
// otherwise): pinged as the Realtime pool's sockets are, within the
// descriptors sessions leave free, its metrics rtgate_live_pool_*.
func newLivePool(cfg Settings, d *upstream.Dialer, sessions *atomic.Int64, log *slog.Logger, reg prometheus.Registerer) *upstream.Pool {
	lc := cfg.LivePool
	if lc.Size <= 0 {
		return nil
	}
	lc.PingInterval, lc.PongTimeout = cfg.Pool.PingInterval, cfg.Pool.PongTimeout
	fdLimit := openFileLimit()
	lc.Spare = func() int { return fdLimit - fdReserve - 2*int(sessions.Load()) }
	log.Info("GPT-Live warm pool on", "size", lc.Size, "max_idle", lc.MaxIdle)
	return upstream.NewLivePool(d, lc, log, upstream.NewPoolMetricsNamed(reg, "rtgate_live_pool"))
}

// closePools closes the warm pools that are on (nil: off), the Realtime
// pool's and GPT-Live's, at shutdown.
func closePools(pools ...*upstream.Pool) {
	for _, p := range pools {
		if p != nil {
			p.Close()
		}
	}
}

// archiveConfig is where recorded sessions go: RECORDINGS, a directory or
// s3://bucket/prefix.
func archiveConfig(cfg Settings) recording.ArchiveConfig {
	ac := recording.ArchiveConfig{Retention: cfg.RecordingsRetention, MaxBuffer: int(cfg.RecordingsMaxBuffer)}
	rest, isS3 := strings.CutPrefix(cfg.Recordings, "s3://")
	if !isS3 {
		ac.Dir = cfg.Recordings
		return ac
	}
	bucket, prefix, _ := strings.Cut(rest, "/")
	if prefix != "" && !strings.HasSuffix(prefix, "/") {
		prefix += "/"
	}
	ac.S3 = recording.S3Config{Endpoint: cfg.RecordingsS3Endpoint, Region: cfg.RecordingsS3Region, Bucket: bucket,
		Prefix: prefix, AccessKey: cfg.RecordingsS3AccessKey, SecretKey: cfg.RecordingsS3SecretKey,
		PathStyle: cfg.RecordingsS3Endpoint != ""}
	return ac
}
