package peers

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"time"

	"rtgate/bench/harness"
	"rtgate/bench/load"
	"rtgate/bench/proc"
	"rtgate/bench/stats"
)

// sampleMedian takes n samples of p's usage gap apart and returns the one with the
// median RSS, so a single GC or page-reclaim moment does not decide the figure.
func sampleMedian(ctx context.Context, p *proc.Proc, n int, gap time.Duration) (proc.Usage, error) {
	var us []proc.Usage
	for i := range n {
		if i > 0 && !harness.SleepUntil(ctx, time.Now().Add(gap)) {
			return proc.Usage{}, ctx.Err()
		}
		u, err := p.Usage()
		if err != nil {
			return proc.Usage{}, err
		}
		us = append(us, u)
	}
	sort.Slice(us, func(i, j int) bool { return us[i].RSS < us[j].RSS })
	return us[len(us)/2], nil
}

// measureMemory holds n sessions idle through s and reports the proxy's RSS per
// session; the sessions are closed and drained (bounded) before it returns.
func measureMemory(ctx context.Context, o *Options, s *system, n int) (*Memory, error) {
	m := &Memory{Target: n}
	if !harness.SleepUntil(ctx, time.Now().Add(o.Settle)) {
		return nil, ctx.Err()
	}
	var proxyIdle, proxyHeld, mockIdle, mockHeld proc.Usage
	var err error
	if s.proxy != nil {
		if proxyIdle, err = sampleMedian(ctx, s.proxy, 3, 500*time.Millisecond); err != nil {
			return nil, err
		}
	}
	if mockIdle, err = s.mock.Usage(); err != nil {
		return nil, err
	}
	var heapIdle int64
	if s.admin != "" {
		if heapIdle, _, err = s.liveHeap(ctx); err != nil {
			return nil, err
		}
	}
	before, err := s.mock.Stats(ctx)
	if err != nil {
		return nil, err
	}

	client, err := s.client(o.SourceIPs, 512)
	if err != nil {
		return nil, err
	}
	t0 := time.Now()
	conns, failures := openMany(ctx, client, n, o.HoldParallel, o.HoldLimit)
	m.RampSecs = time.Since(t0).Seconds()
	defer func() {
		closeAll(conns)
		waitDrained(ctx, s.mock, before.Active, 30*time.Second, o.Log)
	}()
	m.Held, m.Failures = len(conns), failures
	o.Log.Info("sessions held", "held", m.Held, "failed", sum(failures), "seconds", fmt.Sprintf("%.1f", m.RampSecs))
	if m.Held == 0 {
		return nil, fmt.Errorf("no session could be held: %s", describeFailures(failures))
	}
	if !harness.SleepUntil(ctx, time.Now().Add(o.Settle)) {
		return nil, ctx.Err()
	}
	if s.proxy != nil {
		if proxyHeld, err = sampleMedian(ctx, s.proxy, 3, time.Second); err != nil {
			return nil, err
		}
		m.ProxyIdleRSS, m.ProxyHeldRSS, m.ProxyProcs = proxyIdle.RSS, proxyHeld.RSS, len(proxyHeld.Procs)
		m.PerSession = float64(proxyHeld.RSS-proxyIdle.RSS) / float64(m.Held)
	}
	if s.admin != "" {
		heapHeld, gc, err := s.liveHeap(ctx)
		if err != nil {
			return nil, err
		}
		m.GatewayHeapPerSession = float64(heapHeld-heapIdle) / float64(m.Held)
		m.GOGC, m.GOMEMLIMIT = gc.gogc, gc.gomemlimit
	}
	if mockHeld, err = s.mock.Usage(); err != nil {
		return nil, err
	}
	m.MockaiPerSession = float64(mockHeld.RSS-mockIdle.RSS) / float64(m.Held)
	st, err := s.mock.Stats(ctx)
	if err != nil {
		return nil, err
	}
	m.MockaiActive = st.Active
	if st.Active < int64(m.Held) {
		return nil, fmt.Errorf("mockai has %d open sessions while the client holds %d: the relay is not holding them end to end", st.Active, m.Held)
	}
	return m, nil
}

