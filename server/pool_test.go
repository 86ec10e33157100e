package server

import (
	"maps"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"rtgate/mockai"
)

// metricSum adds up every sample of the named metric family.
func metricSum(t *testing.T, g *gateway, name string) float64 {
	t.Helper()
	return gathered(t, g.srv.reg, name)
}

// setupsObserved is the sample count of rtgate_session_setup_seconds{pool}.
func setupsObserved(t *testing.T, g *gateway, pool string) uint64 {
	t.Helper()
	fams, err := g.srv.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != "rtgate_session_setup_seconds" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "pool" && l.GetValue() == pool {
					return m.GetHistogram().GetSampleCount()
				}
			}
		}
	}
	return 0
}

func withPool(size int, mutate func(*Settings)) func(*Settings) {
	return func(c *Settings) {
		c.Pool.Size = size
		if mutate != nil {
			mutate(c)
		}
	}
}

// poolSchemes runs a pool test against a plain ws:// upstream and a wss://
// one (mockai -tls), as production upstreams are, as the subtests ws and wss:
// go test -race -run 'TestPoolPongsNeverReachClients/wss' ./server runs one.
func poolSchemes(t *testing.T, test func(t *testing.T, tls bool)) {
	for _, sc := range []struct {
		name string
		tls  bool
	}{{"ws", false}, {"wss", true}} {
		t.Run(sc.name, func(t *testing.T) { test(t, sc.tls) })
	}
}

// startPoolMock starts mockai for a pool test, serving wss:// when tls is set.
func startPoolMock(t *testing.T, cfg mockai.Config, tls bool) *mockai.Server {
	t.Helper()
	// Over TLS, the 101 and session.created come as two records in one
	// TCP segment: the case where session.created waits inside crypto/tls.
	cfg.TLS, cfg.OneSegment = tls, tls
	return startMock(t, cfg)
}

// startPoolGateway starts a gateway with a pool of size in front of mock,
// trusting mock's certificate when it serves TLS.
func startPoolGateway(t *testing.T, mock *mockai.Server, size int, mutate func(*Settings)) *gateway {
	t.Helper()
	return startGateway(t, mock, withPool(size, func(c *Settings) {
		if len(mock.CertPEM()) > 0 {
			c.UpstreamRoots = trustMock(t, mock)
		}
		if mutate != nil {
			mutate(c)
		}
	}))
}

func waitWarm(t *testing.T, g *gateway, n int) {
	t.Helper()
	waitFor(t, "the pool to warm", func() bool { return g.srv.Pool().Warm(g.srv.defaultTarget()) >= n })
}

func TestPoolHitDeliversUpstreamsOwnSessionCreated(t *testing.T) {
	poolSchemes(t, func(t *testing.T, tls bool) {
		mock := startPoolMock(t, mockai.Config{}, tls)
		g := startPoolGateway(t, mock, 2, nil)
		waitWarm(t, g, 2)
		var warmIDs []string
		for _, r := range mock.Records() {
			warmIDs = append(warmIDs, r.SessionID)
		}

		c := g.dial(t, "model=gpt-realtime", bearer(testMasterKey))
		created := read(t, c)
		if created.typ() != "session.created" {
			t.Fatalf("first event %v", created.typ())
		}
		if id := created.str("session", "id"); !slices.Contains(warmIDs, id) {
			t.Fatalf("session id %q is not one mockai issued to a warm socket %v", id, warmIDs)
		}
		if hits := metricSum(t, g, "rtgate_pool_hits_total"); hits != 1 {
			t.Fatalf("pool hits %v, want 1", hits)
		}
		// The session then works end to end.
		send(t, c, map[string]any{"type": "session.update", "session": map[string]any{"type": "realtime", "instructions": "warm"}})
		if e := read(t, c); e.typ() != "session.updated" {
			t.Fatalf("got %v", e.typ())
		}
		send(t, c, map[string]any{"type": "response.create"})
		readUntil(t, c, "response.done")
		// The take triggered a refill.
		waitWarm(t, g, 2)
	})
}

