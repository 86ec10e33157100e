package upstream

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gobwas/ws"
	"github.com/prometheus/client_golang/prometheus"

	"rtgate/frames"
	"rtgate/internal/testwait"
	"rtgate/mockai"
	"rtgate/poller"
)

// sink is an Owner that takes a socket and closes it, as a session that
// ends at once would.
type sink struct{ h *poller.Handle }

func (s *sink) UpstreamReadable() {
	_ = s.h.Endpoint().Read(func(src frames.Source) error { return src.Skip(src.Len()) })
}
func (s *sink) UpstreamGone() {}

func target(t testing.TB, m *mockai.Server, key string) Target {
	t.Helper()
	u, err := url.Parse(m.BaseURL() + "/realtime?model=gpt-realtime")
	if err != nil {
		t.Fatal(err)
	}
	return Target{URL: u, Header: http.Header{"Authorization": {"Bearer " + key}}}
}

// schemes are the upstreams every pool test runs against: plain ws:// and
// wss:// (mockai -tls), as production upstreams are.
var schemes = []struct {
	name string
	tls  bool
}{{"ws", false}, {"wss", true}}

// eachScheme runs test once per scheme.
func eachScheme(t *testing.T, test func(t *testing.T, tls bool)) {
	for _, sc := range schemes {
		t.Run(sc.name, func(t *testing.T) { test(t, sc.tls) })
	}
}

// testPool is a Pool with its metrics on a registry of its own.
type testPool struct {
	*Pool
	reg *prometheus.Registry
}

// newTestPool returns a pool dialing m (trusting its certificate when it
// serves TLS), closed when the test ends.
func newTestPool(t testing.TB, m *mockai.Server, cfg PoolConfig) *testPool {
	t.Helper()
	return newTestPoolLog(t, m, cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
}

// newTestPoolLog is newTestPool logging to log.
func newTestPoolLog(t testing.TB, m *mockai.Server, cfg PoolConfig, log *slog.Logger) *testPool {
	t.Helper()
	d := &Dialer{Timeout: 5 * time.Second, WriteTimeout: 5 * time.Second}
	if pem := m.CertPEM(); len(pem) > 0 {
		roots := x509.NewCertPool()
		if !roots.AppendCertsFromPEM(pem) {
			t.Fatal("mockai's certificate is not valid PEM")
		}
		d.TLSConfig = &tls.Config{RootCAs: roots}
	}
	reg := prometheus.NewRegistry()
	p := NewPool(d, cfg, log, NewPoolMetrics(reg))
	t.Cleanup(p.Close)
	return &testPool{Pool: p, reg: reg}
}

// metric sums every series of the named family (0 if there is none), and
// counts the series.
func (p *testPool) metric(t testing.TB, name string) (sum float64, series int) {
	t.Helper()
	fams, err := p.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			series++
			switch {
			case m.Counter != nil:
				sum += m.Counter.GetValue()
			case m.Gauge != nil:
				sum += m.Gauge.GetValue()
			}
		}
	}
	return sum, series
}

func (p *testPool) sum(t testing.TB, name string) float64 {
	t.Helper()
	v, _ := p.metric(t, name)
	return v
}

// startMock starts mockai, serving wss:// when tls is set.
func startMock(t testing.TB, cfg mockai.Config, tls bool) *mockai.Server {
	t.Helper()
	// Over TLS, the 101 and session.created come as two records in one
	// TCP segment, as from Go's own TLS server or any busy upstream: the
	// case where session.created waits decrypted inside crypto/tls.
	cfg.TLS, cfg.OneSegment = tls, tls
	m, err := mockai.Start(cfg, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close() })
	if tls != strings.HasPrefix(m.BaseURL(), "wss://") {
		t.Fatalf("mockai base %q with TLS %v", m.BaseURL(), tls)
	}
	return m
}

// heldSessionID decodes the session id from a held session.created frame.
func heldSessionID(t testing.TB, held []byte) string {
	t.Helper()
	h, hlen, ok, err := frames.ParseHeader(held)
	if err != nil || !ok || h.OpCode != ws.OpText {
		t.Fatalf("held bytes are not a text frame: %v", err)
	}
	var ev struct {
		Type    string `json:"type"`
		Session struct {
			ID string `json:"id"`
		} `json:"session"`
	}
	if err := json.Unmarshal(held[hlen:], &ev); err != nil || ev.Type != "session.created" {
		t.Fatalf("held frame is %q, want session.created", ev.Type)
	}
	return ev.Session.ID
}

