package admin

import (
	"fmt"
	"testing"
	"time"
)

// TestStatusHistoryRing: the ring keeps the last statusHistory samples,
// oldest first.
func TestStatusHistoryRing(t *testing.T) {
	var b statusBoard
	b.init()
	for i := range statusHistory + 7 {
		b.add(statusSample{sessions: i})
	}
	h := b.history()
	if len(h) != statusHistory || h[0].sessions != 7 || h[len(h)-1].sessions != statusHistory+6 {
		t.Fatalf("history of %d: first %d, last %d", len(h), h[0].sessions, h[len(h)-1].sessions)
	}
}

// TestStatusRates: connects per second, the last minute's hit rate and
// mean timings are differences between samples.
func TestStatusRates(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	hist := []statusSample{
		{at: at(0), started: 10, pool: map[string]poolCounters{"m/k": {hits: 5, misses: 5}},
			models: map[string]modelTimings{"m": {ageSum: 10, ageCount: 10, refillSum: 1, refillCount: 10}}},
		{at: at(1), started: 14, pool: map[string]poolCounters{"m/k": {hits: 8, misses: 6}},
			models: map[string]modelTimings{"m": {ageSum: 14, ageCount: 12, refillSum: 1.2, refillCount: 12}}},
		{at: at(2), started: 14, pool: map[string]poolCounters{"m/k": {hits: 8, misses: 6}},
			models: map[string]modelTimings{"m": {ageSum: 14, ageCount: 12, refillSum: 1.2, refillCount: 12}}},
	}
	pk := PoolKeyReport{Model: "m", Key: "k"}
	fillMinute(&pk, hist)
	if pk.Hits != 3 || pk.Misses != 1 || *pk.HitRate != 0.75 || *pk.WarmAgeS != 2 || fmt.Sprintf("%.3f", *pk.RefillS) != "0.100" {
		t.Fatalf("minute: %+v", pk)
	}
	h := historyOf(hist)
	if h.Connects[1] != 4 || h.Connects[2] != 0 || *h.HitRate[1] != 0.75 || h.HitRate[2] != nil {
		t.Fatalf("history: %+v", h)
	}
}
