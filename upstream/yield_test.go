package upstream

import (
	"testing"
	"time"

	"rtgate/internal/testwait"
	"rtgate/mockai"
)

func TestYieldRoom(t *testing.T) {
	window := yieldWindow(100 * time.Millisecond)
	for _, tc := range []struct {
		name             string
		clients, warming int
		latest           time.Duration // the latest client dial's start, since the burst began
		want             int
	}{
		{"no client dials: no limit", 0, 500, 0, unlimited},
		{"one client dial: the floor", 1, 0, 0, yieldFloor},
		{"floor used up", 1, yieldFloor, 0, 0},
		{"a burst of 198 misses: one per share", 198, 0, 0, 198 / yieldShare},
		{"the burst's misses arrived over most of its window", 198, 0, window - time.Millisecond, 198 / yieldShare},
		{"over the share already (dials from before the burst)", 16, 40, 0, yieldFloor - 40},
		{"a miss started past the window: demand, no limit", 198, 40, window, unlimited},
		{"misses kept coming for seconds: no limit", 50, 300, 5 * time.Second, unlimited},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := yieldRoom(tc.clients, tc.warming, tc.latest, window); got != tc.want {
				t.Fatalf("yieldRoom(%d, %d, %v, %v) = %d, want %d", tc.clients, tc.warming, tc.latest, window, got, tc.want)
			}
		})
	}
}

func TestYieldWindow(t *testing.T) {
	for _, tc := range []struct {
		refill, want time.Duration
	}{
		{0, yieldRefills * assumedRefill}, // nothing measured yet
		{100 * time.Millisecond, yieldRefills * 100 * time.Millisecond},
		{400 * time.Millisecond, yieldRefills * 400 * time.Millisecond},
	} {
		if got := yieldWindow(tc.refill); got != tc.want {
			t.Errorf("yieldWindow(%v) = %v, want %v", tc.refill, got, tc.want)
		}
	}
}

// TestPoolYieldsToClientDials: a burst that misses raises the target at
// once, but while a client's own dial is in flight the pool dials only the
// yield floor beside it (against a slow upstream, so the dials are still in
// flight when counted); once the client's dial ends, the pool grows to its
// target at the pace after a burst: what the burst took evenly over
// refillSpread, then the target's headroom evenly over headroomSpread.
func TestPoolYieldsToClientDials(t *testing.T) { eachScheme(t, testPoolYieldsToClientDials) }

