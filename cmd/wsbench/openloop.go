package main

import (
	"errors"
	"flag"
	"fmt"
	"math"
	"time"

	"rtgate/bench/compare"
	"rtgate/bench/load"
)

// openLoopOptions are a plain run's open-loop and call-length flags (see
// load.Schedule): -rate makes the run open-loop.
type openLoopOptions struct {
	rate        float64
	spacing     load.Spacing
	duration    time.Duration
	length      load.Length
	seed        uint64
	maxInFlight int
	whenFull    load.WhenFull
	// flag text, parsed by check
	spacingFlag, lengthFlag, whenFullFlag string
}

func (o *openLoopOptions) register(fs *flag.FlagSet) {
	fs.Float64Var(&o.rate, "rate", 0, "open loop: calls arrive at this mean rate per second whatever the calls in flight, each measured from its scheduled arrival (0: closed loop with -c)")
	fs.StringVar(&o.spacingFlag, "arrivals", string(load.SpacingPoisson), "with -rate: poisson (exponential gaps, callers that do not know of each other) or even (exactly 1/rate apart)")
	fs.DurationVar(&o.duration, "duration", 0, "with -rate: no arrival after this long (the run then waits for the calls in flight); -n still caps the count, and without -n only -duration does")
	fs.StringVar(&o.lengthFlag, "call-length", "", "each call keeps its session this long from its start, then closes (at least its exchange): 2s (fixed), exp:2s (exponential, mean 2s, cut at 10x) or uniform:1s-3s; must stay below -t")
	fs.Uint64Var(&o.seed, "seed", 1, "seed of the arrival times and call lengths: the same seed, the same schedule")
	fs.IntVar(&o.maxInFlight, "max-inflight", 0, "with -rate: most calls in flight (default 10 x -c); see -when-full")
	fs.IntVar(&o.maxInFlight, "max-outstanding", 0, "old name of -max-inflight")
	fs.StringVar(&o.whenFullFlag, "when-full", string(load.FullDrop), "with -rate, an arrival that finds -max-inflight calls in flight: drop (a failed call of class overload) or delay (waits; the wait counts in its latency); both are counted in the report")
}