func TestPoolNeverReusesAcrossKeys(t *testing.T) { eachScheme(t, testPoolNeverReusesAcrossKeys) }

func testPoolNeverReusesAcrossKeys(t *testing.T, tls bool) {
	m := startMock(t, mockai.Config{}, tls) // accepts any key, records each
	p := newTestPool(t, m, PoolConfig{Size: 2})
	ta, tb := target(t, m, "sk-team-a"), target(t, m, "sk-team-b")
	if Key(ta) == Key(tb) {
		t.Fatal("targets differing only in key share a pool key")
	}
	p.Prime(ta, "gpt-realtime")
	p.Prime(tb, "gpt-realtime")
	testwait.For(t, "both pools to warm", func() bool { return p.Warm(ta) == 2 && p.Warm(tb) == 2 })

	keyOf := map[string]string{} // session id -> key it was dialed with
	for _, r := range m.Records() {
		keyOf[r.SessionID] = r.Key
	}
	for range 4 {
		for _, tc := range []struct {
			t   Target
			key string
		}{{ta, "sk-team-a"}, {tb, "sk-team-b"}} {
			s := &sink{}
			h, held := p.Take(tc.t, "gpt-realtime", s)
			if h == nil {
				testwait.For(t, "refill", func() bool { return p.Warm(tc.t) > 0 })
				h, held = p.Take(tc.t, "gpt-realtime", s)
			}
			if h == nil {
				t.Fatal("no warm socket after refill")
			}
			s.h = h
			id := heldSessionID(t, held)
			for _, r := range m.Records() {
				keyOf[r.SessionID] = r.Key
			}
			if keyOf[id] != tc.key {
				t.Fatal("a socket dialed with one key was handed to a request for another")
			}
			h.Endpoint().Close()
		}
	}
}

func TestPoolDialsNothingWhenOff(t *testing.T) { eachScheme(t, testPoolDialsNothingWhenOff) }

func testPoolDialsNothingWhenOff(t *testing.T, tls bool) {
	m := startMock(t, mockai.Config{}, tls)
	p := newTestPool(t, m, PoolConfig{Size: 0})
	ta := target(t, m, "k")
	p.Prime(ta, "m")
	if h, _ := p.Take(ta, "m", &sink{}); h != nil {
		t.Fatal("a pool of size 0 handed out a socket")
	}
	time.Sleep(200 * time.Millisecond)
	if n := len(m.Records()); n != 0 {
		t.Fatalf("a pool of size 0 dialed %d times", n)
	}
}

// TestPoolBackoffSchedule checks the exact instants at which a failing key
// is dialed, on a manual clock: the first round, then one probe after
// 0.5 s, 1 s, 2 s, ... doubling up to 30 s.
func TestPoolBackoffSchedule(t *testing.T) { eachScheme(t, testPoolBackoffSchedule) }

func testPoolBackoffSchedule(t *testing.T, tls bool) {
	m := startMock(t, mockai.Config{StatusCode: 500}, tls)
	clk := newManualClock()
	p := newTestPool(t, m, PoolConfig{Size: 3, PingInterval: -1, Clock: clk})
	ta := target(t, m, "k")
	start := clk.Now()

	var dialedAt []time.Duration // on the pool's clock
	var backoffs []float64       // the gauge after each round failed
	settle := func() {
		// The clock stands still while the dials run on the network.
		if n := p.Dialing(ta); n > 0 {
			for range n {
				dialedAt = append(dialedAt, clk.Now().Sub(start))
			}
			testwait.For(t, "the dials to fail", func() bool { return p.Dialing(ta) == 0 })
			backoffs = append(backoffs, p.sum(t, "rtgate_pool_backoff_seconds"))
		}
	}
	p.Prime(ta, "m")
	settle()
	for clk.Now().Sub(start) < 95*time.Second {
		clk.Advance(10 * time.Millisecond)
		settle()
	}
	ms := func(v ...int) []time.Duration {
		var out []time.Duration
		for _, x := range v {
			out = append(out, time.Duration(x)*time.Millisecond)
		}
		return out
	}
	wantAt := ms(0, 0, 0, 500, 1500, 3500, 7500, 15500, 31500, 61500, 91500)
	if !slices.Equal(dialedAt, wantAt) {
		t.Fatalf("dials at %v, want %v", dialedAt, wantAt)
	}
	wantBackoff := []float64{0.5, 1, 2, 4, 8, 16, 30, 30, 30}
	if !slices.Equal(backoffs, wantBackoff) {
		t.Fatalf("backoff gauge after each round %v, want %v", backoffs, wantBackoff)
	}
	if n := len(m.Records()); n != len(wantAt) {
		t.Fatalf("mockai saw %d dials, want %d", n, len(wantAt))
	}
}

