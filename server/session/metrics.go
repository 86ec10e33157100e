package session

import (
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"rtgate/server/guardrail"
	"rtgate/server/routes"
	"rtgate/server/turns"
	"rtgate/server/usage"
)

// metrics are the sessions' Prometheus metrics. Relay counters are added
// when a session ends, not per frame, so the forwarding path stays free of
// shared writes.
type metrics struct {
	reg            prometheus.Registerer
	sessionsOpen   prometheus.Gauge
	sessionsTotal  *prometheus.CounterVec
	sessionSetup   *prometheus.HistogramVec
	bytes          *prometheus.CounterVec
	frames         *prometheus.CounterVec
	tokens         *prometheus.CounterVec
	dialFailures   *prometheus.CounterVec
	usageLogErrors prometheus.Counter
	warmRedials    prometheus.Counter // counted by redial
	resumes        *prometheus.CounterVec
	resumeSeconds  prometheus.Histogram
	spend          *prometheus.CounterVec
	flagged        *prometheus.CounterVec // records with unpriced or unconfirmed usage (noteUnpriced, estimateFlights)
	gatewayErrors  *prometheus.CounterVec // upstream errors for the gateway's own events (holdGatewayAnswer)

	// Sessions by protocol (realtime, live): new series beside the totals
	// above, whose labels stay as they were.
	protocolOpen  *prometheus.GaugeVec
	protocolTotal *prometheus.CounterVec
	// GPT-Live's own: billed seconds, sessions without session.closed, and
	// session.start to session.started.
	liveSeconds     *prometheus.CounterVec
	liveUnconfirmed *prometheus.CounterVec
	liveStart       prometheus.Histogram
	turns           *turns.Metrics
	guardrails      *guardrail.Metrics // rtgate_guardrail_checks_total, rtgate_guardrail_check_seconds
}

// newMetrics registers the sessions' metrics on reg; dialFailures is made
// (and registered) by the gateway, since the balancer counts into it too.
func newMetrics(reg prometheus.Registerer, dialFailures *prometheus.CounterVec) *metrics {
	m := &metrics{
		reg:          reg,
		dialFailures: dialFailures,
		sessionsOpen: prometheus.NewGauge(prometheus.GaugeOpts{Name: "rtgate_sessions_open",
			Help: "Sessions relaying now."}),
		sessionsTotal: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "rtgate_sessions_total",
			Help: "Ended sessions by outcome and client key name."}, []string{"outcome", "key"}),
		tokens: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "rtgate_tokens_total",
			Help: "Tokens from response.done usage, by model group, client key name and kind, counted when sessions end."},
			[]string{"model_group", "key", "kind"}),
		usageLogErrors: prometheus.NewCounter(prometheus.CounterOpts{Name: "rtgate_usage_log_errors_total",
			Help: "USAGE_LOG records lost to a write or sync error, or to a full queue."}),
		spend: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "rtgate_spend_usd_total",
			Help: "Cost in USD of ended sessions at the deployment's prices, by model group and client key name."},
			[]string{"model_group", "key"}),
		sessionSetup: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "rtgate_session_setup_seconds",
			Help:    "From the client's upgrade to the first upstream frame (session.created) sent to it.",
			Buckets: []float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5}},
			[]string{"pool"}),
		bytes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "rtgate_relay_bytes_total",
			Help: "Bytes relayed, counted when sessions end."}, []string{"direction"}),
		frames: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "rtgate_relay_frames_total",
			Help: "Frames relayed, counted when sessions end."}, []string{"direction"}),
	}
	m.registerResumes()
	m.registerGatewayErrors()
	m.protocolOpen = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "rtgate_protocol_sessions_open",
		Help: "Sessions relaying now, by protocol (realtime, live); rtgate_sessions_open is their sum."}, []string{"protocol"})
	m.protocolTotal = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "rtgate_protocol_sessions_total",
		Help: "Ended sessions by protocol (realtime, live) and outcome."}, []string{"protocol", "outcome"})
	m.liveSeconds = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "rtgate_live_seconds_total",
		Help: "GPT-Live session seconds billed (the upstream's usage.seconds), by model group and client key name."},
		[]string{"model_group", "key"})
	m.flagged = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "rtgate_usage_flagged_total",
		Help: "Session records whose usage is flagged: unpriced (a model the gateway has no price for: not in cost_usd; " +
			"model says which) or unconfirmed (billed an estimate: responses in flight the upstream never reported)."},
		[]string{"model_group", "model", "flag"})
	m.liveUnconfirmed = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "rtgate_live_unconfirmed_sessions_total",
		Help: "GPT-Live sessions that ended without session.closed: billed their last reported seconds."},
		[]string{"model_group"})
	m.liveStart = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "rtgate_live_session_start_seconds",
		Help:    "GPT-Live: from the client's session.start reaching the gateway to the upstream's first event (session.started) sent to it.",
		Buckets: []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5}})
	for _, p := range []string{routes.ProtocolRealtime, routes.ProtocolLive} {
		m.protocolOpen.WithLabelValues(p)
	}
	reg.MustRegister(m.sessionsOpen, m.sessionsTotal, m.sessionSetup, m.bytes, m.frames,
		m.tokens, m.usageLogErrors, m.spend,
		m.protocolOpen, m.protocolTotal, m.liveSeconds, m.liveUnconfirmed, m.liveStart, m.flagged)
	m.warmRedials = prometheus.NewCounter(prometheus.CounterOpts{Name: "rtgate_pool_warm_redials_total",
		Help: "Taken warm sockets that proved dead before the client sent anything, replaced by a fresh dial."})
	reg.MustRegister(m.warmRedials)
	m.turns = turns.NewMetrics(reg)
	m.guardrails = guardrail.NewMetrics(reg)
	return m
}

