package stats

import (
	"testing"
	"time"
)

func ms(v ...int) []time.Duration {
	out := make([]time.Duration, len(v))
	for i, x := range v {
		out[i] = time.Duration(x) * time.Millisecond
	}
	return out
}

func TestPercentileNearestRank(t *testing.T) {
	one20 := make([]int, 20)
	for i := range one20 {
		one20[i] = i + 1
	}
	one100 := make([]int, 100)
	for i := range one100 {
		one100[i] = i + 1
	}
	tests := []struct {
		name    string
		samples []time.Duration
		p       float64
		want    time.Duration
	}{
		{"empty", nil, 50, 0},
		{"single p50", ms(7), 50, 7 * time.Millisecond},
		{"single p99", ms(7), 99, 7 * time.Millisecond},
		// Classic textbook set: 15 20 35 40 50.
		{"textbook p5", ms(15, 20, 35, 40, 50), 5, 15 * time.Millisecond},
		{"textbook p30", ms(15, 20, 35, 40, 50), 30, 20 * time.Millisecond},
		{"textbook p40", ms(15, 20, 35, 40, 50), 40, 20 * time.Millisecond},
		{"textbook p50", ms(15, 20, 35, 40, 50), 50, 35 * time.Millisecond},
		{"textbook p100", ms(15, 20, 35, 40, 50), 100, 50 * time.Millisecond},
		{"p0 is min", ms(3, 5, 9), 0, 3 * time.Millisecond},
		{"negative clamps to min", ms(3, 5, 9), -1, 3 * time.Millisecond},
		{"over 100 clamps to max", ms(3, 5, 9), 150, 9 * time.Millisecond},
		{"even n p50 takes lower middle", ms(1, 2, 3, 4), 50, 2 * time.Millisecond},
		{"1..20 p95 exact rank 19", ms(one20...), 95, 19 * time.Millisecond},
		{"1..20 p99 rounds up to 20", ms(one20...), 99, 20 * time.Millisecond},
		{"1..100 p99", ms(one100...), 99, 99 * time.Millisecond},
		{"1..100 p99.9", ms(one100...), 99.9, 100 * time.Millisecond},
		{"1..100 p1", ms(one100...), 1, 1 * time.Millisecond},
		{"1..100 p50", ms(one100...), 50, 50 * time.Millisecond},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := Percentile(tc.samples, tc.p); got != tc.want {
				t.Errorf("Percentile(p=%v) = %v, want %v", tc.p, got, tc.want)
			}
		})
	}
}

func TestSummarizeSortsACopy(t *testing.T) {
	in := ms(50, 10, 40, 20, 30)
	s := Summarize(in)
	want := Summary{N: 5, Min: 10 * time.Millisecond, P50: 30 * time.Millisecond,
		P95: 50 * time.Millisecond, P99: 50 * time.Millisecond, Max: 50 * time.Millisecond}
	if s != want {
		t.Errorf("Summarize = %+v, want %+v", s, want)
	}
	if in[0] != 50*time.Millisecond {
		t.Errorf("Summarize reordered its input: %v", in)
	}
	if (Summarize(nil) != Summary{}) {
		t.Errorf("Summarize(nil) should be the zero summary")
	}
}

func TestCDF(t *testing.T) {
	tests := []struct {
		name      string
		n, max    int
		wantLen   int
		wantFirst Point
		wantLast  Point
	}{
		{"small set keeps every sample", 4, 10, 4,
			Point{1 * time.Millisecond, 0.25}, Point{4 * time.Millisecond, 1}},
		{"large set thinned, keeps extremes", 1000, 11, 11,
			Point{1 * time.Millisecond, 0.001}, Point{1000 * time.Millisecond, 1}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			v := make([]int, tc.n)
			for i := range v {
				v[i] = i + 1
			}
			pts := CDF(ms(v...), tc.max)
			if len(pts) != tc.wantLen {
				t.Fatalf("len = %d, want %d", len(pts), tc.wantLen)
			}
			if pts[0] != tc.wantFirst || pts[len(pts)-1] != tc.wantLast {
				t.Errorf("ends = %+v .. %+v, want %+v .. %+v", pts[0], pts[len(pts)-1], tc.wantFirst, tc.wantLast)
			}
			for i := 1; i < len(pts); i++ {
				if pts[i].Value < pts[i-1].Value || pts[i].Fraction <= pts[i-1].Fraction {
					t.Fatalf("CDF not increasing at %d: %+v then %+v", i, pts[i-1], pts[i])
				}
			}
		})
	}
	if CDF(nil, 10) != nil {
		t.Error("CDF of no samples should be nil")
	}
}
