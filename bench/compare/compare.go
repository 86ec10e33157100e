// Package compare runs the one-command comparison benchmark: the same
// wsbench load directly against a fake upstream (mockai) and through the
// gateway with its upstream pool off and on, and writes the published table,
// raw JSON and an HTML report.
//
// It builds nothing: it runs the mockai and gateway binaries it is given,
// each as a separate process on kernel-chosen loopback ports, and stops
// them (by PID) when it returns, also when the run fails or ctx is
// cancelled (Ctrl-C). The load itself runs in this process, so the CPU that
// wsbench reports is the load generator's alone.
//
// Each leg (setup) runs Config.Runs times back to back against one fresh
// gateway; the table shows the runs' samples combined, and the JSON keeps
// every run's samples and the per-run p50 spread. After its closed-loop
// runs each leg also takes one open-loop steady-state run (OpenLoop). A
// gateway leg also reports its gateway process's CPU over those runs and
// its peak RSS (GatewayUsage). With Protocol gemini the legs are a Gemini
// Live client direct, the gateway translating the Realtime API to Gemini,
// and the Realtime pool-off leg, and the run reports the translation's CPU
// per turn against the verbatim relay's (gemini.go). With Protocol
// guardrails the legs are gateways with the conversation record or one
// guardrail mode on, each set against one with neither (guardrails.go).
package compare

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"rtgate/bench/harness"
	"rtgate/bench/load"
	"rtgate/bench/proc"
	"rtgate/bench/report"
)

// Leg identifiers, as accepted by -legs.
const (
	LegDirect  = "direct"
	LegPoolOff = "pool-off"
	LegPoolOn  = "pool-on"
)

// AllLegs is the default -legs, in table order.
var AllLegs = []string{LegDirect, LegPoolOff, LegPoolOn, LegPoolOnRedis}

var legNames = map[string]string{
	LegDirect:      "Direct",
	LegPoolOff:     "Gateway pool off",
	LegPoolOn:      "Gateway pool on",
	LegPoolFixed:   "Gateway pool on (fixed c/N)",
	LegPoolOnRedis: "Gateway pool on, Redis limits",
	LegGemini:      "Gateway → Gemini (translated)",
	LegRecord:      "Gateway, conversation record",
	LegInput:       "Gateway, input transcription guardrail",
	LegOutput:      "Gateway, output transcription guardrail",
	LegToolNone:    "Gateway, tool calls, no guardrail",
	LegTool:        "Gateway, tool call guardrail",
}

// Profile is the latency mockai adds, standing in for the real upstream.
//
// The defaults are stand-ins, not measurements of OpenAI: 150 ms before
// the 101 (the part of the published 276 ms direct dial that is the
// upstream accepting the upgrade, as opposed to our loopback TCP), 7 ms to
// session.created (the published session p50), 400 ms to the first audio
// delta, then 25 deltas of 4800 bytes (100 ms of 24 kHz PCM16 each, 2.5 s
// of audio) 40 ms apart, faster than real time as the API delivers. A
// direct call therefore cannot finish faster than about
// 150+7+400+24*40 = 1517 ms; the Floor method computes that.
type Profile struct {
	UpgradeDelay, SessionDelay, FirstAudioDelay time.Duration
	Deltas, DeltaBytes                          int
	DeltaInterval                               time.Duration
}

// DefaultProfile returns the stand-in upstream latency described on Profile.
func DefaultProfile() Profile {
	return Profile{
		UpgradeDelay:    150 * time.Millisecond,
		SessionDelay:    7 * time.Millisecond,
		FirstAudioDelay: 400 * time.Millisecond,
		Deltas:          25,
		DeltaBytes:      4800,
		DeltaInterval:   40 * time.Millisecond,
	}
}

// Floor is the least time a call can take against this profile.
func (p Profile) Floor() time.Duration { return p.FloorFor(1) }

// FloorFor is the least time a call of turns turns (one at a time, on one
// session) can take against this profile.
func (p Profile) FloorFor(turns int) time.Duration {
	turn := p.FirstAudioDelay
	if p.Deltas > 1 {
		turn += time.Duration(p.Deltas-1) * p.DeltaInterval
	}
	return p.UpgradeDelay + p.SessionDelay + time.Duration(max(turns, 1))*turn
}

