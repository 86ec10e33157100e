package sketch

import (
	"testing"
	"time"
)

func TestDurations(t *testing.T) {
	var s Durations
	if s.Quantile(0.5) != 0 {
		t.Fatal("empty sketch has a median")
	}
	s.Add(437 * time.Millisecond)
	if s.Quantile(0.5) != 437*time.Millisecond || s.Quantile(0.95) != 437*time.Millisecond {
		t.Fatalf("one value: p50 %v p95 %v, want it exactly", s.Quantile(0.5), s.Quantile(0.95))
	}
	var o Durations
	for range 99 {
		o.Add(50 * time.Millisecond)
	}
	o.Add(time.Hour) // beyond the last bucket: counted there
	s.Merge(&o)
	if s.Count() != 101 || s.Quantile(0.5) < 45*time.Millisecond || s.Quantile(0.5) > 55*time.Millisecond {
		t.Fatalf("merged: n %d p50 %v", s.Count(), s.Quantile(0.5))
	}
	if s.Quantile(1) != time.Hour {
		t.Fatalf("max %v", s.Quantile(1))
	}
}
