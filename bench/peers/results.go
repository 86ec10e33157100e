package peers

import (
	"time"

	"rtgate/bench/proc"
)

// Results are everything one comparison measured; results.json holds them as they are.
type Results struct {
	Started  time.Time     `json:"started"`
	Finished time.Time     `json:"finished,omitzero"`
	Machine  Machine       `json:"machine"`
	Options  ResultOptions `json:"options"`
	Runs     []Run         `json:"runs"`
}

// ResultOptions are the Options a comparison ran with, as recorded.
type ResultOptions struct {
	Systems          []string `json:"systems"`
	Upstreams        []string `json:"upstreams"`
	Phases           []string `json:"phases"`
	Rounds           int      `json:"rounds"`
	Quick            bool     `json:"quick"`
	Sessions         int      `json:"sessions"`
	TLSSessions      int      `json:"tls_sessions"`
	VoiceSessions    int      `json:"voice_sessions"`
	TLSVoiceSessions int      `json:"tls_voice_sessions"`
	VoiceWarmup      string   `json:"voice_warmup"`
	VoiceDuration    string   `json:"voice_duration"`
	VoiceInterval    string   `json:"voice_interval"`
	SourceIPs        int      `json:"source_ips"`
	Pool             string   `json:"pool"`
	GatewayArgs      []string `json:"gateway_args"`
	LatencyConns     int      `json:"latency_conns"`
	LatencyRounds    int      `json:"latency_rounds"`
	LatencyInterval  string   `json:"latency_interval"`
	ThroughputConns  int      `json:"throughput_conns"`
	Window           int      `json:"window"`
	Warmup           string   `json:"warmup"`
	Duration         string   `json:"duration"`
	FileLimit        int      `json:"file_limit"`
}

// voiceSessionsOf is the voice phase's session count over upstream up.
func (r ResultOptions) voiceSessionsOf(up string) int {
	if up == string(proc.UpstreamTLS) {
		return r.TLSVoiceSessions
	}
	return r.VoiceSessions
}

func resultOptions(o *Options, limit int) ResultOptions {
	r := ResultOptions{
		Systems: o.Systems, Phases: o.Phases, Rounds: o.Rounds, Quick: o.Quick,
		Sessions: o.Sessions, TLSSessions: o.TLSSessions, SourceIPs: len(o.SourceIPs),
		VoiceSessions: o.VoiceSessions, TLSVoiceSessions: o.TLSVoiceSessions,
		VoiceWarmup: o.VoiceWarmup.String(), VoiceDuration: o.VoiceDuration.String(), VoiceInterval: o.VoiceInterval.String(),
		Pool: o.Pool, GatewayArgs: o.GatewayArgs,
		LatencyConns: o.LatencyConns, LatencyRounds: o.LatencyRounds, LatencyInterval: o.LatencyInterval.String(),
		ThroughputConns: o.ThroughputConns, Window: o.Window, Warmup: o.Warmup.String(), Duration: o.Duration.String(),
		FileLimit: limit,
	}
	for _, u := range o.Upstreams {
		r.Upstreams = append(r.Upstreams, string(u))
	}
	return r
}

// Run is one system measured once.
type Run struct {
	Upstream   string       `json:"upstream"` // "tls" (wss://) or "plain" (ws://)
	Round      int          `json:"round"`
	System     string       `json:"system"`
	Error      string       `json:"error,omitempty"`
	Memory     *Memory      `json:"memory,omitempty"`
	Latency    *Latency     `json:"latency,omitempty"`
	Throughput []Throughput `json:"throughput,omitempty"`
	Voice      *Voice       `json:"voice,omitempty"`
	// BusyBefore is the machine's CPU use (in cores) just before the run, when none
	// of the run's processes existed; QuietWait how long the run waited for it to
	// fall under Options.QuietCores.
	BusyBefore float64 `json:"busy_before_cores"`
	QuietWait  float64 `json:"quiet_wait_seconds"`
	// Mockai is the upstream's counters at the end: frames in and out confirm that
	// the load went through it.
	Mockai proc.MockStats `json:"mockai"`
}

// Memory is the held-idle-sessions figure. Proxy fields are zero for direct.
type Memory struct {
	Target   int            `json:"target"` // sessions asked for
	Held     int            `json:"held"`   // sessions that got session.created
	Failures map[string]int `json:"failures,omitempty"`
	RampSecs float64        `json:"ramp_seconds"`
	// ProxyIdleRSS and ProxyHeldRSS are summed over the proxy's processes.
	ProxyIdleRSS int64 `json:"proxy_idle_rss"`
	ProxyHeldRSS int64 `json:"proxy_held_rss"`
	ProxyProcs   int   `json:"proxy_processes"`
	// PerSession is (held - idle) / Held, bytes.
	PerSession float64 `json:"proxy_bytes_per_session"`
	// GatewayHeapPerSession is, for rtgate, the growth of its live heap (after a
	// forced collection) per held session, with the GOGC and GOMEMLIMIT it ran
	// with, as its /metrics reports them (the harness's environment, or the
	// gateway's own GOGC default when that has none).
	GatewayHeapPerSession float64 `json:"gateway_live_heap_bytes_per_session,omitempty"`
	GOGC                  string  `json:"gogc,omitempty"`
	GOMEMLIMIT            string  `json:"gomemlimit,omitempty"`
	// MockaiActive is mockai's open sessions while held (Held, plus any warm pool).
	MockaiActive     int64   `json:"mockai_active"`
	MockaiPerSession float64 `json:"mockai_bytes_per_session"`
}

