package guardrail

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Check outcomes, the outcome label of rtgate_guardrail_checks_total.
const (
	outcomePass        = "pass"
	outcomeBlock       = "block"
	outcomeErrorOpen   = "error_open"   // failed, and on_error let it pass
	outcomeErrorClosed = "error_closed" // failed, and on_error blocked
)

// Metrics are the guardrails' Prometheus metrics. The gateway registers
// its metrics on a registry it passes around rather than globally, so these
// are made once per registry with NewMetrics and given to each check as
// Input.Metrics; a nil *Metrics counts nothing.
type Metrics struct {
	checks  *prometheus.CounterVec
	seconds *prometheus.HistogramVec
}

// NewMetrics registers the guardrail metrics on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		checks: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "rtgate_guardrail_checks_total",
			Help: "Guardrail checks by outcome: pass, block, error_open (failed, passed by on_error: fail_open), " +
				"error_closed (failed, blocked by on_error: fail_closed). Checks cut short by the session ending are not counted."},
			[]string{"guardrail", "mode", "outcome"}),
		seconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "rtgate_guardrail_check_seconds",
			Help: "Time one guardrail check took, errors and timeouts included (a timeout shows as the guardrail's timeout).",
			// From an in-process content filter (tens of µs) to a remote
			// service at its timeout (2 s by default).
			Buckets: []float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5}},
			[]string{"guardrail", "mode"}),
	}
	reg.MustRegister(m.checks, m.seconds)
	return m
}

// Prepare exports the series of gs (each guardrail in each of its modes,
// every outcome) at 0, so a rate() or an alert on one outcome has a series
// before that outcome's first check. Call it once the config is loaded.
func (m *Metrics) Prepare(gs ...*Guardrail) {
	if m == nil {
		return
	}
	for _, g := range gs {
		for _, mode := range g.spec.Modes {
			for _, o := range []string{outcomePass, outcomeBlock, outcomeErrorOpen, outcomeErrorClosed} {
				m.checks.WithLabelValues(g.spec.Name, string(mode), o)
			}
			m.seconds.WithLabelValues(g.spec.Name, string(mode))
		}
	}
}

func (m *Metrics) observe(name string, mode Mode, outcome string, took time.Duration) {
	if m == nil {
		return
	}
	m.checks.WithLabelValues(name, string(mode), outcome).Inc()
	m.seconds.WithLabelValues(name, string(mode)).Observe(took.Seconds())
}
