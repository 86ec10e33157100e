package upstream

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// PoolMetrics are the warm pool's Prometheus metrics. Keys are labelled by
// model and the first 8 hex digits of the key's SHA-256 digest, never by
// anything secret.
type PoolMetrics struct {
	Warm       *prometheus.GaugeVec
	Target     *prometheus.GaugeVec
	Inflight   *prometheus.GaugeVec
	Hits       *prometheus.CounterVec
	Misses     *prometheus.CounterVec
	DeadOnTake *prometheus.CounterVec
	Dials      *prometheus.CounterVec
	Backoff    *prometheus.GaugeVec
	WarmAge    *prometheus.HistogramVec
	Refill     *prometheus.HistogramVec
	// Pings and MissedPongs are the liveness checks of idle warm sockets.
	Pings       *prometheus.CounterVec
	Pongs       *prometheus.CounterVec
	MissedPongs *prometheus.CounterVec
	// Anticipated counts warm-up dials started at a client's accept, ahead
	// of its request (Pool.Expect).
	Anticipated *prometheus.CounterVec
}

// NewPoolMetrics creates the metrics and registers them with reg.
func NewPoolMetrics(reg prometheus.Registerer) *PoolMetrics {
	return NewPoolMetricsNamed(reg, "rtgate_pool")
}

// NewPoolMetricsNamed is NewPoolMetrics with another name prefix: the Live
// pool's are rtgate_live_pool_* (NewLivePool).
func NewPoolMetricsNamed(reg prometheus.Registerer, prefix string) *PoolMetrics {
	labels := []string{"model", "key"}
	auto := promauto.With(reg)
	gauge := func(name, help string) *prometheus.GaugeVec {
		return auto.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help}, labels)
	}
	counter := func(name, help string) *prometheus.CounterVec {
		return auto.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
	}
	return &PoolMetrics{
		Warm:   gauge(prefix+"_warm_sockets", "Upstream sockets held warm (past session.created)."),
		Target: gauge(prefix+"_target_sockets", "Warm sockets the pool aims to hold (fixed, or adaptive with REALTIME_POOL_SIZE=auto)."),
		Inflight: gauge(prefix+"_inflight_limit",
			"Concurrent warm-up dials the key may run now: twice connect rate × refill time (Little's law), within [64, REALTIME_POOL_MAX_INFLIGHT]."),
		Hits: counter(prefix+"_hits_total", "Client connects served from a warm socket."),
		Misses: auto.NewCounterVec(prometheus.CounterOpts{Name: prefix + "_misses_total",
			Help: "Client connects that dialed fresh, by reason: empty (no ready socket), safety_identifier (a per-user header that must reach the upstream on the upgrade), query (parameters beyond the session's shape, forwarded), no_pool (no pool for its shape); key none for the last."},
			append(labels, "reason")),
		DeadOnTake: counter(prefix+"_dead_on_take_total", "Warm sockets found dead when a client came for them."),
		Dials: auto.NewCounterVec(prometheus.CounterOpts{Name: prefix + "_dials_total",
			Help: "Warm-pool dials by result (ok means session.created arrived)."}, append(labels, "result")),
		Backoff: gauge(prefix+"_backoff_seconds", "Current refill backoff after failed dials; 0 when healthy."),
		WarmAge: auto.NewHistogramVec(prometheus.HistogramOpts{Name: prefix + "_warm_age_seconds",
			Help:    "Age of a warm socket when handed to a client.",
			Buckets: []float64{0.1, 0.5, 1, 2, 5, 10, 20, 30, 60}}, []string{"model"}),
		Refill: auto.NewHistogramVec(prometheus.HistogramOpts{Name: prefix + "_refill_seconds",
			Help:    "Time from dial start to session.created for a warm socket.",
			Buckets: prometheus.ExponentialBuckets(0.005, 2, 12)}, []string{"model"}),
		Pings: counter(prefix+"_pings_total", "WebSocket pings sent to idle warm sockets to check they are alive."),
		Pongs: counter(prefix+"_pongs_total", "Pongs that answered those pings in time (consumed by the pool, never relayed)."),
		MissedPongs: counter(prefix+"_missed_pongs_total",
			"Idle warm sockets retired (and replaced) because they did not answer a ping in time."),
		Anticipated: counter(prefix+"_anticipated_dials_total",
			"Warm-up dials started when a client connection was accepted, ahead of its request, because the pool was short."),
	}
}

// RegisterDialerMetrics registers d's TLS handshake counters with reg: how
// many upstream TLS handshakes completed, and how many of them resumed an
// earlier session (see Dialer.tlsConfigFor). A low resumed share with a
// steady upstream means its tickets are not accepted (or resumption is off).
func RegisterDialerMetrics(reg prometheus.Registerer, d *Dialer) {
	reg.MustRegister(
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "rtgate_upstream_tls_handshakes_total",
			Help: "TLS handshakes with wss:// upstreams that completed."},
			func() float64 { n, _ := d.TLSHandshakes(); return float64(n) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "rtgate_upstream_tls_resumed_total",
			Help: "Of those, handshakes that resumed an earlier TLS session (UPSTREAM_TLS_RESUMPTION)."},
			func() float64 { _, n := d.TLSHandshakes(); return float64(n) }))
}
