package peers

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"

	"rtgate/bench/proc"
	"rtgate/bench/report"
)

// metric is one column of the table: how to read it from a run, whether lower is
// better, and how to print it.
type metric struct {
	head        string
	lowerBetter bool
	proxyOnly   bool // meaningless for direct (no proxy process)
	noRatio     bool
	relative    bool // a difference from direct, so direct itself is the baseline
	voiceCount  bool // the heading names the voice sessions it was measured at
	// value reads the metric from run; direct is the same round's direct run, if any.
	value  func(run, direct *Run) (float64, bool)
	format func(float64) string
}

// minVoiceDelivered is the share of scheduled deltas a voice run must deliver for
// its CPU figure to count.
const minVoiceDelivered = 0.95

// maxVoiceOtherCores is how much CPU other jobs may take during a voice window
// for its CPU figure to count. A fixed-rate load costs a relay less per session
// the busier the machine (each wake-up finds more sockets ready, so fewer
// epoll_wait and hand-offs per frame), so a crowded window reads cheap, not
// dear: measured on the 2-core machine, HAProxy plain 0.43 cores per 1,000
// with other jobs at 1.1 cores against 1.31 with none, in the same run.
const maxVoiceOtherCores = 0.5

func throughputOf(r *Run, load string) *Throughput {
	for i := range r.Throughput {
		if r.Throughput[i].Load == load {
			return &r.Throughput[i]
		}
	}
	return nil
}

func kib(v float64) string   { return fmt.Sprintf("%.1f KiB", v/1024) }
func mib(v float64) string   { return fmt.Sprintf("%.1f MiB", v/(1<<20)) }
func micro(v float64) string { return fmt.Sprintf("%.0f µs", v) }
func rate(v float64) string  { return fmt.Sprintf("%.0f", v) }
func secs(v float64) string  { return fmt.Sprintf("%.2f s", v) }
func cores(v float64) string { return fmt.Sprintf("%.2f", v) }
func percent(v float64) string {
	return fmt.Sprintf("%.1f%%", 100*v)
}

// addedLatency reads a latency percentile minus the same round's direct one.
func addedLatency(pick func(*Latency) float64) func(run, direct *Run) (float64, bool) {
	return func(run, direct *Run) (float64, bool) {
		if run.Latency == nil || direct == nil || direct.Latency == nil {
			return 0, false
		}
		return pick(run.Latency) - pick(direct.Latency), true
	}
}

func throughputMetric(load string, cpu bool) func(run, _ *Run) (float64, bool) {
	return func(run, _ *Run) (float64, bool) {
		t := throughputOf(run, load)
		if t == nil {
			return 0, false
		}
		if cpu {
			return t.CPUPer100kRoundTrips, true
		}
		return t.PerSecond, true
	}
}

var metrics = []metric{
	{head: "memory / idle session", lowerBetter: true, proxyOnly: true, format: kib,
		value: func(r, _ *Run) (float64, bool) {
			return orZero(r.Memory, func(m *Memory) float64 { return m.PerSession })
		}},
	{head: "live heap / idle session", lowerBetter: true, proxyOnly: true, noRatio: true, format: kib,
		value: func(r, _ *Run) (float64, bool) {
			if r.Memory == nil || r.Memory.GOGC == "" {
				return 0, false
			}
			return r.Memory.GatewayHeapPerSession, true
		}},
	{head: "idle RSS", lowerBetter: true, proxyOnly: true, noRatio: true, format: mib,
		value: func(r, _ *Run) (float64, bool) {
			return orZero(r.Memory, func(m *Memory) float64 { return float64(m.ProxyIdleRSS) })
		}},
	{head: "rtt p50", lowerBetter: true, format: micro,
		value: func(r, _ *Run) (float64, bool) {
			return orZero(r.Latency, func(l *Latency) float64 { return l.P50us })
		}},
	{head: "added p50", lowerBetter: true, relative: true, format: micro, value: addedLatency(func(l *Latency) float64 { return l.P50us })},
	{head: "added p99", lowerBetter: true, relative: true, format: micro, value: addedLatency(func(l *Latency) float64 { return l.P99us })},
	{head: "1 KiB msg/s", format: rate, value: throughputMetric("1KiB", false)},
	{head: "CPU / 100k round trips (1 KiB)", lowerBetter: true, proxyOnly: true, format: secs, value: throughputMetric("1KiB", true)},
	{head: "audio msg/s", format: rate, value: throughputMetric("audio", false)},
	{head: "CPU / 100k round trips (audio)", lowerBetter: true, proxyOnly: true, format: secs, value: throughputMetric("audio", true)},
	// A relay that fell behind did less work than the load asked, so its CPU is
	// no figure for the load: shown only where it delivered minVoiceDelivered.
	{head: "voice: CPU cores / 1,000 sessions", lowerBetter: true, proxyOnly: true, voiceCount: true, format: cores,
		value: func(r, _ *Run) (float64, bool) {
			if r.Voice == nil || r.Voice.Delivered() < minVoiceDelivered || r.Voice.Disturbed {
				return 0, false
			}
			return r.Voice.CoresPer1000, true
		}},
	{head: "voice: deltas delivered", noRatio: true, format: percent,
		value: func(r, _ *Run) (float64, bool) {
			return orZero(r.Voice, func(v *Voice) float64 { return v.Delivered() })
		}},
}

