package upstream

import (
	"testing"
	"time"

	"rtgate/internal/testwait"
	"rtgate/mockai"
)

func TestYieldRoom(t *testing.T) {
	big := int(^uint(0) >> 1)
	for _, tc := range []struct {
		name             string
		clients, warming int
		want             int
	}{
		{"no client dials: no limit", 0, 500, big},
		{"one client dial: the floor", 1, 0, yieldFloor},
		{"floor used up", 1, yieldFloor, 0},
		{"a burst of 198 misses: one per share", 198, 0, 198 / yieldShare},
		{"over the share already (dials from before the burst)", 16, 40, yieldFloor - 40},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := yieldRoom(tc.clients, tc.warming); got != tc.want {
				t.Fatalf("yieldRoom(%d, %d) = %d, want %d", tc.clients, tc.warming, got, tc.want)
			}
		})
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
	// on a loaded machine can exceed a rate window, sizing.go.)
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
