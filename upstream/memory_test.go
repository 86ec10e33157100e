package upstream

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"rtgate/internal/testwait"
	"rtgate/mockai"
)

func TestRememberedRateFades(t *testing.T) {
	at := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	r := Remembered{Rate: 400, At: at}
	for _, tc := range []struct {
		name  string
		after time.Duration
		want  float64
	}{
		{"at once", 0, 400},
		{"one half-life", demandHalfLife, 200},
		{"two half-lives", 2 * demandHalfLife, 100},
		{"below half a connect per window", 11 * demandHalfLife, 0}, // 400/2048 per s × 250 ms < 0.5
		{"past the forget horizon", demandForget + time.Second, 0},
		{"measured in the future (a clock step): as measured", -time.Minute, 400},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := r.RateAt(at.Add(tc.after))
			if d := got - tc.want; d > 0.01 || d < -0.01 {
				t.Fatalf("rate after %v = %v, want %v", tc.after, got, tc.want)
			}
		})
	}
	// The lightest peak there is, one connect in a window, is remembered
	// for a while, not forgotten as soon as it starts to fade.
	if got := (Remembered{Rate: 4, At: at}).RateAt(at.Add(time.Minute)); got <= 0 {
		t.Fatal("a peak of one connect per window is forgotten a minute later")
	}
}

