package cluster

import (
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"rtgate/internal/testwait"
	"rtgate/server/redistest"
)

// TestLimiterNeverOverWhileOneInstanceStalls: three limiters share a real
// redis-server, one of them through a proxy that now and then stops
// passing bytes either way and later delivers what it held (a path to
// Redis that is late for one instance only, as on a busy host: its calls
// time out while the others still decide in Redis, and land late). Sixty
// clients spread over the three keep taking and giving back a key's
// sessions: at no moment do they hold more than the key's limit between
// them. The stalls are short at first (the stalled instance admits none
// until the others would count it at its share), then one outlasts that
// grace (it admits by its share, counted so by the others). Late calls
// must not lower its count in Redis (the writes are fenced).
//
// The long stall starts once the stalled instance is back on Redis, its
// lease renewed: the limit holds only while each instance renews its lease
// in time (Limiter: what this does not cover). Started at once, it could
// follow short stalls whose gaps every probe had missed; in one CI run its
// lease ran out during it, the others stopped counting its sessions while
// it went on admitting its share, and the three held 40 of 30 (34 when
// forced by stretching its probe past the short stalls).
func TestLimiterNeverOverWhileOneInstanceStalls(t *testing.T) {
	rd := redistest.Start(t)
	px := startStallProxy(t, rd.Addr())
	const limit, lease = 30, 4 * time.Second
	var ls []*Limiter
	for i := range 3 {
		url := rd.URL()
		if i == 0 {
			url = "redis://" + px.addr() + "/0"
		}
		st, err := NewStore(url, 20*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		l := NewLimiter(st, lease, 1, slog.New(slog.NewTextHandler(io.Discard, nil)), prometheus.NewRegistry())
		t.Cleanup(l.Close)
		ls = append(ls, l)
	}
	testwait.For(t, "the limiters to learn each other", func() bool {
		for _, l := range ls {
			if l.Instances() != 3 {
				return false
			}
		}
		return true
	})

	var held, peak, admitted, admittedStalled atomic.Int64
	var stalled atomic.Bool
	stop := make(chan struct{})
	var wg sync.WaitGroup
	stopClients := sync.OnceFunc(func() { close(stop); wg.Wait() })
	t.Cleanup(stopClients) // also when a wait below fails the test
	for w := range 60 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l := ls[w%3]
			for n := 0; n < 100_000; n++ { // bounded; stopped well before
				select {
				case <-stop:
					return
				default:
				}
				if l.Admit("k", limit, 0) != nil {
					time.Sleep(2 * time.Millisecond)
					continue
				}
				admitted.Add(1)
				if w%3 == 0 && stalled.Load() {
					admittedStalled.Add(1)
				}
				h := held.Add(1)
				for p := peak.Load(); h > p && !peak.CompareAndSwap(p, h); p = peak.Load() {
				}
				time.Sleep(time.Duration(20+rand.IntN(60)) * time.Millisecond)
				held.Add(-1)
				l.Release("k")
				time.Sleep(time.Duration(rand.IntN(80)) * time.Millisecond) // demand comes and goes around the limit
			}
		}()
	}
	// Short stalls (each ends well within the grace), then one past it.
	for range 5 {
		time.Sleep(time.Duration(100+rand.IntN(200)) * time.Millisecond)
		stalled.Store(true)
		px.stall()
		time.Sleep(time.Duration(100+rand.IntN(300)) * time.Millisecond)
		px.resume()
		stalled.Store(false)
	}
	time.Sleep(200 * time.Millisecond)
	testwait.For(t, "the stalled instance to be back on Redis", func() bool { return ls[0].mode.Load() != alone })
	stalled.Store(true)
	px.stall()
	time.Sleep(ls[0].grace + 400*time.Millisecond)
	px.resume()
	stalled.Store(false)
	time.Sleep(500 * time.Millisecond)
	stopClients()

	t.Logf("peak %d held of %d; %d admitted, %d of them by the stalled instance while stalled; outages %v, %v, %v",
		peak.Load(), limit, admitted.Load(), admittedStalled.Load(),
		counterValue(ls[0].mOutages), counterValue(ls[1].mOutages), counterValue(ls[2].mOutages))
	if peak.Load() > limit {
		t.Fatalf("the instances held %d sessions of a key limited to %d", peak.Load(), limit)
	}
	if peak.Load() < limit*2/3 || counterValue(ls[0].mOutages) == 0 {
		t.Fatalf("peak %d, %v outages of the stalled instance: the key was not pressed against its limit through outages",
			peak.Load(), counterValue(ls[0].mOutages))
	}
	if admittedStalled.Load() == 0 {
		t.Fatal("the stalled instance admitted nothing alone, even past its grace: it should take its share")
	}
}