// check parses the flags' text and checks them against the rest of the
// run's options; it lifts -n's default when -duration bounds the run.
func (o *openLoopOptions) check(fs *flag.FlagSet, b *benchOptions) error {
	var err error
	if o.spacing, err = load.ParseSpacing(o.spacingFlag); err != nil {
		return fmt.Errorf("-arrivals: %w", err)
	}
	if o.whenFull, err = load.ParseWhenFull(o.whenFullFlag); err != nil {
		return fmt.Errorf("-when-full: %w", err)
	}
	if o.length, err = load.ParseLength(o.lengthFlag); err != nil {
		return fmt.Errorf("-call-length: %w", err)
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	switch {
	case o.rate < 0 || math.IsInf(o.rate, 0) || math.IsNaN(o.rate):
		return fmt.Errorf("-rate must be a positive number or 0, got %v", o.rate)
	case o.rate == 0 && (set["arrivals"] || set["duration"] || set["max-inflight"] || set["max-outstanding"] || set["when-full"]):
		return errors.New("-arrivals, -duration, -max-inflight and -when-full shape an open-loop run: give -rate")
	case o.duration < 0:
		return fmt.Errorf("-duration must not be negative, got %v", o.duration)
	case o.maxInFlight < 0:
		return fmt.Errorf("-max-inflight must not be negative, got %d", o.maxInFlight)
	case o.length.Kind != load.LengthNone && (b.hold > 0 || b.voice.n > 0):
		return errors.New("-call-length shapes calls: not with -hold or -voice")
	case o.length.Longest() >= b.timeout:
		return fmt.Errorf("-call-length %s can draw %v, not below the per-call timeout -t %v", o.length, o.length.Longest(), b.timeout)
	}
	if o.duration > 0 && !set["n"] {
		b.n = math.MaxInt32 // -duration alone bounds the run
	}
	return nil
}

// apply sets a run's open-loop options.
func (o *openLoopOptions) apply(opts *load.Options) {
	opts.Rate, opts.Spacing, opts.Duration = o.rate, o.spacing, o.duration
	opts.CallLength, opts.Seed = o.length, o.seed
	opts.MaxInFlight, opts.WhenFull = o.maxInFlight, o.whenFull
}

// expected is how many calls the run makes, for the progress line.
func (o *openLoopOptions) expected(n int) int {
	if o.rate > 0 && o.duration > 0 {
		return min(n, int(math.Ceil(o.rate*o.duration.Seconds())))
	}
	return n
}

// arrivals is the run's count of calls for its JSON: the arrivals an
// open-loop run scheduled, else -n.
func (o *openLoopOptions) arrivals(n int, sum load.Summary) int {
	if sum.OpenLoop != nil {
		return sum.OpenLoop.Scheduled
	}
	return n
}

// describe is the banner of an open-loop run.
func (o *openLoopOptions) describe(n int) string {
	bound := fmt.Sprintf("%d arrivals", n)
	switch {
	case o.duration > 0 && n == math.MaxInt32:
		bound = "arrivals for " + o.duration.String()
	case o.duration > 0:
		bound += " within " + o.duration.String()
	}
	s := fmt.Sprintf("%s at %g/s, %s spacing, seed %d (open loop, %s when full)", bound, o.rate, o.spacing, o.seed, o.whenFull)
	if o.length.Kind != load.LengthNone {
		s += ", call length " + o.length.String()
	}
	return s
}

// compareOpenFlags adds `wsbench compare`'s open-loop flags, the plain
// run's names with the steady-state leg's defaults, to fs; the returned
// function parses their text once fs is parsed. The leg is Realtime's:
// with -protocol live it runs only when -rate is given (with gemini, never:
// compare refuses -rate there).
func compareOpenFlags(fs *flag.FlagSet, o *compare.OpenLoop) func(notRealtime bool) error {
	spacing, length, whenFull := string(o.Spacing), o.Length.String(), string(o.WhenFull)
	fs.Float64Var(&o.Rate, "rate", o.Rate, "open-loop leg: calls arrive at this mean rate per second against each leg after its closed-loop runs (0: no open-loop leg; with -protocol live, 0 unless given; not with gemini)")
	fs.StringVar(&spacing, "arrivals", spacing, "open-loop leg: poisson or even spacing")
	fs.DurationVar(&o.Duration, "duration", o.Duration, "open-loop leg: arrivals for this long")
	fs.StringVar(&length, "call-length", length, "open-loop leg: call lengths, 2s, exp:2s or uniform:1s-3s (0: end after the exchange)")
	fs.Uint64Var(&o.Seed, "seed", o.Seed, "open-loop leg: seed of the schedule, the same for every leg")
	fs.IntVar(&o.MaxInFlight, "max-inflight", o.MaxInFlight, "open-loop leg: most calls in flight (0: 10 x -c)")
	fs.StringVar(&whenFull, "when-full", whenFull, "open-loop leg: drop or delay an arrival that finds -max-inflight calls in flight")
	return func(notRealtime bool) error {
		var err error
		if o.Spacing, err = load.ParseSpacing(spacing); err != nil {
			return fmt.Errorf("-arrivals: %w", err)
		}
		if o.Length, err = load.ParseLength(length); err != nil {
			return fmt.Errorf("-call-length: %w", err)
		}
		if o.WhenFull, err = load.ParseWhenFull(whenFull); err != nil {
			return fmt.Errorf("-when-full: %w", err)
		}
		rateSet := false
		fs.Visit(func(f *flag.Flag) { rateSet = rateSet || f.Name == "rate" })
		if notRealtime && !rateSet {
			o.Rate = 0
		}
		return nil
	}
}
