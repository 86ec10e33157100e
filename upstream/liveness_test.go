package upstream

import (
	"sync"
	"testing"
	"time"

	"rtgate/frames"
	"rtgate/internal/testwait"
	"rtgate/mockai"
	"rtgate/poller"
)

func TestWheel(t *testing.T) {
	start := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	at := func(d time.Duration) time.Time { return start.Add(d) }
	var wh wheel
	wh.init(100*time.Millisecond, start)
	a, b, c, d := &warmConn{}, &warmConn{}, &warmConn{}, &warmConn{}
	wh.add(a, at(250*time.Millisecond))
	wh.add(b, at(250*time.Millisecond+wheelSlots*100*time.Millisecond)) // same slot, a turn later
	wh.add(c, at(-time.Second))                                         // already due
	wh.add(d, at(time.Hour))
	steps := []struct {
		now  time.Duration
		want []*warmConn
	}{
		{0, []*warmConn{c}},
		{199 * time.Millisecond, nil},
		{299 * time.Millisecond, []*warmConn{a}},
		{5 * time.Second, nil},
		{6*time.Second + 650*time.Millisecond, []*warmConn{b}},
		{6*time.Second + 650*time.Millisecond, nil}, // not twice
		{2 * time.Hour, []*warmConn{d}},             // the janitor was late by many turns
	}
	for _, st := range steps {
		got := wh.due(at(st.now))
		if len(got) != len(st.want) {
			t.Fatalf("at %v: %d due, want %d", st.now, len(got), len(st.want))
		}
		for i := range got {
			if got[i] != st.want[i] {
				t.Fatalf("at %v: the wrong socket is due", st.now)
			}
		}
	}
}

// recorder is an Owner that keeps every byte the upstream sends it.
type recorder struct {
	h   *poller.Handle
	mu  sync.Mutex
	got []byte
}

func (r *recorder) UpstreamReadable() {
	_ = r.h.Endpoint().Read(func(src frames.Source) error {
		p, err := src.Next(src.Len())
		r.mu.Lock()
		r.got = append(r.got, p...)
		r.mu.Unlock()
		return err
	})
}
func (r *recorder) UpstreamGone() {}

func (r *recorder) bytes() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.got)
}

// An idle warm socket whose upstream stopped answering (mockai stops
// reading after session.created, so pings go unanswered, as behind a
// middlebox that dropped the flow) is not handed out while its ping is
// unanswered, and is retired and replaced when the pong is overdue.
func TestPoolRetiresSocketsThatMissTheirPong(t *testing.T) {
	eachScheme(t, testPoolRetiresSocketsThatMissTheirPong)
}

// warmOnManualClock starts a pool of cfg on a manual clock, primes it for
// key "k" and model "m" and waits until all cfg.Size sockets are warm.
func warmOnManualClock(t *testing.T, m *mockai.Server, cfg PoolConfig) (*testPool, *manualClock, Target) {
	t.Helper()
	clk := newManualClock()
	cfg.Clock = clk
	p := newTestPool(t, m, cfg)
	ta := target(t, m, "k")
	p.Prime(ta, "m")
	testwait.For(t, "the pool to warm", func() bool { return p.Warm(ta) == cfg.Size })
	return p, clk, ta
}

func testPoolRetiresSocketsThatMissTheirPong(t *testing.T, tls bool) {
	m := startMock(t, mockai.Config{StopReading: true}, tls)
	p, clk, ta := warmOnManualClock(t, m, PoolConfig{Size: 2, PingInterval: time.Second, PongTimeout: 500 * time.Millisecond})
	start := clk.Now()

	// Each socket's first check falls in 0.5-1 s; step through it.
	var firstPing, lastPing time.Duration
	for p.sum(t, "rtgate_pool_pings_total") < 2 {
		clk.Advance(10 * time.Millisecond)
		switch got := p.sum(t, "rtgate_pool_pings_total"); {
		case got >= 1 && firstPing == 0:
			firstPing = clk.Now().Sub(start)
			fallthrough
		case got == 2:
			lastPing = clk.Now().Sub(start)
		}
		if clk.Now().Sub(start) > time.Second {
			t.Fatalf("%v pings in the first interval, want 2", p.sum(t, "rtgate_pool_pings_total"))
		}
	}
	if firstPing < 500*time.Millisecond {
		t.Fatalf("first ping at %v, before half the interval", firstPing)
	}
	if h, _ := p.Take(ta, "m", &sink{}); h != nil {
		t.Fatal("a socket with its ping unanswered was handed out")
	}
	if got := p.Warm(ta); got != 2 {
		t.Fatalf("a take dropped pinged sockets: %d warm, want 2", got)
	}
	for clk.Now().Sub(start) < firstPing+490*time.Millisecond {
		clk.Advance(10 * time.Millisecond)
	}
	if got := p.sum(t, "rtgate_pool_missed_pongs_total"); got != 0 {
		t.Fatalf("%v sockets retired before their pong was due", got)
	}
	for clk.Now().Sub(start) < lastPing+500*time.Millisecond+janitorTick(p.cfg) {
		clk.Advance(10 * time.Millisecond)
	}
	if got := p.sum(t, "rtgate_pool_missed_pongs_total"); got != 2 {
		t.Fatalf("%v sockets retired for a missed pong, want 2", got)
	}
	testwait.For(t, "replacements", func() bool { return p.Warm(ta) == 2 && len(m.Records()) == 4 })
	s := &sink{}
	h, _ := p.Take(ta, "m", s)
	if h == nil {
		t.Fatal("no replacement socket was handed out")
	}
	s.h = h
	h.Endpoint().Close()
}