// newReasonCounter is a counter labelled by reason with each of reasons
// exported from the start, at 0: a rate() or an alert on one reason then has
// a series before that reason's first event.
func newReasonCounter(name, help string, reasons ...string) *prometheus.CounterVec {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, []string{"reason"})
	for _, r := range reasons {
		c.WithLabelValues(r)
	}
	return c
}

// sumCounter adds up every series of a counter vector.
func sumCounter(c prometheus.Collector) float64 {
	ch := make(chan prometheus.Metric, 64)
	go func() { c.Collect(ch); close(ch) }()
	total := 0.0
	for m := range ch {
		var d dto.Metric
		if m.Write(&d) == nil {
			total += d.GetCounter().GetValue()
		}
	}
	return total
}

// registerResumes adds session continuity's metrics (Manager.resume).
func (m *metrics) registerResumes() {
	m.resumes = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "rtgate_session_resumes_total",
		Help: "Sessions carried onto a fresh upstream session (session continuity), by cause (upstream_lost, upstream_closed, " +
			"session_expired, rollover, mid_frame) and outcome (ok, failed, refused)."}, []string{"cause", "outcome"})
	m.resumeSeconds = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "rtgate_session_resume_seconds",
		Help:    "From the loss of a session's upstream to the fresh upstream taking the client's frames (resumes that succeeded).",
		Buckets: []float64{0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}})
	m.reg.MustRegister(m.resumes, m.resumeSeconds)
}

// countTokens adds usage to the token metrics.
func (m *metrics) countTokens(group, key string, u usage.Usage) {
	in, out := u.InputTokenDetails, u.OutputTokenDetails
	for kind, n := range map[string]int64{
		"input_text": in.TextTokens, "input_audio": in.AudioTokens, "input_image": in.ImageTokens,
		"input_cached": in.CachedTokens, "output_text": out.TextTokens, "output_audio": out.AudioTokens,
	} {
		if n > 0 {
			m.tokens.WithLabelValues(group, key, kind).Add(float64(n))
		}
	}
}
