package compare

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"rtgate/bench/harness"
	"rtgate/bench/load"
	"rtgate/bench/report"
	"rtgate/bench/stats"
)

// The steady-state leg. The closed-loop runs start Concurrency clients
// together and each starts its next call when the last ends, so connects
// come in waves and a pool refills between them. Real callers arrive
// continuously: after its closed-loop runs, each leg's gateway (or mockai,
// for direct) also takes an open-loop run, calls arriving at a constant
// mean rate with Poisson spacing whatever the calls in flight, each with
// a length drawn from a distribution and measured from its scheduled
// arrival (load.Schedule). Every leg gets the same schedule (one
// seed), so the legs differ only in what serves them.

// OpenLoop configures the steady-state leg; Rate 0 leaves it out.
type OpenLoop struct {
	Rate        float64
	Spacing     load.Spacing
	Duration    time.Duration // arrivals stop after it; the calls in flight then end
	Length      load.Length
	Seed        uint64
	MaxInFlight int           // 0: load's default, 10 x Concurrency
	WhenFull    load.WhenFull // default drop
}

// DefaultOpenLoop is the steady-state leg of `wsbench compare`: 50 calls a
// second for 30 s with lengths uniform over 1-3 s (about 100 calls in flight
// with the default profile, whose exchange takes 1.5 s): well inside what a
// 2-core box serves in the closed-loop runs (200 in flight), and about 35 s
// a leg, drain included.
func DefaultOpenLoop() OpenLoop {
	return OpenLoop{Rate: 50, Spacing: load.SpacingPoisson, Duration: 30 * time.Second,
		Length: load.Length{Kind: load.LengthUniform, Min: time.Second, Max: 3 * time.Second, Mean: 2 * time.Second},
		Seed:   1, WhenFull: load.FullDrop}
}

// check lists what is wrong with o for calls of timeout.
func (o OpenLoop) check(timeout time.Duration) []error {
	var errs []error
	if o.Rate < 0 {
		errs = append(errs, fmt.Errorf("-rate %g: want 0 (no open-loop leg) or more", o.Rate))
	}
	if o.Rate > 0 && o.Duration <= 0 {
		errs = append(errs, errors.New("-rate needs a positive -duration"))
	}
	if o.MaxInFlight < 0 {
		errs = append(errs, fmt.Errorf("-max-inflight %d: want 0 (10 x -c) or more", o.MaxInFlight))
	}
	if o.Length.Longest() >= timeout {
		errs = append(errs, fmt.Errorf("-call-length %s can draw %v, not below -t %v", o.Length, o.Length.Longest(), timeout))
	}
	return errs
}

// Describe says what the leg runs, for headings and notes.
func (o OpenLoop) Describe() string {
	s := fmt.Sprintf("%g calls/s with %s arrivals for %v (seed %d)", o.Rate, o.Spacing, o.Duration, o.Seed)
	if o.Length.Kind != load.LengthNone {
		s += ", call length " + o.Length.String()
	}
	return s + ", the same schedule for every leg"
}

// Schedule is the arrivals o makes against each leg.
func Schedule(o OpenLoop) []load.Arrival {
	return load.Schedule{Rate: o.Rate, Spacing: o.Spacing, N: openLoopCount, Duration: o.Duration, Length: o.Length, Seed: o.Seed}.Arrivals()
}

// openLoopCount is the open-loop leg's count bound: none in practice, the
// leg is bounded by its duration.
const openLoopCount = 1 << 30

// OpenRun is one leg's open-loop run.
type OpenRun struct {
	Result      *load.Result
	Summary     load.Summary
	PoolHitRate *float64
}

// runOpenLeg runs the open-loop load through client after a pause, reading
// the pool counters at metricsURLs around it.
func runOpenLeg(ctx context.Context, cfg Config, client *load.Client, metricsURLs []string, prefix, name string,
	say harness.Say) (*OpenRun, error) {
	if err := harness.Sleep(ctx, cfg.Pause); err != nil {
		return nil, err
	}
	o := cfg.Open
	before := sumCounters(readAllPoolCounters(ctx, metricsURLs, prefix))
	res, err := load.Run(ctx, client, load.Options{N: openLoopCount, Concurrency: cfg.Concurrency, Rate: o.Rate,
		Spacing: o.Spacing, Duration: o.Duration, CallLength: o.Length, Seed: o.Seed,
		MaxInFlight: o.MaxInFlight, WhenFull: o.WhenFull})
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	after := sumCounters(readAllPoolCounters(ctx, metricsURLs, prefix))
	run := &OpenRun{Result: res, Summary: res.Summary(), PoolHitRate: hitRate(before, after)}
	ol := run.Summary.OpenLoop
	say("%s open loop: %d/%d ok at %.1f/s offered, %d dropped, %d delayed, session p99 %s, total p99 %s, %.1f s", name,
		run.Summary.OK, run.Summary.Calls, ol.OfferedRate, ol.Dropped, ol.Delayed, report.FormatMS(run.Summary.Session.P99),
		report.FormatMS(run.Summary.Total.P99), res.Wall.Seconds())
	return run, nil
}