// Latency is the round-trip figure at LatencyConns connections.
type Latency struct {
	Conns   int     `json:"conns"`
	Samples int     `json:"samples"`
	Errors  int     `json:"errors"`
	P50us   float64 `json:"p50_us"`
	P90us   float64 `json:"p90_us"`
	P99us   float64 `json:"p99_us"`
	MaxUs   float64 `json:"max_us"`
	MeanUs  float64 `json:"mean_us"`
	Seconds float64 `json:"seconds"`
	// OtherCPU: as in Throughput, over the whole phase.
	OtherCPU float64 `json:"other_cpu_seconds"`
	Attempts int     `json:"attempts"` // see Options.DisturbedCores
}

// Throughput is one payload size's relay rate and CPU cost.
type Throughput struct {
	Load         string  `json:"load"` // "1KiB" or "audio"
	PayloadBytes int     `json:"payload_bytes"`
	Conns        int     `json:"conns"`
	Window       int     `json:"window"`
	Seconds      float64 `json:"seconds"`
	// Relayed counts frames crossing the proxy in the measured window: each echo is
	// two (client to upstream, upstream to client).
	Relayed   int64   `json:"relayed"`
	PerSecond float64 `json:"relayed_per_second"`
	// ProxyCPU is user+system seconds of the proxy's processes in the window;
	// CPUPer100kRoundTrips scales it to 100,000 round trips (one frame each way,
	// so 200,000 relayed frames). Zero for direct.
	ProxyCPU             float64 `json:"proxy_cpu_seconds"`
	CPUPer100kRoundTrips float64 `json:"proxy_cpu_seconds_per_100k_round_trips"`
	MockaiCPU            float64 `json:"mockai_cpu_seconds"`
	ClientCPU            float64 `json:"client_cpu_seconds"`
	// OtherCPU is the machine's busy CPU in the window not used by the proxy,
	// mockai or the load client: other jobs, plus task time not charged to one of them.
	OtherCPU  float64 `json:"other_cpu_seconds"`
	Attempts  int     `json:"attempts"`   // see Options.DisturbedCores
	Lost      int64   `json:"lost"`       // echoes that never came back
	BadLength int64   `json:"bad_length"` // echoes of the wrong size
	// Profile is the file of the rtgate CPU profile taken over the window
	// (Options.Profile).
	Profile string `json:"profile,omitempty"`
}

// Voice is the sustained-voice figure: the relay's CPU while Opened sessions
// each send an append and receive a delta every interval.
type Voice struct {
	Sessions int            `json:"sessions"`
	Opened   int            `json:"opened"`
	Failures map[string]int `json:"failures,omitempty"`
	Lost     map[string]int `json:"lost,omitempty"` // sessions that ended while streaming
	Seconds  float64        `json:"seconds"`
	// The client's counts against the schedule (see load.VoiceResult).
	SentExpected int64   `json:"sent_expected"`
	Sent         int64   `json:"sent"`
	LateSends    int64   `json:"late_sends"`
	MaxLateMs    float64 `json:"max_late_ms"`
	RecvExpected int64   `json:"received_expected"`
	Received     int64   `json:"received"`
	// ProxyCPU is the relay's user+system seconds over the window;
	// CoresPer1000 is that as cores per 1,000 sessions. Zero for direct.
	ProxyCPU     float64 `json:"proxy_cpu_seconds"`
	CoresPer1000 float64 `json:"proxy_cores_per_1000_sessions"`
	MockaiCPU    float64 `json:"mockai_cpu_seconds"`
	ClientCPU    float64 `json:"client_cpu_seconds"`
	OtherCPU     float64 `json:"other_cpu_seconds"`
	Attempts     int     `json:"attempts"`
	// MockaiFramesIn is what mockai read: the appends that crossed the relay,
	// the warm-up's included.
	MockaiFramesIn int64 `json:"mockai_frames_in"`
	// Disturbed is set when other jobs used more than maxVoiceOtherCores during
	// the window even on the least disturbed attempt: the table leaves its CPU
	// figure out (see maxVoiceOtherCores).
	Disturbed bool `json:"disturbed,omitempty"`
	// Profile is the file of the rtgate CPU profile taken over the window
	// (Options.Profile).
	Profile string `json:"profile,omitempty"`
}

// Delivered is the share of scheduled deltas that arrived in the window.
func (v *Voice) Delivered() float64 {
	if v.RecvExpected == 0 {
		return 0
	}
	return float64(v.Received) / float64(v.RecvExpected)
}
