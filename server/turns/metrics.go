package turns

import "github.com/prometheus/client_golang/prometheus"

// Buckets of the turn histograms: 50 ms to 5 s finely (what a user hears as
// quick, slow or broken), a few beyond for long answers; tool time from
// 10 ms to a minute.
var (
	firstAudioBuckets = []float64{0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.4, 0.5, 0.6, 0.75, 1, 1.25, 1.5, 2, 2.5, 3, 4, 5, 7.5, 10}
	durationBuckets   = []float64{0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1, 1.5, 2, 3, 4, 5, 7.5, 10, 15, 20, 30, 60}
	toolBuckets       = []float64{0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}
)

// Metrics are the turn metrics, by model group and deployment.
type Metrics struct {
	firstAudio  *prometheus.HistogramVec
	firstOutput *prometheus.HistogramVec
	tool        *prometheus.HistogramVec
	duration    *prometheus.HistogramVec
	total       *prometheus.CounterVec
	penalties   *prometheus.CounterVec
}

// NewMetrics makes the turn metrics and registers them with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	labels := []string{"model_group", "deployment"}
	m := &Metrics{
		firstAudio: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "rtgate_turn_first_audio_seconds",
			Help: "Time a voice turn waited for its first audio: from when the upstream had what it needed to answer (the response.create " +
				"the gateway forwarded, or the forwarding of the audio server VAD's speech_stopped.audio_end_ms points at) to the first " +
				"audio delta (a tool chain's from the client's create after the tool's output). What latency-based routing ranks by.",
			Buckets: firstAudioBuckets}, labels),
		firstOutput: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "rtgate_turn_first_output_seconds",
			Help: "Time to the first output of responses that are not voice turns, by kind: text (text-only responses; a text-only " +
				"session's turns, which route) and out_of_band (conversation \"none\"), from the same clock as first audio.",
			Buckets: firstAudioBuckets}, append(labels, "kind")),
		tool: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "rtgate_turn_tool_seconds",
			Help:    "The client's time running a tool within a turn: from the tool call's response.done to the client's next response.create (not the deployment's latency).",
			Buckets: toolBuckets}, labels),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "rtgate_turn_duration_seconds",
			Help:    "Time from a turn's start to its last response.done (a tool-call chain is one turn).",
			Buckets: durationBuckets}, labels),
		total: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "rtgate_turns_total",
			Help: "Turns ended, by outcome: completed, interrupted, failed, incomplete, unfinished (the session ended first)."},
			append(labels, "outcome")),
		penalties: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "rtgate_turn_failures_total",
			Help: "Turns the upstream failed (a failed response not the client's fault, a server_error or rate-limit error, no first " +
				"output within 10 s), each a 10 s penalty sample for latency-based routing."}, labels),
	}
	reg.MustRegister(m.firstAudio, m.firstOutput, m.tool, m.duration, m.total, m.penalties)
	return m
}

// Observe exports what one mark measured.
func (m *Metrics) Observe(group, deployment string, ev Event) {
	if ev.HasFirstAudio {
		if ev.Kind == Voice {
			m.firstAudio.WithLabelValues(group, deployment).Observe(ev.FirstAudio.Seconds())
		} else {
			m.firstOutput.WithLabelValues(group, deployment, ev.Kind.String()).Observe(ev.FirstAudio.Seconds())
		}
	}
	if ev.HasTool {
		m.tool.WithLabelValues(group, deployment).Observe(ev.Tool.Seconds())
	}
	if ev.Penalty && ev.Routes {
		m.penalties.WithLabelValues(group, deployment).Inc()
	}
	if ev.Outcome != "" {
		if ev.Outcome != Unfinished {
			m.duration.WithLabelValues(group, deployment).Observe(ev.Duration.Seconds())
		}
		m.total.WithLabelValues(group, deployment, ev.Outcome).Inc()
	}
}