// Healthy sockets answer every ping: none is retired, none replaced, pings
// keep coming every interval, and no pong ever reaches the owner a socket
// is handed to.
func TestPoolPongsKeepSocketsWarm(t *testing.T) { eachScheme(t, testPoolPongsKeepSocketsWarm) }

func testPoolPongsKeepSocketsWarm(t *testing.T, tls bool) {
	m := startMock(t, mockai.Config{}, tls)
	const size = 4
	p, clk, ta := warmOnManualClock(t, m, PoolConfig{Size: size, MaxIdle: time.Hour, PingInterval: time.Second, PongTimeout: 500 * time.Millisecond})
	// The network is instant on the pool's clock: after each step, wait
	// for the pongs to what it sent.
	answered := func() bool {
		return p.sum(t, "rtgate_pool_pongs_total") == p.sum(t, "rtgate_pool_pings_total")
	}
	start := clk.Now()
	for clk.Now().Sub(start) < 5*time.Second {
		clk.Advance(10 * time.Millisecond)
		testwait.For(t, "the pongs", answered)
	}
	// First checks at 0.5-1 s, later ones 0.9-1 s after each pong.
	if got := p.sum(t, "rtgate_pool_pings_total"); got < 4*size || got > 5*size {
		t.Fatalf("%v pings in 5 s, want between %d and %d", got, 4*size, 5*size)
	}
	if got := p.sum(t, "rtgate_pool_missed_pongs_total"); got != 0 {
		t.Fatalf("%v healthy sockets retired", got)
	}
	if n := len(m.Records()); n != size {
		t.Fatalf("mockai saw %d dials, want only the first %d", n, size)
	}
	// Hand sockets out right behind a ping, whether its pong is in or not:
	// the owner must never see one. Nothing else arrives, since the owner
	// sends nothing.
	var owners []*recorder
	for len(owners) < size && clk.Now().Sub(start) < 20*time.Second {
		pings := p.sum(t, "rtgate_pool_pings_total")
		clk.Advance(10 * time.Millisecond)
		if p.sum(t, "rtgate_pool_pings_total") == pings {
			continue
		}
		r := &recorder{}
		if h, _ := p.Take(ta, "m", r); h != nil {
			r.h = h
			owners = append(owners, r)
		}
		testwait.For(t, "the pongs", answered)
	}
	time.Sleep(100 * time.Millisecond)
	if len(owners) == 0 {
		t.Fatal("no socket was handed out")
	}
	for _, r := range owners {
		if n := r.bytes(); n != 0 {
			t.Fatalf("a session was handed %d bytes it did not ask for (a pong?)", n)
		}
		r.h.Endpoint().Close()
	}
}

// Pings are spread over the interval, not sent to every socket at once.
func TestPoolSpreadsPings(t *testing.T) {
	m := startMock(t, mockai.Config{}, false)
	const size = 20
	p, clk, _ := warmOnManualClock(t, m, PoolConfig{Size: size, MaxIdle: time.Hour, PingInterval: time.Second, PongTimeout: 500 * time.Millisecond})
	steps, last := 0, 0.0
	for range 20 { // 50 ms steps over the first second
		clk.Advance(50 * time.Millisecond)
		if got := p.sum(t, "rtgate_pool_pings_total"); got > last {
			steps++
			last = got
		}
	}
	if last != size {
		t.Fatalf("%v pings in the first interval, want %d", last, size)
	}
	if steps < 4 {
		t.Fatalf("%d sockets were pinged in only %d distinct 50 ms steps", size, steps)
	}
}
