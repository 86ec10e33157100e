package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"rtgate/bench/compare"
	"rtgate/bench/load"
	"rtgate/bench/proc"
	"rtgate/bench/report"
)

// parseCompareFlags reads `wsbench compare` flags.
func parseCompareFlags(args []string, stderr io.Writer) (compare.Config, bool, error) {
	cfg := compare.DefaultConfig()
	fs, quiet := settingsFlags("compare", stderr, &cfg.Settings)
	legs := fs.String("legs", strings.Join(compare.AllLegs, ","), "legs to run, comma-separated: direct, pool-off, pool-on, pool-on-redis (-protocol gemini: direct, gemini, pool-off; "+
		"-protocol guardrails: "+strings.Join(compare.GuardrailLegs, ", ")+")")
	fs.IntVar(&cfg.N, "n", cfg.N, "calls per run")
	fs.IntVar(&cfg.Concurrency, "c", cfg.Concurrency, "concurrent calls")
	fs.IntVar(&cfg.Runs, "runs", cfg.Runs, "runs per leg (samples are combined)")
	timeoutS := fs.Float64("t", cfg.Timeout.Seconds(), "per-call timeout, seconds")
	fs.StringVar(&cfg.Pool, "pool", cfg.Pool, "REALTIME_POOL_SIZE for the pool-on leg: auto or a number")
	protocol := fs.String("protocol", "realtime", "realtime, or live: GPT-Live calls (/v1/live/sessions); the pool-on leg sets LIVE_POOL_SIZE (-live-pool) instead of REALTIME_POOL_SIZE; "+
		fmt.Sprintf("or gemini: a Gemini Live client direct, the gateway translating Realtime to a gemini/ deployment, and Realtime pool off, closed loop (-n %d -c %d -runs %d -turns %d unless given)",
			compare.GeminiN, compare.GeminiConcurrency, compare.GeminiRuns, compare.GeminiTurns)+
		fmt.Sprintf("; or guardrails: gateways with the conversation record or one guardrail mode against one with neither, the same calls, closed loop (-n %d -c %d -runs %d -turns %d -upstream plain unless given)",
			compare.GuardrailsN, compare.GuardrailsConcurrency, compare.GuardrailsRuns, compare.GuardrailsTurns))
	fs.IntVar(&cfg.Turns, "turns", 1, "exchanges per call on one session (Realtime and Gemini; manual turns)")
	fs.IntVar(&cfg.LivePool, "live-pool", 0, "with -protocol live: LIVE_POOL_SIZE for the pool-on leg (0: -c)")
	fs.StringVar(&cfg.GatewayLogLevel, "gateway-log-level", cfg.GatewayLogLevel, "LOG_LEVEL for the gateway")
	fs.BoolVar(&cfg.Audio, "audio", false, "stream 1 s of real-time input audio per call")
	sourceIPs := fs.String("source-ips", "", "local source addresses for wsbench, e.g. 127.0.0.1-127.0.0.8")
	fs.DurationVar(&cfg.Warmup, "warmup", cfg.Warmup, "pause after the gateway is healthy (lets the pool fill)")
	fs.DurationVar(&cfg.Pause, "pause", cfg.Pause, "pause between runs")
	fs.IntVar(&cfg.FirstBurst, "first-burst", 0, "report each run's first N calls apart from the rest (0: -c, the first wave)")
	fs.BoolVar(&cfg.Restart, "restart", false, "restart each gateway before every run after the first, keeping REALTIME_POOL_STATE: run 2's first burst is a restart's with remembered demand")
	fs.IntVar(&cfg.RedisTimeoutMS, "redis-timeout-ms", 0, "REDIS_TIMEOUT_MS for the pool-on-redis leg (0: the gateway's default)")
	fs.IntVar(&cfg.Instances, "instances", cfg.Instances, "gateway processes behind a real HAProxy (leastconn); with more than 1, -n/-c default to 5000/500 and a fixed pool of c/N per instance is measured too")
	p := &cfg.Profile
	fs.DurationVar(&p.UpgradeDelay, "upgrade-delay", p.UpgradeDelay, "mockai: delay before the 101")
	fs.DurationVar(&p.SessionDelay, "session-delay", p.SessionDelay, "mockai: delay before session.created")
	fs.DurationVar(&p.FirstAudioDelay, "first-audio-delay", p.FirstAudioDelay, "mockai: delay before the first audio delta")
	fs.IntVar(&p.Deltas, "deltas", p.Deltas, "mockai: audio deltas per response")
	fs.IntVar(&p.DeltaBytes, "delta-bytes", p.DeltaBytes, "mockai: PCM bytes per delta")
	fs.DurationVar(&p.DeltaInterval, "delta-interval", p.DeltaInterval, "mockai: gap between deltas")
	parseOpen := compareOpenFlags(fs, &cfg.Open)
	if err := parseHarness(fs, args); err != nil {
		return cfg, false, err
	}
	var err0 error
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if cfg.Instances > 1 {
		if !set["n"] {
			cfg.N = 5000
		}
		if !set["c"] {
			cfg.Concurrency = 500
		}
	}
	cfg.Legs = splitList(*legs)
	if strings.TrimSpace(*protocol) == string(compare.ProtocolGuardrails) {
		cfg.Protocol = compare.ProtocolGuardrails
	} else if cfg.Protocol, err0 = load.ParseProtocol(*protocol); err0 != nil {
		return cfg, false, fmt.Errorf("-protocol: %w (or guardrails)", err0)
	}
	// Bounded: make bench runs them after the Realtime and Live runs.
	var sizes map[string]int
	var defaultLegs []string
	switch cfg.Protocol {
	case load.ProtocolGemini:
		sizes = map[string]int{"n": compare.GeminiN, "c": compare.GeminiConcurrency, "runs": compare.GeminiRuns, "turns": compare.GeminiTurns}
		defaultLegs = compare.GeminiLegs
	case compare.ProtocolGuardrails:
		sizes = map[string]int{"n": compare.GuardrailsN, "c": compare.GuardrailsConcurrency, "runs": compare.GuardrailsRuns, "turns": compare.GuardrailsTurns}
		defaultLegs = compare.GuardrailLegs
	}
	if sizes != nil {
		for name, v := range map[string]*int{"n": &cfg.N, "c": &cfg.Concurrency, "runs": &cfg.Runs, "turns": &cfg.Turns} {
			if !set[name] {
				*v = sizes[name]
			}
		}
		if !set["legs"] {
			cfg.Legs = slices.Clone(defaultLegs)
		}
	}
	if cfg.Protocol == compare.ProtocolGuardrails && !set["upstream"] {
		// What a guardrail costs is the gateway reading events, which
		// TLS to the upstream does not change: plain unless asked.
		cfg.Upstream = proc.UpstreamPlain
	}
	if err := parseOpen(cfg.Protocol != load.ProtocolRealtime); err != nil {
		return cfg, false, err
	}
	cfg.Timeout = time.Duration(*timeoutS * float64(time.Second))
	var err error
	if cfg.SourceIPs, err = load.ParseSourceIPs(*sourceIPs); err != nil {
		return cfg, false, fmt.Errorf("-source-ips: %w", err)
	}
	return cfg, *quiet, nil
}

