package upstream

import "github.com/prometheus/client_golang/prometheus"

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
}

// NewPoolMetrics creates the metrics and registers them with reg.
func NewPoolMetrics(reg prometheus.Registerer) *PoolMetrics {
	labels := []string{"model", "key"}
	m := &PoolMetrics{
		Warm: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "rtgate_pool_warm_sockets",
			Help: "Upstream sockets held warm (past session.created)."}, labels),
		Target: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "rtgate_pool_target_sockets",
			Help: "Warm sockets the pool aims to hold (fixed, or adaptive with REALTIME_POOL_SIZE=auto)."}, labels),
		Inflight: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "rtgate_pool_inflight_limit",
			Help: "Concurrent warm-up dials the key may run now: twice connect rate × refill time (Little's law), within [64, REALTIME_POOL_MAX_INFLIGHT]."}, labels),
		Hits: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "rtgate_pool_hits_total",
			Help: "Client connects served from a warm socket."}, labels),
		Misses: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "rtgate_pool_misses_total",
			Help: "Client connects that found no warm socket and dialed fresh."}, labels),
		DeadOnTake: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "rtgate_pool_dead_on_take_total",
			Help: "Warm sockets found dead when a client came for them."}, labels),
		Dials: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "rtgate_pool_dials_total",
			Help: "Warm-pool dials by result (ok means session.created arrived)."}, append(labels, "result")),
		Backoff: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "rtgate_pool_backoff_seconds",
			Help: "Current refill backoff after failed dials; 0 when healthy."}, labels),
		WarmAge: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "rtgate_pool_warm_age_seconds",
			Help:    "Age of a warm socket when handed to a client.",
			Buckets: []float64{0.1, 0.5, 1, 2, 5, 10, 20, 30, 60}}, []string{"model"}),
		Refill: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "rtgate_pool_refill_seconds",
			Help:    "Time from dial start to session.created for a warm socket.",
			Buckets: prometheus.ExponentialBuckets(0.005, 2, 12)}, []string{"model"}),
		Pings: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "rtgate_pool_pings_total",
			Help: "WebSocket pings sent to idle warm sockets to check they are alive."}, labels),
		Pongs: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "rtgate_pool_pongs_total",
			Help: "Pongs that answered those pings in time (consumed by the pool, never relayed)."}, labels),
		MissedPongs: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "rtgate_pool_missed_pongs_total",
			Help: "Idle warm sockets retired (and replaced) because they did not answer a ping in time."}, labels),
	}
	reg.MustRegister(m.Warm, m.Target, m.Inflight, m.Hits, m.Misses, m.DeadOnTake, m.Dials, m.Backoff, m.WarmAge, m.Refill,
		m.Pings, m.Pongs, m.MissedPongs)
	return m
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
