package load

import (
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"
)

// gapsOf returns the gaps between consecutive arrivals, in seconds.
func gapsOf(as []Arrival) []float64 {
	gaps := make([]float64, 0, len(as))
	for i := 1; i < len(as); i++ {
		gaps = append(gaps, (as[i].At - as[i-1].At).Seconds())
	}
	return gaps
}

func meanStd(xs []float64) (mean, std float64) {
	for _, x := range xs {
		mean += x
	}
	mean /= float64(len(xs))
	for _, x := range xs {
		std += (x - mean) * (x - mean)
	}
	return mean, math.Sqrt(std / float64(len(xs)-1))
}

func TestScheduleArrivals(t *testing.T) {
	tests := []struct {
		name  string
		sched Schedule
		// wantN is the arrivals expected (-1: check the rate over Duration).
		wantN int
		// cv is the gaps' coefficient of variation: 1 for exponential
		// gaps, 0 for even ones.
		cv float64
	}{
		{"poisson", Schedule{Rate: 100, N: 20000, Seed: 1}, 20000, 1},
		{"poisson, other seed", Schedule{Rate: 40, N: 20000, Seed: 99}, 20000, 1},
		{"poisson, default spacing", Schedule{Rate: 250, Spacing: SpacingPoisson, N: 20000, Seed: 7}, 20000, 1},
		{"even", Schedule{Rate: 50, Spacing: SpacingEven, N: 1000, Seed: 1}, 1000, 0},
		{"poisson within a duration", Schedule{Rate: 200, N: math.MaxInt32, Duration: 60 * time.Second, Seed: 3}, -1, 1},
		{"even within a duration", Schedule{Rate: 10, Spacing: SpacingEven, N: 1000, Duration: 2 * time.Second}, 20, 0},
		{"count before duration", Schedule{Rate: 10, N: 5, Duration: time.Hour}, 5, -1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			as := tc.sched.Arrivals()
			switch {
			case tc.wantN >= 0 && len(as) != tc.wantN:
				t.Fatalf("%d arrivals, want %d", len(as), tc.wantN)
			case tc.wantN < 0:
				// A Poisson count over 60 s at 200/s: 12,000, sd 110.
				want := tc.sched.Rate * tc.sched.Duration.Seconds()
				if d := math.Abs(float64(len(as)) - want); d > 4*math.Sqrt(want) {
					t.Fatalf("%d arrivals in %v at %g/s, want %.0f +- %.0f", len(as), tc.sched.Duration, tc.sched.Rate, want, 4*math.Sqrt(want))
				}
			}
			if as[0].At != 0 {
				t.Errorf("first arrival at %v, want the start", as[0].At)
			}
			if !slices.IsSortedFunc(as, func(a, b Arrival) int { return int(a.At - b.At) }) {
				t.Error("arrivals out of time order")
			}
			if d := tc.sched.Duration; d > 0 && as[len(as)-1].At >= d {
				t.Errorf("an arrival at %v, at or past the duration %v", as[len(as)-1].At, d)
			}
			if tc.cv < 0 {
				return
			}
			gaps := gapsOf(as)
			mean, std := meanStd(gaps)
			// Mean rate within 3 % (the standard error at 20,000 gaps is 0.7 %).
			if rate := 1 / mean; math.Abs(rate-tc.sched.Rate) > 0.03*tc.sched.Rate {
				t.Errorf("mean rate %.2f/s, want %g/s within 3%%", rate, tc.sched.Rate)
			}
			if cv := std / mean; math.Abs(cv-tc.cv) > 0.04 {
				t.Errorf("gaps' coefficient of variation %.3f, want %g", cv, tc.cv)
			}
			if tc.cv == 1 {
				// Exponential: P(gap > mean) = 1/e and P(gap > 3 mean) = e^-3,
				// memoryless in between; an even or uniform spacing fails these.
				over := func(k float64) float64 {
					n := 0
					for _, g := range gaps {
						if g > k/tc.sched.Rate {
							n++
						}
					}
					return float64(n) / float64(len(gaps))
				}
				for _, k := range []float64{0.1, 1, 3} {
					if got, want := over(k), math.Exp(-k); math.Abs(got-want) > 0.02 {
						t.Errorf("P(gap > %g x mean) = %.3f, want %.3f (exponential)", k, got, want)
					}
				}
			}
		})
	}
}

