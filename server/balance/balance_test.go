package balance

import (
	"fmt"
	"io"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"rtgate/server/routes"
)

// testDeployments are n deployments of group g, "g/0@h0" ..., each with
// rpm and max_parallel_requests as given.
func testDeployments(n int, rpm float64, maxSessions int) []*routes.Deployment {
	ds := make([]*routes.Deployment, n)
	for i := range ds {
		ds[i] = &routes.Deployment{Name: fmt.Sprintf("g/%d@h%d", i, i), Group: "g", RPM: rpm, MaxSessions: maxSessions}
	}
	return ds
}

// testBalancer is a Balancer on its own registry and clock.
func testBalancer(probeTimeout time.Duration, now *time.Time) (*Balancer, *prometheus.Registry) {
	reg := prometheus.NewRegistry()
	b := New(Config{Registerer: reg, Log: slog.New(slog.NewTextHandler(io.Discard, nil)), ProbeTimeout: probeTimeout,
		DialFailures: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "f"}, []string{"model_group"}),
		Now:          func() time.Time { return *now }})
	return b, reg
}

// TestHealthStates drives the health table (healthState) with a clock of its
// own: each step is an event at a time (in seconds) and the order ranking
// gives afterwards.
func TestHealthStates(t *testing.T) {
	type step struct {
		at    float64 // seconds since the start
		event string  // "fail N", "ok N", or "" (just order)
		order []int   // deployment indexes in the order ranked
		probe bool    // this step's order claims a probe
	}
	for _, tc := range []struct {
		name  string
		steps []step
	}{
		{"healthy: fewest live first", []step{
			{at: 0, order: []int{0, 1}}, // live 0/1 set below
		}},
		{"a failure ejects behind the healthy one", []step{
			{at: 0, event: "fail 0", order: []int{1, 0}},
			{at: 0.5, order: []int{1, 0}},
			{at: 0.9, event: "fail 0", order: []int{1, 0}}, // already ejected: no longer backoff
		}},
		{"after the backoff one connect probes, the others still skip it", []step{
			{at: 0, event: "fail 0"},
			{at: 1, order: []int{0, 1}, probe: true},
			{at: 1.1, order: []int{1, 0}},
			{at: 1.2, order: []int{1, 0}},
		}},
		{"a probe that succeeds brings it back", []step{
			{at: 0, event: "fail 0"},
			{at: 1, order: []int{0, 1}, probe: true},
			{at: 1.1, event: "ok 0", order: []int{0, 1}},
		}},
		{"a failed probe doubles the backoff", []step{
			{at: 0, event: "fail 0"},
			{at: 1, order: []int{0, 1}, probe: true},
			{at: 1.5, event: "fail 0", order: []int{1, 0}},
			{at: 3.4, order: []int{1, 0}},                  // 2 s backoff from 1.5
			{at: 3.5, order: []int{0, 1}, probe: true},     // due
			{at: 3.6, event: "fail 0", order: []int{1, 0}}, // 4 s now
			{at: 7.5, order: []int{1, 0}},
			{at: 7.6, order: []int{0, 1}, probe: true},
		}},
		{"an unanswered probe is given up after the dial timeout", []step{
			{at: 0, event: "fail 0"},
			{at: 1, order: []int{0, 1}, probe: true},
			{at: 10.9, order: []int{1, 0}},
			{at: 11, order: []int{0, 1}, probe: true},
		}},
		{"success resets the backoff", []step{
			{at: 0, event: "fail 0"},
			{at: 1, event: "fail 0"}, // due: 2 s
			{at: 3, order: []int{0, 1}, probe: true},
			{at: 3, event: "ok 0"},
			{at: 4, event: "fail 0", order: []int{1, 0}},
			{at: 5, order: []int{0, 1}, probe: true}, // 1 s again
		}},
		{"a healthy one ejected too: the one due first is probed", []step{
			{at: 0, event: "fail 0"},
			{at: 0.5, event: "fail 1"},
			{at: 0.7, order: []int{0, 1}}, // both ejected: fewest live
			{at: 1.0, order: []int{0, 1}, probe: true},
			{at: 1.2, order: []int{0, 1}}, // 0 probing, 1 ejected: live decides
			{at: 1.5, order: []int{1, 0}, probe: true},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ds := testDeployments(2, 0, 0)
			start := time.Unix(1_000_000, 0)
			now := start
			b, reg := testBalancer(10*time.Second, &now)
			// Deployment 1 has more live sessions, so that fewest-live
			// alone would put 0 first.
			b.Attach(ds[1])
			for i, st := range tc.steps {
				now = start.Add(time.Duration(st.at * float64(time.Second)))
				var n int
				switch {
				case st.event == "":
				case scan(st.event, "fail %d", &n):
					b.Failed(ds[n], "test")
				case scan(st.event, "ok %d", &n):
					b.Succeeded(ds[n])
				default:
					t.Fatalf("bad event %q", st.event)
				}
				if st.order == nil {
					continue
				}
				before := gathered(t, reg, "rtgate_upstream_probes_total")
				got := b.Rank(ds)
				after := gathered(t, reg, "rtgate_upstream_probes_total")
				if idx := indexes(ds, got); !slices.Equal(idx, st.order) || (after > before) != st.probe {
					t.Fatalf("step %d (t=%.1fs %q): order %v probe %v, want %v probe %v", i, st.at, st.event, idx, after > before, st.order, st.probe)
				}
			}
		})
	}
}

