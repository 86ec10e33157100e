package compare

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"rtgate/bench/load"
)

// okSample is a successful call meant to start at offset, taking total.
func okSample(offset, total time.Duration) load.Sample {
	return load.Sample{Offset: offset, Reached: load.PhaseDone, Dial: time.Millisecond, Session: time.Millisecond,
		FirstAudio: time.Millisecond, Total: total}
}

// TestSplitRunSeparatesTheFirstBurst: a run whose first wave was slow (a
// cold pool) and whose rest was fast shows both: the first N calls by
// intended start, whatever order they finished in, and the rest.
func TestSplitRunSeparatesTheFirstBurst(t *testing.T) {
	var samples []load.Sample
	for i := range 8 { // the rest, finished first in the slice
		samples = append(samples, okSample(time.Second+time.Duration(i)*time.Millisecond, 100*time.Millisecond))
	}
	for range 4 { // the first wave, all at the start, slow
		samples = append(samples, okSample(0, 900*time.Millisecond))
	}
	hits := []bool{false, false, false, true, true, true, true, true, true, true, true, true}
	sp := splitRun(&load.Result{Samples: samples}, 4, hits)
	if sp.FirstN != 4 || sp.First.Calls != 4 || sp.Rest.Calls != 8 {
		t.Fatalf("split %d: %d + %d calls, want 4 + 8", sp.FirstN, sp.First.Calls, sp.Rest.Calls)
	}
	if sp.First.Total.P99 != 900*time.Millisecond || sp.Rest.Total.P99 != 100*time.Millisecond {
		t.Fatalf("first burst p99 %v, rest %v; want 900ms and 100ms", sp.First.Total.P99, sp.Rest.Total.P99)
	}
	if sp.FirstHitRate == nil || *sp.FirstHitRate != 0.25 || sp.RestHitRate == nil || *sp.RestHitRate != 1 {
		t.Fatalf("hit rates %v / %v, want 25%% / 100%%", sp.FirstHitRate, sp.RestHitRate)
	}
	if sp := splitRun(&load.Result{Samples: samples}, 4, nil); sp.FirstHitRate != nil {
		t.Fatal("a hit rate without a usage log")
	}

	out := &Outcome{Legs: []*LegResult{
		{ID: LegDirect, Name: "Direct", Runs: []RunResult{{Split: splitRun(&load.Result{Samples: samples[:8]}, 4, nil)}}},
		{ID: LegPoolOn, Name: "Gateway pool on", Runs: []RunResult{{Split: sp}}},
	}}
	md := out.BurstMarkdown()
	if !strings.Contains(md, "| Gateway pool on | 1: first 4 | 4/4 | 900.0 ms |") || !strings.Contains(md, "25.0%") ||
		!strings.Contains(md, "+800.0%") {
		t.Fatalf("the table does not show the pool-on first burst against direct's:\n%s", md)
	}
}

// TestSessionHitsReadsTheUsageLog: the sessions of one run, in start
// order, from the gateway's usage log; lines of other runs and lines that
// do not parse are left out.
func TestSessionHitsReadsTheUsageLog(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	var b strings.Builder
	for _, r := range []usageRecord{
		{StartedAt: t0.Add(-time.Second), PoolHit: true}, // an earlier run
		{StartedAt: t0.Add(2 * time.Millisecond), PoolHit: true},
		{StartedAt: t0.Add(1 * time.Millisecond), PoolHit: false},
		{StartedAt: t0.Add(time.Hour), PoolHit: true}, // a later run
	} {
		j, _ := json.Marshal(r)
		b.Write(j)
		b.WriteByte('\n')
	}
	b.WriteString("not json\n")
	path := filepath.Join(t.TempDir(), "usage.jsonl")
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	got := sessionHits(path, t0, t0.Add(time.Minute), 2, 0)
	if len(got) != 2 || got[0] || !got[1] {
		t.Fatalf("hits %v, want [false true] (start order)", got)
	}
	if got := sessionHits(filepath.Join(t.TempDir(), "none"), t0, t0.Add(time.Minute), 1, 0); got != nil {
		t.Fatalf("hits %v from a missing log, want none", got)
	}
}
