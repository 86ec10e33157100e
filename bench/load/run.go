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
	// N is the number of calls (arrivals, with Rate).
	N int
	// Concurrency is the number of calls in flight (closed loop).
	Concurrency int
	// Rate, when positive, starts calls open-loop at Rate per second
	// regardless of completions.
	Rate float64
	// MaxOutstanding caps calls in flight with Rate; an arrival beyond it
	// is recorded as an "overload" failure. Default 10 x Concurrency.
	MaxOutstanding int
	// Progress, when set, is updated as calls finish.
	Progress *Progress
	// OnCall, when set, is called (concurrently) with each finished call.
	OnCall func(i int, s Sample)
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
	if opts.MaxOutstanding <= 0 {
		opts.MaxOutstanding = 10 * opts.Concurrency
	}
	samples := make([]Sample, opts.N)
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
	if opts.Rate > 0 {
		runOpen(ctx, client, opts, finish)
	} else {
		runClosed(ctx, client, opts, finish)
	}
	res := &Result{Wall: time.Since(begin), CPU: ProcessCPU() - cpu0}

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

// runClosed keeps Concurrency calls in flight until N have been made.
func runClosed(ctx context.Context, client *Client, opts Options, finish func(int, Sample)) {
	ForEach(ctx, opts.N, opts.Concurrency, func(i int) { finish(i, client.Call(ctx, time.Now())) })
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

// runOpen starts call i at begin + i/Rate whether or not earlier calls
// have finished; each call's latency counts from its scheduled start.
func runOpen(ctx context.Context, client *Client, opts Options, finish func(int, Sample)) {
	slots := make(chan struct{}, opts.MaxOutstanding)
	var wg sync.WaitGroup
	defer wg.Wait()
	timer := time.NewTimer(0)
	defer timer.Stop()
	begin := time.Now()
	for i := range opts.N {
		at := begin.Add(time.Duration(float64(i) / opts.Rate * float64(time.Second)))
		if wait := time.Until(at); wait > 0 {
			timer.Reset(wait)
			select {
			case <-ctx.Done():
				return
			case <-timer.C:
			}
		} else if ctx.Err() != nil {
			return
		}
		select {
		case slots <- struct{}{}:
			wg.Go(func() {
				defer func() { <-slots }()
				finish(i, client.Call(ctx, at))
			})
		default:
			finish(i, Sample{Start: at, Failure: "overload",
				Detail: fmt.Sprintf("%d calls already outstanding", opts.MaxOutstanding)})
		}
	}
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
	// Failures counts failed calls by class.
	Failures map[string]int `json:"failures"`

	Wall time.Duration `json:"wall_ns"`
	CPU  time.Duration `json:"cpu_ns"`
	// CPUPer1000 is this process's CPU per 1,000 calls.
	CPUPer1000 time.Duration `json:"cpu_per_1000_calls_ns"`
	// Throughput is finished calls per second of wall time.
	Throughput float64 `json:"calls_per_second"`
}

// Summarize computes the summary of samples; wall and cpu may be zero.
func Summarize(samples []Sample, wall, cpu time.Duration) Summary {
	var dial, session, audio, total, later []time.Duration
	turns := false // calls of several turns (their LaterFirstAudio is not nil)
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
		if c.OK() {
			s.OK++
			total = append(total, c.Total)
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
func (r *Result) Summary() Summary { return Summarize(r.Samples, r.Wall, r.CPU) }

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