func TestScheduleIsReproducible(t *testing.T) {
	base := Schedule{Rate: 100, N: 500, Seed: 42, Length: Length{Kind: LengthExp, Mean: time.Second}}
	a, b := base.Arrivals(), base.Arrivals()
	if !slices.Equal(a, b) {
		t.Fatal("the same seed gave two schedules")
	}
	other := base
	other.Seed = 43
	if slices.Equal(a, other.Arrivals()) {
		t.Fatal("seeds 42 and 43 gave the same schedule")
	}
	// The lengths are a stream of their own: choosing a distribution does
	// not move the arrivals, so legs with and without lengths meet the
	// same callers.
	plain := base
	plain.Length = Length{}
	for i, p := range plain.Arrivals() {
		if p.At != a[i].At || p.Length != 0 {
			t.Fatalf("arrival %d: %+v without lengths, %+v with", i, p, a[i])
		}
	}
}

func TestParseLength(t *testing.T) {
	tests := []struct {
		in      string
		want    Length
		longest time.Duration
		wantErr string
	}{
		{"", Length{}, 0, ""},
		{"0", Length{}, 0, ""},
		{"2s", Length{Kind: LengthFixed, Mean: 2 * time.Second}, 2 * time.Second, ""},
		{"fixed:500ms", Length{Kind: LengthFixed, Mean: 500 * time.Millisecond}, 500 * time.Millisecond, ""},
		{"exp:2s", Length{Kind: LengthExp, Mean: 2 * time.Second}, 20 * time.Second, ""},
		{"uniform:1s-3s", Length{Kind: LengthUniform, Min: time.Second, Max: 3 * time.Second, Mean: 2 * time.Second}, 3 * time.Second, ""},
		{"uniform:0s-1s", Length{Kind: LengthUniform, Max: time.Second, Mean: 500 * time.Millisecond}, time.Second, ""},
		{"exp:0s", Length{}, 0, "positive"},
		{"-1s", Length{}, 0, "positive"},
		{"exp:soon", Length{}, 0, "invalid duration"},
		{"uniform:3s-1s", Length{}, 0, "MIN < MAX"},
		{"uniform:2s", Length{}, 0, "MIN-MAX"},
		{"normal:2s", Length{}, 0, "unknown distribution"},
	}
	for _, tc := range tests {
		got, err := ParseLength(tc.in)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("ParseLength(%q) = %+v, %v; want an error with %q", tc.in, got, err, tc.wantErr)
			}
			continue
		}
		if err != nil || got != tc.want || got.Longest() != tc.longest {
			t.Errorf("ParseLength(%q) = %+v (longest %v), %v; want %+v (longest %v)", tc.in, got, got.Longest(), err, tc.want, tc.longest)
		}
		if back, err := ParseLength(got.String()); err != nil || back != got {
			t.Errorf("ParseLength(%q).String() = %q does not parse back: %+v, %v", tc.in, got.String(), back, err)
		}
	}
}

func TestLengthDraws(t *testing.T) {
	const n = 20000
	tests := []struct {
		in       string
		mean     time.Duration
		cv       float64 // the coefficient of variation of the draws
		min, max time.Duration
	}{
		{"", 0, -1, 0, 0},
		{"1500ms", 1500 * time.Millisecond, 0, 1500 * time.Millisecond, 1500 * time.Millisecond},
		// Exponential: sd = mean (cut at 10 x mean, which changes neither
		// beyond the tolerance).
		{"exp:2s", 2 * time.Second, 1, 0, 20 * time.Second},
		// Uniform over [a, b]: sd = (b-a)/sqrt(12), cv = 1/(2 sqrt 3) x (b-a)/mean.
		{"uniform:1s-3s", 2 * time.Second, 1 / math.Sqrt(12), time.Second, 3 * time.Second},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			l, err := ParseLength(tc.in)
			if err != nil {
				t.Fatal(err)
			}
			r := rand.New(rand.NewPCG(5, 6))
			xs := make([]float64, n)
			for i := range xs {
				d := l.Draw(r)
				if d < tc.min || d > tc.max {
					t.Fatalf("draw %v outside [%v, %v]", d, tc.min, tc.max)
				}
				xs[i] = d.Seconds()
			}
			mean, std := meanStd(xs)
			if tc.mean == 0 {
				if mean != 0 {
					t.Fatalf("no distribution drew a mean of %v s", mean)
				}
				return
			}
			if want := tc.mean.Seconds(); math.Abs(mean-want) > 0.02*want {
				t.Errorf("mean %.3f s, want %.3f s within 2%%", mean, want)
			}
			if cv := std / mean; math.Abs(cv-tc.cv) > 0.03 {
				t.Errorf("coefficient of variation %.3f, want %.3f", cv, tc.cv)
			}
		})
	}
}
