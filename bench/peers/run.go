package peers

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"time"
)

// RunAll measures every system Rounds times and writes results.json and table.md into
// a new directory under o.OutDir, which it returns. results.json is rewritten after
// every system, so an interrupted run keeps what it measured.
func RunAll(ctx context.Context, o Options) (*Results, string, error) {
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	limit, err := fileLimit()
	if err != nil {
		return nil, "", fmt.Errorf("open-file limit: %w", err)
	}
	if err := o.check(limit); err != nil {
		return nil, "", err
	}
	// Run private copies of the rtgate binaries: bin/ may be rebuilt while this runs.
	binDir, err := os.MkdirTemp("", "benchpeers-bin-")
	if err != nil {
		return nil, "", fmt.Errorf("binary snapshot: %w", err)
	}
	defer os.RemoveAll(binDir)
	binaries := map[string]string{}
	for name, bin := range map[string]*string{"mockai": &o.Mockai, "gateway": &o.Gateway} {
		if *bin == "" {
			continue // not needed by the systems asked for
		}
		if binaries[name], err = snapshot(*bin, filepath.Join(binDir, name)); err != nil {
			return nil, "", err
		}
		*bin = filepath.Join(binDir, name)
	}

	res := &Results{Started: time.Now()}
	res.Machine = describeMachine(ctx, &o)
	res.Machine.Binaries = binaries
	ro := &res.Options
	ro.Phases = o.Phases
	ro.Systems, ro.Rounds, ro.Quick, ro.Sessions, ro.SourceIPs = o.Systems, o.Rounds, o.Quick, o.Sessions, len(o.SourceIPs)
	ro.Pool, ro.GatewayArgs = o.Pool, o.GatewayArgs
	ro.LatencyConns, ro.LatencyRounds, ro.LatencyInterval = o.LatencyConns, o.LatencyRounds, o.LatencyInterval.String()
	ro.ThroughputConns, ro.Window, ro.Warmup, ro.Duration = o.ThroughputConns, o.Window, o.Warmup.String(), o.Duration.String()
	ro.FileLimit = limit

	dir := filepath.Join(o.OutDir, "peers-"+res.Started.Format("20060102-150405"))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, "", fmt.Errorf("results directory: %w", err)
	}
	if dir, err = filepath.Abs(dir); err != nil {
		return nil, "", err
	}
	for round := 1; round <= o.Rounds; round++ {
		order := slices.Clone(o.Systems)
		if round%2 == 0 {
			slices.Reverse(order) // so no system always runs first or last
		}
		for _, sys := range order {
			if ctx.Err() != nil {
				return res, dir, ctx.Err()
			}
			busy, waited := waitQuiet(ctx, o.QuietCores, o.QuietLimit, o.Log)
			o.Log.Info("measuring", "round", round, "system", sys)
			run := measure(ctx, &o, limit, dir, round, sys)
			run.BusyBefore, run.QuietWait = busy, waited.Seconds()
			if run.Error != "" {
				o.Log.Error("run failed", "round", round, "system", sys, "err", run.Error)
			}
			res.Runs = append(res.Runs, run)
			if err := writeJSON(filepath.Join(dir, "results.json"), res); err != nil {
				return res, dir, err
			}
		}
	}
	res.Finished = time.Now()
	if err := writeJSON(filepath.Join(dir, "results.json"), res); err != nil {
		return res, dir, err
	}
	if err := os.WriteFile(filepath.Join(dir, "table.md"), []byte(Markdown(res)), 0o644); err != nil {
		return res, dir, fmt.Errorf("write table: %w", err)
	}
	return res, dir, nil
}

