package compare

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"rtgate/bench/load"
	"rtgate/bench/proc"
)

// guardrails makes c a -protocol guardrails run.
func guardrails(c *Config) {
	c.Protocol, c.Legs, c.Open.Rate = ProtocolGuardrails, slices.Clone(GuardrailLegs), 0
}

// TestCompareGuardrails runs the -protocol guardrails comparison for real,
// at a tiny size, over both upstreams: every leg's calls get every turn
// answered, the record leg's gateway writes a record per call, each
// guardrail leg's gateway checks what its mode reads (and blocks nothing),
// the others check nothing, and the report says so.
func TestCompareGuardrails(t *testing.T) {
	for _, up := range []proc.Upstream{proc.UpstreamTLS, proc.UpstreamPlain} {
		t.Run(string(up), func(t *testing.T) {
			cfg := tinyConfig(t)
			guardrails(&cfg)
			cfg.GatewayBin = requireBinary(t, "gateway")
			cfg.Upstream = up
			cfg.N, cfg.Concurrency, cfg.Runs, cfg.Turns = 8, 4, 1, 2
			out, err := Run(context.Background(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			if len(out.Legs) != len(GuardrailLegs) {
				t.Fatalf("%d legs, want %d", len(out.Legs), len(GuardrailLegs))
			}
			turns := float64(cfg.N * cfg.Turns)
			for _, leg := range out.Legs {
				s := leg.Combined
				if s.OK != cfg.N || s.LaterFirstAudio == nil || s.LaterFirstAudio.N != cfg.N*(cfg.Turns-1) {
					t.Errorf("%s: %d/%d ok (%v), later turns %+v; want every call's %d turns", leg.ID, s.OK, s.Calls, s.Failures, s.LaterFirstAudio, cfg.Turns)
				}
				g := leg.Guard
				if g == nil || g.Checks == nil {
					t.Fatalf("%s: no guardrail activity read: %+v", leg.ID, g)
				}
				if g.Checks["block"] != 0 || g.Checks["error_open"] != 0 || g.Checks["error_closed"] != 0 {
					t.Errorf("%s: checks %v, want passes only", leg.ID, g.Checks)
				}
				switch leg.ID {
				case LegInput, LegTool: // one transcript, one call a turn
					if g.Checks["pass"] != turns {
						t.Errorf("%s: %v checks passed, want %v (one a turn)", leg.ID, g.Checks["pass"], turns)
					}
				case LegOutput: // the transcript as it streams: at least once a turn
					if g.Checks["pass"] < turns {
						t.Errorf("%s: %v checks passed, want at least %v", leg.ID, g.Checks["pass"], turns)
					}
				default:
					if g.Checks["pass"] != 0 {
						t.Errorf("%s: %v checks without a guardrail", leg.ID, g.Checks["pass"])
					}
				}
				if want := map[bool]int{true: cfg.N}[leg.ID == LegRecord]; g.Records != want {
					t.Errorf("%s: %d conversation records, want %d", leg.ID, g.Records, want)
				}
				if leg.Gateway == nil || leg.Gateway.IdleRSS <= 0 {
					t.Errorf("%s: no idle RSS: %+v", leg.ID, leg.Gateway)
				}
			}
			checkGatewayUsage(t, out, cfg)
			table := out.Markdown()
			for _, want := range []string{
				"| metric | pool-off (none) | record | input guardrail | output guardrail | tool calls, none | tool guardrail |",
				"| success | 100.0% (8/8) | 100.0% (8/8) | 100.0% (8/8) | 100.0% (8/8) | 100.0% (8/8) | 100.0% (8/8) |",
				"| guardrail checks | none | none | pass 16 | pass ", "| conversation records | 0 | 8 | 0 | 0 | 0 | 0 |",
				"| 1st audio p95 (every turn) |", "|   vs pool-off | - |", "| gateway RSS / session |",
			} {
				if !strings.Contains(table, want) {
					t.Errorf("table lacks %q:\n%s", want, table)
				}
			}
			sum := out.GuardrailsSummary(cfg)
			for _, want := range []string{"record vs pool-off: CPU / turn", "tool vs tool-none:", "the same 8 calls x 2 turns on each leg"} {
				if !strings.Contains(sum, want) {
					t.Errorf("summary lacks %q:\n%s", want, sum)
				}
			}
			// Each leg's gateway had the deployment on mockai, its key named
			// and not written, and only its own record or guardrail.
			root := map[proc.Upstream]string{proc.UpstreamTLS: "wss://", proc.UpstreamPlain: "ws://"}[up]
			for _, id := range GuardrailLegs {
				conf, err := os.ReadFile(filepath.Join(out.Dir, "gateway-"+id+".yaml"))
				if err != nil {
					t.Fatal(err)
				}
				c := string(conf)
				mode, guarded := guardrailModes[id]
				if !strings.Contains(c, "api_base: "+root+"127.0.0.1:") || !strings.Contains(c, "api_key: os.environ/"+guardrailsKeyVar) ||
					strings.Contains(c, "sk-mock-") || strings.Contains(c, "log_transcripts") != (id == LegRecord) ||
					strings.Contains(c, "guardrails:") != guarded || (guarded && !strings.Contains(c, "mode: "+mode)) {
					t.Errorf("%s: gateway config:\n%s", id, c)
				}
			}
			raw, err := os.ReadFile(out.JSONPath)
			if err != nil {
				t.Fatal(err)
			}
			var doc struct {
				Config struct {
					Protocol string `json:"protocol"`
				} `json:"config"`
				Table string        `json:"table_markdown"`
				Costs []jsonLegCost `json:"guardrail_costs"`
				Legs  []struct {
					ID    string                 `json:"id"`
					Guard *jsonGuardrailActivity `json:"guardrails"`
				} `json:"legs"`
			}
			if err := json.Unmarshal(raw, &doc); err != nil {
				t.Fatal(err)
			}
			if doc.Config.Protocol != "guardrails" || doc.Table != table || len(doc.Costs) != len(GuardrailLegs) ||
				doc.Costs[len(doc.Costs)-1].Leg != LegTool || doc.Costs[len(doc.Costs)-1].Baseline != LegToolNone ||
				len(doc.Legs) != len(GuardrailLegs) || doc.Legs[1].Guard == nil || doc.Legs[1].Guard.Records != cfg.N {
				t.Errorf("results.json: %+v", doc)
			}
			html, err := os.ReadFile(out.HTMLPath)
			if err != nil {
				t.Fatal(err)
			}
			for _, want := range []string{"Realtime with the conversation record and each guardrail mode", "Cost against pool-off", "tool vs tool-none"} {
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

// TestGuardrailsValidation: what a -protocol guardrails run takes, and the
// guardrail legs outside it.
func TestGuardrailsValidation(t *testing.T) {
	tests := []struct {
		name    string
		mutate  func(c *Config)
		wantErr string // "" for none
	}{
		{"every leg", guardrails, ""},
		{"two legs", func(c *Config) { guardrails(c); c.Legs = []string{LegPoolOff, LegOutput} }, ""},
		{"tls upstream", func(c *Config) { guardrails(c); c.Upstream = proc.UpstreamTLS }, ""},
		{"record leg in a Realtime run", func(c *Config) { c.Legs = []string{LegPoolOff, LegRecord} }, "the record leg is -protocol guardrails'"},
		{"tool leg in a Gemini run", func(c *Config) { gemini(c); c.Legs = []string{LegGemini, LegTool} }, "the tool leg is -protocol guardrails'"},
		{"pool on", func(c *Config) { guardrails(c); c.Legs = []string{LegPoolOff, LegPoolOn} }, "-protocol guardrails has no pool-on leg"},
		{"direct", func(c *Config) { guardrails(c); c.Legs = []string{LegDirect, LegInput} }, "-protocol guardrails has no direct leg"},
		{"unknown leg", func(c *Config) { guardrails(c); c.Legs = []string{"pre-call"} }, `unknown leg "pre-call" (want pool-off, record, input, output, tool-none, tool)`},
		{"instances", func(c *Config) { guardrails(c); c.Instances = 3 }, "one gateway a leg"},
		{"restart", func(c *Config) { guardrails(c); c.Restart = true }, "without -restart"},
		{"audio", func(c *Config) { guardrails(c); c.Audio = true }, "does not take -audio"},
		{"open loop", func(c *Config) { guardrails(c); c.Open.Rate = 20 }, "closed-loop only"},
		{"no gateway", func(c *Config) { guardrails(c); c.GatewayBin = "" }, "no gateway binary"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultConfig()
			tc.mutate(&cfg)
			err := cfg.validate()
			if (err == nil) != (tc.wantErr == "") || (err != nil && !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("error %v, want %q", err, tc.wantErr)
			}
		})
	}
}

// TestGuardrailsConfig: each leg's gateway config turns on its own record
// or guardrail mode and nothing else, and legFlow gives each leg's calls
// the turns its gateway answers.
func TestGuardrailsConfig(t *testing.T) {
	tests := []struct {
		leg           string
		want, wantNot []string
		wantFlow      load.Flow
	}{
		{LegPoolOff, nil, []string{"guardrails:", "log_transcripts"}, load.FlowCommit},
		{LegRecord, []string{"      log_transcripts: true\n"}, []string{"guardrails:"}, load.FlowCommit},
		{LegInput, []string{"mode: realtime_input_transcription", "default_on: true", "- keyword: password\n          action: BLOCK"}, []string{"log_transcripts"}, load.FlowServerAnswers},
		{LegOutput, []string{"mode: realtime_output_transcription", "guardrail: litellm_content_filter"}, []string{"log_transcripts"}, load.FlowCommit},
		{LegToolNone, nil, []string{"guardrails:"}, load.FlowTool},
		{LegTool, []string{"mode: realtime_tool_call", "guardrail_name: " + guardrailName}, nil, load.FlowTool},
	}
	for _, tc := range tests {
		t.Run(tc.leg, func(t *testing.T) {
			c := guardrailsConfig(tc.leg, "ws://127.0.0.1:9/v1")
			if !strings.Contains(c, "api_base: ws://127.0.0.1:9/v1\n") || !strings.Contains(c, "model_name: gpt-realtime") {
				t.Errorf("no deployment on mockai:\n%s", c)
			}
			for _, w := range tc.want {
				if !strings.Contains(c, w) {
					t.Errorf("lacks %q:\n%s", w, c)
				}
			}
			for _, w := range tc.wantNot {
				if strings.Contains(c, w) {
					t.Errorf("has %q:\n%s", w, c)
				}
			}
			if f := legFlow(ProtocolGuardrails, tc.leg); f != tc.wantFlow {
				t.Errorf("flow %q, want %q", f, tc.wantFlow)
			}
		})
	}
	if f := legFlow(load.ProtocolRealtime, LegPoolOff); f != load.FlowTurns {
		t.Errorf("a Realtime run's flow %q, want turns.go's", f)
	}
	// No text mockai says in the run holds a blocked word: the run
	// measures checks, not refusals.
	for _, text := range []string{benchInputTranscript, benchOutputTranscript, benchToolArguments} {
		for _, w := range benchBlockedWords {
			if strings.Contains(strings.ToLower(text), w) {
				t.Errorf("%q holds the blocked %q", text, w)
			}
		}
	}
}

// guardLeg is a finished leg for the output tests: calls of 3 turns whose
// first audio is firstAudio each, and its gateway's CPU per turn and RSS.
func guardLeg(id string, calls int, firstAudio, cpuPerTurn time.Duration, idleRSS, peakRSS int64, guard *GuardrailActivity) *LegResult {
	samples := make([]load.Sample, calls)
	for i := range samples {
		samples[i] = load.Sample{Reached: load.PhaseDone, FirstAudio: firstAudio, LaterFirstAudio: []time.Duration{firstAudio, firstAudio},
			Total: 3*time.Second + 3*firstAudio}
	}
	res := &load.Result{Samples: samples, Wall: time.Second, CPU: time.Second}
	return &LegResult{ID: id, Name: guardrailLegName(id), Runs: []RunResult{{Result: res}},
		Combined: load.Summarize(samples, res.Wall, res.CPU),
		Gateway:  &GatewayUsage{CPU: cpuPerTurn * time.Duration(3*calls), Calls: calls, Turns: 3 * calls, IdleRSS: idleRSS, PeakRSS: peakRSS},
		Guard:    guard}
}

// TestGuardrailsOutput: the table and the summary set each leg against
// pool-off (and tool against tool-none): CPU per turn as a ratio, first
// audio and RSS per session as differences; without pool-off there are no
// costs, and a leg without a gateway reading shows "-".
func TestGuardrailsOutput(t *testing.T) {
	const mib = 1 << 20
	passes := func(n float64) *GuardrailActivity {
		return &GuardrailActivity{Checks: map[string]float64{"pass": n, "block": 0, "error_open": 0, "error_closed": 0}}
	}
	poolOff := guardLeg(LegPoolOff, 10, 400*time.Millisecond, 3*time.Millisecond, 20*mib, 30*mib, &GuardrailActivity{Checks: map[string]float64{}})
	record := guardLeg(LegRecord, 10, 398*time.Millisecond, 3300*time.Microsecond, 20*mib, 31*mib, &GuardrailActivity{Checks: map[string]float64{}, Records: 10})
	input := guardLeg(LegInput, 10, 420*time.Millisecond, 4500*time.Microsecond, 20*mib, 40*mib, passes(30))
	toolNone := guardLeg(LegToolNone, 10, 900*time.Millisecond, 4*time.Millisecond, 20*mib, 35*mib, &GuardrailActivity{Checks: map[string]float64{}})
	tool := guardLeg(LegTool, 10, 905*time.Millisecond, 4400*time.Microsecond, 20*mib, 35*mib,
		&GuardrailActivity{Checks: map[string]float64{"pass": 27, "error_open": 3}})
	tool.Combined.Failures = map[string]int{"timeout_first_audio": 1}

	t.Run("against pool-off", func(t *testing.T) {
		out := &Outcome{Protocol: ProtocolGuardrails, Concurrency: 100, Legs: []*LegResult{poolOff, record, input, toolNone, tool}}
		table := out.Markdown()
		for _, want := range []string{
			"| metric | pool-off (none) | record | input guardrail | tool calls, none | tool guardrail |",
			"| failures | none | none | none | none | timeout_first_audio 1 |",
			"| guardrail checks | none | none | pass 30 | none | pass 27, error_open 3 |",
			"| conversation records | 0 | 10 | 0 | 0 | 0 |",
			"| 1st audio p50 (every turn) | 400.0 ms | 398.0 ms | 420.0 ms | 900.0 ms | 905.0 ms |",
			"|   vs pool-off | - | -2.00 ms | +20.0 ms | +500.0 ms | +505.0 ms |",
			"| total p50 | 4200.0 ms | 4194.0 ms | 4260.0 ms | 5700.0 ms | 5715.0 ms |",
			"|   vs pool-off | - | -6.00 ms | +60.0 ms | +1500.0 ms | +1515.0 ms |",
			"| gateway CPU / turn | 3.00 ms | 3.30 ms | 4.50 ms | 4.00 ms | 4.40 ms |",
			"|   vs pool-off | - | 1.10x | 1.50x | 1.33x | 1.47x |",
			"| gateway RSS idle / peak | 20.0 / 30.0 MiB | 20.0 / 31.0 MiB | 20.0 / 40.0 MiB |",
			// (peak - idle) / 100 sessions
			"| gateway RSS / session | 102.4 KiB | 112.6 KiB | 204.8 KiB | 153.6 KiB | 153.6 KiB |",
			"|   vs pool-off | - | +10.2 KiB | +102.4 KiB | +51.2 KiB | +51.2 KiB |",
		} {
			if !strings.Contains(table, want) {
				t.Errorf("table lacks %q:\n%s", want, table)
			}
		}
		sum := out.GuardrailsSummary(Config{N: 10, Runs: 1, Turns: 3, Concurrency: 100})
		for _, want := range []string{
			"input vs pool-off: CPU / turn 4.50 ms vs 3.00 ms = 1.50x (+1.50 ms a turn); first audio p50 420.0 ms (+20.0 ms), p95 420.0 ms (+20.0 ms); call total p50 +60.0 ms; RSS / session 204.8 KiB (+102.4 KiB)",
			"tool vs tool-none: CPU / turn 4.40 ms vs 4.00 ms = 1.10x (+0.40 ms a turn); first audio p50 905.0 ms (+5.00 ms)",
			"record vs pool-off: CPU / turn 3.30 ms vs 3.00 ms = 1.10x (+0.30 ms a turn); first audio p50 398.0 ms (-2.00 ms)",
			"the same 10 calls x 3 turns on each leg",
		} {
			if !strings.Contains(sum, want) {
				t.Errorf("summary lacks %q:\n%s", want, sum)
			}
		}
		if costs := out.guardrailCosts(); len(costs) != 5 || costs[4].Leg != LegTool || costs[4].Baseline != LegToolNone {
			t.Errorf("costs %+v, want 4 against pool-off and tool against tool-none", costs)
		}
	})
	t.Run("without pool-off", func(t *testing.T) {
		noGateway := *input
		noGateway.Gateway, noGateway.Guard = nil, nil
		out := &Outcome{Protocol: ProtocolGuardrails, Concurrency: 100, Legs: []*LegResult{&noGateway, toolNone, tool}}
		table := out.Markdown()
		for _, want := range []string{
			"|   vs pool-off | - | - | - |", "| gateway CPU / turn | - | 4.00 ms | 4.40 ms |",
			"| guardrail checks | - | none | pass 27, error_open 3 |", "| conversation records | - | 0 | 0 |",
		} {
			if !strings.Contains(table, want) {
				t.Errorf("table lacks %q:\n%s", want, table)
			}
		}
		sum := out.GuardrailsSummary(Config{N: 10, Runs: 1, Turns: 3, Concurrency: 100})
		if strings.Contains(sum, "vs pool-off") || !strings.Contains(sum, "tool vs tool-none: CPU / turn 4.40 ms vs 4.00 ms = 1.10x") {
			t.Errorf("summary:\n%s", sum)
		}
	})
	t.Run("another protocol", func(t *testing.T) {
		out := &Outcome{Protocol: load.ProtocolGemini, Legs: []*LegResult{poolOff, input}}
		if md := out.GuardrailsMarkdown(); md != "" {
			t.Errorf("a Gemini run's guardrails table:\n%s", md)
		}
	})
}
