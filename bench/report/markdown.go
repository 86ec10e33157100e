// Package report renders wsbench results: Markdown tables for the terminal
// and a self-contained HTML page (inline SVG charts, no scripts) for the
// comparison.
package report

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"rtgate/bench/load"
	"rtgate/bench/stats"
)

// FormatMS prints a duration in milliseconds: two decimals below 10 ms
// (loopback phases are often fractions of a millisecond), one above.
func FormatMS(d time.Duration) string {
	v := stats.Millis(d)
	if math.Abs(v) < 10 {
		return fmt.Sprintf("%.2f ms", v)
	}
	return fmt.Sprintf("%.1f ms", v)
}

// formatPercent prints a 0..1 fraction as a percentage.
func formatPercent(f float64) string { return fmt.Sprintf("%.1f%%", 100*f) }

// MarkdownTable renders a Markdown table; align holds "l" or "r" per column.
func MarkdownTable(header []string, align string, rows [][]string) string {
	var b strings.Builder
	b.WriteString("| " + strings.Join(header, " | ") + " |\n|")
	for i := range header {
		if i < len(align) && align[i] == 'r' {
			b.WriteString("---:|")
		} else {
			b.WriteString("---|")
		}
	}
	b.WriteString("\n")
	for _, r := range rows {
		b.WriteString("| " + strings.Join(r, " | ") + " |\n")
	}
	return b.String()
}

// phaseRows lists each phase's percentiles; a phase nobody reached shows "-".
func phaseRows(s load.Summary) [][]string {
	phases := []struct {
		name string
		sum  stats.Summary
	}{{"dial", s.Dial}, {"session", s.Session}, {"first audio", s.FirstAudio}, {"total", s.Total}}
	if s.LaterFirstAudio != nil { // calls of several turns: the first turn and the later ones apart
		phases[2].name = "first audio, turn 1"
		phases = slices.Insert(phases, 3, struct {
			name string
			sum  stats.Summary
		}{"first audio, turns 2+", *s.LaterFirstAudio})
	}
	if s.Exchange != nil { // calls with lengths: total without the time they held their session
		phases = append(phases, struct {
			name string
			sum  stats.Summary
		}{"exchange (total - held)", *s.Exchange})
	}
	rows := make([][]string, 0, len(phases))
	for _, p := range phases {
		if p.sum.N == 0 {
			rows = append(rows, []string{p.name, "0", "-", "-", "-", "-"})
			continue
		}
		rows = append(rows, []string{p.name, fmt.Sprint(p.sum.N), FormatMS(p.sum.P50), FormatMS(p.sum.P95),
			FormatMS(p.sum.P99), FormatMS(p.sum.Max)})
	}
	return rows
}

// failureTable lists failures by class, most frequent first ("" if none).
func failureTable(failures map[string]int) string {
	return countTable("failure", "calls", failures)
}

// countTable lists counts by class, most frequent first, preceded by a blank
// line ("" if there are none).
func countTable(what, unit string, counts map[string]int) string {
	if len(counts) == 0 {
		return ""
	}
	var rows [][]string
	for _, class := range load.FailureClasses(counts) {
		rows = append(rows, []string{class, fmt.Sprint(counts[class])})
	}
	return "\n" + MarkdownTable([]string{what, unit}, "lr", rows)
}

// RunMarkdown renders one run: a headline, the phase table (percentiles by
// nearest rank; total over successful calls only), failures by class and
// the generator's own CPU use.
func RunMarkdown(s load.Summary) string {
	var b strings.Builder
	fmt.Fprintf(&b, "calls %d, ok %d (%s), wall %.1f s, %.1f calls/s\n\n",
		s.Calls, s.OK, formatPercent(s.SuccessRate), s.Wall.Seconds(), s.Throughput)
	b.WriteString(MarkdownTable([]string{"phase", "n", "p50", "p95", "p99", "max"}, "lrrrrr", phaseRows(s)))
	b.WriteString(failureTable(s.Failures))
	if s.OpenLoop != nil {
		b.WriteString("\n" + OpenLoopLine(s.OpenLoop) + "\n")
	}
	fmt.Fprintf(&b, "\nwsbench CPU: %.0f ms user+sys, %.1f ms per 1,000 calls\n",
		stats.Millis(s.CPU), stats.Millis(s.CPUPer1000))
	return b.String()
}

// HoldMarkdown renders a hold run.
func HoldMarkdown(r *load.HoldResult) string {
	var b strings.Builder
	open := load.Summarize(r.Opening, r.OpenTime, 0)
	rows := [][]string{
		{"attempted", fmt.Sprint(len(r.Opening))},
		{"established", fmt.Sprint(r.Established)},
		{"held to the end", fmt.Sprint(r.Held)},
		{"failed to open", fmt.Sprint(r.Failed)},
		{"closed cleanly", fmt.Sprint(r.ClosedClean)},
	}
	b.WriteString(MarkdownTable([]string{"sessions", "count"}, "lr", rows))
	fmt.Fprintf(&b, "\nopened in %.1f s, held for %.1f s\n\n", r.OpenTime.Seconds(), r.Holding.Seconds())
	b.WriteString(MarkdownTable([]string{"phase", "n", "p50", "p95", "p99", "max"}, "lrrrrr", phaseRows(open)[:2]))
	// An established session is a success here, not a call that stopped
	// short of response.done: only real failures are listed.
	failures := map[string]int{}
	for _, s := range r.Opening {
		if s.Failure != "" {
			failures[s.Failure]++
		}
	}
	b.WriteString(failureTable(failures))
	b.WriteString(countTable("lost during hold", "sessions", r.Lost))
	fmt.Fprintf(&b, "\nwsbench CPU: %.0f ms user+sys; memory: %.1f KiB per established session (heap + stacks)\n",
		stats.Millis(r.CPU), float64(r.MemPerSession)/1024)
	return b.String()
}

// VoiceMarkdown renders a sustained voice run: sessions, appends sent on time,
// deltas received, against the schedule.
func VoiceMarkdown(r *load.VoiceResult) string {
	var b strings.Builder
	ratio := func(n, of int64) string {
		if of == 0 {
			return "-"
		}
		return formatPercent(float64(n) / float64(of))
	}
	rows := [][]string{
		{"sessions opened", fmt.Sprintf("%d of %d", r.Opened, r.Sessions), ""},
		{"appends sent", fmt.Sprintf("%d of %d", r.Sent, r.SentExpected), ratio(r.Sent, r.SentExpected)},
		{"late sends (> half an interval)", fmt.Sprint(r.LateSends), ratio(r.LateSends, r.Sent)},
		{"deltas received", fmt.Sprintf("%d of %d", r.Received, r.RecvExpected), ratio(r.Received, r.RecvExpected)},
	}
	b.WriteString(MarkdownTable([]string{"voice", "count", "share"}, "lrr", rows))
	fmt.Fprintf(&b, "\n%v of audio every %v both ways for %v (opened in %.1f s); worst late send %s\n",
		r.Interval, r.Interval, r.Window, r.OpenTime.Seconds(), FormatMS(r.MaxLate))
	b.WriteString(failureTable(r.Failures))
	b.WriteString(countTable("lost while streaming", "sessions", r.Lost))
	fmt.Fprintf(&b, "\nwsbench CPU: %.0f ms user+sys over the window\n", stats.Millis(r.CPU))
	return b.String()
}