func testPoolYieldsToClientDials(t *testing.T, tls bool) {
	m := startMock(t, mockai.Config{UpgradeDelay: 300 * time.Millisecond}, tls)
	clk := newManualClock() // the burst stays in one window however slow the machine
	// MIN 0: nothing warm, so every connect of the burst misses, the first
	// one included (a hit's refill, with no client dialing yet, would not
	// yield to anything).
	p := newTestPool(t, m, PoolConfig{Auto: true, Min: 0, Max: 256, MaxIdle: time.Hour, PingInterval: -1, Clock: clk})
	ta := target(t, m, "k")
	p.Prime(ta, "m")
	if n := p.Dialing(ta); n != 0 {
		t.Fatalf("%d dials for a pool with a floor of 0 and no demand", n)
	}

	var dones []*Miss
	for range 40 { // a burst, taken as the gateway takes: a miss counts as a client dial
		s := &sink{}
		h, _, miss := p.TakeOrDial(ta, "m", s)
		if h != nil {
			s.h = h
			h.Endpoint().Close()
			if miss != nil {
				t.Fatal("a hit returned a Miss")
			}
			continue
		}
		dones = append(dones, miss) // a miss: its fresh dial is in flight
	}
	if len(dones) != 40 {
		t.Fatalf("%d misses, want 40", len(dones))
	}
	target := p.Target(ta)
	if target < 80 {
		t.Fatalf("target after the burst %d, want at least 80 (the burst still counts)", target)
	}
	limit := max(yieldFloor, 40/yieldShare) // 5, well under the 64 the in-flight limit allows
	if n := p.Dialing(ta); n > limit {
		t.Fatalf("%d warm-up dials beside 40 client dials, want at most %d", n, limit)
	}
	// The pool keeps growing, within the limit, while the clients dial.
	testwait.For(t, "a yielded warm-up dial to land", func() bool { return p.Warm(ta) >= 1 })
	if n := p.Dialing(ta); n > limit {
		t.Fatalf("%d warm-up dials in flight while clients dial, want at most %d", n, limit)
	}
	for _, miss := range dones[1:] {
		miss.Done()
	}
	if n := p.Dialing(ta); n > limit {
		t.Fatalf("%d warm-up dials after 39 client dials ended, want no new ones (at most %d)", n, limit)
	}
	// Beside one client dial, the floor: the dials from the burst land and
	// only the floor's replace them.
	testwait.For(t, "the burst's warm-up dials to land", func() bool { return p.Dialing(ta) <= yieldFloor })
	if n := p.Dialing(ta); n > yieldFloor {
		t.Fatalf("%d warm-up dials beside one client dial, want at most %d", n, yieldFloor)
	}
	before := p.Dialing(ta)
	dones[0].Done() // the burst has passed: the refill is spread over refillSpread
	// The deficit is at most the target (which may still grow a little as
	// the first refill times are measured).
	if n, most := p.Dialing(ta), before+paceRoom(p.Target(ta), 0, 0); n > most {
		t.Fatalf("%d warm-up dials the instant the burst passed, want at most %d (the pace's first tick)", n, most)
	}
	clk.Advance(refillSpread)
	// What the burst took is started; the target's headroom is not yet.
	// (The target may have grown since the burst: refill times measured
	// on a loaded machine can exceed a rate window: targetSize.)
	first, now := p.Warm(ta)+p.Dialing(ta), p.Target(ta)
	if first < target/headroom || first >= now {
		t.Fatalf("%d warm or dialing once the first tier has passed, want what the burst took (%d) but not the whole target %d",
			first, target/headroom, now)
	}
	clk.Advance(headroomSpread)
	now = p.Target(ta)
	if n := p.Warm(ta) + p.Dialing(ta); n < now {
		t.Fatalf("%d warm or dialing once both tiers have passed, want the whole target %d started", n, now)
	}
	testwait.For(t, "the pool to reach its target", func() bool { return p.Warm(ta) >= now })
}

func TestPaceRoom(t *testing.T) {
	big := int(^uint(0) >> 1)
	for _, tc := range []struct {
		name             string
		deficit, started int
		elapsed          time.Duration
		want             int
	}{
		{"nothing to refill", 0, 0, 0, big},
		// A deficit of 500 is what a burst took (250) and the target's
		// headroom (250).
		{"the first tick: the floor and a tick's share of the first tier", 500, 0, 0, yieldFloor + 5},
		{"half way through the first tier, nothing started yet", 500, 0, refillSpread/2 - paceTick, yieldFloor + 125},
		{"half way through the first tier, on pace", 500, 125, refillSpread/2 - paceTick, yieldFloor},
		{"the first tier over, a tick into the headroom's", 500, 250, refillSpread, yieldFloor + 3},
		{"half way through the headroom's tier", 500, 250, refillSpread + headroomSpread/2 - paceTick, yieldFloor + 125},
		{"both tiers have passed", 500, 100, refillSpread + headroomSpread, big},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := paceRoom(tc.deficit, tc.started, tc.elapsed); got != tc.want {
				t.Fatalf("paceRoom(%d, %d, %v) = %d, want %d", tc.deficit, tc.started, tc.elapsed, got, tc.want)
			}
		})
	}
}

