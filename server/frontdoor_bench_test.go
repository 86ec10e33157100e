package server

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"rtgate/poller"
)

// Figures for issue 10: the front door under a flood of half-open TLS
// handshakes, and memory for clients that stop reading. Each benchmark runs
// its scenario once per b.N (run them with -benchtime 1x), logs what it saw
// and reports it with ReportMetric. They are measurements, not assertions;
// the behaviour is asserted by the tests in hostile_test.go and
// limits_test.go. Run them with -v: benchmark logs are cut to ten lines
// otherwise. The gateway runs in this process, with cmd/gateway's
// netpoll tuning (so goroutines and heap are exact; RSS also holds the
// test's clients), mockai as its own process.
//
//	go test -run '^$' -bench 'HalfOpenTLSFlood' -benchtime 1x -v -timeout 10m ./server/
//	go test -run '^$' -bench 'StalledClientsMemoryBudget/budget=off' -benchtime 1x -v -timeout 10m ./server/
//	go test -run '^$' -bench 'StalledClientsMemoryBudget/budget=256MiB' -benchtime 1x -v -timeout 10m ./server/
//	go test -run '^$' -bench 'BacklogResidue' -benchtime 1x -v -timeout 10m ./server/

// figureClients is how many clients flood or stall in the figures.
const figureClients = 2000

// quietLog keeps the gateway's logs out of the figures' -v output.
var quietLog = slog.New(slog.DiscardHandler)

var tuneOnce sync.Once

// tuneLikeTheBinary gives netpoll cmd/gateway's default tuning (512-byte
// input buffers and nodes), so that per-connection figures are the
// production ones. Run it before the benchmark's first connection.
func tuneLikeTheBinary(b *testing.B) {
	var err error
	tuneOnce.Do(func() { err = poller.Tune(poller.Tuning{BufferSize: 512, NodeSize: 512}) })
	if err != nil {
		b.Fatal(err)
	}
}

// rttProbe is a session used to time round trips through the gateway while
// something else goes on: session.update answered by session.updated.
type rttProbe struct {
	c *websocket.Conn
}

func newRTTProbe(tb testing.TB, d *websocket.Dialer, url string) *rttProbe {
	tb.Helper()
	c, _, err := d.Dial(url, bearer(testMasterKey))
	if err != nil {
		tb.Fatalf("probe session: %v", err)
	}
	tb.Cleanup(func() { _ = c.Close() })
	if e := read(tb, c); e.typ() != "session.created" {
		tb.Fatalf("probe session: %v", e.typ())
	}
	return &rttProbe{c: c}
}

// measure times n round trips, gap apart, and returns p50 and p99 in ms.
func (p *rttProbe) measure(tb testing.TB, n int, gap time.Duration) (p50, p99 float64) {
	tb.Helper()
	var d []time.Duration
	for range n {
		start := time.Now()
		send(tb, p.c, map[string]any{"type": "session.update", "session": map[string]any{"type": "realtime"}})
		for {
			if e := read(tb, p.c); e.typ() == "session.updated" {
				break
			}
		}
		d = append(d, time.Since(start))
		time.Sleep(gap)
	}
	return pctMS(d, 50), pctMS(d, 99)
}

// pctMS is the exact p-th percentile of d in milliseconds (nearest rank).
func pctMS(d []time.Duration, p int) float64 {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	i := (len(s)*p + 99) / 100
	return float64(s[max(i-1, 0)]) / float64(time.Millisecond)
}

// connectMS times n connects (dial, TLS, upgrade, session.created) in ms: p50, p99.
func connectMS(tb testing.TB, d *websocket.Dialer, url string, n int) (p50, p99 float64) {
	tb.Helper()
	var ds []time.Duration
	for range n {
		start := time.Now()
		c, _, err := d.Dial(url, bearer(testMasterKey))
		if err != nil {
			tb.Fatalf("connect: %v", err)
		}
		if e := read(tb, c); e.typ() != "session.created" {
			tb.Fatalf("connect: %v", e.typ())
		}
		ds = append(ds, time.Since(start))
		_ = c.Close()
	}
	return pctMS(ds, 50), pctMS(ds, 99)
}

