package load

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"rtgate/bench/stats"
)

// Options shape a run of calls.
type Options struct {
	// N is the number of calls (at most, arrivals with Rate).
	N int
	// Concurrency is the number of calls in flight (closed loop).
	Concurrency int
	// Rate, when positive, makes the run open-loop: calls arrive at Rate per
	// second on average, spaced by Spacing (default Poisson), whatever the
	// calls in flight, and each is measured from its scheduled arrival
	// (Schedule).
	Rate    float64
	Spacing Spacing
	// Duration, when positive, bounds an open-loop run's arrivals in time
	// (N still bounds their count).
	Duration time.Duration
	// CallLength draws each call's length (closed and open loop); Seed
	// seeds the draws and the arrival times.
	CallLength Length
	Seed       uint64
	// MaxInFlight caps calls in flight with Rate (default 10 x
	// Concurrency); WhenFull says what an arrival that finds the cap
	// reached does. Both cases are counted in Result.Open.
	MaxInFlight int
	WhenFull    WhenFull
	// Progress, when set, is updated as calls finish.
	Progress *Progress
	// OnCall, when set, is called (concurrently) with each finished call.
	OnCall func(i int, s Sample)
}

// WhenFull is what an open-loop arrival does when MaxInFlight calls are
// already in flight.
type WhenFull string

const (
	// FullDrop skips the arrival: it is recorded as a failed call of class
	// "overload" (the generator, not the target, refused it).
	FullDrop WhenFull = "drop"
	// FullDelay makes the arrival wait for a call to end; its latency still
	// counts from its scheduled arrival, so the wait is charged to it, and
	// the arrivals after it wait their turn behind it.
	FullDelay WhenFull = "delay"
)

// ParseWhenFull reads -when-full.
func ParseWhenFull(s string) (WhenFull, error) {
	switch WhenFull(s) {
	case FullDrop, FullDelay:
		return WhenFull(s), nil
	}
	return "", fmt.Errorf("unknown -when-full %q (want drop or delay)", s)
}

// Progress counts finished calls while a run is going.
type Progress struct {
	Done   atomic.Int64
	Failed atomic.Int64
}

// Result is everything measured in one run.
type Result struct {
	// Samples holds one sample per started call, in call order.
	Samples []Sample
	// Wall is the run's duration.
	Wall time.Duration
	// CPU is the user+system CPU this process used during the run.
	CPU time.Duration
	// Open describes an open-loop run's arrivals (nil for closed loop).
	Open *OpenLoop
}

// Run makes opts.N calls with client and measures them. It stops early,
// returning what it has, when ctx is cancelled.
func Run(ctx context.Context, client *Client, opts Options) (*Result, error) {
	if opts.N <= 0 {
		return nil, fmt.Errorf("load: number of calls must be positive, got %d", opts.N)
	}
	if opts.Concurrency <= 0 {
		return nil, fmt.Errorf("load: concurrency must be positive, got %d", opts.Concurrency)
	}
	if opts.Rate < 0 {
		return nil, fmt.Errorf("load: rate must not be negative, got %v", opts.Rate)
	}
	if opts.Duration < 0 {
		return nil, fmt.Errorf("load: duration must not be negative, got %v", opts.Duration)
	}
	if opts.MaxInFlight <= 0 {
		opts.MaxInFlight = 10 * opts.Concurrency
	}
	opts.Spacing = cmp.Or(opts.Spacing, SpacingPoisson)
	opts.WhenFull = cmp.Or(opts.WhenFull, FullDrop)
	var plan []Arrival
	size := opts.N
	if opts.Rate > 0 {
		plan = opts.schedule().Arrivals()
		size = len(plan)
	}
	samples := make([]Sample, size)
	finish := func(i int, s Sample) {
		samples[i] = s
		if opts.Progress != nil {
			if !s.OK() {
				opts.Progress.Failed.Add(1)
			}
			opts.Progress.Done.Add(1)
		}
		if opts.OnCall != nil {
			opts.OnCall(i, s)
		}
	}

	cpu0, begin := ProcessCPU(), time.Now()
	var open *OpenLoop
	if opts.Rate > 0 {
		open = runOpen(ctx, opts, plan, client.CallFor, finish)
	} else {
		runClosed(ctx, client, opts, finish)
	}
	res := &Result{Wall: time.Since(begin), CPU: ProcessCPU() - cpu0, Open: open}

	// Calls never started (interrupted run) have a zero Start: drop them.
	res.Samples = samples[:0]
	for _, s := range samples {
		if s.Start.IsZero() {
			continue
		}
		s.Offset = s.Start.Sub(begin)
		res.Samples = append(res.Samples, s)
	}
	return res, nil
}

// schedule is the open-loop schedule opts describe.
func (o Options) schedule() Schedule {
	return Schedule{Rate: o.Rate, Spacing: o.Spacing, N: o.N, Duration: o.Duration, Length: o.CallLength, Seed: o.Seed}
}

