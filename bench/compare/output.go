package compare

import (
	"cmp"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"rtgate/bench/load"
	"rtgate/bench/report"
	"rtgate/bench/stats"
)

// jsonResults is the raw results file.
type jsonResults struct {
	Generated time.Time `json:"generated"`
	Config    struct {
		N           int      `json:"n"`
		Concurrency int      `json:"concurrency"`
		Runs        int      `json:"runs"`
		TimeoutS    float64  `json:"timeout_s"`
		Legs        []string `json:"legs"`
		Pool        string   `json:"pool_on_size"`
		Audio       bool     `json:"audio"`
		Upstream    string   `json:"upstream"` // "tls" (wss://) or "plain" (ws://)
		Protocol    string   `json:"protocol"` // realtime, live, gemini or guardrails
		Turns       int      `json:"turns"`
		Profile     struct {
			UpgradeDelayMS    float64 `json:"upgrade_delay_ms"`
			SessionDelayMS    float64 `json:"session_delay_ms"`
			FirstAudioDelayMS float64 `json:"first_audio_delay_ms"`
			Deltas            int     `json:"deltas"`
			DeltaBytes        int     `json:"delta_bytes"`
			DeltaIntervalMS   float64 `json:"delta_interval_ms"`
			FloorMS           float64 `json:"floor_ms"`
		} `json:"mockai_profile"`
		// OpenLoop is the steady-state leg's load, nil without one.
		OpenLoop *jsonOpenConfig `json:"open_loop,omitempty"`
	} `json:"config"`
	// Table is the closed-loop comparison, OpenTable the open-loop one.
	Table     string    `json:"table_markdown"`
	OpenTable string    `json:"open_loop_table_markdown,omitempty"`
	Legs      []jsonLeg `json:"legs"`
	// Gemini is a -protocol gemini run's CPU ratio (nil otherwise, or
	// without both gateway legs).
	Gemini *jsonGeminiRatio `json:"gemini_cpu_per_turn,omitempty"`
	// Guardrails are a -protocol guardrails run's legs' costs against
	// their baselines (guardrails.go).
	Guardrails []jsonLegCost `json:"guardrail_costs,omitempty"`
}

// jsonGeminiRatio is GeminiRatio in results.json.
type jsonGeminiRatio struct {
	TranslatedMS float64 `json:"translated_ms"`
	VerbatimMS   float64 `json:"verbatim_ms"`
	Ratio        float64 `json:"ratio"`
}

type jsonLeg struct {
	ID          string       `json:"id"`
	Name        string       `json:"name"`
	Combined    load.Summary `json:"combined"`
	PoolHitRate *float64     `json:"pool_hit_rate"`
	// P50SpreadMS is, per phase, max - min of the runs' p50s: how much the
	// runs disagree.
	P50SpreadMS map[string]float64 `json:"p50_spread_ms"`
	Runs        []jsonRun          `json:"runs"`
	// Open is the leg's open-loop run (OpenRun); Runs are closed-loop.
	Open *jsonOpenRun `json:"open_loop,omitempty"`
	// Gateway is the leg's gateway process over the closed-loop runs
	// (GatewayUsage); absent for direct and with several instances.
	Gateway *jsonGatewayUsage `json:"gateway,omitempty"`
	// Guard is a guardrails run's leg's checks and records.
	Guard *jsonGuardrailActivity `json:"guardrails,omitempty"`
}

type jsonRun struct {
	Summary     load.Summary       `json:"summary"`
	Split       Split              `json:"first_burst_split"`
	P50MS       map[string]float64 `json:"p50_ms"`
	PoolHitRate *float64           `json:"pool_hit_rate"`
	Samples     []load.Sample      `json:"samples"`
}

// phaseP50s returns each phase's p50 in milliseconds.
func phaseP50s(s load.Summary) map[string]float64 {
	return map[string]float64{
		"dial": stats.Millis(s.Dial.P50), "session": stats.Millis(s.Session.P50),
		"first_audio": stats.Millis(s.FirstAudio.P50), "total": stats.Millis(s.Total.P50),
	}
}

