package compare

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
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
	p := cfg.Profile
	r.Config.Profile.UpgradeDelayMS = stats.Millis(p.UpgradeDelay)
	r.Config.Profile.SessionDelayMS = stats.Millis(p.SessionDelay)
	r.Config.Profile.FirstAudioDelayMS = stats.Millis(p.FirstAudioDelay)
	r.Config.Profile.Deltas, r.Config.Profile.DeltaBytes = p.Deltas, p.DeltaBytes
	r.Config.Profile.DeltaIntervalMS = stats.Millis(p.DeltaInterval)
	r.Config.Profile.FloorMS = stats.Millis(p.Floor())
	r.Table = out.Comparison.Markdown()
	r.Config.OpenLoop, r.OpenTable = openConfigJSON(cfg), out.OpenMarkdown()
	for _, leg := range out.Legs {
		jl := jsonLeg{ID: leg.ID, Name: leg.Name, Combined: leg.Combined, PoolHitRate: leg.PoolHitRate,
			P50SpreadMS: map[string]float64{}, Open: openRunJSON(leg.Open)}
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
				p.UpgradeDelay, p.SessionDelay, p.FirstAudioDelay, p.Deltas, p.DeltaBytes, p.DeltaInterval, p.Floor()),
			"Phases: dial = TCP + upgrade until the 101; session = 101 to session.created; first audio = response.create to the first audio delta; total = call start to response.done and a clean close. Percentiles are nearest-rank; dial/session/first-audio include every call that reached the phase, total only successful calls.",
		},
	}
	page.Tables = append(page.Tables, report.Table{Title: "Comparison (closed loop)", Header: out.Comparison.Header(), Rows: out.Comparison.Rows()})
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
	if p == load.ProtocolLive {
		return "GPT-Live (pool on: LIVE_POOL_SIZE)"
	}
	return "Realtime"
}
