package huge

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"rtgate/bench/benchtest"
)

func TestPlan(t *testing.T) {
	for _, tt := range []struct {
		name          string
		sessions, gws int
		limit         int
		want          Layout
		wantErr       string
	}{
		{name: "the default run under a 20,000 limit", sessions: 100_000, gws: 12, limit: 20000,
			want: Layout{Gateways: 12, PerGateway: 8334, Mockai: 6, Clients: []int{16667, 16667, 16667, 16667, 16666, 16666},
				FileLimit: 20000, PerProcess: 18000}},
		{name: "a small check", sessions: 2000, gws: 12, limit: 20000,
			want: Layout{Gateways: 12, PerGateway: 167, Mockai: 1, Clients: []int{2000}, FileLimit: 20000, PerProcess: 18000}},
		{name: "two gateways share a mockai", sessions: 20_000, gws: 4, limit: 20000,
			want: Layout{Gateways: 4, PerGateway: 5000, Mockai: 2, Clients: []int{10000, 10000}, FileLimit: 20000, PerProcess: 18000}},
		{name: "too few gateways for the limit", sessions: 100_000, gws: 4, limit: 20000, wantErr: "use more gateways"},
		{name: "no sessions", sessions: 0, gws: 12, limit: 20000, wantErr: "must be positive"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := DefaultConfig()
			c.Sessions, c.Gateways = tt.sessions, tt.gws
			got, err := plan(c, tt.limit)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			gotJ, _ := json.Marshal(got)
			wantJ, _ := json.Marshal(tt.want)
			if string(gotJ) != string(wantJ) {
				t.Fatalf("layout %s\nwant %s", gotJ, wantJ)
			}
			sum := 0
			for _, n := range got.Clients {
				sum += n
				if n > got.PerProcess {
					t.Errorf("a client process holds %d sockets, over %d", n, got.PerProcess)
				}
			}
			if sum != tt.sessions {
				t.Errorf("clients open %d sessions, want %d", sum, tt.sessions)
			}
		})
	}
}

// A small run end to end with the real binaries: three gateways on one port,
// every session established and held, each role's figures read, the report
// written, and every process stopped.
func TestRunSmall(t *testing.T) {
	bins := benchtest.Build(t, t.TempDir(), "mockai", "gateway", "wsbench")
	cfg := DefaultConfig()
	cfg.MockaiBin, cfg.GatewayBin, cfg.WsbenchBin, cfg.OutDir = bins[0], bins[1], bins[2], t.TempDir()
	cfg.Sessions, cfg.Gateways, cfg.Concurrency = 300, 3, 50
	cfg.PerProcess = 200 // two client processes
	cfg.OpenTimeout, cfg.HoldFor = time.Minute, time.Second
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	rep, err := Run(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	md := rep.Markdown()
	if !rep.Pass() || rep.Held.SessionsOpen != 300 || len(rep.Held.PerGateway) != 3 || rep.Held.ClientsRunning != 2 {
		t.Fatalf("report:\n%s", md)
	}
	if rep.Held.GatewayRSS <= rep.Idle.GatewayRSS/2 || rep.Held.GatewayHeap <= 0 || rep.AtOpen.GatewayCPU <= rep.Idle.GatewayCPU ||
		rep.AtOpen.ClientCPU <= 0 || rep.AtOpen.MockaiCPU <= rep.Idle.MockaiCPU {
		t.Fatalf("missing figures: %+v\n%s", rep.Held, md)
	}
	for _, f := range []string{"report.md", "results.json", "gateway-3.log", "client-2.json"} {
		if _, err := os.Stat(filepath.Join(rep.Dir, f)); err != nil {
			t.Errorf("run folder: %v", err)
		}
	}
	for _, want := range []string{"| sessions held at the end | 300", "sessions/s", "gateway RSS per session", "CPU while establishing"} {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q:\n%s", want, md)
		}
	}
}