// TestFencedWritesKeepTheLatestCount: writes of one instance's count that
// reach Redis out of order leave the latest there, whatever order they land
// in; a count of 0 removes the field but keeps its sequence number.
func TestFencedWritesKeepTheLatestCount(t *testing.T) {
	rd := redistest.Start(t)
	st, err := NewStore(rd.URL(), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	l := NewLimiter(st, 10*time.Second, 1, slog.New(slog.NewTextHandler(io.Discard, nil)), prometheus.NewRegistry())
	t.Cleanup(l.Close)
	field := func() string {
		v, _ := st.Client.HGet(t.Context(), l.sessionsKey("k"), st.Instance).Result()
		return v
	}
	// admit writes count n with sequence seq, through the admission script.
	admit := func(n, seq int64) {
		t.Helper()
		err := admitScript.Run(t.Context(), st.Client,
			[]string{l.sessionsKey("k"), l.instancesKey(), l.rateKey("k"), l.syncedKey()},
			st.Instance, n, 100, 0, l.lease.Milliseconds(), l.stale.Milliseconds(), seq).Err()
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		writes [][2]int64 // count, seq, in the order they land
		want   string
	}{
		{[][2]int64{{1, 1}, {2, 2}, {3, 3}}, "3"},
		{[][2]int64{{3, 6}, {2, 5}, {1, 4}}, "3"},   // landing in reverse: the latest stays
		{[][2]int64{{5, 8}, {9, 7}}, "5"},           // an older, higher count does not land either
		{[][2]int64{{1, 10}, {7, 9}, {2, 11}}, "2"}, // a late call between two newer ones
	} {
		for _, w := range tc.writes {
			admit(w[0], w[1])
		}
		if got := field(); got != tc.want {
			t.Fatalf("after writes %v the field holds %q, want %q", tc.writes, got, tc.want)
		}
	}
}

func counterValue(c prometheus.Counter) float64 {
	var m dto.Metric
	_ = c.Write(&m)
	return m.GetCounter().GetValue()
}

// stallProxy forwards TCP connections to a server; while stalled it passes
// no byte either way, and delivers what it held once resumed (a path to
// Redis that is late for one instance only).
type stallProxy struct {
	ln net.Listener

	mu    sync.Mutex
	gate  chan struct{} // nil: flowing; else closed on resume
	conns []net.Conn
}

func startStallProxy(t *testing.T, to string) *stallProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &stallProxy{ln: ln}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", to)
			if err != nil {
				_ = c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, up)
			p.mu.Unlock()
			go p.pipe(up, c)
			go p.pipe(c, up)
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		p.resume()
		p.mu.Lock()
		defer p.mu.Unlock()
		for _, c := range p.conns {
			_ = c.Close()
		}
	})
	return p
}

func (p *stallProxy) addr() string { return p.ln.Addr().String() }

func (p *stallProxy) pipe(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			gate := p.gate
			p.mu.Unlock()
			if gate != nil {
				<-gate
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			_ = dst.Close()
			return
		}
	}
}

func (p *stallProxy) stall() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.gate == nil {
		p.gate = make(chan struct{})
	}
}

func (p *stallProxy) resume() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.gate != nil {
		close(p.gate)
		p.gate = nil
	}
}

// TestRefusedOnlyWhenRedisIsGone: a killed Redis refuses connections (down
// for every instance: the shares are taken at once); a frozen one does not
// (its kernel still accepts them: only the grace lets an instance alone
// take its share).
func TestRefusedOnlyWhenRedisIsGone(t *testing.T) {
	rd := redistest.Start(t)
	st, err := NewStore(rd.URL(), 50*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	if st.Refused(time.Second) {
		t.Fatal("a running Redis refused a connection")
	}
	rd.Freeze()
	frozen := st.Refused(time.Second)
	rd.Thaw()
	if frozen {
		t.Fatal("a frozen Redis counted as gone")
	}
	rd.Stop()
	if !st.Refused(time.Second) {
		t.Fatal("a killed Redis did not count as gone")
	}
}

// TestConnectsLearnRedisDiedBeforeTheProbe: an instance that went alone on
// a late call while Redis was up (frozen here: its kernel still accepts)
// refuses a limited key's connects for the grace; once Redis is killed,
// its next connects learn it (Redis is gone for every instance, nobody
// decides there) and admit by its share at once, without waiting for the
// probe (stretched to a minute here, so only the connects can learn it).
func TestConnectsLearnRedisDiedBeforeTheProbe(t *testing.T) {
	rd := redistest.Start(t)
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	var ls []*Limiter
	for range 2 {
		st, err := NewStore(rd.URL(), 50*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		l := newLimiter(st, 4*time.Second, 1, quiet, prometheus.NewRegistry(), time.Minute)
		t.Cleanup(l.Close)
		ls = append(ls, l)
	}
	testwait.For(t, "the limiters to learn each other", func() bool {
		return ls[0].Instances() == 2 && ls[1].Instances() == 2
	})
	l := ls[0]
	if r := l.Admit("k", 10, 0); r != nil {
		t.Fatalf("Redis up: refused %+v", r)
	}
	rd.Freeze()
	if r := l.Admit("k", 10, 0); r == nil || r.Note == "" {
		t.Fatalf("Redis frozen, one instance alone within its grace: got %+v, want a refusal saying why", r)
	}
	rd.Stop()
	time.Sleep(2 * askDownEvery) // a refusal asks the address at most this often
	if r := l.Admit("k", 10, 0); r != nil {
		t.Fatalf("Redis killed: refused %+v, want admitted by the instance's share", r)
	}
	if counterValue(l.mFallback) == 0 {
		t.Fatal("the admission after the kill was not counted as decided alone")
	}
}

// TestConcurrentRefusalsWaitForTheAsk: connects refused at the same moment
// while Redis is being killed (it still accepts, then drops each
// connection: 30 ms here, so that the ask takes that long) all learn that
// Redis is gone from the one ask: none is refused on the answer from before
// it.
func TestConcurrentRefusalsWaitForTheAsk(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			time.AfterFunc(30*time.Millisecond, func() { _ = c.Close() })
		}
	}()
	st, err := NewStore("redis://"+ln.Addr().String(), 100*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	l := &Limiter{st: st, born: time.Now().Add(-time.Second)}
	down := make([]bool, 8)
	var wg sync.WaitGroup
	for i := range down {
		wg.Go(func() { down[i] = l.askDown() })
	}
	wg.Wait()
	for i, d := range down {
		if !d {
			t.Fatalf("refusal %d of %d answered before the ask in flight: Redis not gone", i+1, len(down))
		}
	}
}