// A key that recovers resets its backoff and fills at once.
func TestPoolBackoffResetsOnSuccess(t *testing.T) { eachScheme(t, testPoolBackoffResetsOnSuccess) }

func testPoolBackoffResetsOnSuccess(t *testing.T, tls bool) {
	m := startMock(t, mockai.Config{Key: "sk-right", RejectStatus: 401}, tls)
	clk := newManualClock()
	p := newTestPool(t, m, PoolConfig{Size: 3, PingInterval: -1, Clock: clk})
	bad, good := target(t, m, "sk-wrong"), target(t, m, "sk-right")
	p.Prime(bad, "m")
	testwait.For(t, "the first round to fail", func() bool {
		return p.Dialing(bad) == 0 && p.sum(t, "rtgate_pool_backoff_seconds") == 0.5
	})
	p.Prime(good, "m") // a key of its own: never held back by the other's backoff
	testwait.For(t, "the good key to fill", func() bool { return p.Warm(good) == 3 })
	if got := p.sum(t, "rtgate_pool_backoff_seconds"); got != 0.5 {
		t.Fatalf("backoff gauges sum to %v, want only the failing key's 0.5", got)
	}
}

// TestPoolKeysOnlyConfiguredShapes: a pool exists only for a Primed
// (configured) target. A connect with query parameters beyond the
// session's shape, or a per-user header, misses even while the pool holds
// sockets (counted apart, by reason), one with a shape nobody configured
// (another OpenAI-Beta) misses as no_pool; none of them makes a key, sizes
// anything or dials. A key Retain lets go is forgotten, metric series and
// all, once idle.
func TestPoolKeysOnlyConfiguredShapes(t *testing.T) { eachScheme(t, testPoolKeysOnlyConfiguredShapes) }

func testPoolKeysOnlyConfiguredShapes(t *testing.T, tls bool) {
	m := startMock(t, mockai.Config{}, tls)
	clk := newManualClock()
	p := newTestPool(t, m, PoolConfig{Size: 1, MaxIdle: 200 * time.Millisecond, PingInterval: -1, Clock: clk})
	primed := target(t, m, "k")
	p.Prime(primed, "m")
	testwait.For(t, "the configured key to warm", func() bool { return p.Warm(primed) == 1 })

	withQuery, withSafety, beta := target(t, m, "k"), target(t, m, "k"), target(t, m, "k")
	withQuery.URL.RawQuery += "&nonce=1"
	withSafety.Header.Set("OpenAI-Safety-Identifier", "user-1")
	beta.Header.Set("OpenAI-Beta", "realtime=v1")
	for _, tg := range []Target{withQuery, withSafety, beta} {
		for range 5 {
			if h, _, miss := p.TakeOrDial(tg, "m", &sink{}); h != nil || miss != nil {
				t.Fatalf("%v: a socket or a Miss for a connect the pool cannot serve", tg.Header)
			}
		}
	}
	if got := p.Warm(primed); got != 1 {
		t.Fatalf("the configured key holds %d, want its 1 untouched", got)
	}
	if got := p.Target(primed); got != 1 {
		t.Fatalf("target %d: unservable connects counted as demand", got)
	}
	for reason, want := range map[string]float64{MissQuery: 5, MissSafetyIdentifier: 5, MissNoPool: 5, MissEmpty: 0} {
		if got := metricWith(t, p, "rtgate_pool_misses_total", "reason", reason); got != want {
			t.Errorf("misses for %s: %v, want %v", reason, got, want)
		}
	}
	if _, n := p.metric(t, "rtgate_pool_target_sockets"); n != 1 {
		t.Fatalf("%d keys have a target series, want the configured 1", n)
	}
	if n := m.Stats().Upgrades; n != 1 {
		t.Fatalf("mockai saw %d upgrades, want the configured key's 1", n)
	}

	p.Retain(nil) // a reload removed its deployment
	clk.Advance(time.Minute)
	if got := p.Target(primed); got != 0 {
		t.Fatalf("a key let go still targets %d sockets once idle", got)
	}
	// Its socket expires and the janitor forgets it, metric series and all;
	// let the clock run in steps.
	testwait.For(t, "the key let go to be forgotten", func() bool {
		clk.Advance(time.Second)
		_, n := p.metric(t, "rtgate_pool_target_sockets")
		_, misses := p.metric(t, "rtgate_pool_misses_total")
		return p.Warm(primed) == 0 && n == 0 && misses == 1 // the no_pool series, key none
	})
}