func TestFileMemoryRoundTrip(t *testing.T) {
	dir := t.TempDir()
	f := FileMemory{Path: filepath.Join(dir, "pool.json")}
	at := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	want := map[string]Remembered{
		strings.Repeat("a", 64): {Rate: 160, RefillMS: 212.5, At: at},
		strings.Repeat("b", 64): {Rate: 4, RefillMS: 0, At: at.Add(time.Second)},
	}
	for range 2 { // the second write replaces the first
		if err := f.Save(context.Background(), want); err != nil {
			t.Fatal(err)
		}
	}
	got, err := f.Load(context.Background(), time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Fatalf("loaded %d keys, want %d", len(got), len(want))
	}
	for k, w := range want {
		if g := got[k]; g.Rate != w.Rate || g.RefillMS != w.RefillMS || !g.At.Equal(w.At) {
			t.Fatalf("key %s…: loaded %+v, want %+v", k[:8], g, w)
		}
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 1 {
		t.Fatalf("%d files in the state folder, want only the state file (no temporary left)", len(ents))
	}
}

// logBuffer is a slog destination a test can read while the pool logs.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestPoolStateMissingOrCorruptIsColdStart: a missing, corrupt or
// unknown-version state file means a cold start (ready at once, the floor
// as target) with one log line, and the next write replaces the bad file.
func TestPoolStateMissingOrCorruptIsColdStart(t *testing.T) {
	m := startMock(t, mockai.Config{}, false)
	for _, tc := range []struct {
		name, content, logged string
	}{
		{"missing", "", "no remembered demand yet"},
		{"corrupt", `{"version":1,"keys":{"ab`, "unreadable"},
		{"not json", "\x00\x01garbage", "unreadable"},
		{"unknown version", `{"version":99,"keys":{}}`, "unreadable"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "pool.json")
			if tc.content != "" {
				if err := os.WriteFile(path, []byte(tc.content), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			var logs logBuffer
			clk := newManualClock()
			p := newTestPoolLog(t, m, PoolConfig{Auto: true, Min: 2, Max: 64, PingInterval: -1, Clock: clk,
				Memory: FileMemory{Path: path}}, slog.New(slog.NewTextHandler(&logs, nil)))
			ta := target(t, m, "k")
			p.Prime(ta, "m")
			if p.Warming() {
				t.Fatal("a cold start reports warming")
			}
			if got := p.Target(ta); got != 2 {
				t.Fatalf("cold target %d, want the floor 2", got)
			}
			if n := strings.Count(logs.String(), "starting cold"); n != 1 {
				t.Fatalf("%d cold-start log lines, want 1:\n%s", n, logs.String())
			}
			if !strings.Contains(logs.String(), tc.logged) {
				t.Fatalf("log does not say %q:\n%s", tc.logged, logs.String())
			}
			clk.Advance(stateEvery) // the periodic write replaces the bad file
			if _, err := (FileMemory{Path: path}).Load(context.Background(), time.Time{}); err != nil {
				t.Fatalf("after a write the state does not load: %v", err)
			}
		})
	}
}

// TestPoolRestartsFromRememberedDemand: a pool that saw a burst writes its
// demand when it closes; a new pool on the same state file starts with the
// burst's target, reports Warming until it holds most of it, then not.
func TestPoolRestartsFromRememberedDemand(t *testing.T) {
	eachScheme(t, testPoolRestartsFromRememberedDemand)
}

func testPoolRestartsFromRememberedDemand(t *testing.T, tls bool) {
	m := startMock(t, mockai.Config{}, tls)
	mem := FileMemory{Path: filepath.Join(t.TempDir(), "pool.json")}
	// MAX bounds the restored pool, so that it fills in seconds over TLS
	// on a loaded machine too.
	cfg := PoolConfig{Auto: true, Min: 1, Max: 96, MaxIdle: time.Hour, PingInterval: -1, Memory: mem}

	clk := newManualClock()
	cfg.Clock = clk
	first := newTestPool(t, m, cfg)
	ta := target(t, m, "k")
	first.Prime(ta, "m")
	testwait.For(t, "the floor to warm", func() bool { return first.Warm(ta) == 1 })
	for range 40 {
		s := &sink{}
		if h, _ := first.Take(ta, "m", s); h != nil {
			s.h = h
			h.Endpoint().Close()
		}
	}
	burstTarget := first.Target(ta)
	if burstTarget < 81 {
		t.Fatalf("target after the burst %d, want at least 81", burstTarget)
	}
	first.Close() // at drain: writes the state

	// The restart, a minute later on the pool's clock.
	clk2 := newManualClock()
	clk2.Advance(time.Minute)
	cfg.Clock = clk2
	second := newTestPool(t, m, cfg)
	if !second.Warming() {
		t.Fatal("a pool with remembered demand is not warming at start")
	}
	second.Prime(ta, "m")
	restored := second.Target(ta)
	// 1 + 2 × ceil(40 × 2^(-1/5)) = 71 at least: the burst faded by a
	// minute (more if refills were slow, up to MAX).
	if restored < 71 || restored > cfg.Max {
		t.Fatalf("restored target %d, want between 71 and MAX %d (the burst's was %d)", restored, cfg.Max, burstTarget)
	}
	if !second.Warming() {
		t.Fatal("warming ended before the pool filled")
	}
	testwait.For(t, "the restored pool to fill and stop warming", func() bool { return !second.Warming() })
	if w := second.Warm(ta); float64(w) < warmEnough*float64(restored) {
		t.Fatalf("ready with %d warm of %d, want at least %.0f%%", w, restored, 100*warmEnough)
	}
	if second.Warming() {
		t.Fatal("warming came back")
	}
}

// TestPoolWarmingIsBounded: a pool that cannot fill (its upstream holds
// every upgrade) stops reporting Warming after WarmupBound on its clock.
func TestPoolWarmingIsBounded(t *testing.T) {
	m := startMock(t, mockai.Config{UpgradeDelay: time.Hour}, false)
	mem := FileMemory{Path: filepath.Join(t.TempDir(), "pool.json")}
	ta := target(t, m, "k")
	clk := newManualClock()
	if err := mem.Save(context.Background(), map[string]Remembered{Key(ta): {Rate: 100, RefillMS: 100, At: clk.Now()}}); err != nil {
		t.Fatal(err)
	}
	p := newTestPool(t, m, PoolConfig{Auto: true, Min: 1, Max: 256, PingInterval: -1, Clock: clk, Memory: mem,
		WarmupBound: 3 * time.Second})
	p.Prime(ta, "m")
	if !p.Warming() {
		t.Fatal("not warming at start")
	}
	clk.Advance(2 * time.Second)
	if !p.Warming() {
		t.Fatal("warming ended before its bound with nothing warm")
	}
	clk.Advance(time.Second)
	if p.Warming() {
		t.Fatal("still warming past POOL_WARMUP_SECS")
	}
}

// TestPoolRememberedDemandFades: demand remembered long ago starts a pool
// smaller (halved per half-life) or cold (past the horizon), and a seeded
// key hands over to what auto measures once it has seen burstMemory of its
// own traffic.
func TestPoolRememberedDemandFades(t *testing.T) {
	m := startMock(t, mockai.Config{UpgradeDelay: time.Hour}, false) // nothing fills: only the targets matter
	ta := target(t, m, "k")
	for _, tc := range []struct {
		name    string
		age     time.Duration
		want    int
		warming bool
	}{
		// 1 + 2 × ceil(rate × 250 ms) × max(1, 100 ms / 250 ms)
		{"fresh", 0, 1 + 2*40, true},
		{"one half-life old", demandHalfLife, 1 + 2*20, true},
		{"three half-lives old", 3 * demandHalfLife, 1 + 2*5, true},
		{"past the horizon", demandForget + time.Minute, 1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mem := FileMemory{Path: filepath.Join(t.TempDir(), "pool.json")}
			clk := newManualClock()
			if err := mem.Save(context.Background(), map[string]Remembered{
				Key(ta): {Rate: 160, RefillMS: 100, At: clk.Now().Add(-tc.age)}}); err != nil {
				t.Fatal(err)
			}
			p := newTestPool(t, m, PoolConfig{Auto: true, Min: 1, Max: 256, PingInterval: -1, Clock: clk, Memory: mem})
			p.Prime(ta, "m")
			if got := p.Target(ta); got != tc.want {
				t.Fatalf("target %d, want %d", got, tc.want)
			}
			if got := p.Warming(); got != tc.warming {
				t.Fatalf("warming %v, want %v", got, tc.warming)
			}
		})
	}

	t.Run("hands over to auto", func(t *testing.T) {
		mem := FileMemory{Path: filepath.Join(t.TempDir(), "pool.json")}
		clk := newManualClock()
		if err := mem.Save(context.Background(), map[string]Remembered{Key(ta): {Rate: 160, RefillMS: 100, At: clk.Now()}}); err != nil {
			t.Fatal(err)
		}
		p := newTestPool(t, m, PoolConfig{Auto: true, Min: 1, Max: 256, PingInterval: -1, Clock: clk, Memory: mem})
		p.Prime(ta, "m")
		if h, _ := p.Take(ta, "m", &sink{}); h != nil { // one light connect
			t.Fatal("a socket was warm against an upstream that holds every upgrade")
		}
		clk.Advance(burstMemory - time.Second)
		if got := p.Target(ta); got < 60 {
			t.Fatalf("target %d within burstMemory of the first connect, want the seed's", got)
		}
		clk.Advance(2 * time.Second)
		if got := p.Target(ta); got != 1 {
			t.Fatalf("target %d after burstMemory of light traffic, want auto's floor 1", got)
		}
	})
}