func TestPoolMissFallsBackToFreshDial(t *testing.T) {
	poolSchemes(t, func(t *testing.T, tls bool) {
		mock := startPoolMock(t, mockai.Config{UpgradeDelay: 300 * time.Millisecond}, tls)
		g := startPoolGateway(t, mock, 1, nil)
		waitWarm(t, g, 1)
		a := g.dial(t, "model=gpt-realtime", bearer(testMasterKey))
		b := g.dial(t, "model=gpt-realtime", bearer(testMasterKey)) // the refill is still 300 ms away
		if e := read(t, a); e.typ() != "session.created" {
			t.Fatalf("a: %v", e.typ())
		}
		if e := read(t, b); e.typ() != "session.created" {
			t.Fatalf("b: %v", e.typ())
		}
		if hits, misses := metricSum(t, g, "rtgate_pool_hits_total"), metricSum(t, g, "rtgate_pool_misses_total"); hits != 1 || misses != 1 {
			t.Fatalf("hits %v misses %v, want 1 and 1", hits, misses)
		}
	})
}

func TestPoolDiscardsSocketsThatMisbehave(t *testing.T) {
	// Each upstream dial takes this long, so that refills do not race the
	// connect below.
	const refillGap = 300 * time.Millisecond
	cases := []struct {
		name string
		mock mockai.Config
	}{
		{"closed by the upstream", mockai.Config{CloseAfterFrames: 1, UpgradeDelay: refillGap}},
		{"dropped by the upstream", mockai.Config{DropAfterFrames: 1, UpgradeDelay: refillGap}},
		{"unexpected frame", mockai.Config{MalformedAfterFrames: 1, UpgradeDelay: refillGap}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			poolSchemes(t, func(t *testing.T, tls bool) {
				mock := startPoolMock(t, tc.mock, tls)
				g := startPoolGateway(t, mock, 2, nil)
				// Each warm socket gets session.created, then misbehaves and
				// is dropped. Connect once the first two were seen and
				// dropped: their replacements are refillGap away. (Sooner,
				// a socket can be taken in the instant between its
				// session.created and netpoll reporting the hang-up behind
				// it; the session's redial of a dead hand-off covers that.)
				waitFor(t, "warm dials to be discarded", func() bool {
					return metricSum(t, g, "rtgate_pool_dials_total") >= 2 && metricSum(t, g, "rtgate_pool_warm_sockets") == 0
				})
				c := g.dial(t, "model=gpt-realtime", bearer(testMasterKey))
				if e := read(t, c); e.typ() != "session.created" {
					t.Fatalf("got %v", e.typ())
				}
				_ = c.Close()
				if hits := metricSum(t, g, "rtgate_pool_hits_total"); hits != 0 {
					t.Fatalf("a misbehaving socket was handed out (%v hits)", hits)
				}
			})
		})
	}
}

func TestPoolReplacesExpiredSockets(t *testing.T) {
	poolSchemes(t, func(t *testing.T, tls bool) {
		mock := startPoolMock(t, mockai.Config{}, tls)
		g := startPoolGateway(t, mock, 2, func(c *Settings) { c.Pool.MaxIdle = 300 * time.Millisecond })
		waitWarm(t, g, 2)
		waitFor(t, "replacement dials", func() bool { return len(mock.Records()) >= 6 })
		waitWarm(t, g, 2)
		if active := mock.Stats().Active; active > 4 {
			t.Fatalf("%d upstream sockets open; expired ones were not closed", active)
		}
	})
}