// writeOutputs writes results.json and report.html into out.Dir.
func writeOutputs(out *Outcome, cfg Config, started time.Time) error {
	var r jsonResults
	r.Generated = started
	r.Config.N, r.Config.Concurrency, r.Config.Runs = cfg.N, cfg.Concurrency, cfg.Runs
	r.Config.TimeoutS, r.Config.Legs, r.Config.Pool, r.Config.Audio = cfg.Timeout.Seconds(), cfg.Legs, cfg.Pool, cfg.Audio
	r.Config.Upstream = string(cfg.Upstream)
	r.Config.Protocol, r.Config.Turns = string(cmp.Or(cfg.Protocol, load.ProtocolRealtime)), max(cfg.Turns, 1)
	p := cfg.Profile
	r.Config.Profile.UpgradeDelayMS = stats.Millis(p.UpgradeDelay)
	r.Config.Profile.SessionDelayMS = stats.Millis(p.SessionDelay)
	r.Config.Profile.FirstAudioDelayMS = stats.Millis(p.FirstAudioDelay)
	r.Config.Profile.Deltas, r.Config.Profile.DeltaBytes = p.Deltas, p.DeltaBytes
	r.Config.Profile.DeltaIntervalMS = stats.Millis(p.DeltaInterval)
	r.Config.Profile.FloorMS = stats.Millis(p.FloorFor(cfg.Turns))
	r.Table = out.Markdown()
	if out.Protocol == ProtocolGuardrails {
		r.Guardrails = legCostsJSON(out.guardrailCosts())
	}
	if g := out.geminiRatio(); g != nil {
		r.Gemini = &jsonGeminiRatio{TranslatedMS: stats.Millis(g.Translated), VerbatimMS: stats.Millis(g.Verbatim), Ratio: g.Ratio}
	}
	r.Config.OpenLoop, r.OpenTable = openConfigJSON(cfg), out.OpenMarkdown()
	for _, leg := range out.Legs {
		jl := jsonLeg{ID: leg.ID, Name: leg.Name, Combined: leg.Combined, PoolHitRate: leg.PoolHitRate,
			P50SpreadMS: map[string]float64{}, Open: openRunJSON(leg.Open), Gateway: gatewayUsageJSON(leg.Gateway),
			Guard: guardrailActivityJSON(leg.Guard)}
		for _, run := range leg.Runs {
			jl.Runs = append(jl.Runs, jsonRun{Summary: run.Summary, Split: run.Split, P50MS: phaseP50s(run.Summary),
				PoolHitRate: run.PoolHitRate, Samples: run.Result.Samples})
		}
		for phase := range phaseP50s(leg.Combined) {
			var vals []float64
			for _, run := range jl.Runs {
				vals = append(vals, run.P50MS[phase])
			}
			jl.P50SpreadMS[phase] = slices.Max(vals) - slices.Min(vals)
		}
		r.Legs = append(r.Legs, jl)
	}
	out.JSONPath = filepath.Join(out.Dir, "results.json")
	if err := writeFile(out.JSONPath, func(f *os.File) error {
		enc := json.NewEncoder(f)
		return enc.Encode(r)
	}); err != nil {
		return err
	}
	out.HTMLPath = filepath.Join(out.Dir, "report.html")
	return writeFile(out.HTMLPath, func(f *os.File) error { return report.WriteHTML(f, htmlPage(out, cfg, r)) })
}

func writeFile(path string, fill func(*os.File) error) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("write results: %w", err)
	}
	if err := fill(f); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// htmlPage lays out the report: setup notes, the comparison table, a