// heapMiB is the live heap after collections (two: sync.Pool caches, such
// as netpoll's buffer cache, survive the first).
func heapMiB() float64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return float64(ms.HeapInuse) / (1 << 20)
}

func rssMiB(tb testing.TB) float64 { return float64(rssKiB(tb)) / 1024 }

// tlsMockAndGateway starts mockai over TLS (with args) and a gateway in
// front of it; listenerTLS serves the client side over TLS too.
func tlsMockAndGateway(tb testing.TB, listenerTLS bool, mutate func(*Settings), args ...string) (*gateway, *websocket.Dialer, string) {
	tb.Helper()
	certFile := filepath.Join(tb.TempDir(), "mockai.pem")
	mock := startMockaiProcess(tb, append([]string{"-tls", "-cert-out", certFile}, args...)...)
	pem, err := os.ReadFile(certFile)
	if err != nil {
		tb.Fatal(err)
	}
	roots := trustPEM(tb, pem)
	var cert listenerCert
	if listenerTLS {
		cert = newListenerCert(tb)
	}
	g := startGatewayLog(tb, nil, func(c *Settings) {
		c.APIBase, _ = ParseAPIBase(mock.baseURL)
		c.UpstreamRoots = roots
		if listenerTLS {
			c.TLSCert, c.TLSKey = cert.certFile, cert.keyFile
		}
		if mutate != nil {
			mutate(c)
		}
	}, quietLog)
	d := dialer()
	url := g.url("model=gpt-realtime")
	if listenerTLS {
		d.TLSClientConfig = tlsClientConfig(cert.roots)
		url = "wss://" + g.addr + "/v1/realtime?model=gpt-realtime"
	}
	return g, d, url
}