func orZero[T any](p *T, f func(*T) float64) (float64, bool) {
	if p == nil {
		return 0, false
	}
	return f(p), true
}

// SystemSummary is one system's figures over its successful rounds.
type SystemSummary struct {
	System string
	// Values[i] holds metric i's value per round (NaN where a round lacked it).
	Values [][]float64
	Errors []string
}

// median of the non-NaN values (the mean of the middle two for an even count),
// NaN if none. The summary shows the median of the rounds, not their mean: on a
// shared machine one disturbed round of three then moves nothing.
func median(vs []float64) float64 {
	var ok []float64
	for _, v := range vs {
		if !math.IsNaN(v) {
			ok = append(ok, v)
		}
	}
	if len(ok) == 0 {
		return math.NaN()
	}
	slices.Sort(ok)
	n := len(ok)
	if n%2 == 1 {
		return ok[n/2]
	}
	return (ok[n/2-1] + ok[n/2]) / 2
}

// spread is (max - min) / median of the non-NaN values, in percent, for the
// every-round table; NaN with fewer than two values.
func spread(vs []float64) float64 {
	var ok []float64
	for _, v := range vs {
		if !math.IsNaN(v) {
			ok = append(ok, v)
		}
	}
	m := median(ok)
	if len(ok) < 2 || m == 0 {
		return math.NaN()
	}
	return 100 * (slices.Max(ok) - slices.Min(ok)) / math.Abs(m)
}

// Summarize groups the runs over upstream by system, in the order of
// res.Options.Systems.
func Summarize(res *Results, upstream string) []SystemSummary {
	direct := map[int]*Run{}
	for i := range res.Runs {
		if r := &res.Runs[i]; r.Upstream == upstream && r.System == SysDirect && r.Error == "" {
			direct[r.Round] = r
		}
	}
	var out []SystemSummary
	for _, sys := range res.Options.Systems {
		s := SystemSummary{System: sys, Values: make([][]float64, len(metrics))}
		for i := range res.Runs {
			r := &res.Runs[i]
			if r.System != sys || r.Upstream != upstream {
				continue
			}
			if r.Error != "" {
				s.Errors = append(s.Errors, fmt.Sprintf("round %d: %s", r.Round, r.Error))
				continue
			}
			for k, m := range metrics {
				v, ok := m.value(r, direct[r.Round])
				if !ok || (m.proxyOnly && sys == SysDirect) {
					v = math.NaN()
				}
				s.Values[k] = append(s.Values[k], v)
			}
		}
		out = append(out, s)
	}
	return out
}

// bestPeer is the best mean among the peers for metric k, NaN if no peer has one.
func bestPeer(sums []SystemSummary, k int) float64 {
	best := math.NaN()
	for _, s := range sums {
		if !isPeer(s.System) {
			continue
		}
		v := median(s.Values[k])
		if math.IsNaN(v) {
			continue
		}
		if math.IsNaN(best) || (metrics[k].lowerBetter && v < best) || (!metrics[k].lowerBetter && v > best) {
			best = v
		}
	}
	return best
}