// openComparison is the comparison table of the legs' open-loop runs.
func (out *Outcome) openComparison() (report.Comparison, bool) {
	var c report.Comparison
	any := false
	for _, leg := range out.Legs {
		if leg.Open == nil {
			continue
		}
		any = true
		sum := leg.Open.Summary
		if sum.Exchange != nil {
			// Every leg holds each call for the same drawn length, which
			// would swamp the totals: the table compares the exchanges.
			sum.Total = *sum.Exchange
		}
		rl := &report.Leg{Name: leg.Name, Summary: sum, PoolHitRate: leg.Open.PoolHitRate}
		switch leg.ID {
		case LegDirect:
			c.Direct = rl
		case LegPoolOff:
			c.PoolOff = rl
		case LegPoolOn:
			c.PoolOn = rl
		case LegPoolFixed:
			c.PoolFixed = rl
		case LegPoolOnRedis:
			c.PoolOnRedis = rl
		}
	}
	return c, any
}

// openRows are the open-loop table's rows: the closed-loop table's
// metrics, the session p99 (what a pool saves), and what the generator did
// with its arrivals.
func (out *Outcome) openRows() (header []string, rows [][]string) {
	c, ok := out.openComparison()
	if !ok {
		return nil, nil
	}
	header, rows = c.Header(), c.Rows()
	var legs []*LegResult
	for _, leg := range out.Legs {
		if leg.Open != nil {
			legs = append(legs, leg)
		}
	}
	pad := len(header) - 1 - len(legs) // the pool-on-vs-direct columns
	extra := func(name string, cell func(*OpenRun) string) []string {
		row := []string{name}
		for _, leg := range legs {
			row = append(row, cell(leg.Open))
		}
		for range pad {
			row = append(row, "")
		}
		return row
	}
	session99 := []string{"session p99"}
	for _, leg := range legs {
		session99 = append(session99, phaseCell(leg.Open.Summary.Session, func(s stats.Summary) time.Duration { return s.P99 }))
	}
	if pad > 0 && c.Direct != nil && c.PoolOn != nil {
		d, p := c.Direct.Summary.Session, c.PoolOn.Summary.Session
		if d.N > 0 && p.N > 0 {
			diff := p.P99 - d.P99
			sign := "+"
			if diff < 0 {
				sign, diff = "-", -diff
			}
			session99 = append(session99, sign+report.FormatMS(diff), percentVs(d.P99, p.P99))
		} else {
			session99 = append(session99, "-", "")
		}
	}
	// After "session p50" (row 2: success, dial p50, session p50).
	rows = slices.Insert(rows, 3, session99)
	if cfg := out.openLengths(); cfg {
		for _, row := range rows {
			if rest, ok := strings.CutPrefix(row[0], "total "); ok {
				row[0] = "exchange " + rest + " (total - held)"
			}
		}
	}
	rows = append(rows,
		extra("arrivals (offered rate)", func(r *OpenRun) string {
			return fmt.Sprintf("%d (%.1f/s)", r.Summary.OpenLoop.Scheduled, r.Summary.OpenLoop.OfferedRate)
		}),
		extra("dropped / delayed at cap", func(r *OpenRun) string {
			ol := r.Summary.OpenLoop
			return fmt.Sprintf("%d / %d", ol.Dropped, ol.Delayed)
		}),
		extra("peak in flight", func(r *OpenRun) string { return fmt.Sprint(r.Summary.OpenLoop.PeakInFlight) }),
		extra("start lag p99", func(r *OpenRun) string { return report.FormatMS(r.Summary.OpenLoop.StartLag.P99) }),
	)
	return header, rows
}

// percentVs says how pooled compares with direct, relative to direct, as
// the comparison table's last column does.
func percentVs(direct, pooled time.Duration) string {
	if direct <= 0 {
		return "-"
	}
	pct := 100 * float64(pooled-direct) / float64(direct)
	switch {
	case pct > -0.5 && pct < 0.5:
		return "same"
	case pct < 0:
		return fmt.Sprintf("%.0f%% faster", -pct)
	}
	return fmt.Sprintf("%.0f%% slower", pct)
}