func indexes(ds, got []*routes.Deployment) []int {
	var idx []int
	for _, d := range got {
		idx = append(idx, slices.Index(ds, d))
	}
	return idx
}

func scan(s, format string, n *int) bool {
	_, err := fmt.Sscanf(s, format, n)
	return err == nil
}

// TestReserve: a plan puts first the deployment whose slot it took, and
// that one is the probe when a probe is due and has room; a due probe whose
// slots are full is not claimed (the next connect may probe it); when no
// deployment has room the refusal says why and when to come back.
func TestReserve(t *testing.T) {
	start := time.Unix(1_000_000, 0)
	now := start
	b, reg := testBalancer(10*time.Second, &now)
	ds := testDeployments(2, 0, 1)

	// Deployment 0 is ejected and due; its one slot is taken by a
	// session planned before the ejection.
	p, busy := b.Reserve(ds[:1])
	if busy != nil || p.Reserved != ds[0] {
		t.Fatalf("first plan %+v, %+v", p, busy)
	}
	b.Failed(ds[0], "test")
	now = now.Add(ejectBase)
	p, busy = b.Reserve(ds)
	if busy != nil || p.Reserved != ds[1] || !slices.Equal(indexes(ds, p.Cands), []int{1, 0}) {
		t.Fatalf("plan with the probe full: %v reserved %v, busy %+v", indexes(ds, p.Cands), p.Reserved, busy)
	}
	if n := gathered(t, reg, "rtgate_upstream_probes_total"); n != 0 {
		t.Fatalf("%v probes claimed by a connect that does not go to the probe first", n)
	}
	// Both full: refused as at capacity.
	if _, busy = b.Reserve(ds); busy == nil || !busy.Capped || busy.RetryAfter != 1 {
		t.Fatalf("both full: %+v", busy)
	}
	// The probe's slot comes back: the next connect probes it.
	b.Release(ds[0])
	p, busy = b.Reserve(ds)
	if busy != nil || p.Reserved != ds[0] || p.Cands[0] != ds[0] {
		t.Fatalf("plan with the probe free: %v, busy %+v", indexes(ds, p.Cands), busy)
	}
	if n := gathered(t, reg, "rtgate_upstream_probes_total"); n != 1 {
		t.Fatalf("%v probes claimed, want the one connect that goes to it", n)
	}

	// rpm: 60 a minute is one a second, a bucket of one.
	rated := testDeployments(1, 60, 0)
	rated[0].Name = "r/0@h"
	if _, busy = b.Reserve(rated); busy != nil {
		t.Fatalf("first connect at rpm 60: %+v", busy)
	}
	now = now.Add(100 * time.Millisecond)
	if _, busy = b.Reserve(rated); busy == nil || busy.Capped || busy.RetryAfter != 1 {
		t.Fatalf("second connect within the second: %+v, want throttled with Retry-After 1", busy)
	}
}

// TestStateSurvivesAReload: a reload builds new Deployment values; one that
// keeps its name keeps its health, live count and slots.
func TestStateSurvivesAReload(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	b, _ := testBalancer(time.Second, &now)
	before := testDeployments(2, 0, 1)
	if _, busy := b.Reserve(before[1:]); busy != nil {
		t.Fatal(busy)
	}
	b.Attach(before[1])
	b.Failed(before[0], "test")
	after := testDeployments(2, 0, 1)
	if b.Healthy(after[0]) {
		t.Fatal("the reloaded deployment forgot its ejection")
	}
	if st := b.Snapshot(after[1]); st.Live != 1 || st.State != "healthy" {
		t.Fatalf("reloaded deployment 1: %+v, want live 1 healthy", st)
	}
	if _, busy := b.Reserve(after[1:]); busy == nil || !busy.Capped {
		t.Fatalf("the reloaded deployment's slot was given back: %+v", busy)
	}
}

// TestHealthMetrics: an ejection shows in the ejected gauge and the
// ejections counter; coming back clears the gauge.
func TestHealthMetrics(t *testing.T) {
	ds := testDeployments(1, 0, 0)
	now := time.Unix(1_000_000, 0)
	b, reg := testBalancer(time.Second, &now)
	b.Failed(ds[0], "test")
	if g, c := gathered(t, reg, "rtgate_upstream_ejected"), gathered(t, reg, "rtgate_upstream_ejections_total"); g != 1 || c != 1 {
		t.Fatalf("after a failure: ejected %v, ejections %v", g, c)
	}
	b.Succeeded(ds[0])
	if g := gathered(t, reg, "rtgate_upstream_ejected"); g != 0 {
		t.Fatalf("after a success: ejected %v", g)
	}
}

// gathered adds up every sample of the named metric family in reg.
func gathered(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, f := range fams {
		if f.GetName() == name {
			for _, m := range f.GetMetric() {
				sum += m.GetCounter().GetValue() + m.GetGauge().GetValue()
			}
		}
	}
	return sum
}