// 2,000 clients open TCP to the TLS listener and send half a ClientHello;
// then 2,000 send a whole one and stall. Reported: goroutines, heap and RSS
// before, during and after, and another session's connects and round trips
// during the flood against the same figures before it.
func BenchmarkHalfOpenTLSFlood(b *testing.B) {
	tuneLikeTheBinary(b)
	for range b.N {
		g, d, url := tlsMockAndGateway(b, true, nil)
		hello := clientHelloBytes(b)
		probe := newRTTProbe(b, d, url)
		connectMS(b, d, url, 5) // warm-up
		probe.measure(b, 20, 0)

		goBefore, heapBefore, rssBefore := runtime.NumGoroutine(), heapMiB(), rssMiB(b)
		conP50Before, conP99Before := connectMS(b, d, url, 30)
		rttP50Before, rttP99Before := probe.measure(b, 200, 5*time.Millisecond)

		flood := func(payload []byte) []net.Conn {
			conns := make([]net.Conn, 0, figureClients)
			for range figureClients {
				c, err := net.Dial("tcp", g.addr)
				if err != nil {
					b.Fatalf("flood dial: %v", err)
				}
				_, _ = c.Write(payload)
				conns = append(conns, c)
			}
			return conns
		}
		closeAll := func(conns []net.Conn) {
			for _, c := range conns {
				_ = c.Close()
			}
		}

		half := flood(hello[:len(hello)/2])
		waitFor(b, "the half-open flood to be accepted", func() bool { return g.srv.Handshaking() == figureClients })
		goDuring, heapDuring, rssDuring := runtime.NumGoroutine(), heapMiB(), rssMiB(b)
		conP50During, conP99During := connectMS(b, d, url, 30)
		rttP50During, rttP99During := probe.measure(b, 200, 5*time.Millisecond)
		closeAll(half)
		waitFor(b, "the flood to be forgotten", func() bool { return g.srv.Handshaking() == 0 })
		waitFor(b, "goroutines to settle", func() bool { return runtime.NumGoroutine() <= goBefore+2 })
		goAfter, heapAfter := runtime.NumGoroutine(), heapMiB()

		whole := flood(hello)
		waitFor(b, "the stalled handshakes to start", func() bool {
			return g.srv.TLSHandshakesRunning() == int64(g.srv.cfg.MaxHandshakes)
		})
		time.Sleep(200 * time.Millisecond)
		goStalled, running := runtime.NumGoroutine(), g.srv.TLSHandshakesRunning()
		refused := metricValue(b, g, `rtgate_connections_refused_total{reason="handshakes"}`)
		closeAll(whole)
		waitFor(b, "the stalled handshakes to end", func() bool {
			return g.srv.TLSHandshakesRunning() == 0 && g.srv.Handshaking() == 0
		})
		waitFor(b, "goroutines to settle", func() bool { return runtime.NumGoroutine() <= goBefore+2 })

		b.Logf("TLS listener, TLS upstream (mockai -tls), MAX_HANDSHAKES %d, handshake timeout %v", g.srv.cfg.MaxHandshakes, g.srv.cfg.HandshakeTimeout)
		b.Logf("%d half-open (half a ClientHello): goroutines %d before, %d during, %d after; heap %.1f -> %.1f MiB (%.2f KiB each), back to %.1f; RSS %.1f -> %.1f MiB",
			figureClients, goBefore, goDuring, goAfter, heapBefore, heapDuring, (heapDuring-heapBefore)*1024/figureClients, heapAfter, rssBefore, rssDuring)
		b.Logf("another client's connect p50/p99 %.2f/%.2f ms before, %.2f/%.2f ms during; a live session's rtt p50/p99 %.2f/%.2f ms before, %.2f/%.2f ms during",
			conP50Before, conP99Before, conP50During, conP99During, rttP50Before, rttP99Before, rttP50During, rttP99During)
		b.Logf("%d whole ClientHellos that stall: %d handshakes running, %.0f refused at once, goroutines %d (%d before)",
			figureClients, running, refused, goStalled, goBefore)
		b.ReportMetric(float64(goDuring-goBefore), "goroutines-added-halfopen")
		b.ReportMetric(float64(goStalled-goBefore), "goroutines-added-stalled")
		b.ReportMetric(conP99During/conP99Before, "connect-p99-ratio")
		b.ReportMetric(rttP99During/rttP99Before, "rtt-p99-ratio")
		b.ReportMetric((heapDuring-heapBefore)*1024/figureClients, "heap-KiB/halfopen")
	}
}

// 2,000 clients stop reading while the upstream streams audio in real time
// (4,800 bytes = 100 ms every 100 ms, over TLS from mockai), with the global
// budget off and on; the write timeout is raised to 60 s so that the caps,
// not the timeout, act. Sampled over 30 s: RSS, heap, goroutines, sessions
// ended by the budget and by the per-session cap, bytes waiting by the
// watchdog's count, and another session's round trips. Run each budget in
// its own process (-bench 'StalledClientsMemoryBudget/budget=off'), since
// RSS does not come back between sub-benchmarks.
func BenchmarkStalledClientsMemoryBudget(b *testing.B) {
	tuneLikeTheBinary(b)
	for _, budget := range []int64{0, 256 << 20} {
		name := "budget=off"
		if budget > 0 {
			name = fmt.Sprintf("budget=%dMiB", budget>>20)
		}
		b.Run(name, func(b *testing.B) {
			for range b.N {
				stalledFigure(b, budget)
			}
		})
	}
}