// openLengths reports whether the open-loop runs' calls had lengths (the
// table then shows their exchanges in place of their totals).
func (out *Outcome) openLengths() bool {
	for _, leg := range out.Legs {
		if leg.Open != nil && leg.Open.Summary.Exchange != nil {
			return true
		}
	}
	return false
}

func phaseCell(s stats.Summary, pick func(stats.Summary) time.Duration) string {
	if s.N == 0 {
		return "-"
	}
	return report.FormatMS(pick(s))
}

// OpenMarkdown renders the open-loop table ("" when no leg ran one).
func (out *Outcome) OpenMarkdown() string {
	header, rows := out.openRows()
	if header == nil {
		return ""
	}
	align := "l"
	for range header[1:] {
		align += "r"
	}
	return report.MarkdownTable(header, align, rows)
}

// jsonOpenConfig is the open-loop leg's configuration in results.json.
type jsonOpenConfig struct {
	Rate        float64       `json:"rate"`
	Spacing     load.Spacing  `json:"spacing"`
	DurationS   float64       `json:"duration_s"`
	CallLength  string        `json:"call_length"`
	Seed        uint64        `json:"seed"`
	MaxInFlight int           `json:"max_in_flight"`
	WhenFull    load.WhenFull `json:"when_full"`
}

// openConfigJSON is cfg's open-loop leg for results.json, with the cap in
// effect (load's default when unset).
func openConfigJSON(cfg Config) *jsonOpenConfig {
	o := cfg.Open
	if o.Rate <= 0 {
		return nil
	}
	return &jsonOpenConfig{Rate: o.Rate, Spacing: o.Spacing, DurationS: o.Duration.Seconds(), CallLength: o.Length.String(),
		Seed: o.Seed, MaxInFlight: cmp.Or(o.MaxInFlight, 10*cfg.Concurrency), WhenFull: o.WhenFull}
}

// jsonOpenRun is a leg's open-loop run in results.json.
type jsonOpenRun struct {
	Summary     load.Summary  `json:"summary"`
	PoolHitRate *float64      `json:"pool_hit_rate"`
	Samples     []load.Sample `json:"samples"`
}

func openRunJSON(r *OpenRun) *jsonOpenRun {
	if r == nil {
		return nil
	}
	return &jsonOpenRun{Summary: r.Summary, PoolHitRate: r.PoolHitRate, Samples: r.Result.Samples}
}

// addOpenToPage adds the open-loop table, a note saying which runs are
// which, and the open-loop runs' series to the CDF charts (whose order is
// dial, session, first audio, total).
func addOpenToPage(page *report.Page, out *Outcome, cfg Config) {
	header, rows := out.openRows()
	if header == nil {
		page.Notes = append(page.Notes, "Every leg is closed-loop: each of the concurrent clients starts its next call when its last one ends.")
		return
	}
	page.Notes = append(page.Notes, fmt.Sprintf("Closed loop: the %d clients of each run start together and each starts its next call when its last one ends (the Comparison, per-run and first-burst tables). Open loop (steady state), after each leg's closed-loop runs against the same processes: %s; calls are measured from their scheduled arrival, so a target that falls behind is charged for the wait (the open-loop table).",
		cfg.Concurrency, cfg.Open.Describe()))
	page.Tables = append(page.Tables, report.Table{Title: "Open loop (steady state): " + cfg.Open.Describe(), Header: header, Rows: rows})
	picks := []func(load.Sample) (time.Duration, bool){
		func(s load.Sample) (time.Duration, bool) { return s.Dial, s.Reached >= load.PhaseDial },
		func(s load.Sample) (time.Duration, bool) { return s.Session, s.Reached >= load.PhaseSession },
		func(s load.Sample) (time.Duration, bool) { return s.FirstAudio, s.Reached >= load.PhaseFirstAudio },
		func(s load.Sample) (time.Duration, bool) { return s.Total, s.OK() },
	}
	for i := range min(len(picks), len(page.Charts)) {
		for _, leg := range out.Legs {
			if leg.Open == nil {
				continue
			}
			var vals []time.Duration
			for _, s := range leg.Open.Result.Samples {
				if v, ok := picks[i](s); ok {
					vals = append(vals, v)
				}
			}
			slices.Sort(vals)
			page.Charts[i].Series = append(page.Charts[i].Series, report.Series{Name: leg.Name + " (open loop)", Sorted: vals})
		}
	}
}
