package peers

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"rtgate/bench/harness"
	"rtgate/bench/load"
	"rtgate/bench/proc"
)

// RunAll measures every system Rounds times over each upstream and writes
// results.json and table.md into a new directory under o.OutDir, which it returns.
// results.json is rewritten after every system, so an interrupted run keeps what
// it measured.
func RunAll(ctx context.Context, o Options) (*Results, string, error) {
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	limit, err := proc.FileLimit()
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
		if binaries[name], err = harness.Snapshot(*bin, filepath.Join(binDir, name)); err != nil {
			return nil, "", err
		}
		*bin = filepath.Join(binDir, name)
	}

	res := &Results{Started: time.Now()}
	res.Machine = describeMachine(ctx, &o)
	res.Machine.Binaries = binaries
	res.Options = resultOptions(&o, limit)
	dir, err := harness.ResultsDir(o.OutDir, "peers", res.Started)
	if err != nil {
		return nil, "", err
	}
	for _, up := range o.Upstreams {
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
				o.Log.Info("measuring", "upstream", up, "round", round, "system", sys)
				run := measure(ctx, &o, limit, dir, up, round, sys)
				run.BusyBefore, run.QuietWait = busy, waited.Seconds()
				if run.Error != "" {
					o.Log.Error("run failed", "upstream", up, "round", round, "system", sys, "err", run.Error)
				}
				res.Runs = append(res.Runs, run)
				if err := harness.WriteJSON(filepath.Join(dir, "results.json"), res); err != nil {
					return res, dir, err
				}
			}
		}
	}
	res.Finished = time.Now()
	if err := harness.WriteJSON(filepath.Join(dir, "results.json"), res); err != nil {
		return res, dir, err
	}
	if err := os.WriteFile(filepath.Join(dir, "table.md"), []byte(Markdown(res)), 0o644); err != nil {
		return res, dir, fmt.Errorf("write table: %w", err)
	}
	return res, dir, nil
}

// measure runs one system once over upstream up: a fresh mockai -echo with the
// system in front of it for the memory, latency and throughput phases, then a
// fresh mockai -stream and system for the voice phase. Every process is stopped
// before it returns.
func measure(ctx context.Context, o *Options, limit int, resultsDir string, up proc.Upstream, round int, sys string) (run Run) {
	run = Run{Upstream: string(up), Round: round, System: sys}
	fail := func(err error) Run { run.Error = err.Error(); return run }
	dir := filepath.Join(resultsDir, fmt.Sprintf("%s-%d-%s", up, round, sys))
	if slices.ContainsFunc(echoPhases, o.phase) {
		err := withSystem(ctx, o, up, sys, dir, []string{"-echo"}, limit, func(s *system) error {
			// run is the named result, so the counters land in what is returned, failed or not.
			defer func() {
				sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				defer cancel()
				run.Mockai, _ = s.mock.Stats(sctx)
			}()
			return echoPhasesOn(ctx, o, s, up, &run)
		})
		if err != nil {
			return fail(err)
		}
	}
	if o.phase(PhaseVoice) {
		stream := []string{"-stream", o.VoiceInterval.String()}
		err := withSystem(ctx, o, up, sys, filepath.Join(dir, "voice"), stream, limit, func(s *system) error {
			v, attempts, err := retryDisturbed(ctx, o, "voice", func() (*Voice, float64, error) {
				v, err := measureVoice(ctx, o, s, o.voiceSessions(up))
				if err != nil {
					return nil, 0, err
				}
				return v, v.OtherCPU / v.Seconds, nil
			})
			if err != nil {
				return err
			}
			v.Attempts, run.Voice = attempts, v
			v.Disturbed = v.OtherCPU/v.Seconds > maxVoiceOtherCores
			return nil
		})
		if err != nil {
			return fail(err)
		}
	}
	return run
}

// withSystem starts mockai (with mockArgs) and sys in front of it, waits until a
// session opens through it, runs fn, and stops both.
func withSystem(ctx context.Context, o *Options, up proc.Upstream, sys, dir string, mockArgs []string, limit int, fn func(*system) error) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	mock, err := proc.StartMockai(ctx, o.Mockai, up, mockArgs, dir, 10*time.Second)
	if err != nil {
		return err
	}
	defer mock.Stop(5 * time.Second)
	s := &system{mock: mock, url: mock.RealtimeURL(), tls: mock.TLSConfig(), dir: dir}
	readyOf := mock.Proc
	if sys != SysDirect {
		p, url, admin, err := launch(ctx, o, sys, dir, mock, limit)
		if err != nil {
			return err
		}
		defer p.Stop(10 * time.Second)
		s.proxy, s.url, s.tls, s.admin, readyOf = p, url, nil, admin, p
	}
	probe, err := s.client(nil, 1024)
	if err != nil {
		return err
	}
	if err := proc.WaitReady(ctx, readyOf, 15*time.Second, func(ctx context.Context) error {
		c, smp := probe.Open(ctx)
		if c == nil {
			return fmt.Errorf("%s: %s", smp.Failure, smp.Detail)
		}
		return c.Close()
	}); err != nil {
		return err
	}
	return fn(s)
}

