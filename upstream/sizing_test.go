package upstream

import (
	"testing"
	"time"
)

func TestTargetSize(t *testing.T) {
	auto := PoolConfig{Auto: true, Min: 2, Max: 512}
	cases := []struct {
		name string
		cfg  PoolConfig
		d    demand
		want int
	}{
		{"fixed size ignores demand", PoolConfig{Size: 4}, demand{primed: true, burst: 900}, 4},
		{"fixed size, one-off key in use", PoolConfig{Size: 4}, demand{burst: 1}, 4},
		{"one-off key idle holds nothing, fixed", PoolConfig{Size: 4}, demand{idle: true}, 0},
		{"one-off key idle holds nothing, auto", auto, demand{idle: true, burst: 50}, 0},
		{"primed and idle keeps its floor", auto, demand{primed: true, idle: true}, 2},
		{"auto, no demand: the floor", auto, demand{primed: true, refill: 50 * time.Millisecond}, 2},
		// short refills: hold twice the burst
		{"auto, short refill", auto, demand{primed: true, burst: 10, refill: 50 * time.Millisecond}, 2 + 20},
		{"auto, refill exactly one window", auto, demand{primed: true, burst: 10, refill: 250 * time.Millisecond}, 2 + 20},
		// long refills: twice a refill's worth of connects at the burst's rate
		{"auto, 500 ms refill", auto, demand{primed: true, burst: 10, refill: 500 * time.Millisecond}, 2 + 40},
		{"auto, 1 s refill", auto, demand{primed: true, burst: 7, refill: time.Second}, 2 + 56},
		{"auto, unmeasured refill assumes 200 ms", auto, demand{primed: true, burst: 10}, 2 + 20},
		{"auto, rounds up", auto, demand{primed: true, burst: 1, refill: 300 * time.Millisecond}, 2 + 3},
		{"auto, clamped to Max", auto, demand{primed: true, burst: 625, refill: 105 * time.Millisecond}, 512},
		{"auto, one-off key has no floor", auto, demand{burst: 3, refill: 100 * time.Millisecond}, 6},
		{"auto, one-off key with no demand", auto, demand{refill: 100 * time.Millisecond}, 0},
	}
	for _, tc := range cases {
		if got := targetSize(tc.cfg, tc.d); got != tc.want {
			t.Errorf("%s: targetSize = %d, want %d", tc.name, got, tc.want)
		}
	}
}

func TestInflightLimit(t *testing.T) {
	cfg := PoolConfig{MaxInflight: 1024}
	cases := []struct {
		name string
		cfg  PoolConfig
		d    demand
		want int
	}{
		{"no demand: the minimum", cfg, demand{refill: 100 * time.Millisecond}, minInflight},
		{"light demand: the minimum", cfg, demand{burst: 10, refill: 100 * time.Millisecond}, minInflight},
		// 2,500 connects/s (625 per 250 ms window) with a 105 ms refill:
		// λW = 262.5, twice that rounded up. A fixed 256 fell behind here.
		{"the stress point", cfg, demand{burst: 625, refill: 105 * time.Millisecond}, 525},
		{"slow refills need more", cfg, demand{burst: 625, refill: 400 * time.Millisecond}, 1024},
		{"unmeasured refill assumes 200 ms", cfg, demand{burst: 100}, 160},
		{"the ceiling bounds it", PoolConfig{MaxInflight: 300}, demand{burst: 625, refill: 105 * time.Millisecond}, 300},
		{"a ceiling below the minimum wins", PoolConfig{MaxInflight: 8}, demand{}, 8},
		{"no ceiling configured: the default", PoolConfig{}, demand{burst: 5000, refill: time.Second}, defaultMaxInflight},
	}
	for _, tc := range cases {
		if got := inflightLimit(tc.cfg, tc.d); got != tc.want {
			t.Errorf("%s: inflightLimit = %d, want %d", tc.name, got, tc.want)
		}
	}
}

// TestDemandWindows drives the demand estimate through its windows: the
// busiest 250 ms window is remembered for 10 s, then forgotten.
func TestDemandWindows(t *testing.T) {
	start := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	kp := &keyPool{windowStart: start}
	p := &Pool{cfg: PoolConfig{Auto: true}}
	at := func(d time.Duration) time.Time { return start.Add(d) }
	for i := range 30 { // 30 connects in the first window
		kp.noteTake(at(time.Duration(i) * time.Millisecond))
	}
	for i := range 5 { // 5 in a later one
		kp.noteTake(at(3*time.Second + time.Duration(i)*time.Millisecond))
	}
	steps := []struct {
		at        time.Duration
		wantBurst int
	}{
		{100 * time.Millisecond, 30},
		{5 * time.Second, 30},
		{9*time.Second + 999*time.Millisecond, 30},
		{10 * time.Second, 5}, // the first window has left the memory
		{13 * time.Second, 0},
		{time.Hour, 0},
	}
	for _, st := range steps {
		if got := p.demandLocked(kp, at(st.at)).burst; got != st.wantBurst {
			t.Errorf("at %v: burst %d, want %d", st.at, got, st.wantBurst)
		}
	}
	kp.noteTake(at(time.Hour))
	if got := p.demandLocked(kp, at(time.Hour)).burst; got != 1 {
		t.Errorf("after an hour's gap: burst %d, want 1", got)
	}
}

func TestRefillSmoothing(t *testing.T) {
	kp := &keyPool{}
	kp.noteRefill(100 * time.Millisecond)
	if kp.refillTime != 100*time.Millisecond {
		t.Fatalf("first measurement %v, want 100ms", kp.refillTime)
	}
	kp.noteRefill(600 * time.Millisecond)
	if kp.refillTime != 200*time.Millisecond {
		t.Fatalf("after a 600 ms refill: %v, want 200ms (a fifth of the way)", kp.refillTime)
	}
}
