// Package stats computes the latency statistics wsbench reports.
//
// Percentiles use the nearest-rank definition: for n samples sorted in
// ascending order, the p-th percentile (0 < p <= 100) is the sample at
// 1-based rank ceil(p/100 * n). It is always one of the observed samples
// (no interpolation), so "p99 = 812 ms" means at least 99% of the calls took
// 812 ms or less and one call really took 812 ms. The 0th percentile is the
// minimum. An empty sample set has no percentiles: every value is zero and
// N tells the caller there was nothing to measure.
//
// This is written by hand on purpose: a benchmark run keeps every sample (a
// few hundred thousand at most), so sorting them and reading a rank is exact
// and cheap. Streaming estimators (HDR histograms, t-digest, Prometheus
// summaries) trade that exactness for bounded memory and report values no
// call ever took, which a published comparison should not.
package stats

import (
	"math"
	"slices"
	"time"
)

// Percentile returns the nearest-rank p-th percentile of sorted, which must
// be sorted ascending. p is clamped to [0, 100]; an empty slice yields 0.
func Percentile(sorted []time.Duration, p float64) time.Duration {
	n := len(sorted)
	if n == 0 {
		return 0
	}
	if p <= 0 || math.IsNaN(p) {
		return sorted[0]
	}
	if p >= 100 {
		return sorted[n-1]
	}
	// A tiny epsilon keeps p*n that is mathematically an integer (95% of 20
	// is 19) from rounding up to the next rank through float error.
	rank := int(math.Ceil(p/100*float64(n) - 1e-9))
	if rank < 1 {
		rank = 1
	}
	return sorted[rank-1]
}

// Summary describes one set of latency samples.
type Summary struct {
	N   int           `json:"n"`
	Min time.Duration `json:"min_ns"`
	P50 time.Duration `json:"p50_ns"`
	P95 time.Duration `json:"p95_ns"`
	P99 time.Duration `json:"p99_ns"`
	Max time.Duration `json:"max_ns"`
}

// Summarize sorts a copy of samples and returns their summary.
func Summarize(samples []time.Duration) Summary {
	sorted := slices.Clone(samples)
	slices.Sort(sorted)
	return SummarizeSorted(sorted)
}

// SummarizeSorted is Summarize for samples already sorted ascending.
func SummarizeSorted(sorted []time.Duration) Summary {
	if len(sorted) == 0 {
		return Summary{}
	}
	return Summary{
		N:   len(sorted),
		Min: sorted[0],
		P50: Percentile(sorted, 50),
		P95: Percentile(sorted, 95),
		P99: Percentile(sorted, 99),
		Max: sorted[len(sorted)-1],
	}
}

// Point is one point of an empirical cumulative distribution: Fraction of
// the samples took Value or less.
type Point struct {
	Value    time.Duration
	Fraction float64
}

// CDF returns at most maxPoints points of the empirical distribution of
// sorted (ascending), always including the minimum and the maximum. Large
// sample sets are thinned by rank so a chart stays small.
func CDF(sorted []time.Duration, maxPoints int) []Point {
	n := len(sorted)
	if n == 0 || maxPoints < 1 {
		return nil
	}
	if maxPoints < 2 {
		maxPoints = 2
	}
	if n <= maxPoints {
		pts := make([]Point, n)
		for i, v := range sorted {
			pts[i] = Point{Value: v, Fraction: float64(i+1) / float64(n)}
		}
		return pts
	}
	pts := make([]Point, 0, maxPoints)
	for k := range maxPoints {
		// Ranks spread evenly from 1 to n inclusive.
		rank := 1 + int(math.Round(float64(k)*float64(n-1)/float64(maxPoints-1)))
		pts = append(pts, Point{Value: sorted[rank-1], Fraction: float64(rank) / float64(n)})
	}
	return pts
}

// Millis converts a duration to fractional milliseconds for reports.
func Millis(d time.Duration) float64 {
	return float64(d) / float64(time.Millisecond)
}