// percentile table per leg, the per-run p50s, and a CDF chart per phase.
func htmlPage(out *Outcome, cfg Config, r jsonResults) report.Page {
	p := cfg.Profile
	page := report.Page{
		Title:     "rtgate comparison: direct vs gateway, " + protocolName(cfg.Protocol) + ", " + cfg.Upstream.Describe() + " upstream",
		Generated: r.Generated,
		Notes: []string{
			fmt.Sprintf("%d calls per run, %d concurrent, %d runs per leg, per-call timeout %v, pool-on REALTIME_POOL_SIZE=%s, input audio %v.",
				cfg.N, cfg.Concurrency, cfg.Runs, cfg.Timeout, cfg.Pool, cfg.Audio),
			fmt.Sprintf("Fake upstream (mockai) profile: %v before the 101, %v to session.created, %v to the first audio delta, %d deltas of %d bytes every %v; no call can finish in under %v.",
				p.UpgradeDelay, p.SessionDelay, p.FirstAudioDelay, p.Deltas, p.DeltaBytes, p.DeltaInterval, p.FloorFor(cfg.Turns)),
			"Phases: dial = TCP + upgrade until the 101; session = 101 to session.created; first audio = response.create to the first audio delta; total = call start to response.done and a clean close. Percentiles are nearest-rank; dial/session/first-audio include every call that reached the phase, total only successful calls.",
		},
	}
	if out.Protocol == load.ProtocolGemini {
		page.Notes[0] = fmt.Sprintf("%d calls per run, %d turns each, %d concurrent, %d runs per leg, per-call timeout %v; legs: %s (mockai's Gemini endpoint), %s (a gemini/ deployment on the same mockai), %s (the Realtime baseline).",
			cfg.N, max(cfg.Turns, 1), cfg.Concurrency, cfg.Runs, cfg.Timeout, legName(cfg.Protocol, LegDirect), legName(cfg.Protocol, LegGemini), legName(cfg.Protocol, LegPoolOff))
		header, rows := out.geminiRows()
		page.Tables = append(page.Tables, report.Table{Title: "Comparison (closed loop)", Header: header, Rows: rows})
		page.Notes = append(page.Notes, strings.Split(strings.TrimSpace(out.GeminiSummary(cfg)), "\n")...)
	} else if out.Protocol == ProtocolGuardrails {
		page.Notes[0] = fmt.Sprintf("%d calls per run, %d turns each, %d concurrent, %d runs per leg, per-call timeout %v; legs: %s, each a gateway (pool off) "+
			"with its CONFIG_FILE (gateway-<leg>.yaml in this directory): the baseline with neither record nor guardrail, the conversation record, "+
			"or one litellm_content_filter guardrail (blocked words that no text of the run holds) in one mode.",
			cfg.N, max(cfg.Turns, 1), cfg.Concurrency, cfg.Runs, cfg.Timeout, strings.Join(cfg.Legs, ", "))
		page.Notes[2] = "Phases: dial = TCP + upgrade until the 101; session = 101 to session.created; first audio = a turn's commit (after a 100 ms append) to its answer's first audio delta; total = call start to the last turn's response.done and a clean close."
		header, rows := out.guardrailRows()
		page.Tables = append(page.Tables, report.Table{Title: "Cost against pool-off (closed loop)", Header: header, Rows: rows})
		page.Notes = append(page.Notes, strings.Split(strings.TrimSpace(out.GuardrailsSummary(cfg)), "\n")...)
	} else {
		page.Tables = append(page.Tables, report.Table{Title: "Comparison (closed loop)", Header: out.Comparison.Header(), Rows: out.Comparison.Rows()})
	}
	if rows := out.gatewayRows(); out.Protocol != load.ProtocolGemini && out.Protocol != ProtocolGuardrails && rows != nil {
		page.Tables = append(page.Tables, report.Table{Title: "Gateway process (closed loop)",
			Header: []string{"leg", "CPU", "CPU / call", "CPU / turn", "RSS (peak)"}, Rows: rows})
	}
	for _, leg := range out.Legs {
		s := leg.Combined
		var rows [][]string
		for _, ph := range []struct {
			name string
			sum  stats.Summary
		}{{"dial", s.Dial}, {"session", s.Session}, {"first audio", s.FirstAudio}, {"total", s.Total}} {
			rows = append(rows, []string{ph.name, fmt.Sprint(ph.sum.N), report.FormatMS(ph.sum.P50), report.FormatMS(ph.sum.P95),
				report.FormatMS(ph.sum.P99), report.FormatMS(ph.sum.Max)})
		}
		for _, class := range load.FailureClasses(s.Failures) {
			rows = append(rows, []string{"failed: " + class, fmt.Sprint(s.Failures[class]), "", "", "", ""})
		}
		page.Tables = append(page.Tables, report.Table{Title: leg.Name + " (all runs)",
			Header: []string{"phase", "n", "p50", "p95", "p99", "max"}, Rows: rows})
	}
	spread := report.Table{Title: "p50 per run", Header: []string{"leg", "run", "dial", "session", "first audio", "total", "ok"}}
	for _, leg := range out.Legs {
		for i, run := range leg.Runs {
			s := run.Summary
			spread.Rows = append(spread.Rows, []string{leg.Name, fmt.Sprint(i + 1), report.FormatMS(s.Dial.P50),
				report.FormatMS(s.Session.P50), report.FormatMS(s.FirstAudio.P50), report.FormatMS(s.Total.P50),
				fmt.Sprintf("%d/%d", s.OK, s.Calls)})
		}
	}
	page.Tables = append(page.Tables, spread)
	burst := report.Table{Title: "First burst and steady state, per run (total)",
		Header: []string{"leg", "run", "calls", "p50", "p95", "p99", "pool hits"}}
	for _, leg := range out.Legs {
		for i, run := range leg.Runs {
			sp := run.Split
			for part, s := range []load.Summary{sp.First, sp.Rest} {
				what, hit := fmt.Sprintf("%d: first %d", i+1, sp.FirstN), sp.FirstHitRate
				if part == 1 {
					what, hit = fmt.Sprintf("%d: other %d", i+1, s.Calls), sp.RestHitRate
				}
				h := "n/a"
				if hit != nil {
					h = fmt.Sprintf("%.1f%%", *hit*100)
				}
				burst.Rows = append(burst.Rows, []string{leg.Name, what, fmt.Sprintf("%d/%d", s.OK, s.Calls),
					report.FormatMS(s.Total.P50), report.FormatMS(s.Total.P95), report.FormatMS(s.Total.P99), h})
			}
		}
	}
	page.Tables = append(page.Tables, burst)

	phases := []struct {
		title string
		pick  func(load.Sample) (time.Duration, bool)
	}{
		{"dial", func(s load.Sample) (time.Duration, bool) { return s.Dial, s.Reached >= load.PhaseDial }},
		{"session", func(s load.Sample) (time.Duration, bool) { return s.Session, s.Reached >= load.PhaseSession }},
		{"first audio", func(s load.Sample) (time.Duration, bool) { return s.FirstAudio, s.Reached >= load.PhaseFirstAudio }},
		{"total", func(s load.Sample) (time.Duration, bool) { return s.Total, s.OK() }},
	}
	for _, ph := range phases {
		chart := report.Chart{Title: ph.title}
		for _, leg := range out.Legs {
			var vals []time.Duration
			for _, run := range leg.Runs {
				for _, s := range run.Result.Samples {
					if v, ok := ph.pick(s); ok {
						vals = append(vals, v)
					}
				}
			}
			slices.Sort(vals)
			chart.Series = append(chart.Series, report.Series{Name: leg.Name, Sorted: vals})
		}
		page.Charts = append(page.Charts, chart)
	}
	addOpenToPage(&page, out, cfg)
	return page
}

