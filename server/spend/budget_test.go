package spend

import (
	"context"
	"math"
	"path/filepath"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"rtgate/server/redistest"
)

func TestParseDuration(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{"", 0, true},
		{"30s", 30 * time.Second, true},
		{"30m", 30 * time.Minute, true},
		{"1h", time.Hour, true},
		{"30d", 30 * 24 * time.Hour, true},
		{"2w", 14 * 24 * time.Hour, true},
		{"1mo", 30 * 24 * time.Hour, true},
		{"0d", 0, false},
		{"1.5h", 0, false},
		{"h", 0, false},
		{"-1d", 0, false},
		{"30 d", 0, false},
		{"1y", 0, false},
		{"99999999999999999999d", 0, false},
	} {
		got, err := ParseDuration(tc.in)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("ParseDuration(%q) = %v, %v; want %v, ok %v", tc.in, got, err, tc.want, tc.ok)
		}
	}
}

// TestLedgerWindows: the window starts at the first spend and resets every
// duration after it, not at fixed clock times; a lifetime budget never
// resets.
func TestLedgerWindows(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 9, 17, 0, 0, time.UTC)
	hourly := Budget{Max: 1, Every: time.Hour}
	l := NewLedger()
	if got := l.Spent("a", hourly, t0); got != 0 {
		t.Fatalf("spent before any spend: %v", got)
	}
	steps := []struct {
		at        time.Duration // after t0
		book      float64
		wantSpent float64
	}{
		{0, 0.25, 0.25},
		{30 * time.Minute, 0.5, 0.75},
		{59 * time.Minute, 0, 0.75},
		{60 * time.Minute, 0, 0}, // 10:17: the second window
		{61 * time.Minute, 0.125, 0.125},
		{3*time.Hour + 5*time.Minute, 0.5, 0.5}, // windows with no spend pass
	}
	for _, s := range steps {
		now := t0.Add(s.at)
		got := l.Book("a", hourly, s.book, now)
		if math.Abs(got-s.wantSpent) > 1e-12 || l.Spent("a", hourly, now) != got {
			t.Fatalf("at +%v after booking %v: spent %v, want %v", s.at, s.book, got, s.wantSpent)
		}
	}
	if r := hourly.ResetsIn(t0, t0.Add(3*time.Hour+5*time.Minute)); r != 55*time.Minute {
		t.Fatalf("ResetsIn %v, want 55m", r)
	}
	life := Budget{Max: 1}
	l.Book("b", life, 0.5, t0)
	if got := l.Spent("b", life, t0.Add(365*24*time.Hour)); got != 0.5 {
		t.Fatalf("lifetime budget spent %v a year on, want 0.5", got)
	}
}