func (p Profile) args() []string {
	deltas := p.Deltas
	if deltas == 0 {
		deltas = -1 // mockai reads 0 as "default"; we mean none
	}
	return []string{
		"-upgrade-delay", p.UpgradeDelay.String(),
		"-session-delay", p.SessionDelay.String(),
		"-first-audio-delay", p.FirstAudioDelay.String(),
		"-deltas", strconv.Itoa(deltas),
		"-delta-bytes", strconv.Itoa(p.DeltaBytes),
		"-delta-interval", p.DeltaInterval.String(),
	}
}

// Config is one comparison.
type Config struct {
	harness.Settings
	Legs                 []string // subset of AllLegs
	N, Concurrency, Runs int
	Timeout              time.Duration // per call
	// Pool is REALTIME_POOL_SIZE for the pool-on leg ("auto" or a number).
	Pool            string
	GatewayLogLevel string
	Profile         Profile
	Audio           bool
	SourceIPs       []net.IP
	// Warmup is the pause after the gateway is healthy, before the first
	// run, so a pool can fill; Pause separates runs.
	Warmup, Pause time.Duration
	// Instances > 1 runs that many gateways behind HAProxy (startInstances).
	Instances int
	// FirstBurst is how many of each run's first calls are reported apart
	// from the rest (Split); 0 means Concurrency, the first wave.
	FirstBurst int
	// Protocol is what the calls speak: Realtime (the default) or GPT-Live
	// (-protocol live: /v1/live/sessions, the pool-on leg with
	// LIVE_POOL_SIZE=LivePool, the hit rate from rtgate_live_pool_*), or
	// gemini: GeminiLegs (gemini.go), or ProtocolGuardrails: GuardrailLegs,
	// whose calls speak Realtime (guardrails.go).
	Protocol load.Protocol
	// Turns is the exchanges per call (0 or 1: one; Realtime and Gemini).
	Turns int
	// LivePool is LIVE_POOL_SIZE for a Live pool-on leg (0: Concurrency).
	LivePool int
	// RedisTimeoutMS is REDIS_TIMEOUT_MS for the Redis leg (withRedis; 0:
	// the gateway's default).
	RedisTimeoutMS int
	// Restart restarts each gateway leg's gateway before every run after
	// the first (SIGTERM, drain, start again), with REALTIME_POOL_STATE
	// kept: run 2's first burst is then the first burst after a restart
	// with remembered demand, run 1's that of a cold instance.
	Restart bool
	// Open is the steady-state open-loop run each leg takes after its
	// closed-loop runs (OpenLoop); Open.Rate 0 leaves it out.
	Open OpenLoop
}

// DefaultConfig is what `wsbench compare` runs without flags.
func DefaultConfig() Config {
	return Config{
		// mockai serves wss://, as OpenAI does; the gateway trusts its certificate.
		Settings: harness.Settings{MockaiBin: "bin/mockai", GatewayBin: "bin/gateway", Upstream: proc.UpstreamTLS,
			OutDir: filepath.Join("bench", "results")},
		Legs: slices.Clone(AllLegs),
		N:    2000, Concurrency: 200, Runs: 2, Timeout: 30 * time.Second,
		Pool: "auto", GatewayLogLevel: "warn",
		Profile: DefaultProfile(),
		Warmup:  time.Second, Pause: time.Second,
		Instances: 1,
		Open:      DefaultOpenLoop(),
	}
}

