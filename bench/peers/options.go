package peers

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"rtgate/bench/proc"
)

// Options configure a comparison. DefaultOptions is the full size; QuickOptions a
// check that finishes in a few minutes.
type Options struct {
	Mockai, Gateway       string // rtgate binaries (bin/mockai, bin/gateway)
	Nginx, HAProxy, Caddy string // peer binaries; looked up in PATH when only a name
	Systems               []string
	// Upstreams are the ways mockai serves, each measured in full, in this order:
	// TLS (wss://, as OpenAI does) first, then plain ws://.
	Upstreams   []proc.Upstream
	Rounds      int      // each system is measured this many times per upstream
	Pool        string   // REALTIME_POOL_SIZE for rtgate-pool-on ("auto" or a count)
	GatewayArgs []string // extra flags for bin/gateway, such as -buffer-size 512
	// Sessions (plain upstream) and TLSSessions (TLS upstream) are held idle for
	// the memory figure.
	Sessions, TLSSessions int
	// VoiceSessions (plain) and TLSVoiceSessions (TLS) stream audio both ways
	// for VoiceWarmup and then the measured VoiceDuration in the voice phase: an
	// append every VoiceInterval up, a delta every VoiceInterval down (mockai
	// -stream).
	VoiceSessions, TLSVoiceSessions           int
	VoiceWarmup, VoiceDuration, VoiceInterval time.Duration
	// Profile, when set, saves a CPU profile of rtgate (its admin
	// /debug/pprof/profile) over each voice and throughput window into the run's folder. The
	// profiler's own cost is in that run's CPU figure, so it is off by default.
	Profile          bool
	HoldParallel     int // handshakes in flight while opening them
	HoldLimit        time.Duration
	SourceIPs        []net.IP // the client's source addresses, used in turn
	LatencyConns     int
	LatencyRounds    int           // round trips per connection
	LatencyInterval  time.Duration // between one connection's round trips
	ThroughputConns  int
	Window           int // echoes in flight per connection
	Warmup, Duration time.Duration
	Settle           time.Duration // quiet time before an RSS sample
	// Before each system, wait (up to QuietLimit) until the rest of the machine uses
	// less than QuietCores of CPU: other jobs on a shared machine skew every figure.
	QuietCores float64
	QuietLimit time.Duration
	// A latency or throughput phase during which other jobs used more than
	// DisturbedCores on average is repeated, up to Retries times; the least disturbed
	// attempt is kept.
	DisturbedCores float64
	Retries        int
	OutDir         string // results go to OutDir/peers-<time>/
	Log            *slog.Logger
	Quick          bool // recorded in the results; set by QuickOptions
	// Phases are the measurements to make (default all): PhaseMemory, PhaseLatency,
	// PhaseThroughput, PhaseVoice.
	Phases                 []string
	SmallBytes, AudioBytes int // payload sizes of the two throughput loads
}

// The phases of one system's measurement, in the order they run.
const (
	PhaseMemory     = "memory"
	PhaseLatency    = "latency"
	PhaseThroughput = "throughput"
	PhaseVoice      = "voice"
)

// AllPhases is every phase.
var AllPhases = []string{PhaseMemory, PhaseLatency, PhaseThroughput, PhaseVoice}

// echoPhases run against mockai -echo; the voice phase has its own mockai
// (-stream) and proxy.
var echoPhases = []string{PhaseMemory, PhaseLatency, PhaseThroughput}

func (o *Options) phase(p string) bool { return slices.Contains(o.Phases, p) }

// heldSessions is the memory phase's session count for upstream u.
func (o *Options) heldSessions(u proc.Upstream) int {
	if u == proc.UpstreamTLS {
		return o.TLSSessions
	}
	return o.Sessions
}

// voiceSessions is the voice phase's session count for upstream u.
func (o *Options) voiceSessions(u proc.Upstream) int {
	if u == proc.UpstreamTLS {
		return o.TLSVoiceSessions
	}
	return o.VoiceSessions
}

// DefaultOptions is the full-size comparison: 9,000 held sessions over a plain
// upstream (18,000 sockets in one proxy process, under the 20,000 open-file limit)
// and 5,000 over TLS; 500 voice sessions over each upstream, 2 s of warm-up and
// 10 s measured; two rounds, TLS and plain upstream.
//
// 500 voice sessions, not more: on the 2-core machine the figures come from, the
// load client and mockai alone use about 1.5 cores for 1,000 sessions (50,000
// appends and 50,000 deltas a second, each its own loopback packet; measured
// direct, no relay), so with a relay beside them every system fell below the 95%
// delivery the CPU figure needs. At 500 they use about 0.8 cores and leave the
// relay room. The figure is still per 1,000 sessions.
func DefaultOptions() Options {
	return Options{
		Mockai: "bin/mockai", Gateway: "bin/gateway",
		Nginx: "nginx", HAProxy: "haproxy", Caddy: "caddy",
		Systems: DefaultSystems, Phases: AllPhases, Rounds: 2, Pool: "auto",
		Upstreams: []proc.Upstream{proc.UpstreamTLS, proc.UpstreamPlain},
		Sessions:  9000, TLSSessions: 5000, HoldParallel: 64, HoldLimit: 3 * time.Minute,
		VoiceSessions: 500, TLSVoiceSessions: 500, VoiceWarmup: 2 * time.Second, VoiceDuration: 10 * time.Second,
		VoiceInterval: 20 * time.Millisecond,
		SourceIPs:     LoopbackRange(8),
		// One connection's round trips, spaced so none queues behind another: the
		// relay's own added latency, not a queue's.
		LatencyConns: 1, LatencyRounds: 2000, LatencyInterval: 2 * time.Millisecond,
		ThroughputConns: 50, Window: 8, Warmup: time.Second, Duration: 5 * time.Second,
		Settle: 3 * time.Second, QuietCores: 0.2, QuietLimit: 2 * time.Minute,
		DisturbedCores: 0.3, Retries: 2, OutDir: "bench/results",
		SmallBytes: 1024, AudioBytes: audioDeltaSize,
	}
}