func stalledFigure(b *testing.B, budget int64) {
	g, _, url := tlsMockAndGateway(b, false, func(c *Settings) {
		c.MaxBufferedBytes = budget
		c.IdleTimeout = 0
		c.WriteTimeout = 60 * time.Second
	}, "-deltas", "100000", "-delta-bytes", "4800", "-delta-interval", "100ms")
	probe := newRTTProbe(b, dialer(), url)
	probe.measure(b, 20, 0)
	rttP50Before, rttP99Before := probe.measure(b, 100, 10*time.Millisecond)
	goBefore, heapBefore, rssBefore := runtime.NumGoroutine(), heapMiB(), rssMiB(b)

	// Open the clients (100 at a time), each asks for a response and stops reading.
	clients := make([]*websocket.Conn, figureClients)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 100)
	for i := range clients {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			c, _, err := stallingDialer().Dial(url, bearer(testMasterKey))
			if err != nil {
				b.Errorf("stalled client %d: %v", i, err)
				return
			}
			clients[i] = c
			_ = c.SetReadDeadline(time.Now().Add(90 * time.Second))
			if _, _, err := c.ReadMessage(); err != nil { // session.created
				b.Errorf("stalled client %d: %v", i, err)
				return
			}
			_ = c.WriteMessage(websocket.TextMessage, []byte(`{"type":"response.create"}`))
		})
	}
	wg.Wait()
	defer func() {
		for _, c := range clients {
			if c != nil {
				_ = c.Close()
			}
		}
	}()
	opened := time.Now()
	b.Logf("%d clients open and stalled", g.srv.SessionsOpen()-1)

	var rtts []time.Duration
	var peakRSS, peakHeap float64
	peakGo := 0
	for sec := 1; sec <= 30; sec++ {
		deadline := opened.Add(time.Duration(sec) * time.Second)
		for time.Now().Before(deadline) {
			start := time.Now()
			send(b, probe.c, map[string]any{"type": "session.update", "session": map[string]any{"type": "realtime"}})
			for read(b, probe.c).typ() != "session.updated" {
			}
			rtts = append(rtts, time.Since(start))
			time.Sleep(20 * time.Millisecond)
		}
		if sec%5 != 0 {
			continue
		}
		rss, heap, gor := rssMiB(b), heapMiB(), runtime.NumGoroutine()
		peakRSS, peakHeap, peakGo = max(peakRSS, rss), max(peakHeap, heap), max(peakGo, gor)
		b.Logf("t=%2ds RSS %.0f MiB, heap %.0f MiB, goroutines %d, sessions open %d, ended by budget %.0f, by MAX_STALLED_BYTES %.0f, waiting %.1f MiB",
			sec, rss, heap, gor, g.srv.SessionsOpen(),
			metricValue(b, g, `rtgate_sessions_ended_total{reason="memory_budget"}`),
			metricValue(b, g, `rtgate_sessions_ended_total{reason="stalled"}`),
			metricValue(b, g, `rtgate_stalled_buffered_bytes`)/(1<<20))
	}
	byBudget := metricValue(b, g, `rtgate_sessions_ended_total{reason="memory_budget"}`)
	byCap := metricValue(b, g, `rtgate_sessions_ended_total{reason="stalled"}`)
	b.Logf("TLS upstream (mockai -tls), plain listener; %d clients stopped reading; MAX_BUFFERED_BYTES %d, MAX_STALLED_BYTES %d",
		figureClients, budget, g.srv.cfg.MaxStalledBytes)
	b.Logf("before: RSS %.0f MiB, heap %.0f MiB, goroutines %d; peak over 30 s: RSS %.0f MiB, heap %.0f MiB, goroutines %d; ended by budget %.0f, by per-session cap %.0f",
		rssBefore, heapBefore, goBefore, peakRSS, peakHeap, peakGo, byBudget, byCap)
	rttP50, rttP99 := pctMS(rtts, 50), pctMS(rtts, 99)
	b.Logf("another session's rtt p50/p99: %.2f/%.2f ms before, %.2f/%.2f ms during (%d round trips)",
		rttP50Before, rttP99Before, rttP50, rttP99, len(rtts))
	b.ReportMetric(peakRSS-rssBefore, "RSS-MiB-added")
	b.ReportMetric(peakHeap-heapBefore, "heap-MiB-added")
	b.ReportMetric(float64(peakGo-goBefore), "goroutines-added")
	b.ReportMetric(byBudget, "ended-by-budget")
	b.ReportMetric(rttP99/rttP99Before, "rtt-p99-ratio")
}

