package turns

import "github.com/prometheus/client_golang/prometheus"

// Buckets of the turn histograms: 50 ms to 5 s finely (what a user hears as
// quick, slow or broken), a few beyond for long answers.
var (
	firstAudioBuckets = []float64{0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.4, 0.5, 0.6, 0.75, 1, 1.25, 1.5, 2, 2.5, 3, 4, 5, 7.5, 10}
	durationBuckets   = []float64{0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1, 1.5, 2, 3, 4, 5, 7.5, 10, 15, 20, 30, 60}
)

// Metrics are the turn metrics, by model group and deployment.
type Metrics struct {
	firstAudio *prometheus.HistogramVec
	duration   *prometheus.HistogramVec
	total      *prometheus.CounterVec
}

// NewMetrics makes the turn metrics and registers them with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	labels := []string{"model_group", "deployment"}
	m := &Metrics{
		firstAudio: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "rtgate_turn_first_audio_seconds",
			Help:    "Time a turn waited for its first output: from response.created, or the end of the user's speech (server VAD's speech_stopped less its silence window), to the first audio (or text) delta.",
			Buckets: firstAudioBuckets}, labels),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "rtgate_turn_duration_seconds",
			Help:    "Time from a turn's start to its last response.done (a tool-call chain is one turn).",
			Buckets: durationBuckets}, labels),
		total: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "rtgate_turns_total",
			Help: "Turns ended, by outcome: completed, interrupted, failed, incomplete, unfinished (the session ended first)."},
			append(labels, "outcome")),
	}
	reg.MustRegister(m.firstAudio, m.duration, m.total)
	return m
}

// Observe exports what one mark measured.
func (m *Metrics) Observe(group, deployment string, ev Event) {
	if ev.HasFirstAudio {
		m.firstAudio.WithLabelValues(group, deployment).Observe(ev.FirstAudio.Seconds())
	}
	if ev.Outcome != "" {
		if ev.Outcome != Unfinished {
			m.duration.WithLabelValues(group, deployment).Observe(ev.Duration.Seconds())
		}
		m.total.WithLabelValues(group, deployment, ev.Outcome).Inc()
	}
}
