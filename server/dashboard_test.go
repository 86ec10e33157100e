package server

import (
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"rtgate/mockai"
)

// exportedMetrics are the names of every metric family the gateway
// registers (with the pool on), whether or not it has a sample yet.
func exportedMetrics(t *testing.T, g *gateway) map[string]bool {
	t.Helper()
	ch := make(chan *prometheus.Desc)
	go func() {
		g.srv.reg.Describe(ch)
		close(ch)
	}()
	fq := regexp.MustCompile(`fqName: "([^"]+)"`)
	names := map[string]bool{}
	for d := range ch {
		if m := fq.FindStringSubmatch(d.String()); m != nil {
			names[m[1]] = true
		}
	}
	// Families gathered without a Desc of their own (collectors).
	fams, err := g.srv.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		names[f.GetName()] = true
	}
	return names
}

// TestGrafanaDashboardQueriesExportedMetrics: every panel of
// deploy/grafana/rtgate.json has a query, and every metric a query names
// (histograms by their _bucket, _sum or _count series) is one the gateway
// exports; the dashboard covers sessions, pool hits, turn latency by
// deployment, spend and refusals.
func TestGrafanaDashboardQueriesExportedMetrics(t *testing.T) {
	raw, err := os.ReadFile("../deploy/grafana/rtgate.json")
	if err != nil {
		t.Fatal(err)
	}
	type panel struct {
		Title   string  `json:"title"`
		Panels  []panel `json:"panels"` // a row's
		Targets []struct {
			Expr string `json:"expr"`
		} `json:"targets"`
	}
	var dash struct {
		Panels []panel `json:"panels"`
	}
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatalf("rtgate.json: %v", err)
	}
	g := startPoolGateway(t, startMock(t, mockai.Config{}), 1, nil)
	exported := exportedMetrics(t, g)
	metric := regexp.MustCompile(`\brtgate_[a-z0-9_]+`)
	used := map[string]bool{}
	var walk func(ps []panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			if len(p.Panels) > 0 {
				walk(p.Panels)
				continue
			}
			if len(p.Targets) == 0 {
				t.Errorf("panel %q has no query", p.Title)
			}
			for _, tg := range p.Targets {
				names := metric.FindAllString(tg.Expr, -1)
				if len(names) == 0 {
					t.Errorf("panel %q: query %q names no rtgate metric", p.Title, tg.Expr)
				}
				for _, n := range names {
					base := n
					for _, suffix := range []string{"_bucket", "_sum", "_count"} {
						if b, ok := strings.CutSuffix(n, suffix); ok && exported[b] {
							base = b
						}
					}
					if !exported[base] {
						t.Errorf("panel %q: %s is not a metric the gateway exports", p.Title, n)
					}
					used[base] = true
				}
			}
		}
	}
	walk(dash.Panels)
	for _, want := range []string{"rtgate_sessions_open", "rtgate_pool_hits_total", "rtgate_turn_first_audio_seconds",
		"rtgate_spend_usd_total", "rtgate_connections_refused_total"} {
		if !used[want] {
			t.Errorf("the dashboard has no panel on %s", want)
		}
	}
}
