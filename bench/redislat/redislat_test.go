package redislat

import (
	"context"
	"strings"
	"testing"
)

// TestRun measures a few admissions against a real redis-server: every one
// is timed, the percentiles are in order, and the counts over each budget
// shrink as the budget grows.
func TestRun(t *testing.T) {
	r, err := Run(context.Background(), Config{N: 200, Warmup: 10, Concurrency: 2, Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if r.N != 200 || r.P50 <= 0 || r.P50 > r.P99 || r.P99 > r.P999 || r.P999 > r.Max {
		t.Fatalf("result %+v: want 200 samples with p50 <= p99 <= p99.9 <= max", r)
	}
	if len(r.Over) != len(Thresholds) {
		t.Fatalf("over %v, want one count per threshold", r.Over)
	}
	for i := 1; i < len(r.Over); i++ {
		if r.Over[i] > r.Over[i-1] {
			t.Fatalf("over %v: more calls over a larger budget", r.Over)
		}
	}
	row := r.Row()
	if cols := strings.Count(Header(), "|"); strings.Count(row, "|") != cols/2 {
		t.Fatalf("row %q does not fit the header %q", row, Header())
	}
}

// TestRunRejectsBadConfig: nothing starts for a config that cannot measure.
func TestRunRejectsBadConfig(t *testing.T) {
	for _, c := range []Config{{N: 0, Concurrency: 1}, {N: 1, Concurrency: 0}, {N: 1, Concurrency: 1, Burners: -1}} {
		if _, err := Run(context.Background(), c); err == nil {
			t.Errorf("config %+v: no error", c)
		}
	}
}