// cell prints a system's mean for metric k with its ratio to the best peer. A ratio
// of a difference (added latency) is only shown when both are clearly positive.
func cell(s SystemSummary, k int, best float64) string {
	m := metrics[k]
	v := median(s.Values[k])
	switch {
	case math.IsNaN(v):
		return "—"
	case m.relative && s.System == SysDirect:
		return "baseline"
	}
	out := m.format(v)
	if m.noRatio || s.System == SysDirect || math.IsNaN(best) || best <= 0 || v <= 0 {
		return out
	}
	return fmt.Sprintf("%s (%.2f×)", out, v/best)
}

// Markdown renders the comparison: a caption, then for each upstream (TLS first)
// a heading, the summary table (mean of the rounds, ratio to the best of the peers
// run) and every round's values, then notes.
func Markdown(res *Results) string {
	var b strings.Builder
	m := res.Machine
	fmt.Fprintf(&b, "Peer comparison, %s. Machine: %s, %d cores, %.0f GB, Linux %s, %s.",
		res.Started.Format("2006-01-02"), orUnknown(m.CPU), m.Cores, m.MemoryGB, orUnknown(m.Kernel), m.Go)
	var vers []string
	for _, sys := range append(slices.Clone(Peers), "rtgate") {
		if v := m.Versions[sys]; v != "" {
			vers = append(vers, v)
		}
	}
	if sum := m.Binaries["gateway"]; sum != "" {
		vers = append(vers, "bin/gateway sha256 "+sum)
	}
	if len(vers) > 0 {
		fmt.Fprintf(&b, " Versions: %s.", strings.Join(vers, "; "))
	}
	o := res.Options
	quick := ""
	if o.Quick {
		quick = " Quick check (smaller sizes): not for publication."
	}
	gw := "default flags"
	if len(o.GatewayArgs) > 0 {
		gw = "flags " + strings.Join(o.GatewayArgs, " ")
	}
	fmt.Fprintf(&b, " Clients connect over plain ws://; the upstream (mockai -echo) is wss:// or ws:// as each heading says. "+
		"Held sessions: %d over a plain upstream, %d over TLS; latency %d connections x %d round trips every %s; "+
		"throughput %d connections x %d in flight for %s; voice %d sessions over a plain upstream, %d over TLS, "+
		"each sending a %s append and receiving a %s delta every %s for %s after %s of warm-up (mockai -stream); "+
		"gateway with %s, pool on = REALTIME_POOL_SIZE=%s; each system measured %d times per upstream, median shown.%s\n",
		o.Sessions, o.TLSSessions, o.LatencyConns, o.LatencyRounds, o.LatencyInterval, o.ThroughputConns, o.Window, o.Duration,
		o.VoiceSessions, o.TLSVoiceSessions, o.VoiceInterval, o.VoiceInterval, o.VoiceInterval, o.VoiceDuration,
		cmp.Or(o.VoiceWarmup, "no time"), gw, o.Pool, o.Rounds, quick)

	for _, up := range o.Upstreams {
		heads := []string{"system"}
		align := "l"
		for _, m := range metrics {
			h := m.head
			if m.voiceCount {
				h = fmt.Sprintf("%s (measured at %d)", h, o.voiceSessionsOf(up))
			}
			heads = append(heads, h)
			align += "r"
		}
		sums := Summarize(res, up)
		fmt.Fprintf(&b, "\n### %s upstream\n\n", proc.Upstream(up).Describe())
		bests := make([]float64, len(metrics))
		for k := range metrics {
			bests[k] = bestPeer(sums, k)
		}
		var rows [][]string
		for _, s := range sums {
			row := []string{s.System}
			for k := range metrics {
				row = append(row, cell(s, k, bests[k]))
			}
			rows = append(rows, row)
		}
		b.WriteString(report.MarkdownTable(heads, align, rows))
		if o.Rounds > 1 {
			b.WriteString("\nEvery round (round 1 / round 2 / ...; ± is half the range, as a share of the median):\n\n")
			rows = nil
			for _, s := range sums {
				row := []string{s.System}
				for k, m := range metrics {
					var parts []string
					for _, v := range s.Values[k] {
						switch {
						case math.IsNaN(v):
							parts = append(parts, "—")
						case m.relative && s.System == SysDirect:
							parts = append(parts, "baseline")
						default:
							parts = append(parts, m.format(v))
						}
					}
					if len(parts) == 0 {
						parts = []string{"—"}
					}
					cellText := strings.Join(parts, " / ")
					if sp := spread(s.Values[k]); !math.IsNaN(sp) && !(m.relative && s.System == SysDirect) {
						cellText += fmt.Sprintf(" (±%.0f%%)", sp/2)
					}
					row = append(row, cellText)
				}
				rows = append(rows, row)
			}
			b.WriteString(report.MarkdownTable(heads, align, rows))
		}
		if d := directLatency(res, up); d != "" {
			b.WriteString("\n" + d + "\n")
		}
		for _, s := range sums {
			for _, e := range s.Errors {
				fmt.Fprintf(&b, "\n**%s failed** (%s)\n", s.System, e)
			}
		}
	}

	fmt.Fprintf(&b, "\nRatios are to the best of the peers run (nginx, HAProxy, Caddy) for that column and upstream (1.00× is the best peer; "+
		"below 1 is better for memory, latency and CPU, above 1 for msg/s). Memory: RSS summed over all the "+
		"proxy's processes with the sessions held idle, minus its idle RSS, per session (kernel socket memory "+
		"is not in RSS). rtt: small-message round trip client → proxy → mockai and back; added: minus direct to mockai, same "+
		"round (over TLS, direct also pays the client's own TLS). msg/s: frames relayed per second, both directions (each echo is two). "+
		"CPU: user+system seconds of the proxy's processes per 100,000 round trips (one frame each way, 200,000 relayed frames). "+
		"Voice: the proxy's CPU (cores) while the sessions stream audio both ways in real time, per 1,000 sessions; "+
		"delivered: deltas that arrived in the window of those scheduled (below 100%% the machine or the relay fell behind; "+
		"below 95%% the CPU figure is left out, as the relay did less than the load asked; so is a window during which other jobs "+
		"used more than %.1f cores, since a crowded machine makes a fixed-rate load read cheaper; "+
		"above 100%%, deltas the warm-up owed arrived in the window).\n", maxVoiceOtherCores)
	for _, r := range res.Runs {
		if r.Memory != nil && r.Memory.GOGC != "" {
			fmt.Fprintf(&b, "\nLive heap (rtgate only): the gateway's go_memstats_heap_alloc_bytes after a forced collection, "+
				"held minus idle, per session; GOGC %s, GOMEMLIMIT %s.\n", r.Memory.GOGC, r.Memory.GOMEMLIMIT)
			break
		}
	}
	if noise := maxOtherCores(res); noise > 0 {
		fmt.Fprintf(&b, "\nOther load on the machine during the timed phases: at most %.2f cores "+
			"(busy CPU not used by the proxy, mockai or the client; see other_cpu_seconds in results.json).\n", noise)
	}
	return b.String()
}

