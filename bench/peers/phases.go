package peers

import (
	"context"
	"fmt"
	"log/slog"
	"sort"
	"time"
)

// sampleMedian takes n samples of c's usage gap apart and returns the one with the
// median RSS, so a single GC or page-reclaim moment does not decide the figure.
func sampleMedian(ctx context.Context, c *child, n int, gap time.Duration) (Usage, error) {
	var us []Usage
	for i := range n {
		if i > 0 && !sleepUntil(ctx, time.Now().Add(gap)) {
			return Usage{}, ctx.Err()
		}
		u, err := c.usage()
		if err != nil {
			return Usage{}, err
		}
		us = append(us, u)
	}
	sort.Slice(us, func(i, j int) bool { return us[i].RSS < us[j].RSS })
	return us[len(us)/2], nil
}

// measureMemory holds o.Sessions sessions idle through the system at target and
// reports the proxy's RSS per session; the sessions are closed and drained (bounded)
// before it returns. proxy is nil for direct.
func measureMemory(ctx context.Context, o *Options, target, mockAddr string, proxy, mock *child) (*Memory, error) {
	m := &Memory{Target: o.Sessions}
	if !sleepUntil(ctx, time.Now().Add(o.Settle)) {
		return nil, ctx.Err()
	}
	var proxyIdle, proxyHeld, mockIdle, mockHeld Usage
	var err error
	if proxy != nil {
		if proxyIdle, err = sampleMedian(ctx, proxy, 3, 500*time.Millisecond); err != nil {
			return nil, err
		}
	}
	if mockIdle, err = mock.usage(); err != nil {
		return nil, err
	}
	before, err := getMockStats(ctx, mockAddr)
	if err != nil {
		return nil, err
	}

	client := newClient(target, clientKey, o.SourceIPs, 512)
	t0 := time.Now()
	conns, failures := client.openMany(ctx, o.Sessions, o.HoldParallel, o.HoldLimit)
	m.RampSecs = time.Since(t0).Seconds()
	defer func() {
		closeAll(conns)
		waitDrained(ctx, mockAddr, before.Active, 30*time.Second, o.Log)
	}()
	m.Held, m.Failures = len(conns), failures
	o.Log.Info("sessions held", "held", m.Held, "failed", sum(failures), "seconds", fmt.Sprintf("%.1f", m.RampSecs))
	if m.Held == 0 {
		return nil, fmt.Errorf("no session could be held: %v", failures)
	}
	if !sleepUntil(ctx, time.Now().Add(o.Settle)) {
		return nil, ctx.Err()
	}
	if proxy != nil {
		if proxyHeld, err = sampleMedian(ctx, proxy, 3, time.Second); err != nil {
			return nil, err
		}
		m.ProxyIdleRSS, m.ProxyHeldRSS, m.ProxyProcs = proxyIdle.RSS, proxyHeld.RSS, len(proxyHeld.Procs)
		m.PerSession = float64(proxyHeld.RSS-proxyIdle.RSS) / float64(m.Held)
	}
	if mockHeld, err = mock.usage(); err != nil {
		return nil, err
	}
	m.MockaiPerSession = float64(mockHeld.RSS-mockIdle.RSS) / float64(m.Held)
	st, err := getMockStats(ctx, mockAddr)
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
func measureLatency(ctx context.Context, o *Options, target string, proxy, mock *child) (*Latency, error) {
	client := newClient(target, clientKey, o.SourceIPs, 4096)
	conns, failures := client.openMany(ctx, o.LatencyConns, o.LatencyConns, 30*time.Second)
	defer closeAll(conns)
	if len(conns) < o.LatencyConns {
		return nil, fmt.Errorf("latency: opened %d of %d connections: %v", len(conns), o.LatencyConns, failures)
	}
	a, err := takeCPU(proxy, mock)
	if err != nil {
		return nil, err
	}
	samples, errs := pingPong(ctx, conns, pingEvent(), o.LatencyRounds, o.LatencyInterval)
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	b, err := takeCPU(proxy, mock)
	if err != nil {
		return nil, err
	}
	if len(samples) == 0 {
		return nil, fmt.Errorf("latency: no round trip completed (%d errors)", errs)
	}
	sortDurations(samples)
	var total time.Duration
	for _, s := range samples {
		total += s
	}
	us := func(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
	return &Latency{
		Conns: len(conns), Samples: len(samples), Errors: errs,
		P50us: us(percentile(samples, 50)), P90us: us(percentile(samples, 90)), P99us: us(percentile(samples, 99)),
		MaxUs: us(samples[len(samples)-1]), MeanUs: us(total / time.Duration(len(samples))),
		Seconds: b.at.Sub(a.at).Seconds(), OtherCPU: b.other(a),
	}, nil
}

// measureThroughput floods o.ThroughputConns sessions with msg and reports the
// relay rate and the CPU each process used over the measured window.
func measureThroughput(ctx context.Context, o *Options, target string, proxy, mock *child, name string, msg []byte) (*Throughput, error) {
	// Buffers that fit a whole message, so each frame is one read and one write.
	client := newClient(target, clientKey, o.SourceIPs, len(msg)+64)
	conns, failures := client.openMany(ctx, o.ThroughputConns, o.ThroughputConns, 30*time.Second)
	if len(conns) < o.ThroughputConns {
		closeAll(conns)
		return nil, fmt.Errorf("throughput: opened %d of %d connections: %v", len(conns), o.ThroughputConns, failures)
	}
	t := &Throughput{Load: name, PayloadBytes: len(msg), Conns: len(conns), Window: o.Window}
	f := startFlood(conns, msg, o.Window)
	type snap struct {
		cpuSnap
		sent, recv int64
	}
	take := func() (snap, error) {
		c, err := takeCPU(proxy, mock)
		return snap{c, f.sent.Load(), f.recv.Load()}, err
	}
	var a, b snap
	var err error
	if sleepUntil(ctx, time.Now().Add(o.Warmup)) {
		if a, err = take(); err == nil && sleepUntil(ctx, time.Now().Add(o.Duration)) {
			b, err = take()
		}
	}
	t.Lost = f.finish(conns, 5*time.Second)
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
	t.ProxyCPU = float64(b.proxy.Ticks-a.proxy.Ticks) / userHZ
	t.MockaiCPU = float64(b.mock.Ticks-a.mock.Ticks) / userHZ
	t.ClientCPU = b.self - a.self
	t.OtherCPU = b.other(a.cpuSnap)
	if t.Relayed > 0 {
		t.CPUPer100k = t.ProxyCPU / float64(t.Relayed) * 1e5
	}
	if t.Relayed == 0 {
		return nil, fmt.Errorf("throughput %s: nothing was relayed (lost %d)", name, t.Lost)
	}
	o.Log.Info("throughput", "load", name, "relayed_per_s", int(t.PerSecond), "proxy_cpu_s", t.ProxyCPU)
	return t, nil
}

// cpuSnap is a moment's CPU counters of the machine and of each process in a run.
type cpuSnap struct {
	at          time.Time
	machine     uint64 // busy ticks
	proxy, mock Usage
	self        float64 // seconds
}

func takeCPU(proxy, mock *child) (cpuSnap, error) {
	s := cpuSnap{at: time.Now(), self: selfCPU()}
	var err error
	if s.machine, err = (ProcFS{Root: "/proc"}).MachineBusy(); err != nil {
		return s, err
	}
	if proxy != nil {
		if s.proxy, err = proxy.usage(); err != nil {
			return s, err
		}
	}
	s.mock, err = mock.usage()
	return s, err
}

// other is the busy CPU seconds between a and s not used by the run's processes.
func (s cpuSnap) other(a cpuSnap) float64 {
	machine := float64(s.machine-a.machine) / userHZ
	ours := float64(s.proxy.Ticks-a.proxy.Ticks+s.mock.Ticks-a.mock.Ticks)/userHZ + (s.self - a.self)
	return max(0, machine-ours)
}

// waitQuiet waits, up to limit, until the machine's busy CPU over one second is under
// cores, and returns the last reading (in cores) and how long it waited.
func waitQuiet(ctx context.Context, cores float64, limit time.Duration, log *slog.Logger) (float64, time.Duration) {
	fs := ProcFS{Root: "/proc"}
	start := time.Now()
	logged := false
	for {
		a, err := fs.MachineBusy()
		if err != nil || !sleepUntil(ctx, time.Now().Add(time.Second)) {
			return 0, time.Since(start)
		}
		b, err := fs.MachineBusy()
		if err != nil {
			return 0, time.Since(start)
		}
		busy := float64(b-a) / userHZ
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
