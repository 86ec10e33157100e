package server

import (
	"context"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"rtgate/mockai"
)

// TestPoolMissTakesAWarmSocketThatLandsFirst: a client that missed the
// pool is served by the pool's refill socket when it lands before the
// client's own dial (held back here by a gated proxy in front of the
// upstream: a slow fake upstream), and that own dial, once it completes,
// waits in the pool for the next client instead of being closed. (The
// miss first claims the refill's dial in flight; with nothing landing, the
// claim lapses after 1.5 refill times, a few milliseconds on loopback, and
// its own dial starts: upstream.Miss.DialNow.)
func TestPoolMissTakesAWarmSocketThatLandsFirst(t *testing.T) {
	poolSchemes(t, func(t *testing.T, tls bool) {
		px, g := startProxiedPool(t, tls, mockai.Config{}, nil)
		hitWithRefillHeld(t, g, px)
		b := g.dial(t, "model=gpt-realtime", bearer(testMasterKey)) // a miss: its own dial is held too
		waitFor(t, "b's own dial to reach the proxy", func() bool { return px.heldCount() == 2 })

		px.release(0) // the refill's socket lands first
		if e := read(t, b); e.typ() != "session.created" {
			t.Fatalf("b, whose own dial is still held: %v (want the warm socket that landed)", e.typ())
		}
		send(t, b, map[string]any{"type": "response.create"})
		readUntil(t, b, "response.done")

		px.release(1) // b's own dial completes: into the pool
		// The only other dial (the refill behind b's take) is still held:
		// a warm socket now can only be b's own dial.
		waitWarm(t, g, 1)
		c := g.dial(t, "model=gpt-realtime", bearer(testMasterKey))
		if e := read(t, c); e.typ() != "session.created" {
			t.Fatalf("c: %v", e.typ())
		}
		if hits, misses := metricSum(t, g, "rtgate_pool_hits_total"), metricSum(t, g, "rtgate_pool_misses_total"); hits != 2 || misses != 1 {
			t.Fatalf("pool hits %v misses %v, want 2 (a, c) and 1 (b)", hits, misses)
		}
		px.releaseAll()
	})
}

// TestPoolDialsAheadOfTheRequest: when the pool is short, a connection
// accepted starts an upstream dial before its request is read (the proxy
// in front of the upstream sees it while the clients have sent nothing),
// and the clients, once they send their requests, are served by those
// dials (any other dial stays held by the proxy).
func TestPoolDialsAheadOfTheRequest(t *testing.T) {
	poolSchemes(t, func(t *testing.T, tls bool) {
		px, g := startProxiedPool(t, tls, mockai.Config{}, func(c *Settings) { c.Pool.Auto, c.Pool.Min, c.Pool.Max = true, 1, 4 })
		waitWarm(t, g, 1)
		px.holdNew()

		// Three connections, no request yet: the warm socket is for the
		// first, the others are dialed for at accept.
		var raws [3]net.Conn
		for i := range raws {
			raw, err := net.Dial("tcp", g.addr)
			if err != nil {
				t.Fatal(err)
			}
			raws[i] = raw
		}
		waitFor(t, "two dials ahead of the requests to reach the proxy", func() bool { return px.heldCount() == 2 })
		if got := metricSum(t, g, "rtgate_pool_anticipated_dials_total"); got != 2 {
			t.Fatalf("rtgate_pool_anticipated_dials_total %v, want 2", got)
		}
		px.release(0)
		px.release(1)
		for i, raw := range raws {
			d := dialer()
			d.NetDialContext = func(context.Context, string, string) (net.Conn, error) { return raw, nil }
			c := dialWith(t, d, g.url("model=gpt-realtime"), bearer(testMasterKey))
			if e := read(t, c); e.typ() != "session.created" {
				t.Fatalf("client %d: %v, want session.created from the warm socket or a dial ahead (any other is still held)", i, e.typ())
			}
			send(t, c, map[string]any{"type": "response.create"})
			readUntil(t, c, "response.done")
		}
		px.releaseAll()
	})
}

