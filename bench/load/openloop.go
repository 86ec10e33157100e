package load

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"rtgate/bench/stats"
)

// OpenLoop is what an open-loop run did with its schedule. Every arrival is
// accounted for: Scheduled = Started + Dropped + Unstarted.
type OpenLoop struct {
	Rate       float64 `json:"rate"`
	Spacing    Spacing `json:"spacing"`
	Seed       uint64  `json:"seed"`
	CallLength string  `json:"call_length,omitempty"`
	// Scheduled is the arrivals the schedule held (N, or fewer when
	// Duration ended it first); Span is the time from the first to the
	// last, and OfferedRate the arrivals per second over it.
	Scheduled   int           `json:"scheduled"`
	Span        time.Duration `json:"span_ns"`
	OfferedRate float64       `json:"offered_rate"`
	// Started is the arrivals whose call was made.
	Started int `json:"started"`
	// Dropped is the arrivals skipped at the in-flight cap (-when-full
	// drop); each is also a failed call of class "overload".
	Dropped int `json:"dropped"`
	// Delayed is the arrivals that had to wait for a call to end
	// (-when-full delay); the wait is in their latency.
	Delayed int `json:"delayed"`
	// Unstarted is the arrivals never reached because the run was
	// interrupted.
	Unstarted int `json:"unstarted"`
	// MaxInFlight is the cap, PeakInFlight the most calls in flight.
	MaxInFlight  int      `json:"max_in_flight"`
	PeakInFlight int      `json:"peak_in_flight"`
	WhenFull     WhenFull `json:"when_full"`
	// StartLag is how late calls began after their scheduled arrival (a
	// delayed arrival's wait, or a generator that fell behind): it is part
	// of each call's measured latency, not hidden from it.
	StartLag stats.Summary `json:"start_lag"`
}

// caller makes one call that was meant to start at start (Client.CallFor).
type caller func(ctx context.Context, start time.Time, length time.Duration) Sample

// runOpen makes the arrivals of plan (opts' schedule), each at its time
// whether or not earlier calls have ended, and hands every call's sample
// (measured from its scheduled arrival) to finish.
func runOpen(ctx context.Context, opts Options, plan []Arrival, call caller, finish func(int, Sample)) *OpenLoop {
	ol := &OpenLoop{Rate: opts.Rate, Spacing: opts.Spacing, Seed: opts.Seed, CallLength: opts.CallLength.String(),
		Scheduled: len(plan), MaxInFlight: opts.MaxInFlight, WhenFull: opts.WhenFull}
	if n := len(plan); n > 1 {
		ol.Span = plan[n-1].At - plan[0].At
		ol.OfferedRate = float64(n-1) / ol.Span.Seconds()
	}
	var lagMu sync.Mutex
	lags := make([]time.Duration, 0, len(plan))
	var inFlight, peak atomic.Int64
	slots := make(chan struct{}, opts.MaxInFlight)
	var wg sync.WaitGroup
	begin := time.Now()
	for i, a := range plan {
		at := begin.Add(a.At)
		if !sleepUntil(ctx, at) {
			break
		}
		got, waited := acquire(ctx, slots, opts.WhenFull == FullDelay)
		if waited {
			ol.Delayed++
		}
		if !got {
			if ctx.Err() != nil {
				break
			}
			ol.Dropped++
			finish(i, Sample{Start: at, Length: a.Length, Failure: "overload",
				Detail: fmt.Sprintf("%d calls already in flight", opts.MaxInFlight)})
			continue
		}
		ol.Started++
		n := inFlight.Add(1)
		for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
		}
		wg.Go(func() {
			defer func() { inFlight.Add(-1); <-slots }()
			lag := time.Since(at)
			lagMu.Lock()
			lags = append(lags, lag)
			lagMu.Unlock()
			finish(i, call(ctx, at, a.Length))
		})
	}
	wg.Wait()
	ol.Unstarted = ol.Scheduled - ol.Started - ol.Dropped
	ol.PeakInFlight = int(peak.Load())
	ol.StartLag = stats.Summarize(lags)
	return ol
}

// acquire takes a slot for a call: at once if one is free; else, when wait
// is set, once one frees (waited reports that it had to), unless ctx ends
// first. got is false when no slot was taken.
func acquire(ctx context.Context, slots chan struct{}, wait bool) (got, waited bool) {
	select {
	case slots <- struct{}{}:
		return true, false
	default:
	}
	if !wait {
		return false, false
	}
	select {
	case slots <- struct{}{}:
		return true, true
	case <-ctx.Done():
		return false, true
	}
}
