package server

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"rtgate/mockai"
)

// TestClientShapesOpenNoPools: a pool key is the upstream session's shape,
// never a client's (upstream.Poolable). 40 connects each with its own
// query parameter, and 10 each with its own OpenAI-Safety-Identifier, open
// exactly one upstream session each (counted at mockai: session.created
// sent), all direct, with the parameter and the header forwarded as sent;
// the configured deployment's warm sockets stay untouched, no other pool
// is made, and the misses are counted apart by reason. Before, each nonce
// made a key with a pool of its own: 80 extra upstream sessions.
func TestClientShapesOpenNoPools(t *testing.T) {
	poolSchemes(t, func(t *testing.T, tls bool) {
		mock := startPoolMock(t, mockai.Config{}, tls)
		g := startPoolGateway(t, mock, 2, nil)
		waitWarm(t, g, 2)
		before := mock.Stats().Sessions

		connect := func(query string, h http.Header) {
			c := g.dial(t, query, h)
			if e := read(t, c); e.typ() != "session.created" {
				t.Fatalf("%s: first event %v", query, e.typ())
			}
			c.Close()
		}
		for i := range 40 {
			connect(fmt.Sprintf("model=gpt-realtime&nonce=%d", i), bearer(testMasterKey))
		}
		for i := range 10 {
			h := bearer(testMasterKey)
			h.Set("OpenAI-Safety-Identifier", fmt.Sprintf("user-%d", i))
			connect("model=gpt-realtime", h)
		}

		// mockai counts a session just after sending its session.created.
		waitFor(t, "mockai to count the sessions", func() bool { return mock.Stats().Sessions-before >= 50 })
		if got := mock.Stats().Sessions - before; got != 50 {
			t.Fatalf("%d upstream sessions for 50 connects, want 50: one each, no pool of their own", got)
		}
		recs := mock.Records()
		recs = recs[len(recs)-50:]
		for i, r := range recs[:40] {
			if !strings.Contains(r.Query, fmt.Sprintf("nonce=%d", i)) {
				t.Fatalf("connect %d reached the upstream with query %q: its parameter was not forwarded", i, r.Query)
			}
		}
		for i, r := range recs[40:] {
			if got := r.Header.Get("OpenAI-Safety-Identifier"); got != fmt.Sprintf("user-%d", i) {
				t.Fatalf("connect %d reached the upstream with safety identifier %q (%v %q)", 40+i, got, r.Header, r.Query)
			}
		}
		if got := g.srv.Pool().Warm(g.srv.defaultTarget()); got != 2 {
			t.Fatalf("the deployment's pool holds %d, want its 2 untouched", got)
		}
		for reason, want := range map[string]float64{"query": 40, "safety_identifier": 10, "empty": 0, "no_pool": 0} {
			if got := metricWith(t, g, "rtgate_pool_misses_total", "reason", reason); got != want {
				t.Errorf("misses for %s: %v, want %v", reason, got, want)
			}
		}
		if hits := metricSum(t, g, "rtgate_pool_hits_total"); hits != 0 {
			t.Errorf("%v hits, want 0", hits)
		}
		if n := seriesOf(t, g, "rtgate_pool_target_sockets"); n != 1 {
			t.Errorf("%d pools have a target, want the configured deployment's 1", n)
		}
	})
}

// seriesOf counts the series of the named metric family.
func seriesOf(t *testing.T, g *gateway, name string) int {
	t.Helper()
	fams, err := g.srv.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() == name {
			return len(f.GetMetric())
		}
	}
	return 0
}
