package report

import (
	"fmt"
	"math"
	"strings"
	"time"

	"rtgate/bench/load"
)

// Leg is one column of the comparison: a setup measured with wsbench.
type Leg struct {
	Name    string
	Summary load.Summary
	// PoolHitRate is the gateway's pool hit fraction during the leg, nil
	// when unknown (no pool, or the gateway does not expose the metric).
	PoolHitRate *float64
}

// Comparison is the published table: metrics down, setups across, and for
// the pool-on leg the difference to direct.
type Comparison struct {
	Direct, PoolOff, PoolOn *Leg // nil when the leg was not run
	// PoolFixed is the multi-instance run's fixed-pool leg (wsbench compare -instances).
	PoolFixed *Leg
	// PoolOnRedis is pool on with the per-key limits shared through Redis.
	PoolOnRedis *Leg
}

// Header returns the column titles, only for the legs that ran.
func (c Comparison) Header() []string {
	h := []string{"metric"}
	for _, l := range c.legs() {
		h = append(h, l.Name)
	}
	if c.Direct != nil && c.PoolOn != nil {
		h = append(h, "overhead (pool on vs direct)", "pool on vs direct")
	}
	return h
}

func (c Comparison) legs() []*Leg {
	var out []*Leg
	for _, l := range []*Leg{c.Direct, c.PoolOff, c.PoolOn, c.PoolFixed, c.PoolOnRedis} {
		if l != nil {
			out = append(out, l)
		}
	}
	return out
}

// Rows returns the table body.
func (c Comparison) Rows() [][]string {
	legs := c.legs()
	both := c.Direct != nil && c.PoolOn != nil
	var rows [][]string

	row := []string{"success"}
	for _, l := range legs {
		row = append(row, formatPercent(l.Summary.SuccessRate))
	}
	if both {
		row = append(row, "", "")
	}
	rows = append(rows, row)

	metrics := []struct {
		name string
		get  func(load.Summary) (time.Duration, bool)
	}{
		{"dial p50", func(s load.Summary) (time.Duration, bool) { return s.Dial.P50, s.Dial.N > 0 }},
		{"session p50", func(s load.Summary) (time.Duration, bool) { return s.Session.P50, s.Session.N > 0 }},
		{"1st-audio p50", func(s load.Summary) (time.Duration, bool) { return s.FirstAudio.P50, s.FirstAudio.N > 0 }},
		{"total p50", func(s load.Summary) (time.Duration, bool) { return s.Total.P50, s.Total.N > 0 }},
		{"total p95", func(s load.Summary) (time.Duration, bool) { return s.Total.P95, s.Total.N > 0 }},
		{"total p99", func(s load.Summary) (time.Duration, bool) { return s.Total.P99, s.Total.N > 0 }},
	}
	for _, m := range metrics {
		row := []string{m.name}
		for _, l := range legs {
			if v, ok := m.get(l.Summary); ok {
				row = append(row, FormatMS(v))
			} else {
				row = append(row, "-")
			}
		}
		if both {
			d, okD := m.get(c.Direct.Summary)
			o, okO := m.get(c.PoolOn.Summary)
			if okD && okO {
				row = append(row, signedMS(o-d), relative(d, o))
			} else {
				row = append(row, "-", "-")
			}
		}
		rows = append(rows, row)
	}

	row = []string{"pool hit rate"}
	for _, l := range legs {
		if l.PoolHitRate == nil {
			row = append(row, "n/a")
		} else {
			row = append(row, formatPercent(*l.PoolHitRate))
		}
	}
	if both {
		row = append(row, "", "")
	}
	rows = append(rows, row)

	row = []string{"wsbench CPU / 1k calls"}
	for _, l := range legs {
		row = append(row, fmt.Sprintf("%.0f ms", float64(l.Summary.CPUPer1000)/float64(time.Millisecond)))
	}
	if both {
		row = append(row, "", "")
	}
	return append(rows, row)
}

// Markdown renders the comparison table.
func (c Comparison) Markdown() string {
	h := c.Header()
	align := "l" + strings.Repeat("r", len(h)-1)
	return MarkdownTable(h, align, c.Rows())
}

func signedMS(d time.Duration) string {
	if d >= 0 {
		return "+" + FormatMS(d)
	}
	return "-" + FormatMS(-d)
}

// relative says how much faster or slower pooled is than direct, relative
// to direct: 300 ms vs 200 ms direct is "50% slower".
func relative(direct, pooled time.Duration) string {
	if direct <= 0 {
		return "-"
	}
	pct := 100 * float64(pooled-direct) / float64(direct)
	switch {
	case math.Abs(pct) < 0.5:
		return "same"
	case pct < 0:
		return fmt.Sprintf("%.0f%% faster", -pct)
	default:
		return fmt.Sprintf("%.0f%% slower", pct)
	}
}
