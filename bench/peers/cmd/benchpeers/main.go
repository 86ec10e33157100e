// Command benchpeers runs the peer comparison of package rtgate/bench/peers: nginx,
// HAProxy and Caddy as plain ws:// reverse proxies, direct to mockai, and the rtgate
// gateway with its pool off and on, under the same load. `make bench-peers` runs it;
// -quick is a small check of the harness. It prints the Markdown table and writes
// results.json and table.md under -out.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"rtgate/bench/peers"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	o, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, "benchpeers:", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	res, dir, err := peers.RunAll(ctx, o)
	if res != nil && len(res.Runs) > 0 {
		fmt.Fprintln(stdout, peers.Markdown(res))
	}
	if dir != "" {
		fmt.Fprintln(stderr, "results in", dir)
	}
	if err != nil {
		fmt.Fprintln(stderr, "benchpeers:", err)
		return 1
	}
	return 0
}

func parseFlags(args []string, stderr io.Writer) (peers.Options, error) {
	fs := flag.NewFlagSet("benchpeers", flag.ContinueOnError)
	fs.SetOutput(stderr)
	quick := fs.Bool("quick", false, "small sizes (500 sessions, short phases) to check the harness; other flags still apply")
	d := peers.DefaultOptions()
	o := d
	fs.StringVar(&o.Mockai, "mockai", d.Mockai, "mockai binary")
	fs.StringVar(&o.Gateway, "gateway", d.Gateway, "rtgate gateway binary")
	fs.StringVar(&o.Nginx, "nginx", d.Nginx, "nginx binary")
	fs.StringVar(&o.HAProxy, "haproxy", d.HAProxy, "haproxy binary")
	fs.StringVar(&o.Caddy, "caddy", d.Caddy, "caddy binary")
	systems := fs.String("systems", strings.Join(d.Systems, ","), "systems to run, comma-separated")
	phases := fs.String("phases", strings.Join(d.Phases, ","), "phases to run, comma-separated")
	fs.IntVar(&o.Rounds, "rounds", d.Rounds, "times each system is measured")
	fs.StringVar(&o.Pool, "pool", d.Pool, "REALTIME_POOL_SIZE for rtgate-pool-on")
	gwArgs := fs.String("gateway-args", "", "extra gateway flags, space-separated (e.g. \"-buffer-size 512\")")
	fs.IntVar(&o.Sessions, "n", d.Sessions, "sessions held idle for the memory figure")
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
	fs.StringVar(&o.OutDir, "out", d.OutDir, "results directory (a peers-<time> folder is made in it)")
	verbose := fs.Bool("v", false, "debug logging")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments: %q", fs.Args())
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
		apply("latency-rounds", func() { o.LatencyRounds = q.LatencyRounds })
		apply("warmup", func() { o.Warmup = q.Warmup })
		apply("duration", func() { o.Duration = q.Duration })
		apply("settle", func() { o.Settle = q.Settle })
		o.Quick = true
	}
	o.Systems, o.Phases = splitList(*systems), splitList(*phases)
	o.GatewayArgs = strings.Fields(*gwArgs)
	if *sources < 1 || *sources > 254 {
		return o, fmt.Errorf("-source-ips %d: want 1 to 254", *sources)
	}
	o.SourceIPs = peers.LoopbackRange(*sources)
	level := slog.LevelInfo
	if *verbose {
		level = slog.LevelDebug
	}
	o.Log = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	return o, nil
}

// splitList splits a comma-separated flag value, dropping empty items.
func splitList(v string) []string {
	var out []string
	for s := range strings.SplitSeq(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}
