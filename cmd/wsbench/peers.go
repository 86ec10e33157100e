package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"

	"rtgate/bench/peers"
	"rtgate/bench/proc"
)

// parsePeersFlags reads `wsbench peers` flags (see package bench/peers).
func parsePeersFlags(args []string, stderr io.Writer) (peers.Options, string, error) {
	d := peers.DefaultOptions()
	o := d
	fs := harnessFlags("peers", stderr, &o.Mockai, &o.Gateway, &o.OutDir)
	quick := fs.Bool("quick", false, "small sizes (500/300 held, 100/50 voice sessions, short phases) to check the harness; other flags still apply")
	fs.StringVar(&o.Nginx, "nginx", d.Nginx, "nginx binary")
	fs.StringVar(&o.HAProxy, "haproxy", d.HAProxy, "haproxy binary")
	fs.StringVar(&o.Caddy, "caddy", d.Caddy, "caddy binary (a reference row: add it with -systems)")
	systems := fs.String("systems", strings.Join(d.Systems, ","), "systems to run, comma-separated (known: "+strings.Join(peers.AllSystems, ", ")+")")
	phases := fs.String("phases", strings.Join(d.Phases, ","), "phases to run, comma-separated")
	var ups []string
	for _, u := range d.Upstreams {
		ups = append(ups, string(u))
	}
	upstreams := fs.String("upstream", strings.Join(ups, ","), "how mockai serves, each measured in full: tls (wss://, as OpenAI does), plain (ws://), or both")
	fs.IntVar(&o.Rounds, "rounds", d.Rounds, "times each system is measured per upstream")
	fs.StringVar(&o.Pool, "pool", d.Pool, "REALTIME_POOL_SIZE for rtgate-pool-on")
	gwArgs := fs.String("gateway-args", "", "extra gateway flags, space-separated (e.g. \"-buffer-size 512\")")
	fs.IntVar(&o.Sessions, "n", d.Sessions, "sessions held idle for the memory figure, plain upstream")
	fs.IntVar(&o.TLSSessions, "tls-n", d.TLSSessions, "sessions held idle for the memory figure, TLS upstream")
	fs.IntVar(&o.VoiceSessions, "voice-n", d.VoiceSessions, "sessions streaming audio in the voice phase, plain upstream")
	fs.IntVar(&o.TLSVoiceSessions, "tls-voice-n", d.TLSVoiceSessions, "sessions streaming audio in the voice phase, TLS upstream")
	fs.DurationVar(&o.VoiceDuration, "voice-for", d.VoiceDuration, "voice phase: how long the sessions stream in the measured window")
	fs.DurationVar(&o.VoiceWarmup, "voice-warmup", d.VoiceWarmup, "voice phase: streaming before the measured window (not counted)")
	fs.BoolVar(&o.Profile, "profile", false, "save a CPU profile of rtgate over each voice and throughput window (voice-cpu.pprof, throughput-<load>-cpu.pprof in the run's folder; the profiler's cost is in that run's figure)")
	fs.DurationVar(&o.VoiceInterval, "voice-interval", d.VoiceInterval, "voice phase: one append up and one delta down every interval")
	fs.IntVar(&o.HoldParallel, "hold-parallel", d.HoldParallel, "handshakes in flight while opening them")
	fs.DurationVar(&o.HoldLimit, "hold-limit", d.HoldLimit, "time allowed to open them")
	sources := fs.Int("source-ips", len(d.SourceIPs), "client source addresses 127.0.0.1..127.0.0.N")
	fs.IntVar(&o.LatencyConns, "latency-conns", d.LatencyConns, "connections in the latency phase")
	fs.IntVar(&o.LatencyRounds, "latency-rounds", d.LatencyRounds, "round trips per connection")
	fs.DurationVar(&o.LatencyInterval, "latency-interval", d.LatencyInterval, "gap between one connection's round trips")
	fs.IntVar(&o.ThroughputConns, "conns", d.ThroughputConns, "connections in the throughput phases")
	fs.IntVar(&o.Window, "window", d.Window, "echoes in flight per connection")
	fs.DurationVar(&o.Warmup, "warmup", d.Warmup, "load before each throughput window")
	fs.DurationVar(&o.Duration, "duration", d.Duration, "throughput measurement window")
	fs.DurationVar(&o.Settle, "settle", d.Settle, "quiet time before RSS samples")
	fs.Float64Var(&o.QuietCores, "quiet-cores", d.QuietCores, "before each system, wait until other jobs use less CPU than this (cores)")
	fs.DurationVar(&o.QuietLimit, "quiet-limit", d.QuietLimit, "longest wait for a quiet machine before measuring anyway")
	fs.Float64Var(&o.DisturbedCores, "disturbed-cores", d.DisturbedCores, "repeat a timed phase when other jobs used more CPU than this during it (cores)")
	fs.IntVar(&o.Retries, "retries", d.Retries, "most repeats of a disturbed phase")
	verbose := fs.Bool("v", false, "debug logging")
	readme := fs.String("readme", "", "also write the table into this Markdown file, between its wsbench peers markers (make bench-peers: docs/benchmarks/peers.md)")
	if err := parseHarness(fs, args); err != nil {
		return o, "", err
	}
	if *quick {
		// Quick sizes for whatever was not given explicitly.
		q, set := peers.QuickOptions(), map[string]bool{}
		fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
		apply := func(name string, fn func()) {
			if !set[name] {
				fn()
			}
		}
		apply("n", func() { o.Sessions = q.Sessions })
		apply("tls-n", func() { o.TLSSessions = q.TLSSessions })
		apply("voice-n", func() { o.VoiceSessions = q.VoiceSessions })
		apply("tls-voice-n", func() { o.TLSVoiceSessions = q.TLSVoiceSessions })
		apply("voice-for", func() { o.VoiceDuration = q.VoiceDuration })
		apply("voice-warmup", func() { o.VoiceWarmup = q.VoiceWarmup })
		apply("latency-rounds", func() { o.LatencyRounds = q.LatencyRounds })
		apply("warmup", func() { o.Warmup = q.Warmup })
		apply("duration", func() { o.Duration = q.Duration })
		apply("settle", func() { o.Settle = q.Settle })
		o.Quick = true
	}
	o.Systems, o.Phases = splitList(*systems), splitList(*phases)
	o.Upstreams = nil
	for _, s := range splitList(*upstreams) {
		u, err := proc.ParseUpstream(s)
		if err != nil {
			return o, "", fmt.Errorf("-upstream: %w", err)
		}
		o.Upstreams = append(o.Upstreams, u)
	}
	o.GatewayArgs = strings.Fields(*gwArgs)
	if *sources < 1 || *sources > 254 {
		return o, "", fmt.Errorf("-source-ips %d: want 1 to 254", *sources)
	}
	o.SourceIPs = peers.LoopbackRange(*sources)
	level := slog.LevelInfo
	if *verbose {
		level = slog.LevelDebug
	}
	o.Log = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	return o, *readme, nil
}