// metricWith sums the series of the named family whose label has value.
func metricWith(t testing.TB, p *testPool, name, label, value string) float64 {
	t.Helper()
	fams, err := p.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == label && l.GetValue() == value {
					sum += m.GetCounter().GetValue() + m.GetGauge().GetValue()
				}
			}
		}
	}
	return sum
}

// A call_id connect attaches to one live call, and a transcription socket's
// first event is not known to be session.created: neither is pooled, and
// neither makes the pool dial anything.
func TestPoolNeverPoolsCallsOrTranscription(t *testing.T) {
	eachScheme(t, testPoolNeverPoolsCallsOrTranscription)
}

func testPoolNeverPoolsCallsOrTranscription(t *testing.T, tls bool) {
	m := startMock(t, mockai.Config{}, tls)
	p := newTestPool(t, m, PoolConfig{Auto: true, Min: 2, Max: 64})
	for _, query := range []string{"call_id=rtc_123", "intent=transcription", "model=gpt-realtime&call_id=rtc_9"} {
		tg := target(t, m, "k")
		tg.URL.RawQuery = query
		if Poolable(tg) {
			t.Fatalf("%s is poolable", query)
		}
		p.Prime(tg, "m")
		for range 20 {
			if h, _ := p.Take(tg, "m", &sink{}); h != nil {
				t.Fatalf("%s: a warm socket was handed out", query)
			}
		}
		if n := p.Dialing(tg) + p.Warm(tg); n != 0 {
			t.Fatalf("%s: the pool holds or dials %d sockets", query, n)
		}
	}
	// What Take and Prime started would have reached mockai by now.
	time.Sleep(300 * time.Millisecond)
	if n := len(m.Records()); n != 0 {
		t.Fatalf("mockai saw %d connects for targets that must not be pooled", n)
	}
	if _, n := p.metric(t, "rtgate_pool_target_sockets"); n != 0 {
		t.Fatalf("%d keys were created for targets that must not be pooled", n)
	}
	// A plain target still is.
	plain := target(t, m, "k")
	if !Poolable(plain) {
		t.Fatal("a plain model target is not poolable")
	}
	p.Prime(plain, "m")
	testwait.For(t, "the plain target to warm", func() bool { return p.Warm(plain) == 2 })
}

// MaxInflight is a ceiling on concurrent dials, whatever the sizing wants.
func TestPoolInflightCeiling(t *testing.T) { eachScheme(t, testPoolInflightCeiling) }

func testPoolInflightCeiling(t *testing.T, tls bool) {
	m := startMock(t, mockai.Config{UpgradeDelay: 300 * time.Millisecond}, tls)
	p := newTestPool(t, m, PoolConfig{Size: 40, MaxInflight: 5, PingInterval: -1})
	ta := target(t, m, "k")
	p.Prime(ta, "m")
	if n := p.Dialing(ta); n != 5 {
		t.Fatalf("%d dials in flight, want the ceiling of 5", n)
	}
	if got := p.sum(t, "rtgate_pool_inflight_limit"); got != 5 {
		t.Fatalf("in-flight limit gauge %v, want 5", got)
	}
	testwait.For(t, "the first dials to land", func() bool { return p.Warm(ta) >= 5 })
	if n := p.Dialing(ta); n > 5 {
		t.Fatalf("%d dials in flight, above the ceiling of 5", n)
	}
}