func (c Config) validate() error {
	var errs []error
	if c.N <= 0 || c.Concurrency <= 0 || c.Runs <= 0 {
		errs = append(errs, fmt.Errorf("-n, -c and -runs must be positive (got %d, %d, %d)", c.N, c.Concurrency, c.Runs))
	}
	if c.FirstBurst < 0 {
		errs = append(errs, fmt.Errorf("-first-burst %d: want 0 (the concurrency) or more", c.FirstBurst))
	}
	if c.Protocol == load.ProtocolLive && (c.Instances > 1 || c.Restart) {
		errs = append(errs, errors.New("-protocol live runs one gateway without -restart"))
	}
	if c.Turns < 0 || c.Turns > 1000 || (c.Turns > 1 && c.Protocol == load.ProtocolLive) {
		errs = append(errs, fmt.Errorf("-turns %d: want 1 to 1000, and 1 with -protocol live", c.Turns))
	}
	errs = append(errs, c.checkGemini()...)
	errs = append(errs, c.checkGuardrails()...)
	if c.LivePool < 0 {
		errs = append(errs, fmt.Errorf("-live-pool %d: want 0 (the concurrency) or more", c.LivePool))
	}
	if c.Restart && c.Instances > 1 {
		errs = append(errs, errors.New("-restart runs one gateway; for a rolling restart behind HAProxy see TestRollingRestartBehindHAProxy"))
	}
	if c.Instances < 1 || c.Instances > 64 {
		errs = append(errs, fmt.Errorf("-instances %d: want 1 to 64", c.Instances))
	}
	if c.Timeout <= 0 {
		errs = append(errs, fmt.Errorf("-t must be positive"))
	}
	if len(c.Legs) == 0 {
		errs = append(errs, errors.New("no legs to run"))
	}
	for _, l := range c.Legs {
		if _, ok := legNames[l]; !ok {
			known := AllLegs
			switch c.Protocol {
			case load.ProtocolGemini:
				known = GeminiLegs
			case ProtocolGuardrails:
				known = GuardrailLegs
			}
			errs = append(errs, fmt.Errorf("unknown leg %q (want %s)", l, strings.Join(known, ", ")))
		}
	}
	if c.Pool != "auto" {
		if n, err := strconv.Atoi(c.Pool); err != nil || n < 1 {
			errs = append(errs, fmt.Errorf("-pool %q: want auto or a positive number", c.Pool))
		}
	}
	p := c.Profile
	if p.UpgradeDelay < 0 || p.SessionDelay < 0 || p.FirstAudioDelay < 0 || p.DeltaInterval < 0 || p.Deltas < 0 || p.DeltaBytes < 0 {
		errs = append(errs, errors.New("mockai profile values must not be negative"))
	}
	errs = append(errs, c.Open.check(c.Timeout)...)
	errs = append(errs, c.Settings.Check(c.needsGateway())...)
	return errors.Join(errs...)
}

func (c Config) needsGateway() bool {
	return slices.Contains(c.Legs, LegPoolOff) || slices.Contains(c.Legs, LegPoolOn) || slices.Contains(c.Legs, LegPoolFixed) ||
		slices.Contains(c.Legs, LegPoolOnRedis) || slices.Contains(c.Legs, LegGemini) ||
		slices.ContainsFunc(c.Legs, func(l string) bool { return slices.Contains(guardrailOnly, l) })
}

// LegResult is one leg's runs.
type LegResult struct {
	ID, Name string
	Runs     []RunResult
	// Combined summarizes every run's samples together.
	Combined    load.Summary
	PoolHitRate *float64
	// InstanceHitRates are each instance's, with -instances.
	InstanceHitRates []*float64
	// Open is the leg's open-loop run, nil without one (OpenRun).
	Open *OpenRun
	// Gateway is its gateway's usage over the closed-loop runs; nil for
	// direct and with several instances.
	Gateway *GatewayUsage
	// Guard is what the leg's gateway shows of its guardrails and records
	// (a guardrails run's legs only).
	Guard *GuardrailActivity
}

// RunResult is one run of one leg.
type RunResult struct {
	Result      *load.Result
	Summary     load.Summary
	PoolHitRate *float64
	// Split is the run's first burst apart from its steady state.
	Split Split
}

// Outcome is what a comparison produced.
type Outcome struct {
	// Protocol is the run's (Config.Protocol): with gemini, Comparison is
	// empty and GeminiMarkdown is the table; with guardrails,
	// GuardrailsMarkdown.
	Protocol load.Protocol
	// Concurrency is the run's calls at once (Config.Concurrency): the
	// sessions a gateway's memory per session is over.
	Concurrency int
	Legs        []*LegResult
	Comparison  report.Comparison
	Dir         string // where the files went
	JSONPath    string
	HTMLPath    string
}

