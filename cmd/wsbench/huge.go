package main

import (
	"context"
	"fmt"
	"io"

	"rtgate/bench/huge"
)

// parseHugeFlags reads `wsbench huge` flags.
func parseHugeFlags(args []string, stderr io.Writer) (huge.Config, bool, error) {
	cfg := huge.DefaultConfig()
	fs, quiet := settingsFlags("huge", stderr, &cfg.Settings)
	fs.IntVar(&cfg.Sessions, "n", cfg.Sessions, "idle sessions to hold")
	fs.IntVar(&cfg.Gateways, "gateways", cfg.Gateways, "gateway processes sharing one port (REUSEPORT=1)")
	fs.IntVar(&cfg.Concurrency, "c", cfg.Concurrency, "sessions each client process opens at once")
	fs.IntVar(&cfg.PerProcess, "per-process", cfg.PerProcess, "most sockets one mockai or client process holds (0: 80% of the open-file limit)")
	fs.DurationVar(&cfg.OpenTimeout, "open-timeout", cfg.OpenTimeout, "bound on establishing the sessions")
	fs.DurationVar(&cfg.HoldFor, "hold-for", cfg.HoldFor, "how long the sessions are held once open")
	fs.StringVar(&cfg.WsbenchBin, "wsbench", cfg.WsbenchBin, "client binary (default: this wsbench)")
	if err := parseHarness(fs, args); err != nil {
		return cfg, false, err
	}
	return cfg, *quiet, nil
}

// runHuge runs `wsbench huge`: 0 when every session was established and
// held, 1 when not or the run could not start, 2 for bad flags.
func runHuge(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cfg, quiet, err := parseHugeFlags(args, stderr)
	if code, ok := flagExit("huge", err, stderr); !ok {
		return code
	}
	if !quiet {
		cfg.Progress = stderr
	}
	rep, err := huge.Run(ctx, cfg)
	if err != nil {
		fmt.Fprintln(stderr, "wsbench", err)
		return 1
	}
	fmt.Fprint(stdout, rep.Markdown())
	if !rep.Pass() {
		fmt.Fprintf(stderr, "wsbench huge: INCOMPLETE: %d problem(s), listed at the top of the report\n", len(rep.Problems))
		return 1
	}
	return 0
}