// directLeg is the run's direct leg, nil without one.
func directLeg(out *compare.Outcome) *compare.LegResult {
	for _, leg := range out.Legs {
		if leg.ID == compare.LegDirect {
			return leg
		}
	}
	return nil
}

func runCompare(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cfg, quiet, err := parseCompareFlags(args, stderr)
	if code, ok := flagExit("compare", err, stderr); !ok {
		return code
	}
	if !quiet {
		cfg.Progress = stderr
	}
	out, err := compare.Run(ctx, cfg)
	if err != nil {
		fmt.Fprintln(stderr, "wsbench", err)
		return 1
	}
	turns := ""
	if cfg.Turns > 1 {
		turns = fmt.Sprintf(", %d turns each", cfg.Turns)
	}
	fmt.Fprintf(stdout, "closed loop: %s calls: %d x %d runs per leg%s, %d concurrent, %s upstream\n\n", cfg.Protocol, cfg.N, cfg.Runs, turns, cfg.Concurrency, cfg.Upstream.Describe())
	fmt.Fprint(stdout, out.Markdown())
	// The floor is a Realtime (or Gemini) call's (its deltas); a Live
	// call's audio follows mockai's Live media schedule instead.
	if d := directLeg(out); d != nil && d.Combined.Total.N > 0 && cfg.Protocol != load.ProtocolLive {
		floor := cfg.Profile.FloorFor(cfg.Turns)
		fmt.Fprintf(stdout, "\nmockai latency floor %s; direct total p50 is %s above it (client + loopback + mockai overhead)\n",
			report.FormatMS(floor), report.FormatMS(d.Combined.Total.P50-floor))
	}
	switch {
	case cfg.Protocol == load.ProtocolGemini:
		fmt.Fprintf(stdout, "\n%s", out.GeminiSummary(cfg))
	case cfg.Protocol == compare.ProtocolGuardrails:
		fmt.Fprintf(stdout, "\n%s", out.GuardrailsSummary(cfg))
	case out.GatewayMarkdown() != "":
		fmt.Fprintf(stdout, "\ngateway process, closed-loop runs (CPU from /proc, 10 ms ticks; peak RSS read every 200 ms)\n\n%s", out.GatewayMarkdown())
	}
	fmt.Fprintf(stdout, "\nfirst burst and steady state, per closed-loop run (the pool-on leg's run 1 starts against a fresh gateway)\n\n%s", out.BurstMarkdown())
	if open := out.OpenMarkdown(); open != "" {
		fmt.Fprintf(stdout, "\nopen loop, steady state (after each leg's closed-loop runs, same processes): %s\n\n%s", cfg.Open.Describe(), open)
	}
	if in := out.InstancesMarkdown(); in != "" {
		fmt.Fprintf(stdout, "\n%d gateway instances behind HAProxy (leastconn)\n\n%s", cfg.Instances, in)
	}
	fmt.Fprintf(stdout, "\nraw results: %s\nHTML report: %s\n", out.JSONPath, out.HTMLPath)
	for _, leg := range out.Legs {
		if leg.Combined.OK == 0 || (leg.Open != nil && leg.Open.Summary.OK == 0) {
			return 1
		}
	}
	return 0
}
