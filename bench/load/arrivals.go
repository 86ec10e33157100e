package load

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"time"
)

// The open-loop arrival schedule. Callers of a real service arrive when they
// arrive, not when the previous caller hangs up: an open-loop run makes its
// arrivals at a constant mean rate whatever the calls in flight (as wrk2 and
// k6's constant-arrival-rate executor do) and measures every call from its
// scheduled arrival, so a target that falls behind is charged for the time
// callers waited instead of slowing the generator down with it (coordinated
// omission). The whole schedule (arrival times and call lengths) is drawn up
// front from a seeded generator: the same seed gives every leg of a
// comparison the same callers.

// Spacing is how arrivals are spread at a constant mean rate.
type Spacing string

const (
	// SpacingPoisson draws independent exponential gaps (a Poisson process):
	// callers that do not know of each other, bunching and lulls included.
	SpacingPoisson Spacing = "poisson"
	// SpacingEven puts arrivals exactly 1/rate apart (wrk2's schedule).
	SpacingEven Spacing = "even"
)

// ParseSpacing reads -arrivals.
func ParseSpacing(s string) (Spacing, error) {
	switch Spacing(s) {
	case SpacingPoisson, SpacingEven:
		return Spacing(s), nil
	}
	return "", fmt.Errorf("unknown arrival spacing %q (want poisson or even)", s)
}

// Arrival is one scheduled call of an open-loop run.
type Arrival struct {
	// At is the arrival time from the start of the run.
	At time.Duration
	// Length is how long the call keeps its session (0: until its
	// response is done), from Length.
	Length time.Duration
}

// Schedule says when an open-loop run's calls arrive and how long they last.
type Schedule struct {
	// Rate is the mean number of arrivals per second.
	Rate    float64
	Spacing Spacing // default SpacingPoisson
	// N bounds the arrivals in count, Duration (when positive) in time: no
	// arrival is scheduled at or after Duration. The run ends when the last
	// arrival's call does.
	N        int
	Duration time.Duration
	// Length draws each call's length (the zero value: none).
	Length Length
	// Seed seeds the generator; equal seeds give equal schedules.
	Seed uint64
}

// Arrivals draws the schedule: at most N arrivals, all before Duration,
// in time order.
func (s Schedule) Arrivals() []Arrival {
	if s.N <= 0 || s.Rate <= 0 {
		return nil
	}
	// Two streams from one seed, so a change of length distribution does
	// not move the arrival times.
	times := rand.New(rand.NewPCG(s.Seed, 0x9e3779b97f4a7c15))
	lengths := rand.New(rand.NewPCG(s.Seed, 0xbf58476d1ce4e5b9))
	mean := float64(time.Second) / s.Rate
	n := s.N
	if s.Duration > 0 {
		// Room for a Poisson count well past its mean; the loop stops at Duration.
		expect := s.Duration.Seconds() * s.Rate
		n = min(n, int(expect+10*math.Sqrt(expect)+16))
	}
	// A huge N with no Duration grows as it goes.
	out := make([]Arrival, 0, min(n, 1<<16))
	var at float64 // nanoseconds since the start
	for i := range s.N {
		if i > 0 {
			if s.Spacing == SpacingEven {
				at = float64(i) * mean
			} else {
				at += times.ExpFloat64() * mean
			}
		}
		if s.Duration > 0 && time.Duration(at) >= s.Duration {
			break
		}
		out = append(out, Arrival{At: time.Duration(at), Length: s.Length.Draw(lengths)})
	}
	return out
}

// LengthKind is the distribution of call lengths.
type LengthKind string

const (
	LengthNone    LengthKind = ""        // calls end when their response is done
	LengthFixed   LengthKind = "fixed"   // every call Mean long
	LengthExp     LengthKind = "exp"     // exponential with mean Mean, cut at 10 x Mean
	LengthUniform LengthKind = "uniform" // uniform over [Min, Max]
)

// expCut bounds an exponential length at this many means, so one draw
// cannot outlive the per-call timeout; it moves the mean by 0.05 %.
const expCut = 10

// Length is a distribution of call lengths. A call holds its session until
// its length has passed since its scheduled arrival, then closes; a call
// whose response ends later closes when it ends (the length is a minimum:
// the exchange itself is what the benchmark measures).
type Length struct {
	Kind     LengthKind
	Mean     time.Duration // fixed and exp
	Min, Max time.Duration // uniform
}

// ParseLength reads -call-length: "" or "0" (none), "2s" (fixed),
// "exp:2s" (exponential, mean 2 s), "uniform:1s-3s" (uniform, mean 2 s).
func ParseLength(s string) (Length, error) {
	s = strings.TrimSpace(s)
	if s == "" || s == "0" {
		return Length{}, nil
	}
	kind, arg, found := strings.Cut(s, ":")
	if !found {
		kind, arg = string(LengthFixed), s
	}
	bad := func(err error) (Length, error) {
		return Length{}, fmt.Errorf("call length %q: %w (want 2s, exp:2s or uniform:1s-3s)", s, err)
	}
	switch LengthKind(kind) {
	case LengthFixed, LengthExp:
		d, err := time.ParseDuration(arg)
		if err != nil {
			return bad(err)
		}
		if d <= 0 {
			return bad(errors.New("the mean must be positive"))
		}
		return Length{Kind: LengthKind(kind), Mean: d}, nil
	case LengthUniform:
		lo, hi, ok := strings.Cut(arg, "-")
		if !ok {
			return bad(errors.New("uniform needs MIN-MAX"))
		}
		a, err := time.ParseDuration(lo)
		if err != nil {
			return bad(err)
		}
		b, err := time.ParseDuration(hi)
		if err != nil {
			return bad(err)
		}
		if a < 0 || b <= a {
			return bad(errors.New("uniform needs 0 <= MIN < MAX"))
		}
		return Length{Kind: LengthUniform, Min: a, Max: b, Mean: (a + b) / 2}, nil
	}
	return bad(fmt.Errorf("unknown distribution %q", kind))
}

// Longest is the longest length the distribution can draw.
func (l Length) Longest() time.Duration {
	switch l.Kind {
	case LengthFixed:
		return l.Mean
	case LengthExp:
		return expCut * l.Mean
	case LengthUniform:
		return l.Max
	}
	return 0
}

// Draw draws one length with r (0 for LengthNone).
func (l Length) Draw(r *rand.Rand) time.Duration {
	switch l.Kind {
	case LengthFixed:
		return l.Mean
	case LengthExp:
		return time.Duration(min(r.ExpFloat64(), expCut) * float64(l.Mean))
	case LengthUniform:
		return l.Min + time.Duration(r.Int64N(int64(l.Max-l.Min)+1))
	}
	return 0
}

// String is the flag form ("" for none).
func (l Length) String() string {
	switch l.Kind {
	case LengthFixed:
		return l.Mean.String()
	case LengthExp:
		return "exp:" + l.Mean.String()
	case LengthUniform:
		return "uniform:" + l.Min.String() + "-" + l.Max.String()
	}
	return ""
}