func TestPoolBacksOffAFailingKey(t *testing.T) {
	poolSchemes(t, func(t *testing.T, tls bool) {
		mock := startPoolMock(t, mockai.Config{Key: "sk-not-the-gateways", RejectStatus: 401}, tls)
		g := startPoolGateway(t, mock, 4, nil)
		// The schedule itself (0.5 s, 1 s, 2 s, ...) is upstream's, checked
		// there with a manual clock; here: the key backs off after its
		// first round of 4 refused dials instead of redialing at once.
		waitFor(t, "the key to back off", func() bool {
			return len(mock.Records()) >= 4 && metricSum(t, g, "rtgate_pool_backoff_seconds") > 0
		})
		if n := len(mock.Records()); n > 8 {
			t.Fatalf("the upstream saw %d dials before the backoff showed, want the first round and a probe or so", n)
		}
		// Connects still get the error event and close from the fresh path.
		c := g.dial(t, "model=gpt-realtime", bearer(testMasterKey))
		e := read(t, c)
		if e.typ() != "error" || e.str("error", "status") != "401" {
			t.Fatalf("got %v, want the upstream_unavailable event with 401", e)
		}
		if ce := closeOf(t, c); ce.Code != 1011 {
			t.Fatalf("close %d, want 1011", ce.Code)
		}
	})
}

func TestPoolOffDialsNothingAhead(t *testing.T) {
	poolSchemes(t, func(t *testing.T, tls bool) {
		mock := startPoolMock(t, mockai.Config{}, tls)
		g := startPoolGateway(t, mock, 0, nil)
		if g.srv.Pool() != nil {
			t.Fatal("REALTIME_POOL_SIZE=0 created a pool")
		}
		time.Sleep(300 * time.Millisecond)
		if n := len(mock.Records()); n != 0 {
			t.Fatalf("with the pool off the upstream saw %d dials before any client", n)
		}
		c := g.dial(t, "model=gpt-realtime", bearer(testMasterKey))
		read(t, c)
		time.Sleep(100 * time.Millisecond)
		if n := len(mock.Records()); n != 1 {
			t.Fatalf("one client connect made %d upstream dials", n)
		}
	})
}

func TestPoolClosesWarmSocketsOnShutdown(t *testing.T) {
	poolSchemes(t, func(t *testing.T, tls bool) {
		mock := startPoolMock(t, mockai.Config{}, tls)
		g := startPoolGateway(t, mock, 3, nil)
		waitWarm(t, g, 3)
		g.srv.Pool().Close()
		waitFor(t, "warm sockets to close", func() bool { return mock.Stats().Active == 0 })
	})
}

// The connect must be a hit, and its setup observed, before the scrape:
//   - a warm socket whose ping is unanswered is passed over by Take (its pong
//     must not reach a client), so with pings on, a loaded box that lets 2.5 s
//     pass between warm-up and connect turns the hit into a miss; pings are
//     off here (the pool's liveness tests cover them), and the hit is asserted;
//   - the setup histogram is observed by the reactor after it has written
//     session.created to the client, so a client that has read it can scrape
//     before the observation lands: wait for it (it comes a write call later).
func TestAdminMetricsEndpoint(t *testing.T) {
	poolSchemes(t, func(t *testing.T, tls bool) {
		mock := startPoolMock(t, mockai.Config{}, tls)
		g := startPoolGateway(t, mock, 1, func(c *Settings) { c.Pool.PingInterval = -1 })
		waitWarm(t, g, 1)
		c := g.dial(t, "model=gpt-realtime", bearer(testMasterKey))
		if e := read(t, c); e.typ() != "session.created" {
			t.Fatalf("first event %v, want session.created", e.typ())
		}
		if hits, misses := metricSum(t, g, "rtgate_pool_hits_total"), metricSum(t, g, "rtgate_pool_misses_total"); hits != 1 || misses != 0 {
			t.Fatalf("%v pool hits and %v misses, want the connect to be one hit", hits, misses)
		}
		waitFor(t, "the setup of the hit to be observed", func() bool { return setupsObserved(t, g, "hit") == 1 })
		req, _ := http.NewRequest("GET", "/metrics", nil)
		rec := newRecorder()
		g.srv.admin.Handler(g.srv.ctx).ServeHTTP(rec, req)
		body := rec.String()
		for _, want := range []string{"rtgate_pool_hits_total{", "rtgate_sessions_open 1", "rtgate_session_setup_seconds_bucket{pool=\"hit\"", "go_goroutines"} {
			if !contains(body, want) {
				t.Fatalf("/metrics lacks %q", want)
			}
		}
		if contains(body, testUpstreamKey) || contains(body, testMasterKey) {
			t.Fatal("/metrics shows a key")
		}
	})
}

