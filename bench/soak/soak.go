package soak

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"rtgate/bench/harness"
	"rtgate/bench/proc"
	"rtgate/server/cluster"
)

// Profile is mockai's behaviour for normal sessions.
type Profile struct {
	UpgradeDelay, SessionDelay, FirstAudioDelay time.Duration
	// Deltas audio deltas of DeltaBytes raw PCM, DeltaInterval apart.
	Deltas, DeltaBytes int
	DeltaInterval      time.Duration
}

func (p Profile) args() []string {
	return []string{
		"-upgrade-delay", p.UpgradeDelay.String(),
		"-session-delay", p.SessionDelay.String(),
		"-first-audio-delay", p.FirstAudioDelay.String(),
		"-deltas", strconv.Itoa(p.Deltas),
		"-delta-bytes", strconv.Itoa(p.DeltaBytes),
		"-delta-interval", p.DeltaInterval.String(),
	}
}

// Margins are how far the gateway's end values may be above its start
// values. RSS may grow by the larger of RSSBytes and RSSFraction of the
// start: the Go runtime keeps some of a peak's heap mapped for reuse, and
// returns the rest over time. The live heap after a collection
// (go_memstats_heap_alloc_bytes) is the sharper leak test: it counts only
// objects still referenced, caches sized by the peak among them. (The heap
// in use is reported too; it also counts the free room in partly used
// spans, which a peak leaves behind.)
type Margins struct {
	RSSBytes    int64   `json:"rss_bytes"`
	RSSFraction float64 `json:"rss_fraction"`
	HeapBytes   int64   `json:"heap_bytes"`
	Goroutines  int64   `json:"goroutines"`
	FDs         int64   `json:"fds"`
}

// rssAllowed is the most RSS may grow over start.
func (m Margins) rssAllowed(start int64) int64 {
	return max(m.RSSBytes, int64(m.RSSFraction*float64(start)))
}

// Config is one soak run.
type Config struct {
	// Settings.Progress receives progress lines and, at once, every
	// unexplained session.
	harness.Settings
	// Duration is how long new sessions start; sessions in flight then
	// finish (each bounded by CallTimeout).
	Duration    time.Duration
	Concurrency int
	// FaultRate is the fraction of sessions with an injected fault.
	FaultRate float64
	// Faults limits the faults injected to these kinds (empty: all).
	Faults []Kind
	// Seed makes the plan of sessions reproducible; 0 picks one (it is
	// reported).
	Seed        uint64
	CallTimeout time.Duration
	Profile     Profile

	// Gateway settings the faults lean on: the write timeout (after which
	// a client that reads nothing is dropped), the message size limit and
	// the handshake timeout are small so that those faults end quickly;
	// MAX_STALLED_BYTES, the ceiling for a client that still reads, is the
	// gateway's default; the pool's idle lifetime is short so that the
	// pool empties soon after the load (see the package doc).
	WriteTimeout     time.Duration
	MaxStalledBytes  int
	MaxMessageBytes  int
	HandshakeTimeout time.Duration
	PoolMaxIdle      time.Duration
	// Redis shares the gateway's limits through a redis-server the soak
	// starts (startRedis).
	Redis bool

	Margins Margins
	// Settle bounds the wait, after the load, for sessions to end, the
	// pool to empty and the numbers to come back within Margins.
	Settle time.Duration
	// SampleEvery is the /metrics scrape interval.
	SampleEvery     time.Duration
	GatewayLogLevel string
}

// DefaultConfig is what `wsbench soak` runs without flags.
func DefaultConfig() Config {
	return Config{
		// mockai serves plain ws:// here, so the soak's figures stay
		// comparable; -upstream tls runs it over wss://.
		Settings: harness.Settings{MockaiBin: "bin/mockai", GatewayBin: "bin/gateway", Upstream: proc.UpstreamPlain,
			OutDir: filepath.Join("bench", "results")},
		Duration: 3 * time.Minute, Concurrency: 100, FaultRate: 0.3,
		CallTimeout: 30 * time.Second,
		// About 0.3 s a call: 10 deltas of 200 ms of audio (12.8 KB of
		// base64 each).
		Profile: Profile{UpgradeDelay: 5 * time.Millisecond, SessionDelay: 5 * time.Millisecond,
			FirstAudioDelay: 20 * time.Millisecond, Deltas: 10, DeltaBytes: 9600, DeltaInterval: 10 * time.Millisecond},
		WriteTimeout:     2 * time.Second,
		MaxStalledBytes:  64 << 20,
		MaxMessageBytes:  1 << 20,
		HandshakeTimeout: 3 * time.Second,
		PoolMaxIdle:      5 * time.Second,
		Redis:            true,
		// The gateway has come back to start+15.5 MiB of RSS within 30 s
		// of a 3-minute soak with an 85 MiB peak here; the live heap to
		// +3 MiB (caches sized by the peak), goroutines and fds exactly.
		Margins:         Margins{RSSBytes: 24 << 20, RSSFraction: 0.5, HeapBytes: 8 << 20, Goroutines: 5, FDs: 5},
		Settle:          90 * time.Second,
		SampleEvery:     time.Second,
		GatewayLogLevel: "warn",
	}
}

