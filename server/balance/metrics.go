package balance

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// metrics count hedged dials and deployment health.
type metrics struct {
	ejections     *prometheus.CounterVec
	ejected       *prometheus.GaugeVec
	probes        *prometheus.CounterVec
	hedgesStarted *prometheus.CounterVec
	hedgesWon     *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) metrics {
	auto := promauto.With(reg)
	counter := func(name, help, label string) *prometheus.CounterVec {
		return auto.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, []string{label})
	}
	return metrics{
		ejections: counter("rtgate_upstream_ejections_total",
			"Deployments ejected after a failed, timed-out or overtaken dial (a failed probe counts again).", "deployment"),
		ejected: auto.NewGaugeVec(prometheus.GaugeOpts{Name: "rtgate_upstream_ejected",
			Help: "1 while a deployment is ejected (routed behind the healthy ones), 0 when healthy."}, []string{"deployment"}),
		probes: counter("rtgate_upstream_probes_total",
			"Connects let through to an ejected deployment whose backoff was over, to learn whether it is back.", "deployment"),
		hedgesStarted: counter("rtgate_upstream_hedges_started_total",
			"Second dials started because a dial had not completed its upgrade within UPSTREAM_HEDGE_MS.", "model_group"),
		hedgesWon: counter("rtgate_upstream_hedges_won_total",
			"Hedged dials whose upgrade completed first and served the session.", "model_group"),
	}
}