// measure runs one system once: a fresh mockai, the system in front of it, then the
// memory, latency and throughput phases. Both processes are stopped before it returns.
func measure(ctx context.Context, o *Options, limit int, resultsDir string, round int, sys string) (run Run) {
	run = Run{Round: round, System: sys}
	fail := func(err error) Run { run.Error = err.Error(); return run }
	dir := filepath.Join(resultsDir, fmt.Sprintf("%d-%s", round, sys))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fail(err)
	}
	mock, mockAddr, err := startMockai(o, dir)
	if err != nil {
		return fail(err)
	}
	defer mock.stop(5 * time.Second)
	if err := waitReady(ctx, mock, 10*time.Second, func(ctx context.Context) error {
		_, err := getMockStats(ctx, mockAddr)
		return err
	}); err != nil {
		return fail(err)
	}
	target, proxy := mockAddr, (*child)(nil)
	if sys != SysDirect {
		proxy, target, err = launch(o, sys, dir, mockAddr, limit)
		if err != nil {
			return fail(err)
		}
		defer proxy.stop(10 * time.Second)
	}
	probe := newClient(target, clientKey, nil, 1024)
	readyOf := mock
	if proxy != nil {
		readyOf = proxy
	}
	if err := waitReady(ctx, readyOf, 15*time.Second, func(ctx context.Context) error {
		c, err := probe.open(ctx)
		if err == nil {
			c.Close()
		}
		return err
	}); err != nil {
		return fail(err)
	}

	// run is the named result, so the counters land in what is returned, failed or not.
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		run.Mockai, _ = getMockStats(sctx, mockAddr)
	}()
	if o.phase(PhaseMemory) {
		if run.Memory, err = measureMemory(ctx, o, target, mockAddr, proxy, mock); err != nil {
			return fail(err)
		}
		// Let the proxy and mockai finish tearing the held sessions down.
		if !sleepUntil(ctx, time.Now().Add(o.Settle)) {
			return fail(ctx.Err())
		}
	}
	if o.phase(PhaseLatency) {
		var attempts int
		run.Latency, attempts, err = retryDisturbed(ctx, o, "latency", func() (*Latency, float64, error) {
			l, err := measureLatency(ctx, o, target, proxy, mock)
			if err != nil {
				return nil, 0, err
			}
			return l, l.OtherCPU / l.Seconds, nil
		})
		if err != nil {
			return fail(err)
		}
		run.Latency.Attempts = attempts
	}
	if o.phase(PhaseThroughput) {
		for _, load := range []struct {
			name string
			msg  []byte
		}{{"1KiB", appendEvent(o.SmallBytes)}, {"audio", audioDeltaEvent(o.AudioBytes)}} {
			t, attempts, err := retryDisturbed(ctx, o, "throughput "+load.name, func() (*Throughput, float64, error) {
				t, err := measureThroughput(ctx, o, target, proxy, mock, load.name, load.msg)
				if err != nil {
					return nil, 0, err
				}
				return t, t.OtherCPU / t.Seconds, nil
			})
			if err != nil {
				return fail(err)
			}
			t.Attempts = attempts
			run.Throughput = append(run.Throughput, *t)
		}
	}
	return run
}

// retryDisturbed runs a timed phase, and again (up to o.Retries more times, after
// waiting up to a quarter of o.QuietLimit for a quiet machine) while other jobs used
// more than o.DisturbedCores of CPU during it. It keeps the least disturbed attempt
// and says how many it made.
func retryDisturbed[T any](ctx context.Context, o *Options, name string, phase func() (*T, float64, error)) (*T, int, error) {
	var best *T
	bestOther := 0.0
	for attempt := 1; ; attempt++ {
		r, other, err := phase()
		if err != nil {
			return nil, attempt, err
		}
		if best == nil || other < bestOther {
			best, bestOther = r, other
		}
		if bestOther <= o.DisturbedCores || attempt > o.Retries || ctx.Err() != nil {
			return best, attempt, nil
		}
		o.Log.Info("other jobs disturbed the phase; repeating it", "phase", name, "other_cores", fmt.Sprintf("%.2f", other))
		// A shorter wait than before a system: the proxy is up and holding ports.
		waitQuiet(ctx, o.QuietCores, o.QuietLimit/4, o.Log)
	}
}

// snapshot copies the executable src to dst and returns the start of its SHA-256,
// which identifies the build in the results.
func snapshot(src, dst string) (string, error) {
	in, err := os.Open(src)
	if err != nil {
		return "", fmt.Errorf("binary snapshot: %w", err)
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
	if err != nil {
		return "", fmt.Errorf("binary snapshot: %w", err)
	}
	h := sha256.New()
	_, err = io.Copy(io.MultiWriter(out, h), in)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return "", fmt.Errorf("binary snapshot of %s: %w", src, err)
	}
	return hex.EncodeToString(h.Sum(nil))[:12], nil
}

// writeJSON replaces path with v, indented, never leaving a half-written file.
func writeJSON(path string, v any) error {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("encode results: %w", err)
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, append(data, '\n'), 0o644); err != nil {
		return fmt.Errorf("write results: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("write results: %w", err)
	}
	return nil
}