func (c Config) validate() error {
	var errs []error
	errs = append(errs, c.Settings.Check(true)...)
	if c.Duration <= 0 || c.Concurrency <= 0 || c.CallTimeout <= 0 {
		errs = append(errs, fmt.Errorf("duration, concurrency and call timeout must be positive (got %v, %d, %v)",
			c.Duration, c.Concurrency, c.CallTimeout))
	}
	if c.Concurrency > 2000 {
		errs = append(errs, fmt.Errorf("concurrency %d: at most 2000 (each session holds sockets in three processes)", c.Concurrency))
	}
	if c.FaultRate < 0 || c.FaultRate > 1 {
		errs = append(errs, fmt.Errorf("fault rate %v: want 0 to 1", c.FaultRate))
	}
	if _, err := faultMix(c.Faults); err != nil {
		errs = append(errs, err)
	}
	p := c.Profile
	if p.Deltas < 1 || p.DeltaBytes < 2 || p.DeltaBytes%2 != 0 {
		errs = append(errs, fmt.Errorf("profile: at least one delta of an even number of bytes (got %d x %d)", p.Deltas, p.DeltaBytes))
	}
	if p.UpgradeDelay < 0 || p.SessionDelay < 0 || p.FirstAudioDelay < 0 || p.DeltaInterval < 0 {
		errs = append(errs, errors.New("profile delays must not be negative"))
	}
	if c.MaxStalledBytes < 64<<10 || c.MaxMessageBytes < 1024 || c.HandshakeTimeout < time.Second || c.PoolMaxIdle < time.Second ||
		c.WriteTimeout < time.Second || c.WriteTimeout%time.Second != 0 {
		errs = append(errs, errors.New("gateway limits: stalled bytes >= 64 KiB, message >= 1 KiB, handshake timeout and pool idle >= 1 s, write timeout whole seconds >= 1 s"))
	}
	if c.Settle <= 0 || c.SampleEvery <= 0 {
		errs = append(errs, errors.New("settle and sample interval must be positive"))
	}
	return errors.Join(errs...)
}

