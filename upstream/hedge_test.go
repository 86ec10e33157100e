package upstream

import (
	"context"
	"strings"
	"testing"
	"time"

	"rtgate/internal/testwait"
	"rtgate/mockai"
	"rtgate/poller"
)

// TestMissTakesTheWarmSocketThatLandsFirst: a client that missed the pool
// is told when a warm socket of its key lands while its own dial is still
// in flight, takes it (session.created held, as from a hit), and its own
// dial, completing later, joins the pool instead of being closed: the next
// connect hits it.
func TestMissTakesTheWarmSocketThatLandsFirst(t *testing.T) {
	eachScheme(t, testMissTakesTheWarmSocketThatLandsFirst)
}

func testMissTakesTheWarmSocketThatLandsFirst(t *testing.T, tls bool) {
	// The upgrade takes a while: the pool's first dial is still in flight
	// when the first connect comes.
	m := startMock(t, mockai.Config{UpgradeDelay: 100 * time.Millisecond}, tls)
	p := newTestPool(t, m, PoolConfig{Size: 1, MaxIdle: time.Hour, PingInterval: -1, Clock: newManualClock()})
	ta := target(t, m, "k")
	p.Prime(ta, "m")

	s := &sink{}
	h, _, miss := p.TakeOrDial(ta, "m", s) // a cold key: a miss, and the pool's dial is in flight beside it
	if h != nil || miss == nil {
		t.Fatalf("the first connect of a cold key: handle %v, miss %v; want a miss", h, miss)
	}
	// The client's own dial is "in flight" (the test has not started it):
	// the refill's socket lands first.
	h, held := takeLanded(t, miss, s)
	s.h = h
	if !strings.Contains(string(held), "session.created") {
		t.Fatalf("the taken socket holds %q, want session.created", held)
	}
	miss.Done()

	// The own dial completes after all: into the pool, not closed.
	c, err := p.dialer.Dial(context.Background(), ta)
	if err != nil {
		t.Fatal(err)
	}
	miss.Give(ta, c)
	// Size 1: the refill's replacement plus the given socket.
	testwait.For(t, "the given socket to be ready in the pool", func() bool { return p.Warm(ta) == 2 })
	if got := m.Stats().Active; got != 3 {
		t.Fatalf("mockai holds %d sessions, want 3 (the taken one and two warm): none closed", got)
	}
	for i := range 2 {
		s := &sink{}
		h, _, miss := p.TakeOrDial(ta, "m", s)
		if h == nil {
			t.Fatalf("connect %d after the give missed, want both warm sockets to serve", i+1)
		}
		s.h = h
		miss.Done() // a hit's Miss is nil: a no-op
	}
	h.Endpoint().Close()
}

// TestMissDoneStopsWaiting: a miss whose own dial ended first takes nothing
// afterwards (the socket stays for the next connect) and no longer holds
// the refill back; Give on a closed pool closes the socket.
func TestMissDoneStopsWaiting(t *testing.T) { eachScheme(t, testMissDoneStopsWaiting) }

func testMissDoneStopsWaiting(t *testing.T, tls bool) {
	m := startMock(t, mockai.Config{UpgradeDelay: 100 * time.Millisecond}, tls)
	p := newTestPool(t, m, PoolConfig{Size: 1, MaxIdle: time.Hour, PingInterval: -1, Clock: newManualClock()})
	ta := target(t, m, "k")
	p.Prime(ta, "m")
	_, _, miss := p.TakeOrDial(ta, "m", &sink{})
	miss.Done()
	miss.Done() // only the first counts
	if h, _ := miss.Take(&sink{}); h != nil {
		t.Fatal("a miss that is done took a socket")
	}
	testwait.For(t, "the refill to land", func() bool { return p.Warm(ta) == 1 })
	p.mu.Lock()
	dials, waiting := p.clientDials, len(p.keys[Key(ta)].waiters)
	p.mu.Unlock()
	if dials != 0 || waiting != 0 {
		t.Fatalf("after Done: %d client dials counted, %d misses waiting; want 0 and 0", dials, waiting)
	}

	c, err := p.dialer.Dial(context.Background(), ta)
	if err != nil {
		t.Fatal(err)
	}
	p.Close()
	miss.Give(ta, c)
	testwait.For(t, "the socket given to a closed pool to be closed", func() bool { return m.Stats().Active == 0 })
}

// TestMissPassesOnASocketItWillNotTake: a miss told of a landed socket
// whose own dial ended first passes the news on to the next miss waiting,
// which takes the socket.
func TestMissPassesOnASocketItWillNotTake(t *testing.T) {
	eachScheme(t, func(t *testing.T, tls bool) {
		m := startMock(t, mockai.Config{UpgradeDelay: 100 * time.Millisecond}, tls)
		p := newTestPool(t, m, PoolConfig{Size: 1, MaxIdle: time.Hour, PingInterval: -1, Clock: newManualClock()})
		ta := target(t, m, "k")
		p.Prime(ta, "m")
		_, _, first := p.TakeOrDial(ta, "m", &sink{})
		_, _, second := p.TakeOrDial(ta, "m", &sink{})
		if first == nil || second == nil {
			t.Fatal("two connects to a cold key: want two misses")
		}
		testwait.For(t, "the refill to land", func() bool { return p.Warm(ta) == 1 })
		first.Done() // its own dial won: it will not take the socket it was told of
		s := &sink{}
		h, _ := takeLanded(t, second, s)
		s.h = h
		second.Done()
		h.Endpoint().Close()
	})
}

// takeLanded waits for miss to be told a socket landed, and takes it. A
// socket that has just landed can be busy for an instant (its read
// handler holds it): Take then finds nothing and the pool tells the miss
// again after busyRetry on its clock, which a test's manual clock does not
// run; so this looks again itself, bounded.
func takeLanded(t *testing.T, miss *Miss, owner poller.Owner) (*poller.Handle, []byte) {
	t.Helper()
	waitLanded(t, miss)
	var h *poller.Handle
	var held []byte
	testwait.For(t, "the landed socket to be taken", func() bool {
		h, held = miss.Take(owner)
		return h != nil
	})
	return h, held
}

// waitLanded waits, bounded, for miss's Landed signal.
func waitLanded(t *testing.T, miss *Miss) {
	t.Helper()
	select {
	case <-miss.Landed():
	case <-time.After(testwait.Timeout):
		t.Fatal("no warm socket landed for the waiting miss")
	}
}
