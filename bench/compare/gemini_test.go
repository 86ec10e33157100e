package compare

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"rtgate/bench/load"
	"rtgate/bench/proc"
)

// TestCompareGemini runs the -protocol gemini comparison for real, at a
// tiny size, over both upstreams: a Gemini Live client straight to mockai,
// the gateway translating the Realtime API to a gemini/ deployment on the
// same mockai (its config file written by the run), and the Realtime
// pool-off baseline, each with every call's turns, and the gateway legs'
// CPU and RSS measured.
func TestCompareGemini(t *testing.T) {
	for _, up := range []proc.Upstream{proc.UpstreamTLS, proc.UpstreamPlain} {
		t.Run(string(up), func(t *testing.T) {
			cfg := tinyConfig(t)
			gemini(&cfg)
			cfg.GatewayBin = requireBinary(t, "gateway")
			cfg.Upstream = up
			cfg.N, cfg.Concurrency, cfg.Runs, cfg.Turns = 12, 4, 1, 2
			out, err := Run(context.Background(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			if len(out.Legs) != 3 {
				t.Fatalf("%d legs, want 3", len(out.Legs))
			}
			for _, leg := range out.Legs {
				s := leg.Combined
				if s.OK != cfg.N || s.LaterFirstAudio == nil || s.LaterFirstAudio.N != cfg.N*(cfg.Turns-1) {
					t.Errorf("%s: %d/%d ok (%v), later turns %+v; want every call's %d turns", leg.Name, s.OK, s.Calls, s.Failures, s.LaterFirstAudio, cfg.Turns)
				}
				if leg.Open != nil {
					t.Errorf("%s: an open-loop run in a Gemini comparison", leg.Name)
				}
			}
			checkGatewayUsage(t, out, cfg)
			table := out.GeminiMarkdown()
			for _, want := range []string{
				"| metric | Direct (Gemini Live) | Gateway → Gemini (translated) | Gateway pool off, Realtime (verbatim) |",
				"| success | 100.0% (12/12) | 100.0% (12/12) | 100.0% (12/12) |",
				"| failures | none | none | none |",
				"| 1st audio, turns 2+ p99 |", "| gateway CPU / turn | - |", "| gateway RSS (peak) | - |",
			} {
				if !strings.Contains(table, want) {
					t.Errorf("table lacks %q:\n%s", want, table)
				}
			}
			if sum := out.GeminiSummary(cfg); !strings.Contains(sum, "no pool-on leg: the gateway never warms Gemini sockets") {
				t.Errorf("summary:\n%s", sum)
			}
			// The translated leg's gateway had the gemini/ deployment only,
			// on mockai's root, its key named, not written.
			conf, err := os.ReadFile(filepath.Join(out.Dir, "gateway-gemini.yaml"))
			if err != nil {
				t.Fatal(err)
			}
			root := "ws://"
			if up == proc.UpstreamTLS {
				root = "wss://"
			}
			if !strings.Contains(string(conf), "model: gemini/"+geminiModel) || !strings.Contains(string(conf), "api_base: "+root+"127.0.0.1:") ||
				!strings.Contains(string(conf), "api_key: os.environ/"+geminiKeyVar) || strings.Contains(string(conf), "sk-mock-") {
				t.Errorf("gateway config:\n%s", conf)
			}
			raw, err := os.ReadFile(out.JSONPath)
			if err != nil {
				t.Fatal(err)
			}
			var doc struct {
				Config struct {
					Protocol string `json:"protocol"`
					Turns    int    `json:"turns"`
				} `json:"config"`
				Table string `json:"table_markdown"`
				Legs  []struct {
					ID      string            `json:"id"`
					Gateway *jsonGatewayUsage `json:"gateway"`
				} `json:"legs"`
			}
			if err := json.Unmarshal(raw, &doc); err != nil {
				t.Fatal(err)
			}
			if doc.Config.Protocol != "gemini" || doc.Config.Turns != 2 || doc.Table != table || len(doc.Legs) != 3 ||
				doc.Legs[1].ID != LegGemini || doc.Legs[1].Gateway == nil || doc.Legs[1].Gateway.Turns != cfg.N*cfg.Turns {
				t.Errorf("results.json: %+v", doc)
			}
			html, err := os.ReadFile(out.HTMLPath)
			if err != nil {
				t.Fatal(err)
			}
			for _, want := range []string{"Gemini Live (direct, and translated from the Realtime API by the gateway)", "Gateway → Gemini (translated)", "never warms Gemini sockets"} {
				if !strings.Contains(string(html), want) {
					t.Errorf("HTML report does not say %q", want)
				}
			}
			for _, bin := range []string{cfg.MockaiBin, cfg.GatewayBin} {
				if pids := runningChildren(t, bin); len(pids) > 0 {
					t.Errorf("%s still running: %v", filepath.Base(bin), pids)
				}
			}
		})
	}
}

// TestGeminiRatio: the ratio is the translated leg's CPU per turn over the
// verbatim leg's, and there is none without both or without turns.
func TestGeminiRatio(t *testing.T) {
	usage := func(cpu time.Duration, turns int) *GatewayUsage {
		return &GatewayUsage{CPU: cpu, Calls: turns, Turns: turns}
	}
	tests := []struct {
		name      string
		legs      []*LegResult
		wantRatio float64 // 0: none
		wantText  string
	}{
		{"both legs", []*LegResult{{ID: LegDirect}, {ID: LegGemini, Gateway: usage(3*time.Second, 1000)},
			{ID: LegPoolOff, Gateway: usage(2*time.Second, 1000)}}, 1.5, "3.00 ms vs 2.00 ms = 1.50x (+1.00 ms a turn)"},
		{"translation cheaper", []*LegResult{{ID: LegGemini, Gateway: usage(time.Second, 500)},
			{ID: LegPoolOff, Gateway: usage(4*time.Second, 1000)}}, 0.5, "= 0.50x (-2.00 ms a turn)"},
		{"no verbatim leg", []*LegResult{{ID: LegDirect}, {ID: LegGemini, Gateway: usage(time.Second, 10)}}, 0, "no ratio"},
		{"no turns streamed", []*LegResult{{ID: LegGemini, Gateway: usage(time.Second, 0)}, {ID: LegPoolOff, Gateway: usage(time.Second, 10)}}, 0, "no ratio"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out := &Outcome{Protocol: load.ProtocolGemini, Legs: tc.legs}
			r := out.geminiRatio()
			if (r == nil) != (tc.wantRatio == 0) || (r != nil && (r.Ratio < tc.wantRatio-1e-9 || r.Ratio > tc.wantRatio+1e-9)) {
				t.Fatalf("ratio %+v, want %v", r, tc.wantRatio)
			}
			if sum := out.GeminiSummary(Config{N: 1000, Runs: 1, Turns: 1}); !strings.Contains(sum, tc.wantText) {
				t.Errorf("summary lacks %q:\n%s", tc.wantText, sum)
			}
		})
	}
}

// TestTurnsStreamed: a call's turns count up to the first that did not
// reach its audio.
func TestTurnsStreamed(t *testing.T) {
	samples := []load.Sample{
		{Reached: load.PhaseDone}, // one turn
		{Reached: load.PhaseDone, LaterFirstAudio: []time.Duration{1, 2}},                                // three
		{Reached: load.PhaseFirstAudio, Failure: "timeout_done", LaterFirstAudio: []time.Duration{1}},    // two, the third failed
		{Reached: load.PhaseSession, Failure: "timeout_first_audio", LaterFirstAudio: []time.Duration{}}, // none
	}
	if got := turnsStreamed(samples); got != 6 {
		t.Errorf("turns %d, want 6", got)
	}
}