// runClosed keeps Concurrency calls in flight until N have been made.
func runClosed(ctx context.Context, client *Client, opts Options, finish func(int, Sample)) {
	lengths := make([]time.Duration, opts.N)
	if opts.CallLength.Kind != LengthNone {
		for i, a := range (Schedule{Rate: 1, N: opts.N, Length: opts.CallLength, Seed: opts.Seed}).Arrivals() {
			lengths[i] = a.Length
		}
	}
	ForEach(ctx, opts.N, opts.Concurrency, func(i int) { finish(i, client.CallFor(ctx, time.Now(), lengths[i])) })
}

// ForEach calls fn(i) for every i in [0, n), on at most workers goroutines at
// once, each taking the next index as it finishes one, until all are done or
// ctx ends (indexes not started by then are skipped). It returns when every
// call has returned.
func ForEach(ctx context.Context, n, workers int, fn func(i int)) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(workers, n) {
		wg.Go(func() {
			for ctx.Err() == nil {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				fn(i)
			}
		})
	}
	wg.Wait()
}

// Summary condenses a run for reports.
type Summary struct {
	Calls       int     `json:"calls"`
	OK          int     `json:"ok"`
	SuccessRate float64 `json:"success_rate"`
	// Phase statistics. Dial, Session and FirstAudio cover every call that
	// completed that phase (also calls that failed later); Total covers
	// successful calls only.
	Dial       stats.Summary `json:"dial"`
	Session    stats.Summary `json:"session"`
	FirstAudio stats.Summary `json:"first_audio"`
	Total      stats.Summary `json:"total"`
	// LaterFirstAudio covers turns 2..N of calls of several turns (every
	// later turn that reached its first audio, also of calls that failed
	// later); nil unless the calls had several turns. FirstAudio is then
	// the first turns'.
	LaterFirstAudio *stats.Summary `json:"later_first_audio,omitempty"`
	// Exchange covers successful calls' Total minus the time they held
	// their session for their length (Sample.Held): what Total would be
	// without call lengths. Nil unless some call had a length.
	Exchange *stats.Summary `json:"exchange,omitempty"`
	// Failures counts failed calls by class.
	Failures map[string]int `json:"failures"`
	// OpenLoop is an open-loop run's arrivals: how many were dropped or
	// delayed at the in-flight cap (nil for closed loop).
	OpenLoop *OpenLoop `json:"open_loop,omitempty"`

	Wall time.Duration `json:"wall_ns"`
	CPU  time.Duration `json:"cpu_ns"`
	// CPUPer1000 is this process's CPU per 1,000 calls.
	CPUPer1000 time.Duration `json:"cpu_per_1000_calls_ns"`
	// Throughput is finished calls per second of wall time.
	Throughput float64 `json:"calls_per_second"`
}

// Summarize computes the summary of samples; wall and cpu may be zero.
func Summarize(samples []Sample, wall, cpu time.Duration) Summary {
	var dial, session, audio, total, later, exchange []time.Duration
	turns := false   // calls of several turns (their LaterFirstAudio is not nil)
	lengths := false // calls with a length (Sample.Length)
	s := Summary{Calls: len(samples), Failures: map[string]int{}, Wall: wall, CPU: cpu}
	for _, c := range samples {
		if c.Reached >= PhaseDial {
			dial = append(dial, c.Dial)
		}
		if c.Reached >= PhaseSession {
			session = append(session, c.Session)
		}
		if c.Reached >= PhaseFirstAudio {
			audio = append(audio, c.FirstAudio)
		}
		later = append(later, c.LaterFirstAudio...)
		turns = turns || c.LaterFirstAudio != nil
		lengths = lengths || c.Length > 0
		if c.OK() {
			s.OK++
			total = append(total, c.Total)
			exchange = append(exchange, c.Total-c.Held)
		} else {
			s.Failures[c.Failure]++
		}
	}
	s.Dial, s.Session = stats.Summarize(dial), stats.Summarize(session)
	s.FirstAudio, s.Total = stats.Summarize(audio), stats.Summarize(total)
	if turns {
		sum := stats.Summarize(later)
		s.LaterFirstAudio = &sum
	}
	if lengths {
		sum := stats.Summarize(exchange)
		s.Exchange = &sum
	}
	if s.Calls > 0 {
		s.SuccessRate = float64(s.OK) / float64(s.Calls)
		s.CPUPer1000 = time.Duration(float64(cpu) * 1000 / float64(s.Calls))
	}
	if wall > 0 {
		s.Throughput = float64(s.Calls) / wall.Seconds()
	}
	return s
}

// Summary summarizes the run.
func (r *Result) Summary() Summary {
	s := Summarize(r.Samples, r.Wall, r.CPU)
	s.OpenLoop = r.Open
	return s
}

// FailureClasses returns the classes counted in failures, most frequent
// first (ties by name), so reports list them in a stable order.
func FailureClasses[V int | int64](failures map[string]V) []string {
	keys := slices.Collect(maps.Keys(failures))
	slices.SortFunc(keys, func(a, b string) int {
		if c := cmp.Compare(failures[b], failures[a]); c != 0 {
			return c
		}
		return strings.Compare(a, b)
	})
	return keys
}
