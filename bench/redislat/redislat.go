// Package redislat measures what a Redis call costs a connect when the
// gateway shares its limits through Redis (REDIS_URL): the round trip of
// the admission script (server/cluster), timed around Limiter.Admit as a
// connect calls it, against a redis-server it starts on loopback, with a
// number of CPU burners on the box as a busy host has. It is the figure
// REDIS_TIMEOUT_MS's default is set above (its p99.9 on a busy box).
package redislat

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"rtgate/bench/proc"
	"rtgate/bench/stats"
	"rtgate/server/cluster"
)

// Config is one measurement.
type Config struct {
	// N admissions are timed, after Warmup untimed ones, by Concurrency
	// goroutines (connects in flight at once).
	N, Warmup, Concurrency int
	// Burners CPU-bound processes (`sh -c 'while :; do :; done'`) run
	// while it measures.
	Burners int
	// Dir holds redis-server's folder and log.
	Dir string
}

// Result is the latency of one measurement.
type Result struct {
	Burners     int
	Concurrency int
	N           int
	P50, P99    time.Duration
	P999, Max   time.Duration
	// Over counts the admissions slower than each of Thresholds.
	Over []int
}

// Thresholds are the budgets Result.Over is counted against.
var Thresholds = []time.Duration{5 * time.Millisecond, 10 * time.Millisecond, 20 * time.Millisecond, 50 * time.Millisecond}

// Run starts redis-server and the burners, measures, and stops them.
func Run(ctx context.Context, cfg Config) (Result, error) {
	if cfg.N <= 0 || cfg.Concurrency <= 0 || cfg.Burners < 0 || cfg.Warmup < 0 {
		return Result{}, errors.New("redislat: N and concurrency must be positive, burners and warm-up not negative")
	}
	rd, err := proc.StartRedis(ctx, cfg.Dir, 10*time.Second)
	if err != nil {
		return Result{}, fmt.Errorf("redislat: %w", err)
	}
	defer rd.Stop(time.Second)
	// No budget to speak of: every call is timed to its end, none falls
	// back to the instance's share.
	st, err := cluster.NewStore(rd.URL(), 2*time.Second)
	if err != nil {
		return Result{}, fmt.Errorf("redislat: %w", err)
	}
	lim := cluster.NewLimiter(st, 10*time.Second, 1, slog.New(slog.NewTextHandler(io.Discard, nil)), prometheus.NewRegistry())
	defer lim.Close()

	for i := range cfg.Burners {
		// Bounded by timeout(1) too, should this process die without
		// stopping it (it is also killed with it: Pdeathsig).
		b, err := proc.Start(proc.Spec{Name: "burner", Bin: "/usr/bin/timeout",
			Args:    []string{"600", "sh", "-c", "while :; do :; done"},
			LogPath: filepath.Join(cfg.Dir, "burner-"+strconv.Itoa(i)+".log")})
		if err != nil {
			return Result{}, fmt.Errorf("redislat: %w", err)
		}
		defer b.Stop(time.Second)
	}

	admit := func() (time.Duration, error) {
		start := time.Now()
		// Both limits, so the script takes every step: the count and the bucket.
		if r := lim.Admit("redislat", 1<<30, 1e9); r != nil {
			return 0, fmt.Errorf("redislat: an admission with limits far away was refused: %+v", r)
		}
		d := time.Since(start)
		lim.Release("redislat")
		return d, nil
	}
	for range cfg.Warmup {
		if _, err := admit(); err != nil {
			return Result{}, err
		}
	}
	samples := make([]time.Duration, 0, cfg.N)
	var mu sync.Mutex
	var firstErr error
	var wg sync.WaitGroup
	next := make(chan struct{})
	for range cfg.Concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range next {
				d, err := admit()
				mu.Lock()
				if err != nil && firstErr == nil {
					firstErr = err
				}
				samples = append(samples, d)
				mu.Unlock()
			}
		}()
	}
	for range cfg.N {
		if ctx.Err() != nil {
			break
		}
		next <- struct{}{}
	}
	close(next)
	wg.Wait()
	if firstErr != nil {
		return Result{}, firstErr
	}
	if ctx.Err() != nil {
		return Result{}, ctx.Err()
	}
	slices.Sort(samples)
	r := Result{Burners: cfg.Burners, Concurrency: cfg.Concurrency, N: len(samples),
		P50: stats.Percentile(samples, 50), P99: stats.Percentile(samples, 99),
		P999: stats.Percentile(samples, 99.9), Max: samples[len(samples)-1]}
	for _, th := range Thresholds {
		i, _ := slices.BinarySearch(samples, th+1)
		r.Over = append(r.Over, len(samples)-i)
	}
	return r, nil
}

// Header is the table's head for Row.
func Header() string {
	h := "| CPU burners | connects in flight | admissions | p50 | p99 | p99.9 | max |"
	sep := "|---|---|---|---|---|---|---|"
	for _, th := range Thresholds {
		h += " over " + th.String() + " |"
		sep += "---|"
	}
	return h + "\n" + sep + "\n"
}

// Row is r as a Markdown table row.
func (r Result) Row() string {
	ms := func(d time.Duration) string { return strconv.FormatFloat(stats.Millis(d), 'f', 2, 64) + " ms" }
	row := fmt.Sprintf("| %d | %d | %d | %s | %s | %s | %s |", r.Burners, r.Concurrency, r.N, ms(r.P50), ms(r.P99), ms(r.P999), ms(r.Max))
	for _, n := range r.Over {
		row += " " + strconv.Itoa(n) + " |"
	}
	return row + "\n"
}