// measureLatency times small-message round trips on o.LatencyConns sessions.
func measureLatency(ctx context.Context, o *Options, s *system) (*Latency, error) {
	client, err := s.client(o.SourceIPs, 4096)
	if err != nil {
		return nil, err
	}
	conns, failures := openMany(ctx, client, o.LatencyConns, o.LatencyConns, 30*time.Second)
	defer closeAll(conns)
	if len(conns) < o.LatencyConns {
		return nil, fmt.Errorf("latency: opened %d of %d connections: %s", len(conns), o.LatencyConns, describeFailures(failures))
	}
	a, err := takeCPU(s)
	if err != nil {
		return nil, err
	}
	samples, errs := pingPong(ctx, conns, pingEvent(), o.LatencyRounds, o.LatencyInterval)
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	b, err := takeCPU(s)
	if err != nil {
		return nil, err
	}
	if len(samples) == 0 {
		return nil, fmt.Errorf("latency: no round trip completed (%d errors)", errs)
	}
	slices.Sort(samples)
	var total time.Duration
	for _, s := range samples {
		total += s
	}
	us := func(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
	return &Latency{
		Conns: len(conns), Samples: len(samples), Errors: errs,
		P50us: us(stats.Percentile(samples, 50)), P90us: us(stats.Percentile(samples, 90)), P99us: us(stats.Percentile(samples, 99)),
		MaxUs: us(samples[len(samples)-1]), MeanUs: us(total / time.Duration(len(samples))),
		Seconds: b.at.Sub(a.at).Seconds(), OtherCPU: b.other(a),
	}, nil
}

// measureThroughput floods o.ThroughputConns sessions with msg and reports the
// relay rate and the CPU each process used over the measured window.
func measureThroughput(ctx context.Context, o *Options, s *system, name string, msg []byte) (*Throughput, error) {
	// Buffers that fit a whole message, so each frame is one read and one write.
	client, err := s.client(o.SourceIPs, len(msg)+64)
	if err != nil {
		return nil, err
	}
	conns, failures := openMany(ctx, client, o.ThroughputConns, o.ThroughputConns, 30*time.Second)
	if len(conns) < o.ThroughputConns {
		closeAll(conns)
		return nil, fmt.Errorf("throughput: opened %d of %d connections: %s", len(conns), o.ThroughputConns, describeFailures(failures))
	}
	t := &Throughput{Load: name, PayloadBytes: len(msg), Conns: len(conns), Window: o.Window}
	f := startFlood(conns, msg, o.Window)
	type snap struct {
		cpuSnap
		sent, recv int64
	}
	take := func() (snap, error) {
		c, err := takeCPU(s)
		return snap{c, f.sent.Load(), f.recv.Load()}, err
	}
	var a, b snap
	var prof *profileTake
	if harness.SleepUntil(ctx, time.Now().Add(o.Warmup)) {
		if a, err = take(); err == nil {
			if o.Profile && s.admin != "" {
				prof = startProfile(ctx, s.admin, o.Duration, filepath.Join(s.dir, "throughput-"+name+"-cpu.pprof"))
			}
			if harness.SleepUntil(ctx, time.Now().Add(o.Duration)) {
				b, err = take()
			}
		}
	}
	t.Lost = f.finish(conns, 5*time.Second)
	if prof != nil {
		if perr := prof.wait(); perr != nil {
			o.Log.Warn("throughput profile", "err", perr)
		} else {
			t.Profile = prof.path
		}
	}
	t.BadLength = f.bad.Load()
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	if err != nil {
		return nil, fmt.Errorf("throughput: %w", err)
	}
	t.Seconds = b.at.Sub(a.at).Seconds()
	t.Relayed = (b.sent - a.sent) + (b.recv - a.recv)
	t.PerSecond = float64(t.Relayed) / t.Seconds
	t.ProxyCPU = b.proxy.CPUSeconds() - a.proxy.CPUSeconds()
	t.MockaiCPU = b.mock.CPUSeconds() - a.mock.CPUSeconds()
	t.ClientCPU = (b.self - a.self).Seconds()
	t.OtherCPU = b.other(a.cpuSnap)
	if t.Relayed == 0 {
		return nil, fmt.Errorf("throughput %s: nothing was relayed (lost %d)", name, t.Lost)
	}
	// A round trip is one frame each way: two relayed frames.
	t.CPUPer100kRoundTrips = t.ProxyCPU / (float64(t.Relayed) / 2) * 1e5
	o.Log.Info("throughput", "load", name, "relayed_per_s", int(t.PerSecond), "proxy_cpu_s", t.ProxyCPU)
	return t, nil
}

// measureVoice streams audio both ways on n sessions through s for
// o.VoiceWarmup and then the measured o.VoiceDuration (load.Voice), and reports
// the relay's CPU over the window as cores per 1,000 sessions.
func measureVoice(ctx context.Context, o *Options, s *system, n int) (*Voice, error) {
	client, err := s.client(o.SourceIPs, 2048) // one delta (about 1.4 KB) per read
	if err != nil {
		return nil, err
	}
	var a, b cpuSnap
	var errA, errB error
	var prof *profileTake
	r, err := load.Voice(ctx, client, load.VoiceOptions{N: n, Concurrency: o.HoldParallel, Duration: o.VoiceDuration,
		Warmup: o.VoiceWarmup, Interval: o.VoiceInterval,
		AtStart: func() {
			a, errA = takeCPU(s)
			if o.Profile && s.admin != "" {
				prof = startProfile(ctx, s.admin, o.VoiceDuration, filepath.Join(s.dir, "voice-cpu.pprof"))
			}
		},
		AtEnd: func() { b, errB = takeCPU(s) }})
	if err != nil {
		return nil, err
	}
	if r.Opened < n {
		return nil, fmt.Errorf("voice: opened %d of %d sessions: %s", r.Opened, n, describeFailures(r.Failures))
	}
	if err := errors.Join(errA, errB); err != nil {
		return nil, fmt.Errorf("voice: %w", err)
	}
	v := &Voice{Sessions: n, Opened: r.Opened, Failures: r.Failures, Lost: r.Lost, Seconds: b.at.Sub(a.at).Seconds(),
		SentExpected: r.SentExpected, Sent: r.Sent, LateSends: r.LateSends, MaxLateMs: stats.Millis(r.MaxLate),
		RecvExpected: r.RecvExpected, Received: r.Received,
		ProxyCPU:  b.proxy.CPUSeconds() - a.proxy.CPUSeconds(),
		MockaiCPU: b.mock.CPUSeconds() - a.mock.CPUSeconds(),
		ClientCPU: (b.self - a.self).Seconds(), OtherCPU: b.other(a)}
	if v.Seconds <= 0 {
		return nil, errors.New("voice: the window did not run")
	}
	if prof != nil {
		if err := prof.wait(); err != nil {
			o.Log.Warn("voice profile", "err", err)
		} else {
			v.Profile = prof.path
		}
	}
	v.CoresPer1000 = v.ProxyCPU / v.Seconds / float64(v.Opened) * 1000
	sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if st, err := s.mock.Stats(sctx); err == nil {
		v.MockaiFramesIn = st.FramesIn
	}
	o.Log.Info("voice", "sessions", v.Opened, "proxy_cores_per_1000", fmt.Sprintf("%.2f", v.CoresPer1000),
		"delivered", fmt.Sprintf("%.1f%%", 100*v.Delivered()), "late_sends", v.LateSends,
		"client_cores", fmt.Sprintf("%.2f", v.ClientCPU/v.Seconds), "mockai_cores", fmt.Sprintf("%.2f", v.MockaiCPU/v.Seconds))
	return v, nil
}

// profileTake is a CPU profile being fetched from the gateway's admin port.
type profileTake struct {
	path string
	done chan error
}

// startProfile fetches /debug/pprof/profile for d (whole seconds, at least one)
// from the gateway's admin address into path, in the background.
func startProfile(ctx context.Context, admin string, d time.Duration, path string) *profileTake {
	p := &profileTake{path: path, done: make(chan error, 1)}
	secs := max(1, int(d/time.Second))
	go func() {
		p.done <- func() error {
			ctx, cancel := context.WithTimeout(ctx, time.Duration(secs)*time.Second+15*time.Second)
			defer cancel()
			url := fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", admin, secs)
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
			if err != nil {
				return err
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				return fmt.Errorf("cpu profile: %w", err)
			}
			defer resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("cpu profile: %s", resp.Status)
			}
			f, err := os.Create(path)
			if err != nil {
				return err
			}
			if _, err := io.Copy(f, resp.Body); err != nil {
				f.Close()
				return fmt.Errorf("cpu profile: %w", err)
			}
			return f.Close()
		}()
	}()
	return p
}