// Run runs the comparison. Every process it starts is stopped before it
// returns. A cancelled ctx stops the run early and returns ctx's error.
func Run(ctx context.Context, cfg Config) (*Outcome, error) {
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("compare: %w", err)
	}
	dir, started, say, err := cfg.Begin("compare", cfg.needsGateway())
	if err != nil {
		return nil, fmt.Errorf("compare: %w", err)
	}

	upstreamKey, masterKey := harness.RandomKey("sk-mock-"), harness.RandomKey("sk-gw-")
	mockArgs := append([]string{"-key", upstreamKey}, cfg.Profile.args()...)
	if cfg.Protocol == ProtocolGuardrails {
		mockArgs = append(mockArgs, guardrailsMockArgs()...)
	}
	mock, err := proc.StartMockai(ctx, cfg.MockaiBin, cfg.Upstream, mockArgs, dir, 15*time.Second)
	if err != nil {
		return nil, fmt.Errorf("compare: %w", err)
	}
	defer mock.Stop(5 * time.Second)
	say("mockai at %s (%s upstream; profile: upgrade %v, session %v, first audio %v, %d x %d-byte deltas every %v)",
		mock.Base, cfg.Upstream, cfg.Profile.UpgradeDelay, cfg.Profile.SessionDelay, cfg.Profile.FirstAudioDelay,
		cfg.Profile.Deltas, cfg.Profile.DeltaBytes, cfg.Profile.DeltaInterval)

	out := &Outcome{Dir: dir, Protocol: cfg.Protocol, Concurrency: cfg.Concurrency}
	order := AllLegs
	switch cfg.Protocol {
	case load.ProtocolGemini:
		order = GeminiLegs
	case ProtocolGuardrails:
		order = GuardrailLegs
	}
	if cfg.Instances > 1 && slices.Contains(cfg.Legs, LegPoolOn) {
		order = append(slices.Clone(AllLegs), LegPoolFixed)
		cfg.Legs = append(slices.Clone(cfg.Legs), LegPoolFixed)
	}
	for _, id := range order { // table order, whatever the flag order
		if !slices.Contains(cfg.Legs, id) {
			continue
		}
		leg, err := runLeg(ctx, cfg, id, mock, upstreamKey, masterKey, dir, say)
		if err != nil {
			return nil, fmt.Errorf("compare: %s: %w", legName(cfg.Protocol, id), err)
		}
		out.Legs = append(out.Legs, leg)
		if cfg.Protocol == load.ProtocolGemini || cfg.Protocol == ProtocolGuardrails {
			continue // its own table (GeminiMarkdown, GuardrailsMarkdown)
		}
		rl := &report.Leg{Name: leg.Name, Summary: leg.Combined, PoolHitRate: leg.PoolHitRate}
		switch id {
		case LegDirect:
			out.Comparison.Direct = rl
		case LegPoolOff:
			out.Comparison.PoolOff = rl
		case LegPoolOn:
			out.Comparison.PoolOn = rl
		case LegPoolFixed:
			out.Comparison.PoolFixed = rl
		case LegPoolOnRedis:
			out.Comparison.PoolOnRedis = rl
		}
	}
	if err := writeOutputs(out, cfg, started); err != nil {
		return nil, fmt.Errorf("compare: %w", err)
	}
	return out, nil
}