// TestPoolMissWaitsOnThePoolsDialInFlight: a client that misses while the
// pool's refill dial is in flight claims it and starts no dial of its own
// (the proxy sees none while the claim stands: mockai takes 600 ms to send
// session.created, so the measured refill time makes the claim last 900
// ms), and is served by that dial once it lands.
func TestPoolMissWaitsOnThePoolsDialInFlight(t *testing.T) {
	poolSchemes(t, func(t *testing.T, tls bool) {
		px, g := startProxiedPool(t, tls, mockai.Config{SessionDelay: 600 * time.Millisecond}, nil)
		hitWithRefillHeld(t, g, px)
		b := g.dial(t, "model=gpt-realtime", bearer(testMasterKey)) // a miss: it claims the refill's dial
		time.Sleep(150 * time.Millisecond)
		if got := px.heldCount(); got != 1 {
			t.Fatalf("the proxy holds %d dials 150 ms into b's claim, want 1 (the refill's): b dialed its own", got)
		}
		px.release(0)
		if e := read(t, b); e.typ() != "session.created" {
			t.Fatalf("b: %v, want session.created from the refill's dial", e.typ())
		}
		if hits, misses := metricSum(t, g, "rtgate_pool_hits_total"), metricSum(t, g, "rtgate_pool_misses_total"); hits != 1 || misses != 1 {
			t.Fatalf("pool hits %v misses %v, want 1 (a) and 1 (b)", hits, misses)
		}
		px.releaseAll()
	})
}

// hitWithRefillHeld takes the pool's one warm socket with a client that
// then stays connected (a hit), while the proxy holds every new dial: the
// refill's dial behind the hit is held.
func hitWithRefillHeld(t *testing.T, g *gateway, px *gatedProxy) {
	t.Helper()
	waitWarm(t, g, 1)
	px.holdNew()
	a := g.dial(t, "model=gpt-realtime", bearer(testMasterKey))
	if e := read(t, a); e.typ() != "session.created" {
		t.Fatalf("the hit: %v", e.typ())
	}
	waitFor(t, "the refill's dial to reach the proxy", func() bool { return px.heldCount() == 1 })
}

// startProxiedPool starts mockai (mcfg; wss:// when tls), a gated proxy in front
// of it, and a gateway with a pool of 1 dialing the upstream through the
// proxy; mutate may change the gateway's settings further.
func startProxiedPool(t *testing.T, tls bool, mcfg mockai.Config, mutate func(*Settings)) (*gatedProxy, *gateway) {
	t.Helper()
	mock := startPoolMock(t, mcfg, tls)
	px := startGatedProxy(t, mock)
	g := startPoolGateway(t, mock, 1, func(c *Settings) {
		u, err := ParseAPIBase(strings.Replace(mock.BaseURL(), mock.Addr(), px.addr(), 1))
		if err != nil {
			t.Fatal(err)
		}
		c.APIBase = u
		if mutate != nil {
			mutate(c)
		}
	})
	return px, g
}

// gatedProxy forwards TCP connections to an upstream. While it holds, a
// new connection is accepted but not connected onward until released (in
// accept order): a dial that is slow for as long as a test says.
type gatedProxy struct {
	ln net.Listener
	to string

	mu    sync.Mutex
	hold  bool
	held  []chan struct{}
	conns []net.Conn
}

func startGatedProxy(t *testing.T, mock *mockai.Server) *gatedProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &gatedProxy{ln: ln, to: mock.Addr()}
	go p.serve()
	t.Cleanup(func() {
		_ = ln.Close()
		p.releaseAll()
		p.mu.Lock()
		defer p.mu.Unlock()
		for _, c := range p.conns {
			_ = c.Close()
		}
	})
	return p
}

func (p *gatedProxy) addr() string { return p.ln.Addr().String() }

func (p *gatedProxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		p.conns = append(p.conns, c)
		var gate chan struct{}
		if p.hold {
			gate = make(chan struct{})
			p.held = append(p.held, gate)
		}
		p.mu.Unlock()
		go p.forward(c, gate)
	}
}

func (p *gatedProxy) forward(c net.Conn, gate chan struct{}) {
	if gate != nil {
		<-gate
	}
	up, err := net.Dial("tcp", p.to)
	if err != nil {
		_ = c.Close()
		return
	}
	p.mu.Lock()
	p.conns = append(p.conns, up)
	p.mu.Unlock()
	go func() { _, _ = io.Copy(up, c); _ = up.Close() }()
	_, _ = io.Copy(c, up)
	_ = c.Close()
}

// holdNew makes every connection from now on wait for its release.
func (p *gatedProxy) holdNew() {
	p.mu.Lock()
	p.hold = true
	p.mu.Unlock()
}

func (p *gatedProxy) heldCount() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.held)
}

// release lets the i-th held connection (in accept order) through.
func (p *gatedProxy) release(i int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.held[i]:
	default:
		close(p.held[i])
	}
}

func (p *gatedProxy) releaseAll() {
	p.mu.Lock()
	n := len(p.held)
	p.hold = false
	p.mu.Unlock()
	for i := range n {
		p.release(i)
	}
}