// A call_id connect (a sideband to a live WebRTC or SIP call) and a
// transcription socket are never pooled: each client connect makes exactly
// one upstream dial, and the pool dials nothing extra for them.
func TestPoolNeverPoolsSidebandOrTranscription(t *testing.T) {
	poolSchemes(t, func(t *testing.T, tls bool) {
		mock := startPoolMock(t, mockai.Config{}, tls)
		g := startPoolGateway(t, mock, 2, func(c *Settings) { c.Pool.Auto, c.Pool.Min, c.Pool.Max = true, 2, 64 })
		waitWarm(t, g, 2)
		queries := []string{"call_id=rtc_123", "intent=transcription", "model=gpt-realtime&call_id=rtc_456"}
		for range 3 { // repeated connects would have made an auto pool grow
			for _, q := range queries {
				c := g.dial(t, q, bearer(testMasterKey))
				if e := read(t, c); e.typ() != "session.created" {
					t.Fatalf("%s: first event %v", q, e.typ())
				}
				_ = c.Close()
			}
		}
		time.Sleep(300 * time.Millisecond) // what the pool would dial behind them would be here by now
		// Each record's query, keyed by what makes it unpoolable.
		seen := map[string]int{}
		for _, r := range mock.Records() {
			q, err := url.ParseQuery(r.Query)
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case q.Has("call_id"):
				seen["call_id="+q.Get("call_id")]++
			case q.Has("intent"):
				seen["intent="+q.Get("intent")]++
			}
		}
		want := map[string]int{"call_id=rtc_123": 3, "call_id=rtc_456": 3, "intent=transcription": 3}
		if !maps.Equal(seen, want) {
			t.Fatalf("mockai saw %v connects, want exactly one per client connect %v", seen, want)
		}
		if hits := metricSum(t, g, "rtgate_pool_hits_total"); hits != 0 {
			t.Fatalf("%v pool hits for connects that must not be pooled", hits)
		}
	})
}

// Idle warm sockets are pinged; their pongs are consumed by the pool and
// never reach a client, however close behind a ping the client comes.
func TestPoolPongsNeverReachClients(t *testing.T) {
	poolSchemes(t, func(t *testing.T, tls bool) {
		mock := startPoolMock(t, mockai.Config{}, tls)
		g := startPoolGateway(t, mock, 4, func(c *Settings) {
			c.Pool.PingInterval = 20 * time.Millisecond
			c.Pool.PongTimeout = 2 * time.Second
		})
		waitWarm(t, g, 4)
		waitFor(t, "pings to be answered", func() bool { return metricSum(t, g, "rtgate_pool_pongs_total") >= 20 })
		for i := range 8 {
			c := g.dial(t, "model=gpt-realtime", bearer(testMasterKey))
			c.SetPongHandler(func(string) error {
				t.Errorf("client %d received a pong it never asked for", i)
				return nil
			})
			expectCreatedThenUpdated(t, c, "x")
			_ = c.Close()
		}
		if hits := metricSum(t, g, "rtgate_pool_hits_total"); hits == 0 {
			t.Fatal("no connect was served from the pool")
		}
		if missed := metricSum(t, g, "rtgate_pool_missed_pongs_total"); missed != 0 {
			t.Fatalf("%v healthy warm sockets retired for a missed pong", missed)
		}
	})
}

type recorder struct {
	*httptest.ResponseRecorder
}

func newRecorder() recorder { return recorder{httptest.NewRecorder()} }

func (r recorder) String() string { return r.Body.String() }

func contains(s, sub string) bool { return strings.Contains(s, sub) }