// directLatency is a sentence giving direct's own round-trip times, the baseline of
// the added latency.
func directLatency(res *Results, upstream string) string {
	var p50, p99 []float64
	for _, r := range res.Runs {
		if r.Upstream == upstream && r.System == SysDirect && r.Error == "" && r.Latency != nil {
			p50 = append(p50, r.Latency.P50us)
			p99 = append(p99, r.Latency.P99us)
		}
	}
	if len(p50) == 0 {
		return ""
	}
	return fmt.Sprintf("Direct to mockai the round trip was p50 %s, p99 %s.", micro(median(p50)), micro(median(p99)))
}

// maxOtherCores is the highest rate of CPU use by anything but the run's own
// processes over the latency, throughput and voice phases, in cores.
func maxOtherCores(res *Results) float64 {
	worst := 0.0
	for _, r := range res.Runs {
		if r.Latency != nil && r.Latency.Seconds > 0 {
			worst = max(worst, r.Latency.OtherCPU/r.Latency.Seconds)
		}
		for _, t := range r.Throughput {
			if t.Seconds > 0 {
				worst = max(worst, t.OtherCPU/t.Seconds)
			}
		}
		if v := r.Voice; v != nil && v.Seconds > 0 {
			worst = max(worst, v.OtherCPU/v.Seconds)
		}
	}
	return worst
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}