// QuickOptions shrinks every phase for a check of the harness itself.
func QuickOptions() Options {
	o := DefaultOptions()
	o.Quick = true
	o.Sessions, o.TLSSessions = 500, 300
	o.VoiceSessions, o.TLSVoiceSessions, o.VoiceWarmup, o.VoiceDuration = 100, 50, 500*time.Millisecond, 3*time.Second
	o.LatencyRounds = 300
	o.Warmup, o.Duration = 300*time.Millisecond, time.Second
	o.Settle = time.Second
	return o
}

// LoopbackRange is 127.0.0.1 .. 127.0.0.n: source addresses for the load client.
func LoopbackRange(n int) []net.IP {
	ips := make([]net.IP, n)
	for i := range ips {
		ips[i] = net.IPv4(127, 0, 0, byte(i+1))
	}
	return ips
}

// check validates o and resolves the binaries it needs.
func (o *Options) check(limit int) error {
	var errs []error
	if len(o.Systems) == 0 {
		errs = append(errs, errors.New("no systems to run"))
	}
	for _, s := range o.Systems {
		if !slices.Contains(AllSystems, s) {
			errs = append(errs, fmt.Errorf("unknown system %q (known: %s)", s, strings.Join(AllSystems, ", ")))
		}
	}
	for _, p := range o.Phases {
		if !slices.Contains(AllPhases, p) {
			errs = append(errs, fmt.Errorf("unknown phase %q (known: %s)", p, strings.Join(AllPhases, ", ")))
		}
	}
	if len(o.Phases) == 0 {
		errs = append(errs, errors.New("no phases to run"))
	}
	if len(o.Upstreams) == 0 {
		errs = append(errs, errors.New("no upstream to run (want tls, plain or both)"))
	}
	for _, u := range o.Upstreams {
		if _, err := proc.ParseUpstream(string(u)); err != nil {
			errs = append(errs, err)
		}
	}
	if o.Retries < 0 || o.Retries > 10 {
		errs = append(errs, fmt.Errorf("retries %d: want 0 to 10", o.Retries))
	}
	if o.Rounds < 1 || o.Rounds > 10 {
		errs = append(errs, fmt.Errorf("rounds %d: want 1 to 10", o.Rounds))
	}
	// One proxy process holds two sockets per session, plus a margin.
	maxN := (limit - fileMargin) / 2
	for name, n := range map[string]int{"sessions": o.Sessions, "TLS sessions": o.TLSSessions,
		"voice sessions": o.VoiceSessions, "TLS voice sessions": o.TLSVoiceSessions} {
		if n < 1 || n > maxN {
			errs = append(errs, fmt.Errorf("%s %d: want 1 to %d (two sockets each in one proxy process under the %d open-file limit)",
				name, n, maxN, limit))
		}
	}
	for name, v := range map[string]int{"hold parallelism": o.HoldParallel, "latency connections": o.LatencyConns,
		"latency rounds": o.LatencyRounds, "throughput connections": o.ThroughputConns, "window": o.Window} {
		if v < 1 || v > 100000 {
			errs = append(errs, fmt.Errorf("%s %d: want 1 to 100000", name, v))
		}
	}
	if o.Duration <= 0 || o.LatencyInterval <= 0 || o.HoldLimit <= 0 || o.VoiceDuration <= 0 || o.VoiceWarmup < 0 || o.VoiceInterval < time.Millisecond {
		errs = append(errs, errors.New("durations must be positive"))
	}
	if o.SmallBytes < minPayload || o.AudioBytes < minPayload {
		errs = append(errs, fmt.Errorf("payload sizes must be at least %d bytes", minPayload))
	}
	need := map[string]*string{"mockai": &o.Mockai}
	if !slices.Contains(o.Systems, SysPoolOff) && !slices.Contains(o.Systems, SysPoolOn) {
		o.Gateway = "" // not needed, so not checked or copied
	}
	for _, s := range o.Systems {
		switch s {
		case SysNginx:
			need["nginx"] = &o.Nginx
		case SysHAProxy:
			need["haproxy"] = &o.HAProxy
		case SysCaddy:
			need["caddy"] = &o.Caddy
		case SysPoolOff, SysPoolOn:
			need["gateway"] = &o.Gateway
		}
	}
	for name, bin := range need {
		path, err := exec.LookPath(*bin)
		if err != nil {
			hint := ""
			if name == "mockai" || name == "gateway" {
				hint = " (go build -o bin/ ./cmd/gateway ./cmd/mockai)"
			} else {
				hint = fmt.Sprintf(" (apt-get install -y %s, or leave it out with -systems)", name)
			}
			errs = append(errs, fmt.Errorf("%s: %w%s", name, err, hint))
			continue
		}
		if abs, err := filepath.Abs(path); err == nil {
			path = abs
		}
		*bin = path
	}
	return errors.Join(errs...)
}