// TestClientDialingCountsUntilDone: a client dial the pool did not offer to
// serve (a redial) holds the refill back like a miss until its done.
func TestClientDialingCountsUntilDone(t *testing.T) {
	m := startMock(t, mockai.Config{UpgradeDelay: 300 * time.Millisecond}, false)
	clk := newManualClock()
	p := newTestPool(t, m, PoolConfig{Size: 20, PingInterval: -1, Clock: clk})
	ta := target(t, m, "k")
	done := p.ClientDialing()
	p.Prime(ta, "m")
	if n := p.Dialing(ta); n != yieldFloor {
		t.Fatalf("%d warm-up dials beside a client dial, want the floor %d", n, yieldFloor)
	}
	done()
	if n := p.Dialing(ta); n >= 20 {
		t.Fatalf("%d warm-up dials the instant the client dial ended, want the refill spread", n)
	}
	clk.Advance(refillSpread + headroomSpread)
	if n := p.Warm(ta) + p.Dialing(ta); n != 20 {
		t.Fatalf("%d warm or dialing once the spread has passed, want all 20", n)
	}
	if (*Pool)(nil).ClientDialing() == nil {
		t.Fatal("a nil pool's ClientDialing returned no func")
	}
}

// TestRefillRule: how much of a fixed pool of 10 is warm or dialing after
// each sequence, by the yield rule (growRoomLocked): a hit's replacement never yields,
// growth yields within a burst's window (to the floor beside one client
// dial) and not past it while client dials keep starting, and is paced
// once the burst has passed. The upstream answers slowly, so that the dials
// are still in flight when counted (warm + dialing is counted either way).
func TestRefillRule(t *testing.T) {
	const size = 10
	window := yieldWindow(0) // no dial measured when the burst begins
	for _, tc := range []struct {
		name string
		// fill: the pool is full (and its refill time measured, which sets
		// the window) before run.
		fill bool
		run  func(p *testPool, clk *manualClock, ta Target)
		want int
	}{
		{"a hit's replacement starts beside a burst's dials", true, func(p *testPool, clk *manualClock, ta Target) {
			p.ClientDialing() // in flight to the end
			for range 5 {
				s := &sink{}
				if s.h, _ = p.Take(ta, "m", s); s.h == nil {
					panic("a full pool missed")
				}
				s.h.Endpoint().Close()
			}
		}, size},
		{"growth beside a burst's dial yields to the floor", false, func(p *testPool, clk *manualClock, ta Target) {
			p.ClientDialing()
			p.Prime(ta, "m")
		}, yieldFloor},
		{"growth once a client dial starts past the window: none held back", false, func(p *testPool, clk *manualClock, ta Target) {
			p.ClientDialing()
			p.Prime(ta, "m")
			clk.Advance(window)
			p.ClientDialing() // misses keep coming
			p.Prime(ta, "m")  // any refill
		}, size},
		{"the burst's own dial, however slow, holds growth back", false, func(p *testPool, clk *manualClock, ta Target) {
			p.ClientDialing()
			p.Prime(ta, "m")
			clk.Advance(10 * window)
			p.Prime(ta, "m")
		}, yieldFloor},
		{"a gap shorter than a window is the same burst", false, func(p *testPool, clk *manualClock, ta Target) {
			done := p.ClientDialing()
			p.Prime(ta, "m")
			clk.Advance(window)
			done()
			clk.Advance(window / 2)
			p.ClientDialing()
			clk.Advance(refillSpread + headroomSpread) // the pace started at done() has passed
			p.Prime(ta, "m")
		}, size},
		{"a client dial after a quiet window begins a new burst", false, func(p *testPool, clk *manualClock, ta Target) {
			done := p.ClientDialing()
			clk.Advance(window)
			done()
			clk.Advance(window)
			p.ClientDialing()
			p.Prime(ta, "m")
		}, yieldFloor},
		{"once the burst has passed, growth is paced", false, func(p *testPool, clk *manualClock, ta Target) {
			done := p.ClientDialing()
			p.Prime(ta, "m")
			done()
		}, yieldFloor + paceRoom(size, 0, 0)},
		{"and the pace passes", false, func(p *testPool, clk *manualClock, ta Target) {
			done := p.ClientDialing()
			p.Prime(ta, "m")
			done()
			clk.Advance(refillSpread + headroomSpread)
		}, size},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := startMock(t, mockai.Config{UpgradeDelay: 300 * time.Millisecond}, false)
			clk := newManualClock()
			p := newTestPool(t, m, PoolConfig{Size: size, PingInterval: -1, MaxIdle: time.Hour, Clock: clk})
			ta := target(t, m, "k")
			if tc.fill {
				p.Prime(ta, "m")
				testwait.For(t, "the pool to fill", func() bool { return p.Warm(ta) == size })
			}
			tc.run(p, clk, ta)
			if n := p.Warm(ta) + p.Dialing(ta); n != tc.want {
				t.Fatalf("%d warm or dialing, want %d", n, tc.want)
			}
		})
	}
}