// runPeers runs `wsbench peers`: it prints the Markdown table and writes
// results.json and table.md under -out (and with -readme, the table into that
// file; a quick or interrupted run never is). 0 when every run succeeded, 1
// when one failed or the comparison could not start, 2 for bad flags.
func runPeers(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	o, readme, err := parsePeersFlags(args, stderr)
	if code, ok := flagExit("peers", err, stderr); !ok {
		return code
	}
	res, dir, err := peers.RunAll(ctx, o)
	if res != nil && len(res.Runs) > 0 {
		fmt.Fprintln(stdout, peers.Markdown(res))
	}
	if dir != "" {
		fmt.Fprintln(stderr, "results in", dir)
	}
	if err != nil {
		fmt.Fprintln(stderr, "wsbench peers:", err)
		return 1
	}
	failed := slices.ContainsFunc(res.Runs, func(r peers.Run) bool { return r.Error != "" })
	switch {
	case readme == "":
	case o.Quick || failed:
		fmt.Fprintf(stderr, "wsbench peers: %s left as it was (a quick or failed run is not published)\n", readme)
	default:
		if err := peers.WriteReadme(readme, peers.Markdown(res)); err != nil {
			fmt.Fprintln(stderr, "wsbench peers: warning:", err)
		} else {
			fmt.Fprintln(stderr, "table written into", readme)
		}
	}
	if failed {
		return 1
	}
	return 0
}
