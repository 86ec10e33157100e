package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"rtgate/bench/soak"
)

// parseSoakFlags reads `wsbench soak` flags.
func parseSoakFlags(args []string, stderr io.Writer) (soak.Config, bool, error) {
	cfg := soak.DefaultConfig()
	fs, quiet := settingsFlags("soak", stderr, &cfg.Settings)
	fs.DurationVar(&cfg.Duration, "duration", cfg.Duration, "how long new sessions start (sessions in flight then finish)")
	fs.IntVar(&cfg.Concurrency, "c", cfg.Concurrency, "concurrent sessions")
	fs.Float64Var(&cfg.FaultRate, "fault-rate", cfg.FaultRate, "fraction of sessions with an injected fault, 0 to 1")
	faults := fs.String("faults", "", "inject only these faults, comma-separated (default all): "+strings.Join(faultNames(), ", "))
	fs.Uint64Var(&cfg.Seed, "seed", 0, "seed for the plan of sessions (0: random, reported)")
	timeoutS := fs.Float64("t", cfg.CallTimeout.Seconds(), "per-session timeout, seconds")
	fs.IntVar(&cfg.MaxStalledBytes, "max-stalled-bytes", cfg.MaxStalledBytes, "gateway MAX_STALLED_BYTES")
	fs.DurationVar(&cfg.WriteTimeout, "write-timeout", cfg.WriteTimeout, "gateway WRITE_TIMEOUT_SECS (whole seconds)")
	fs.DurationVar(&cfg.HandshakeTimeout, "handshake-timeout", cfg.HandshakeTimeout, "gateway HANDSHAKE_TIMEOUT_SECS")
	fs.DurationVar(&cfg.PoolMaxIdle, "pool-max-idle", cfg.PoolMaxIdle, "gateway REALTIME_POOL_MAX_IDLE_SECS")
	fs.DurationVar(&cfg.Settle, "settle", cfg.Settle, "after the load, how long the gateway may take to come back to its start values")
	rssMiB := fs.Int64("rss-margin-mib", cfg.Margins.RSSBytes>>20, "end RSS may exceed start by this many MiB ...")
	fs.Float64Var(&cfg.Margins.RSSFraction, "rss-margin-frac", cfg.Margins.RSSFraction, "... or by this fraction of start, whichever is larger")
	heapMiB := fs.Int64("heap-margin-mib", cfg.Margins.HeapBytes>>20, "end live heap (after a collection) may exceed start by this many MiB")
	fs.Int64Var(&cfg.Margins.Goroutines, "goroutine-margin", cfg.Margins.Goroutines, "end goroutines may exceed start by this many")
	fs.Int64Var(&cfg.Margins.FDs, "fd-margin", cfg.Margins.FDs, "end open fds may exceed start by this many")
	fs.StringVar(&cfg.GatewayLogLevel, "gateway-log-level", cfg.GatewayLogLevel, "LOG_LEVEL for the gateway")
	fs.BoolVar(&cfg.Redis, "redis", cfg.Redis, "share the gateway's limits through a redis-server the soak starts (REDIS_URL, a limited key)")
	if err := parseHarness(fs, args); err != nil {
		return cfg, false, err
	}
	if *rssMiB < 0 || *heapMiB < 0 {
		return cfg, false, errors.New("-rss-margin-mib and -heap-margin-mib must not be negative")
	}
	cfg.Margins.RSSBytes, cfg.Margins.HeapBytes = *rssMiB<<20, *heapMiB<<20
	for _, f := range splitList(*faults) {
		cfg.Faults = append(cfg.Faults, soak.Kind(f))
	}
	cfg.CallTimeout = time.Duration(*timeoutS * float64(time.Second))
	return cfg, *quiet, nil
}

func faultNames() []string {
	var names []string
	for _, k := range soak.Kinds()[1:] {
		names = append(names, string(k))
	}
	return names
}

// runSoak runs `wsbench soak`: 0 when every check held, 1 when one did
// not (an unexplained failure, a leak, a crash) or the soak could not run,
// 2 for bad flags.
func runSoak(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cfg, quiet, err := parseSoakFlags(args, stderr)
	if code, ok := flagExit("soak", err, stderr); !ok {
		return code
	}
	if !quiet {
		cfg.Progress = stderr
	}
	rep, err := soak.Run(ctx, cfg)
	if rep != nil {
		fmt.Fprint(stdout, rep.Markdown())
		fmt.Fprintf(stdout, "\nsummary: %s\nraw results: %s\nlogs: %s\n", rep.MarkdownPath, rep.JSONPath, rep.Dir)
	}
	if err != nil {
		fmt.Fprintln(stderr, "wsbench", err)
		return 1
	}
	if !rep.Pass {
		fmt.Fprintf(stderr, "wsbench soak: FAILED: %d problem(s), listed at the top of the summary\n", len(rep.Problems))
		return 1
	}
	return 0
}
