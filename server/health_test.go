package server

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

// testDeployments are n deployments of one group, "g/0@h0" ... .
func testDeployments(t *testing.T, n int) []*routes.Deployment {
	t.Helper()
	body := "model_list:\n"
	for i := range n {
		body += "  - model_name: g\n    litellm_params: {model: m, api_base: ws://h" + string(rune('0'+i)) + "/v1}\n"
	}
	path := writeConfig(t, body+configTail)
	table, err := routes.Load(path, func(name string) (string, bool) { return "k", true })
	if err != nil {
		t.Fatal(err)
	}
	return table.Groups["g"]
}

// TestHealthStates drives the health table of health.go with a clock of its
// own: each step is an event at a time (in seconds) and the order routing
// gives afterwards.
func TestHealthStates(t *testing.T) {
	type step struct {
		at    float64 // seconds since the start
		event string  // "fail N", "ok N", or "" (just order)
		order []int   // deployment indexes in the order routed
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
			ds := testDeployments(t, 2)
			reg := prometheus.NewRegistry()
			r := newRouter(reg, slog.New(slog.NewTextHandler(io.Discard, nil)), 10*time.Second)
			start := time.Unix(1_000_000, 0)
			var now time.Time
			r.now = func() time.Time { return now }
			// Deployment 1 has more live sessions, so that fewest-live
			// alone would put 0 first.
			r.counter(ds[1]).Add(1)
			for i, st := range tc.steps {
				now = start.Add(time.Duration(st.at * float64(time.Second)))
				var n int
				switch {
				case st.event == "":
				case scan(st.event, "fail %d", &n):
					r.failed(ds[n], "test")
				case scan(st.event, "ok %d", &n):
					r.succeeded(ds[n])
				default:
					t.Fatalf("bad event %q", st.event)
				}
				if st.order == nil {
					continue
				}
				before := gathered(t, reg, "rtgate_upstream_probes_total")
				got := r.order(ds)
				var idx []int
				for _, d := range got {
					idx = append(idx, slices.Index(ds, d))
				}
				after := gathered(t, reg, "rtgate_upstream_probes_total")
				if !slices.Equal(idx, st.order) || (after > before) != st.probe {
					t.Fatalf("step %d (t=%.1fs %q): order %v probe %v, want %v probe %v", i, st.at, st.event, idx, after > before, st.order, st.probe)
				}
			}
		})
	}
}

func scan(s, format string, n *int) bool {
	_, err := fmt.Sscanf(s, format, n)
	return err == nil
}

// TestHealthMetrics: an ejection shows in the ejected gauge and the
// ejections counter; coming back clears the gauge.
func TestHealthMetrics(t *testing.T) {
	ds := testDeployments(t, 1)
	reg := prometheus.NewRegistry()
	r := newRouter(reg, slog.New(slog.NewTextHandler(io.Discard, nil)), time.Second)
	r.failed(ds[0], "test")
	if g, c := gathered(t, reg, "rtgate_upstream_ejected"), gathered(t, reg, "rtgate_upstream_ejections_total"); g != 1 || c != 1 {
		t.Fatalf("after a failure: ejected %v, ejections %v", g, c)
	}
	r.succeeded(ds[0])
	if g := gathered(t, reg, "rtgate_upstream_ejected"); g != 0 {
		t.Fatalf("after a success: ejected %v", g)
	}
}

// gathered adds up every sample of the named metric family in reg.
func gathered(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	return gatheredWhere(t, reg, name, "", "")
}

// gatheredWhere adds up the samples of the named metric family in reg whose
// label has value; every sample when label is "".
func gatheredWhere(t *testing.T, reg prometheus.Gatherer, name, label, value string) float64 {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			match := label == ""
			for _, l := range m.GetLabel() {
				match = match || l.GetName() == label && l.GetValue() == value
			}
			if match {
				sum += m.GetCounter().GetValue() + m.GetGauge().GetValue()
			}
		}
	}
	return sum
}