// TestAdaptiveTargetFollowsDemand: a burst of connects raises an auto key's
// target and in-flight limit as targetSize and inflightLimit say, and 10 s later
// (on the pool's clock) both fall back.
func TestAdaptiveTargetFollowsDemand(t *testing.T) { eachScheme(t, testAdaptiveTargetFollowsDemand) }

func testAdaptiveTargetFollowsDemand(t *testing.T, tls bool) {
	m := startMock(t, mockai.Config{}, tls)
	clk := newManualClock()
	p := newTestPool(t, m, PoolConfig{Auto: true, Min: 1, Max: 256, MaxIdle: time.Hour, PingInterval: -1, Clock: clk})
	ta := target(t, m, "k")
	p.Prime(ta, "m")
	testwait.For(t, "the floor to warm", func() bool { return p.Warm(ta) == 1 })
	hits := 0
	for range 40 { // 40 connects in one window; loopback refills are far under 250 ms
		s := &sink{}
		if h, _ := p.Take(ta, "m", s); h != nil {
			hits++
			s.h = h
			h.Endpoint().Close()
		}
	}
	if hits < 1 {
		t.Fatal("the warm socket was not handed out")
	}
	// 1 + 2 × 40 × max(1, refill / 250 ms): at least 81, more if refills
	// are slow on a loaded machine (the exact arithmetic is TestTargetSize's).
	target := p.Target(ta)
	if target < 81 {
		t.Fatalf("target after a burst of 40: %d, want at least 81", target)
	}
	if got := p.sum(t, "rtgate_pool_inflight_limit"); got < minInflight {
		t.Fatalf("in-flight limit %v, below the minimum %d", got, minInflight)
	}
	testwait.For(t, "the pool to grow", func() bool { return p.Warm(ta) >= 81 })
	clk.Advance(9 * time.Second)
	if got := p.Target(ta); got < 81 {
		t.Fatalf("9 s after the burst the target is %d, want at least 81", got)
	}
	clk.Advance(time.Second + rateWindow)
	if got := p.Target(ta); got != 1 {
		t.Fatalf("10 s after the burst the target is %d, want the minimum 1", got)
	}
}

// A socket whose upstream hangs up right behind session.created can die
// before its dial lands in the ready list: the hang-up's lost finds nothing
// to remove. Landing must not file it, or it sits in the list dead, counted
// warm and holding a refill slot until a take or its expiry. The test makes
// that ordering certain: it dials by hand and delivers the hang-up itself
// (as the reactor would) between the socket's session.created and its
// landing.
func TestPoolDoesNotFileASocketThatDiedBeforeLanding(t *testing.T) {
	eachScheme(t, func(t *testing.T, tls bool) {
		m := startMock(t, mockai.Config{}, tls)
		p := newTestPool(t, m, PoolConfig{Size: 1})
		tg := target(t, m, "sk-test")
		p.mu.Lock()
		kp := p.keyLocked(Key(tg), tg, "gpt-realtime", p.now())
		kp.primed = true // as Prime makes it: Size is its floor
		kp.warming++     // what startWarmLocked does for a dial
		p.total++
		p.mu.Unlock()

		w, err := p.dialWarm(kp)
		if err != nil {
			t.Fatalf("dial: %v", err)
		}
		w.UpstreamGone()
		p.landed(kp, w, nil, time.Millisecond)

		p.mu.Lock()
		filed := slices.Contains(kp.warm, w)
		p.mu.Unlock()
		if filed {
			t.Fatal("a socket that died before landing was filed in the ready list")
		}
		if got := p.sum(t, "rtgate_pool_warm_sockets"); got != float64(p.Warm(tg)) {
			t.Fatalf("warm gauge %v, ready list %d", got, p.Warm(tg))
		}
		// The slot it held is free again: the refill dials in its place,
		// and the dead socket is closed, not left open upstream.
		testwait.For(t, "a replacement dial", func() bool { return len(m.Records()) >= 2 })
		testwait.For(t, "the dead socket to close", func() bool { return m.Stats().Active <= 1 })
	})
}