// echoPhasesOn runs the memory, latency and throughput phases asked for on s.
func echoPhasesOn(ctx context.Context, o *Options, s *system, up proc.Upstream, run *Run) error {
	var err error
	if o.phase(PhaseMemory) {
		if run.Memory, err = measureMemory(ctx, o, s, o.heldSessions(up)); err != nil {
			return err
		}
		// Let the proxy and mockai finish tearing the held sessions down.
		if !harness.SleepUntil(ctx, time.Now().Add(o.Settle)) {
			return ctx.Err()
		}
	}
	if o.phase(PhaseLatency) {
		var attempts int
		run.Latency, attempts, err = retryDisturbed(ctx, o, "latency", func() (*Latency, float64, error) {
			l, err := measureLatency(ctx, o, s)
			if err != nil {
				return nil, 0, err
			}
			return l, l.OtherCPU / l.Seconds, nil
		})
		if err != nil {
			return err
		}
		run.Latency.Attempts = attempts
	}
	if o.phase(PhaseThroughput) {
		for _, load := range []struct {
			name string
			msg  []byte
		}{{"1KiB", appendEvent(o.SmallBytes)}, {"audio", audioDeltaEvent(o.AudioBytes)}} {
			t, attempts, err := retryDisturbed(ctx, o, "throughput "+load.name, func() (*Throughput, float64, error) {
				t, err := measureThroughput(ctx, o, s, load.name, load.msg)
				if err != nil {
					return nil, 0, err
				}
				return t, t.OtherCPU / t.Seconds, nil
			})
			if err != nil {
				return err
			}
			t.Attempts = attempts
			run.Throughput = append(run.Throughput, *t)
		}
	}
	return nil
}

// system is what one measurement runs against: mockai, the proxy in front of it
// (nil for direct) and the URL the load client dials.
type system struct {
	mock  *proc.Mockai
	proxy *proc.Proc
	url   string
	tls   *tls.Config // for direct to a TLS mockai
	admin string      // the gateway's admin listener ("" for the others)
	dir   string      // this measurement's folder (logs, configuration, profiles)
}

// gcSettings are the collector settings the gateway runs with, as its
// /metrics reports them (go_gc_gogc_percent, go_gc_gomemlimit_bytes): the
// gateway applies a GOGC default of its own when its environment has none.
type gcSettings struct{ gogc, gomemlimit string }

// liveHeap asks the gateway for a collection (its heap profile handler runs one
// with gc=1) and reads its live heap and collector settings from the admin
// /metrics.
func (s *system) liveHeap(ctx context.Context) (int64, gcSettings, error) {
	var gc gcSettings
	client := &http.Client{Timeout: 10 * time.Second}
	get := func(path string) (*http.Response, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+s.admin+path, nil)
		if err != nil {
			return nil, err
		}
		resp, err := client.Do(req)
		if err == nil && resp.StatusCode != http.StatusOK {
			resp.Body.Close()
			err = fmt.Errorf("gateway admin %s: %s", path, resp.Status)
		}
		return resp, err
	}
	resp, err := get("/debug/pprof/heap?gc=1")
	if err != nil {
		return 0, gc, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp, err = get("/metrics"); err != nil {
		return 0, gc, err
	}
	defer resp.Body.Close()
	m, err := harness.ParseMetrics(resp.Body)
	if err != nil {
		return 0, gc, err
	}
	v, ok := m.Sum("go_memstats_heap_alloc_bytes")
	if !ok {
		return 0, gc, errors.New("gateway metrics: no go_memstats_heap_alloc_bytes")
	}
	gc.gogc, gc.gomemlimit = "unknown", "unknown"
	if p, ok := m.Sum("go_gc_gogc_percent"); ok {
		gc.gogc = strconv.FormatFloat(p, 'f', -1, 64)
		if p < 0 {
			gc.gogc = "off"
		}
	}
	if l, ok := m.Sum("go_gc_gomemlimit_bytes"); ok {
		gc.gomemlimit = "none"
		if l < math.MaxInt64/2 {
			gc.gomemlimit = fmt.Sprintf("%.0f MiB", l/(1<<20))
		}
	}
	return int64(v), gc, nil
}

// client makes a load client for the system, on sources, with gorilla buffers of
// bufSize.
func (s *system) client(sources []net.IP, bufSize int) (*load.Client, error) {
	return newClient(s.url, clientKey, s.tls, sources, bufSize)
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