// Run runs the soak. It returns an error only when the soak could not run
// (bad config, missing binaries, a process that would not start); a soak
// that ran returns its report, whose Pass says whether every check held.
// Every process it starts is stopped before it returns, also when ctx is
// cancelled (the report then says it was interrupted).
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("soak: %w", err)
	}
	if cfg.Redis {
		// The gateway may keep this many connections to Redis open
		// once idle, where it started with one or none.
		cfg.Margins.FDs += int64(cluster.PoolSize())
	}
	if cfg.Seed == 0 {
		var b [8]byte
		_, _ = rand.Read(b[:])
		cfg.Seed = binary.LittleEndian.Uint64(b[:]) | 1
	}
	dir, started, say, err := cfg.Begin("soak", true)
	if err != nil {
		return nil, fmt.Errorf("soak: %w", err)
	}

	upstreamKey, masterKey := harness.RandomKey("sk-mock-"), harness.RandomKey("sk-gw-")
	// A stall outlasts any session, so only the gateway can end one.
	stallFor := cfg.CallTimeout + 15*time.Second
	mockArgs := append([]string{"-key", upstreamKey, "-faults-from-query", "-stall-for", stallFor.String()}, cfg.Profile.args()...)
	mock, err := proc.StartMockai(ctx, cfg.MockaiBin, cfg.Upstream, mockArgs, dir, 15*time.Second)
	if err != nil {
		return nil, fmt.Errorf("soak: %w", err)
	}
	defer mock.Stop(5 * time.Second)
	rd, err := startRedis(ctx, cfg, dir)
	if err != nil {
		return nil, fmt.Errorf("soak: %w", err)
	}
	if rd != nil {
		defer rd.Stop(time.Second)
	}
	set := gatewaySettings(cfg, mock, upstreamKey, masterKey)
	redisSettings(set, rd, cfg)
	gw, err := proc.StartGateway(ctx, cfg.GatewayBin, nil, set, filepath.Join(dir, "gateway.log"))
	if err != nil {
		return nil, fmt.Errorf("soak: %w", err)
	}
	defer gw.Stop(10 * time.Second)
	url, adminAddr := gw.URL(), gw.Admin
	say("soak: mockai pid %d at %s; gateway pid %d at %s (admin %s); seed %d",
		mock.PID(), mock.Base, gw.PID(), url, adminAddr, cfg.Seed)

	rep := &Report{Config: reportConfig(cfg), Started: started, Dir: dir}
	adm := newAdmin(adminAddr)
	r, err := newRunner(url, masterKey, cfg.CallTimeout, cfg.HandshakeTimeout, cfg.MaxMessageBytes, cfg.WriteTimeout, cfg.Profile.Deltas)
	if err != nil {
		return nil, fmt.Errorf("soak: %w", err)
	}

	// The baseline: an idle gateway, after a collection.
	if err := harness.Sleep(ctx, time.Second); err != nil {
		return interrupted(rep, gw.Proc, mock.Proc)
	}
	start, err := settledReading(ctx, adm)
	if err != nil {
		return nil, fmt.Errorf("soak: baseline: %w", err)
	}
	rep.Start = start

	loadStart := time.Now()
	smp := startSampler(ctx, adm, cfg.SampleEvery, loadStart)
	tally := NewTally()
	runLoad(ctx, cfg, r, tally, loadStart, smp, say)
	rep.Wall = time.Since(loadStart)
	rep.Interrupted = ctx.Err() != nil
	say("soak: load stopped after %v; waiting up to %v for the gateway to settle", rep.Wall.Round(time.Second), cfg.Settle)

	if !rep.Interrupted {
		rep.End, rep.Settled = settle(ctx, adm, cfg, start, smp)
		rep.SettleTook = time.Since(loadStart) - rep.Wall
	}
	rep.Readings, rep.Peak, rep.ScrapeFailures = smp.stop()
	if gw.Running() && (rep.End.SessionsOpen > 0 || rep.End.FDs-rep.Start.FDs > cfg.Margins.FDs) {
		rep.OpenSockets, _ = openSockets(gw.PID())
	}
	if gw.Running() {
		// For whoever investigates a leak: what the idle gateway still holds.
		_ = adm.save(ctx, "/debug/pprof/heap", filepath.Join(dir, "heap-end.pprof"))
		_ = adm.save(ctx, "/debug/pprof/goroutine?debug=1", filepath.Join(dir, "goroutines-end.txt"))
	}
	rep.Counts = tally.Counts()
	rep.GatewayOutcomes = diffOutcomes(rep.Start.Outcomes, rep.End.Outcomes)
	rep.PoolHits, rep.PoolMisses = rep.End.PoolHits-rep.Start.PoolHits, rep.End.PoolMisses-rep.Start.PoolMisses
	rep.RedisOutages = rep.End.RedisOutages - rep.Start.RedisOutages
	rep.RedisAlone = rep.End.RedisAlone - rep.Start.RedisAlone

	if gw.Running() {
		rep.GatewayAlive = true
		// SIGTERM drains: up to DRAIN_TIMEOUT (5 s), then CLOSE_TIMEOUT+1 s
		// for sessions it ends, then 2 s to shut down.
		if err := gw.Stop(20 * time.Second); err != nil {
			rep.GatewayExit = err.Error()
		}
	} else {
		rep.GatewayExit = fmt.Sprint(gw.Stop(0)) // already exited: Stop returns its status
	}
	mock.Stop(5 * time.Second)
	rep.LogProblems, _ = proc.LogProblems(gw.LogPath(), 20)
	rep.check(cfg.Margins)
	if err := rep.write(); err != nil {
		return rep, fmt.Errorf("soak: %w", err)
	}
	return rep, nil
}

// interrupted finishes a run cut short before the load started.
func interrupted(rep *Report, procs ...*proc.Proc) (*Report, error) {
	for _, p := range procs {
		p.Stop(5 * time.Second)
	}
	rep.Interrupted = true
	rep.check(Margins{})
	return rep, rep.write()
}