// runLeg starts the leg's gateway (if any), runs the load cfg.Runs times
// and stops the gateway again.
func runLeg(ctx context.Context, cfg Config, id string, mock *proc.Mockai, upstreamKey, masterKey, dir string,
	say harness.Say) (*LegResult, error) {
	leg := &LegResult{ID: id, Name: legName(cfg.Protocol, id)}
	protocol := legProtocol(cfg.Protocol, id)
	live := protocol == load.ProtocolLive
	target, key, tlsConf := mock.RealtimeURL(), upstreamKey, mock.TLSConfig()
	switch protocol {
	case load.ProtocolLive:
		target = mock.LiveURL()
	case load.ProtocolGemini:
		target = geminiURL(mock)
	}
	var gw *proc.Gateway // the single gateway running, for its usage
	var metricsURLs []string
	usageLog := ""                  // the single gateway's usage log, if any
	var restart func(run int) error // with -restart: a new gateway on the same pool state
	if id != LegDirect {
		pool := "0"
		switch id {
		case LegPoolOn, LegPoolOnRedis:
			pool = cfg.Pool
		case LegPoolFixed:
			pool = strconv.Itoa(max(1, cfg.Concurrency/cfg.Instances))
		}
		set := proc.GatewaySettings(mock, upstreamKey, masterKey, cfg.GatewayLogLevel)
		set["REALTIME_POOL_SIZE"] = pool
		if live {
			// The Realtime pool stays off: only Live sockets are pooled
			// (pool on) or none (pool off).
			set["REALTIME_POOL_SIZE"], pool = "0", "0"
			if id == LegPoolOn || id == LegPoolOnRedis {
				pool = strconv.Itoa(cmp.Or(cfg.LivePool, cfg.Concurrency))
			}
			set["LIVE_POOL_SIZE"] = pool
		}
		if id == LegGemini {
			path, err := geminiConfigFile(dir, mock)
			if err != nil {
				return nil, err
			}
			set["CONFIG_FILE"], set[geminiKeyVar] = path, upstreamKey
		}
		if cfg.Protocol == ProtocolGuardrails {
			path, err := guardrailsConfigFile(dir, id, mock)
			if err != nil {
				return nil, err
			}
			set["CONFIG_FILE"], set[guardrailsKeyVar] = path, upstreamKey
			// Six gateways a run: each stops once its load has ended, with
			// nobody to warn, so without the 5 s drain grace.
			set["DRAIN_GRACE_SECS"] = "0"
		}
		if id == LegPoolOnRedis {
			stop, err := withRedis(ctx, cfg, set, dir)
			if err != nil {
				return nil, err
			}
			defer stop() // after the gateways (deferred later, so stopped first)
		}
		if cfg.Instances == 1 {
			// Which sessions were pool hits, in start order (sessionHits).
			usageLog = filepath.Join(dir, "usage-"+id+".jsonl")
			set["USAGE_LOG"] = usageLog
		}
		if cfg.Restart {
			set["REALTIME_POOL_STATE"] = filepath.Join(dir, "pool-state-"+id+".json")
			set["DRAIN_GRACE_SECS"] = "0" // nobody to warn: the load is between runs
		}
		if cfg.Instances > 1 {
			in, err := startInstances(ctx, cfg.GatewayBin, cfg.Instances, set, dir, id)
			if err != nil {
				return nil, err
			}
			defer in.stop()
			target, key, metricsURLs, tlsConf = in.URL(), masterKey, in.MetricsURLs(), nil
			say("%s: %d gateways behind haproxy at %s (REALTIME_POOL_SIZE=%s each)", leg.Name, cfg.Instances, in.addr, pool)
		} else {
			var err error
			gw, err = proc.StartGateway(ctx, cfg.GatewayBin, nil, set, filepath.Join(dir, "gateway-"+id+".log"))
			if err != nil {
				return nil, err
			}
			defer func() { gw.Stop(10 * time.Second) }() // the one running at the end
			target, key, metricsURLs, tlsConf = gw.URL(), masterKey, []string{gw.MetricsURL()}, nil
			switch {
			case live:
				target = gw.LiveURL()
			case id == LegGemini:
				target = "ws://" + gw.Addr + "/v1/realtime?model=" + geminiGroup
			}
			say("%s: gateway pid %d at %s (%s pool size %s)", leg.Name, gw.PID(), target, protocol, pool)
			if cfg.Restart {
				restart = func(run int) error {
					_ = gw.Stop(30 * time.Second) // SIGTERM: drains and writes the pool state
					began := time.Now()
					next, err := proc.StartGateway(ctx, cfg.GatewayBin, nil, set,
						filepath.Join(dir, fmt.Sprintf("gateway-%s-run%d.log", id, run+1)))
					if err != nil {
						return fmt.Errorf("restarting the gateway: %w", err)
					}
					gw = next
					target, metricsURLs = gw.URL(), []string{gw.MetricsURL()}
					say("%s: restarted, gateway pid %d ready (warm) after %.1f s", leg.Name, gw.PID(), time.Since(began).Seconds())
					return nil
				}
			}
		}
		if err := harness.Sleep(ctx, cfg.Warmup); err != nil {
			return nil, err
		}
	}
	newClient := func() (*load.Client, error) {
		return load.NewClient(load.Config{URL: target, Key: key, Timeout: cfg.Timeout, Turns: cfg.Turns,
			Audio: cfg.Audio, SourceIPs: cfg.SourceIPs, TLS: tlsConf, Protocol: protocol, Flow: legFlow(cfg.Protocol, id)})
	}
	client, err := newClient()
	if err != nil {
		return nil, err
	}
	prefix := poolPrefix
	if live {
		prefix = livePoolPrefix
	}
	var all []load.Sample
	var cpu, wall time.Duration
	var hitsBefore, hitsAfter []poolCounters
	restarted := poolCounters{OK: true} // with -restart: the runs' hits and misses, summed
	for run := range cfg.Runs {
		if run > 0 {
			if err := harness.Sleep(ctx, cfg.Pause); err != nil {
				return nil, err
			}
			if restart != nil {
				if err := restart(run); err != nil {
					return nil, err
				}
				if client, err = newClient(); err != nil {
					return nil, err
				}
				if err := harness.Sleep(ctx, cfg.Warmup); err != nil {
					return nil, err
				}
			}
		}
		before := readAllPoolCounters(ctx, metricsURLs, prefix)
		if run == 0 {
			hitsBefore = before
		}
		// The gateway's usage around the run (GatewayUsage); where /proc
		// cannot say (not Linux), the leg goes without.
		var m *meter
		if gw != nil && (run == 0 || leg.Gateway != nil) {
			var merr error
			if m, merr = startMeter(gw); merr != nil {
				say("%s: no gateway CPU and RSS: %v", leg.Name, merr)
			} else if leg.Gateway == nil {
				leg.Gateway = &GatewayUsage{IdleRSS: m.before.RSS}
			}
		}
		if m == nil {
			leg.Gateway = nil
		}
		runStart := time.Now()
		res, err := load.Run(ctx, client, load.Options{N: cfg.N, Concurrency: cfg.Concurrency})
		if m != nil {
			if merr := m.finish(ctx, meterSettle, leg.Gateway); merr != nil {
				say("%s: no gateway CPU and RSS: %v", leg.Name, merr)
				leg.Gateway = nil
			}
		}
		if err != nil {
			return nil, err
		}
		if leg.Gateway != nil {
			leg.Gateway.Calls += len(res.Samples)
			leg.Gateway.Turns += turnsStreamed(res.Samples)
		}
		var hits []bool
		if usageLog != "" {
			hits = sessionHits(usageLog, runStart, time.Now(), res.Summary().Dial.N, 3*time.Second)
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		after := readAllPoolCounters(ctx, metricsURLs, prefix)
		hitsAfter = after
		b, a := sumCounters(before), sumCounters(after)
		restarted = poolCounters{Hits: restarted.Hits + a.Hits - b.Hits, Misses: restarted.Misses + a.Misses - b.Misses,
			OK: restarted.OK && a.OK && b.OK}
		rr := RunResult{Result: res, Summary: res.Summary(), PoolHitRate: hitRate(b, a),
			Split: splitRun(res, cmp.Or(cfg.FirstBurst, cfg.Concurrency), hits)}
		leg.Runs = append(leg.Runs, rr)
		all = append(all, res.Samples...)
		cpu += res.CPU
		wall += res.Wall
		say("%s run %d/%d: %d/%d ok, total p50 %s p99 %s (first %d calls: p99 %s), %.1f s", leg.Name, run+1, cfg.Runs,
			rr.Summary.OK, rr.Summary.Calls, report.FormatMS(rr.Summary.Total.P50), report.FormatMS(rr.Summary.Total.P99),
			rr.Split.FirstN, report.FormatMS(rr.Split.First.Total.P99), res.Wall.Seconds())
	}
	leg.Combined = load.Summarize(all, wall, cpu)
	leg.PoolHitRate = hitRate(sumCounters(hitsBefore), sumCounters(hitsAfter))
	if restart != nil { // each run had its own process, its counters from 0
		leg.PoolHitRate = hitRate(poolCounters{OK: true}, restarted)
	}
	if len(metricsURLs) > 1 {
		for i := range metricsURLs {
			leg.InstanceHitRates = append(leg.InstanceHitRates, hitRate(hitsBefore[i], hitsAfter[i]))
		}
	}
	if cfg.Protocol == ProtocolGuardrails && gw != nil {
		leg.Guard = readGuardrailActivity(ctx, gw.MetricsURL(), usageLog)
	}
	if cfg.Open.Rate > 0 {
		if leg.Open, err = runOpenLeg(ctx, cfg, client, metricsURLs, prefix, leg.Name, say); err != nil {
			return nil, fmt.Errorf("open loop: %w", err)
		}
	}
	return leg, nil
}
