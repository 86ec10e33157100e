package server

import (
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"rtgate/mockai"
)

// metricSum adds up every sample of the named metric family.
func metricSum(t *testing.T, g *gateway, name string) float64 {
	t.Helper()
	return gathered(t, g.srv.metrics.reg, name)
}

func withPool(size int, mutate func(*Settings)) func(*Settings) {
	return func(c *Settings) {
		c.Pool.Size = size
		if mutate != nil {
			mutate(c)
		}
	}
}

func waitWarm(t *testing.T, g *gateway, n int) {
	t.Helper()
	waitFor(t, "the pool to warm", func() bool { return g.srv.Pool().Warm(g.srv.defaultTarget()) >= n })
}

func TestPoolHitDeliversUpstreamsOwnSessionCreated(t *testing.T) {
	mock := startMock(t, mockai.Config{})
	g := startGateway(t, mock, withPool(2, nil))
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
}

func TestPoolMissFallsBackToFreshDial(t *testing.T) {
	mock := startMock(t, mockai.Config{UpgradeDelay: 300 * time.Millisecond})
	g := startGateway(t, mock, withPool(1, nil))
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
}

func TestPoolDiscardsSocketsThatMisbehave(t *testing.T) {
	cases := []struct {
		name string
		mock mockai.Config
	}{
		{"closed by the upstream", mockai.Config{CloseAfterFrames: 1}},
		{"dropped by the upstream", mockai.Config{DropAfterFrames: 1}},
		{"unexpected frame", mockai.Config{MalformedAfterFrames: 1}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			mock := startMock(t, tc.mock)
			g := startGateway(t, mock, withPool(2, nil))
			// Each warm socket gets session.created, then misbehaves and
			// is dropped; wait for some of that to happen.
			waitFor(t, "warm dials", func() bool { return metricSum(t, g, "rtgate_pool_dials_total") >= 2 })
			c := g.dial(t, "model=gpt-realtime", bearer(testMasterKey))
			if e := read(t, c); e.typ() != "session.created" {
				t.Fatalf("got %v", e.typ())
			}
			_ = c.Close()
			if hits := metricSum(t, g, "rtgate_pool_hits_total"); hits != 0 {
				t.Fatalf("a misbehaving socket was handed out (%v hits)", hits)
			}
		})
	}
}

func TestPoolReplacesExpiredSockets(t *testing.T) {
	mock := startMock(t, mockai.Config{})
	g := startGateway(t, mock, withPool(2, func(c *Settings) { c.Pool.MaxIdle = 300 * time.Millisecond }))
	waitWarm(t, g, 2)
	waitFor(t, "replacement dials", func() bool { return len(mock.Records()) >= 6 })
	waitWarm(t, g, 2)
	if active := mock.Stats().Active; active > 4 {
		t.Fatalf("%d upstream sockets open; expired ones were not closed", active)
	}
}

func TestPoolBacksOffAFailingKey(t *testing.T) {
	mock := startMock(t, mockai.Config{Key: "sk-not-the-gateways", RejectStatus: 401})
	g := startGateway(t, mock, withPool(4, nil))
	time.Sleep(3 * time.Second)
	// Without backoff this would be thousands. With it: the first round of
	// 4, then one probe after 0.5 s, 1 s, 2 s (the last lands at 3.5 s).
	if n := len(mock.Records()); n < 4 || n > 8 {
		t.Fatalf("the upstream saw %d dials in 3 s, want a bounded few", n)
	}
	if b := metricSum(t, g, "rtgate_pool_backoff_seconds"); b <= 0 {
		t.Fatalf("backoff gauge %v, want > 0", b)
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
}

func TestPoolOffDialsNothingAhead(t *testing.T) {
	mock := startMock(t, mockai.Config{})
	g := startGateway(t, mock, withPool(0, nil))
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
}

func TestPoolClosesWarmSocketsOnShutdown(t *testing.T) {
	mock := startMock(t, mockai.Config{})
	g := startGateway(t, mock, withPool(3, nil))
	waitWarm(t, g, 3)
	g.srv.Pool().Close()
	waitFor(t, "warm sockets to close", func() bool { return mock.Stats().Active == 0 })
}

func TestAdminMetricsEndpoint(t *testing.T) {
	mock := startMock(t, mockai.Config{})
	g := startGateway(t, mock, withPool(1, nil))
	waitWarm(t, g, 1)
	c := g.dial(t, "model=gpt-realtime", bearer(testMasterKey))
	read(t, c)
	req, _ := http.NewRequest("GET", "/metrics", nil)
	rec := newRecorder()
	g.srv.AdminHandler().ServeHTTP(rec, req)
	body := rec.String()
	for _, want := range []string{"rtgate_pool_hits_total{", "rtgate_sessions_open 1", "rtgate_session_setup_seconds_bucket{pool=\"hit\"", "go_goroutines"} {
		if !contains(body, want) {
			t.Fatalf("/metrics lacks %q", want)
		}
	}
	if contains(body, testUpstreamKey) || contains(body, testMasterKey) {
		t.Fatal("/metrics shows a key")
	}
}

type recorder struct {
	*httptest.ResponseRecorder
}

func newRecorder() recorder { return recorder{httptest.NewRecorder()} }

func (r recorder) String() string { return r.Body.String() }

func contains(s, sub string) bool { return strings.Contains(s, sub) }