// runLoad runs the workers until the duration is over (or ctx ends) and
// every session they started has finished.
func runLoad(ctx context.Context, cfg Config, r *runner, tally *Tally, loadStart time.Time, smp *sampler, say harness.Say) {
	deadline := loadStart.Add(cfg.Duration)
	mix, _ := faultMix(cfg.Faults) // checked by validate
	var next atomic.Int64
	var wg sync.WaitGroup
	for range cfg.Concurrency {
		wg.Go(func() {
			for time.Now().Before(deadline) && ctx.Err() == nil {
				i := int(next.Add(1) - 1)
				p := planSession(cfg.Seed, i, cfg.FaultRate, cfg.Profile.Deltas, mix)
				t0 := time.Now()
				o := r.run(ctx, p)
				rec := tally.Add(Record{Index: i, Plan: p, Cause: o.cause, Detail: o.detail, Took: time.Since(t0), Upgraded: o.upgraded})
				if !rec.Explained {
					say("soak: UNEXPLAINED: session %d (%s, k=%d) ended %s: %s", rec.Index, p.Kind, p.After, rec.Cause, rec.Detail)
				}
			}
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	tick := time.NewTicker(10 * time.Second)
	defer tick.Stop()
	for {
		select {
		case <-done:
			return
		case <-tick.C:
			c := tally.Counts()
			last := smp.last()
			say("soak: %3.0fs  sessions %d (completed %d, failed %d, unexplained %d)  gateway: rss %s, fds %d, goroutines %d, open %d",
				time.Since(loadStart).Seconds(), c.Attempted, c.Completed, c.Failed, c.Unexplained,
				formatBytes(last.RSS), last.FDs, last.Goroutines, last.SessionsOpen)
		}
	}
}

// settledReading asks for two collections (the second frees what
// sync.Pools kept through the first), gives the runtime a moment to return
// freed memory, and reads the metrics.
func settledReading(ctx context.Context, adm *admin) (Reading, error) {
	for range 2 {
		if err := adm.collectGarbage(ctx); err != nil {
			return Reading{}, err
		}
	}
	if err := harness.Sleep(ctx, time.Second); err != nil {
		return Reading{}, err
	}
	return adm.read(ctx)
}

// settle waits, up to cfg.Settle, until every session has ended, the pool
// is empty and the numbers are back within the margins; it returns the
// last reading and whether all of that happened.
func settle(ctx context.Context, adm *admin, cfg Config, start Reading, smp *sampler) (Reading, bool) {
	deadline := time.Now().Add(cfg.Settle)
	var last Reading
	for {
		rd, err := adm.read(ctx)
		if err == nil && rd.SessionsOpen == 0 && rd.WarmSockets == 0 {
			if rd, err = settledReading(ctx, adm); err == nil {
				last = rd
				smp.add(rd)
				if len(resourceProblems(start, rd, cfg.Margins)) == 0 {
					return rd, true
				}
			}
		} else if err == nil {
			last = rd
		}
		if time.Now().After(deadline) || harness.Sleep(ctx, time.Second) != nil {
			return last, false
		}
	}
}

// gatewaySettings is the soak's gateway configuration (see Config).
func gatewaySettings(cfg Config, mock *proc.Mockai, upstreamKey, masterKey string) map[string]string {
	set := proc.GatewaySettings(mock, upstreamKey, masterKey, cfg.GatewayLogLevel)
	set["REALTIME_POOL_SIZE"] = "auto"
	set["REALTIME_POOL_MIN"] = "0"
	set["REALTIME_POOL_MAX_IDLE_SECS"] = secs(cfg.PoolMaxIdle)
	set["MAX_STALLED_BYTES"] = strconv.Itoa(cfg.MaxStalledBytes)
	set["WRITE_TIMEOUT_SECS"] = secs(cfg.WriteTimeout)
	set["MAX_MESSAGE_BYTES"] = strconv.Itoa(cfg.MaxMessageBytes)
	set["HANDSHAKE_TIMEOUT_SECS"] = secs(cfg.HandshakeTimeout)
	set["DRAIN_TIMEOUT"] = "5"
	return set
}

func secs(d time.Duration) string { return strconv.FormatFloat(d.Seconds(), 'f', -1, 64) }

func diffOutcomes(before, after map[string]int64) map[string]int64 {
	out := map[string]int64{}
	for k, v := range after {
		if d := v - before[k]; d != 0 {
			out[k] = d
		}
	}
	return out
}