// What a backlog leaves behind: 50 sessions whose clients stop reading
// while 7.7 MB of audio arrives (MAX_STALLED_BYTES raised so that none is
// dropped), then read it all; the heap (after a
// collection) and RSS with the sessions idle again, against the same
// sessions before the backlog. netpoll's read-size hint (a private field)
// only grows, so this is the figure the caps have to bound.
func BenchmarkBacklogResidue(b *testing.B) {
	tuneLikeTheBinary(b)
	for _, upTLS := range []bool{false, true} {
		name := "upstream=ws"
		if upTLS {
			name = "upstream=wss"
		}
		b.Run(name, func(b *testing.B) {
			for range b.N {
				residueFigure(b, upTLS)
			}
		})
	}
}

func residueFigure(b *testing.B, upTLS bool) {
	const sessions = 50
	args := []string{"-deltas", "120", "-delta-bytes", "48000"} // 120 x 64 KB of base64, as fast as it goes
	raise := func(c *Settings) { c.MaxStalledBytes = 64 << 20 }
	var g *gateway
	var url string
	if upTLS {
		g, _, url = tlsMockAndGateway(b, false, raise, args...)
	} else {
		mock := startMockaiProcess(b, args...)
		g = startGatewayLog(b, nil, func(c *Settings) { c.APIBase, _ = ParseAPIBase(mock.baseURL); raise(c) }, quietLog)
		url = g.url("model=gpt-realtime")
	}
	clients := make([]*websocket.Conn, sessions)
	for i := range clients {
		c, _, err := stallingDialer().Dial(url, bearer(testMasterKey))
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		if e := read(b, c); e.typ() != "session.created" {
			b.Fatalf("client %d: %v", i, e.typ())
		}
		clients[i] = c
	}
	debug.FreeOSMemory()
	heapIdle, rssIdle := heapMiB(), rssMiB(b)

	for _, c := range clients {
		send(b, c, map[string]any{"type": "response.create"})
	}
	time.Sleep(4 * time.Second) // the backlog piles up in the gateway
	heapBacklog, rssBacklog := heapMiB(), rssMiB(b)
	waiting := metricValue(b, g, `rtgate_stalled_buffered_bytes`)
	var wg sync.WaitGroup
	for _, c := range clients {
		wg.Go(func() {
			for {
				if read(b, c).typ() == "response.done" {
					return
				}
			}
		})
	}
	wg.Wait()
	time.Sleep(500 * time.Millisecond)
	debug.FreeOSMemory()
	heapAfter, rssAfter := heapMiB(), rssMiB(b)
	per := func(after, before float64) float64 { return (after - before) * 1024 / sessions }
	b.Logf("%d sessions, upstream %s: idle heap %.1f MiB, RSS %.1f MiB; with the backlog heap %.1f, RSS %.1f (%.1f MiB waiting in netpoll by the watchdog's count); drained and idle again heap %.1f (%+.1f KiB a session), RSS %.1f (%+.1f KiB a session)",
		sessions, map[bool]string{false: "ws://", true: "wss://"}[upTLS], heapIdle, rssIdle, heapBacklog, rssBacklog,
		waiting/(1<<20), heapAfter, per(heapAfter, heapIdle), rssAfter, per(rssAfter, rssIdle))
	b.ReportMetric(per(heapAfter, heapIdle), "heap-KiB/session-left")
	b.ReportMetric(per(rssAfter, rssIdle), "RSS-KiB/session-left")
	b.ReportMetric(per(heapBacklog, heapIdle), "heap-KiB/session-backlog")
}

// trustPEM is a root pool holding the certificates in pem.
func trustPEM(tb testing.TB, pem []byte) *x509.CertPool {
	tb.Helper()
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		tb.Fatal("no certificate in the PEM")
	}
	return pool
}

func tlsClientConfig(roots *x509.CertPool) *tls.Config {
	return &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}
}
