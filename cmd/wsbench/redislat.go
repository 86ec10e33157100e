package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"time"

	"rtgate/bench/redislat"
)

// runRedisLatency runs `wsbench redis-latency`: the Redis admission call's
// latency on this box, once for each number of CPU burners in -burners.
func runRedisLatency(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("redis-latency", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfg := redislat.Config{N: 20000, Warmup: 500, Concurrency: 4}
	fs.IntVar(&cfg.N, "n", cfg.N, "admissions timed per run")
	fs.IntVar(&cfg.Concurrency, "c", cfg.Concurrency, "admissions in flight at once")
	burners := fs.String("burners", "0,2", "runs, each with this many CPU burners on the box (comma-separated)")
	if code, ok := flagExit("redis-latency", parseHarness(fs, args), stderr); !ok {
		return code
	}
	var runs []int
	for _, s := range splitList(*burners) {
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 {
			fmt.Fprintf(stderr, "wsbench redis-latency: -burners %q: want counts like 0,2\n", *burners)
			return 2
		}
		runs = append(runs, n)
	}
	host, _ := os.Hostname()
	fmt.Fprintf(stdout, "Redis admission call (server/cluster's script, Limiter.Admit), %s, %s, %d CPUs\n\n",
		time.Now().UTC().Format("2006-01-02 15:04 MST"), host, runtime.NumCPU())
	fmt.Fprint(stdout, redislat.Header())
	for _, b := range runs {
		dir, err := os.MkdirTemp("", "redislat-")
		if err != nil {
			fmt.Fprintln(stderr, "wsbench redis-latency:", err)
			return 1
		}
		c := cfg
		c.Burners, c.Dir = b, dir
		r, err := redislat.Run(ctx, c)
		_ = os.RemoveAll(dir)
		if err != nil {
			fmt.Fprintln(stderr, "wsbench", err)
			return 1
		}
		fmt.Fprint(stdout, r.Row())
	}
	return 0
}