// TestPoolCatchesUpWithSustainedMisses: misses that keep coming (a client
// dial starting every 25 ms, each in flight for 100 ms, so that client
// dials are always in flight) raise an auto pool's target, and the pool
// reaches it while they still come, instead of yielding to them for as
// long as they last; then connects hit. Before, warm-up dials were held to
// max(2, client dials / 8) while any client dial was in flight, and the
// pool stayed empty. On the manual clock, so that the rate windows are
// exact however slow the machine; the dials themselves are real.
func TestPoolCatchesUpWithSustainedMisses(t *testing.T) {
	eachScheme(t, testPoolCatchesUpWithSustainedMisses)
}

func testPoolCatchesUpWithSustainedMisses(t *testing.T, tls bool) {
	m := startMock(t, mockai.Config{UpgradeDelay: 100 * time.Millisecond}, tls)
	clk := newManualClock()
	p := newTestPool(t, m, PoolConfig{Auto: true, Min: 0, Max: 64, MaxIdle: time.Hour, PingInterval: -1, Clock: clk})
	ta := target(t, m, "k")
	p.Prime(ta, "m")

	var inFlight []*Miss // client dials in flight, oldest first
	step := func(misses int) (hits int) {
		clk.Advance(25 * time.Millisecond)
		if len(inFlight) > 4*misses { // each client dial lasts 4 steps
			for _, miss := range inFlight[:misses] {
				miss.Done()
			}
			inFlight = inFlight[misses:]
		}
		for range misses {
			s := &sink{}
			h, _, miss := p.TakeOrDial(ta, "m", s)
			if h != nil {
				s.h = h
				h.Endpoint().Close()
				hits++
				continue
			}
			inFlight = append(inFlight, miss)
		}
		return hits
	}
	// The burst's window: growth yields to the misses' dials.
	for range int(yieldWindow(0) / (25 * time.Millisecond)) { // the first miss begins it, 25 ms in
		if hits := step(4); hits > 0 {
			t.Fatalf("%d hits in a pool with no floor before it grew", hits)
		}
		if n, most := p.Dialing(ta), max(yieldFloor, len(inFlight)/yieldShare); n > most {
			t.Fatalf("%d warm-up dials beside %d client dials within the burst's window, want at most %d", n, len(inFlight), most)
		}
	}
	// Misses keep coming past the window: the pool grows to its target
	// while client dials are in flight (none of them is ever Done here
	// beyond the 4-step life above, and new ones start every step).
	target := p.Target(ta)
	if target < 32 {
		t.Fatalf("target %d after 4 misses per 25 ms, want at least 32", target)
	}
	step(4)
	if len(inFlight) == 0 {
		t.Fatal("no client dial in flight")
	}
	if n := p.Warm(ta) + p.Dialing(ta); n < p.Target(ta) {
		t.Fatalf("%d warm or dialing once misses kept coming past the window, want the target %d", n, p.Target(ta))
	}
	testwait.For(t, "the pool to reach its target with client dials in flight", func() bool {
		return p.Warm(ta) >= p.Target(ta)
	})
	if hits := step(4); hits != 4 {
		t.Fatalf("%d of 4 connects hit once the pool reached its target, want all", hits)
	}
	for _, miss := range inFlight {
		miss.Done()
	}
}