func (p *profileTake) wait() error { return <-p.done }

// cpuSnap is a moment's CPU counters of the machine and of each process in a run.
type cpuSnap struct {
	at          time.Time
	machine     float64 // busy CPU seconds since boot
	proxy, mock proc.Usage
	self        time.Duration
}

func takeCPU(s *system) (cpuSnap, error) {
	c := cpuSnap{at: time.Now(), self: load.ProcessCPU()}
	var err error
	if c.machine, err = proc.MachineBusy(); err != nil {
		return c, err
	}
	if s.proxy != nil {
		if c.proxy, err = s.proxy.Usage(); err != nil {
			return c, err
		}
	}
	c.mock, err = s.mock.Usage()
	return c, err
}

// other is the busy CPU seconds between a and c not used by the run's processes.
func (c cpuSnap) other(a cpuSnap) float64 {
	ours := c.proxy.CPUSeconds() - a.proxy.CPUSeconds() + c.mock.CPUSeconds() - a.mock.CPUSeconds() + (c.self - a.self).Seconds()
	return max(0, c.machine-a.machine-ours)
}

// waitQuiet waits, up to limit, until the machine's busy CPU over one second is under
// cores, and returns the last reading (in cores) and how long it waited.
func waitQuiet(ctx context.Context, cores float64, limit time.Duration, log *slog.Logger) (float64, time.Duration) {
	start := time.Now()
	logged := false
	for {
		a, err := proc.MachineBusy()
		if err != nil || !harness.SleepUntil(ctx, time.Now().Add(time.Second)) {
			return 0, time.Since(start)
		}
		b, err := proc.MachineBusy()
		if err != nil {
			return 0, time.Since(start)
		}
		busy := b - a
		if busy < cores || time.Since(start) > limit {
			if busy >= cores {
				log.Warn("the machine is still busy; measuring anyway", "busy_cores", busy)
			}
			return busy, time.Since(start)
		}
		if !logged {
			log.Info("waiting for other jobs on the machine to finish", "busy_cores", busy, "limit", limit)
			logged = true
		}
	}
}