// TestLedgerSurvivesRestart saves and loads the state file.
func TestLedgerSurvivesRestart(t *testing.T) {
	path := filepath.Join(t.TempDir(), "budgets.json")
	t0 := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	b := Budget{Max: 2, Every: 24 * time.Hour}
	l := NewLedger()
	l.Book("team-a", b, 1.5, t0)
	if err := l.Save(path); err != nil {
		t.Fatal(err)
	}
	l2, err := LoadLedger(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := l2.Spent("team-a", b, t0.Add(time.Hour)); got != 1.5 {
		t.Fatalf("after a restart: spent %v, want 1.5", got)
	}
	if got := l2.Book("team-a", b, 0.25, t0.Add(25*time.Hour)); got != 0.25 {
		t.Fatalf("next day: spent %v, want 0.25 (the window anchored at the first spend reset)", got)
	}
	if missing, err := LoadLedger(filepath.Join(t.TempDir(), "none.json")); err != nil || missing.Spent("x", b, t0) != 0 {
		t.Fatalf("a missing state file: %v", err)
	}
}

// sharedRedis starts a real redis-server and the Shared store on it.
func sharedRedis(t *testing.T) (*redistest.Server, Shared) {
	t.Helper()
	rs := redistest.Start(t)
	opt, err := redis.ParseURL(rs.URL())
	if err != nil {
		t.Fatal(err)
	}
	client := redis.NewClient(opt)
	t.Cleanup(func() { _ = client.Close() })
	return rs, Shared{Client: client, Prefix: "rtgate-test:"}
}

// TestLedgerSharedThroughRedis: two instances book into one Redis and each
// sees the other's spend after a sync; Redis down loses nothing.
func TestLedgerSharedThroughRedis(t *testing.T) {
	rs, shared := sharedRedis(t)
	b := Budget{Max: 1, Every: time.Hour}
	budgets := map[string]Budget{"team-a": b}
	ctx := context.Background()
	now := time.Now()

	one, two := NewLedger(), NewLedger()
	one.Book("team-a", b, 0.25, now)
	two.Book("team-a", b, 0.5, now)
	for _, l := range []*Ledger{one, two, one} {
		if err := l.Sync(ctx, shared, budgets, now); err != nil {
			t.Fatal(err)
		}
	}
	for i, l := range []*Ledger{one, two} {
		if got := l.Spent("team-a", b, now); math.Abs(got-0.75) > 1e-12 {
			t.Fatalf("instance %d sees %v, want 0.75", i+1, got)
		}
	}
	a1, _ := one.Anchor("team-a")
	a2, _ := two.Anchor("team-a")
	if !a1.Equal(a2) {
		t.Fatalf("the instances disagree on the window: %v and %v", a1, a2)
	}

	rs.Stop()
	one.Book("team-a", b, 0.125, now)
	cctx, cancel := context.WithTimeout(ctx, time.Second)
	if err := one.Sync(cctx, shared, budgets, now); err == nil {
		t.Fatal("Sync with Redis down succeeded")
	}
	cancel()
	if got := one.Spent("team-a", b, now); math.Abs(got-0.875) > 1e-12 {
		t.Fatalf("with Redis down the instance sees %v, want 0.875 (its own booking on top)", got)
	}
	rs.Start() // empty again: a Redis without persistence lost the totals
	if err := one.Sync(ctx, shared, budgets, now); err != nil {
		t.Fatal(err)
	}
	if err := two.Sync(ctx, shared, budgets, now); err != nil {
		t.Fatal(err)
	}
	if got := two.Spent("team-a", b, now); math.Abs(got-0.125) > 1e-12 {
		t.Fatalf("after Redis came back empty: instance 2 sees %v, want the 0.125 pushed since", got)
	}
}

// TestLedgerShareWhileRedisIsAway: two instances share a budget of 1 USD
// through a real Redis, 0.4 spent. Redis then stops answering (SIGSTOP):
// each instance may let the key spend only its half of the 0.6 that
// remained at its last good sync (Cap 0.7), so that together they spend at
// most the budget; an instance that never synced may let it spend nothing.
// Once Redis answers, the whole budget is the cap again.
func TestLedgerShareWhileRedisIsAway(t *testing.T) {
	rs, shared := sharedRedis(t)
	b := Budget{Max: 1, Every: time.Hour}
	budgets := map[string]Budget{"team-a": b}
	ctx := context.Background()
	now := time.Now()
	const half = 0.5 // each instance's part: 1 ÷ the 2 instances

	one, two, late := NewLedger(), NewLedger(), NewLedger()
	if got := one.Cap("team-a", b, half, true, now); got != 1 {
		t.Fatalf("a ledger that was never shared: cap %v, want the budget", got)
	}
	one.Book("team-a", b, 0.4, now)
	for _, l := range []*Ledger{one, two} {
		if err := l.Sync(ctx, shared, budgets, now); err != nil {
			t.Fatal(err)
		}
		if got := l.Cap("team-a", b, half, true, now); got != 1 {
			t.Fatalf("Redis answering: cap %v, want the budget", got)
		}
	}

	rs.Freeze()
	defer rs.Thaw()
	failSync := func(l *Ledger) {
		t.Helper()
		cctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		defer cancel()
		if err := l.Sync(cctx, shared, budgets, now); err == nil {
			t.Fatal("Sync with Redis frozen succeeded")
		}
	}
	for _, l := range []*Ledger{one, two, late} {
		failSync(l)
	}
	spent := 0.4
	for i, l := range []*Ledger{one, two} {
		limit := l.Cap("team-a", b, half, true, now)
		if math.Abs(limit-0.7) > 1e-12 || !l.Cut() {
			t.Fatalf("instance %d, Redis away: cap %v (cut %v), want 0.4 + half of 0.6 = 0.7", i+1, limit, l.Cut())
		}
		// Spend in steps while the instance's cap allows, as budgets.check
		// and the meter do.
		for l.Spent("team-a", b, now) < limit {
			l.Book("team-a", b, 0.05, now)
			spent += 0.05
		}
	}
	if spent > 1+0.05*2+1e-9 { // each may overshoot by the one response that took it over
		t.Fatalf("the instances spent %v of a budget of 1 while Redis was away", spent)
	}
	if got := late.Cap("team-a", b, half, true, now); got != 0 {
		t.Fatalf("an instance that never synced: cap %v, want 0", got)
	}
	if got := one.Cap("team-a", b, 0, false, now); got != 0 {
		t.Fatalf("an instance that knows no part: cap %v, want 0", got)
	}

	rs.Thaw()
	for _, l := range []*Ledger{one, two, one} {
		if err := l.Sync(ctx, shared, budgets, now); err != nil {
			t.Fatal(err)
		}
	}
	if got, c := one.Spent("team-a", b, now), one.Cap("team-a", b, half, true, now); math.Abs(got-spent) > 1e-9 || c != 1 {
		t.Fatalf("Redis back: spent %v cap %v, want %v and the whole budget", got, c, spent)
	}
}