// protocolName names the calls' protocol in the report's title.
func protocolName(p load.Protocol) string {
	switch p {
	case load.ProtocolLive:
		return "GPT-Live (pool on: LIVE_POOL_SIZE)"
	case load.ProtocolGemini:
		return "Gemini Live (direct, and translated from the Realtime API by the gateway)"
	case ProtocolGuardrails:
		return "Realtime with the conversation record and each guardrail mode"
	}
	return "Realtime"
}

// Markdown is the run's closed-loop table: the comparison, or with
// -protocol gemini the Gemini table, with -protocol guardrails the
// guardrails table.
func (out *Outcome) Markdown() string {
	switch out.Protocol {
	case load.ProtocolGemini:
		return out.GeminiMarkdown()
	case ProtocolGuardrails:
		return out.GuardrailsMarkdown()
	}
	return out.Comparison.Markdown()
}

// gatewayRows are the gateway legs' process usage, one row a leg (nil
// when no leg measured its gateway).
func (out *Outcome) gatewayRows() [][]string {
	var rows [][]string
	for _, leg := range out.Legs {
		if g := leg.Gateway; g != nil {
			rows = append(rows, []string{leg.Name, fmt.Sprintf("%.2f s", g.CPU.Seconds()), report.FormatMS(g.PerCall()),
				report.FormatMS(g.PerTurn()), fmt.Sprintf("%.1f MiB", float64(g.PeakRSS)/(1<<20))})
		}
	}
	return rows
}

// GatewayMarkdown is the gateway legs' process table for the Realtime and
// Live runs ("" without one; the Gemini table has these rows itself).
func (out *Outcome) GatewayMarkdown() string {
	rows := out.gatewayRows()
	if rows == nil || out.Protocol == load.ProtocolGemini || out.Protocol == ProtocolGuardrails {
		return ""
	}
	return report.MarkdownTable([]string{"leg", "gateway CPU", "CPU / call", "CPU / turn", "gateway RSS (peak)"}, "lrrrr", rows)
}
