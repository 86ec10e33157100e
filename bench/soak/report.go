package soak

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"rtgate/bench/load"
	"rtgate/bench/proc"
	"rtgate/bench/report"
	"strings"
	"time"
)

// Report is what a soak found. Pass is false when any of Problems holds.
type Report struct {
	Config      ReportConfig  `json:"config"`
	Started     time.Time     `json:"started"`
	Wall        time.Duration `json:"load_wall_ns"`
	Interrupted bool          `json:"interrupted"`
	Counts      Counts        `json:"sessions"`

	// GatewayOutcomes is the gateway's rtgate_sessions_total by outcome,
	// counted during the soak; PoolHits and PoolMisses likewise.
	GatewayOutcomes map[string]int64 `json:"gateway_sessions_by_outcome"`
	PoolHits        int64            `json:"pool_hits"`
	PoolMisses      int64            `json:"pool_misses"`
	// RedisOutages and RedisAlone likewise: the shared limits' Redis
	// outages, and the connects decided alone during them.
	RedisOutages int64 `json:"redis_outages"`
	RedisAlone   int64 `json:"redis_fallback_admissions"`

	// Start is read before the load, End once the gateway settled after
	// it (SettleTook later), Peak is each value's highest reading.
	Start          Reading       `json:"start"`
	Peak           Reading       `json:"peak"`
	End            Reading       `json:"end"`
	Settled        bool          `json:"settled"`
	SettleTook     time.Duration `json:"settle_ns"`
	Readings       []Reading     `json:"readings"`
	ScrapeFailures int           `json:"scrape_failures"`

	GatewayAlive bool     `json:"gateway_alive"`
	GatewayExit  string   `json:"gateway_exit,omitempty"`
	LogProblems  []string `json:"gateway_log_problems,omitempty"`
	// OpenSockets lists the gateway's TCP sockets ("local remote state")
	// when it ended with sessions or descriptors left over.
	OpenSockets []string `json:"gateway_open_sockets,omitempty"`

	Problems []string `json:"problems"`
	Pass     bool     `json:"pass"`

	Dir          string `json:"-"`
	MarkdownPath string `json:"-"`
	JSONPath     string `json:"-"`
}

// ReportConfig is the run's configuration as reported.
type ReportConfig struct {
	Duration         string  `json:"duration"`
	Concurrency      int     `json:"concurrency"`
	FaultRate        float64 `json:"fault_rate"`
	Faults           []Kind  `json:"faults,omitempty"`
	Seed             uint64  `json:"seed"`
	CallTimeout      string  `json:"call_timeout"`
	Profile          Profile `json:"mockai_profile"`
	WriteTimeout     string  `json:"write_timeout"`
	MaxStalledBytes  int     `json:"max_stalled_bytes"`
	MaxMessageBytes  int     `json:"max_message_bytes"`
	HandshakeTimeout string  `json:"handshake_timeout"`
	PoolMaxIdle      string  `json:"pool_max_idle"`
	Margins          Margins `json:"margins"`
	Settle           string  `json:"settle"`
	Upstream         string  `json:"upstream"` // "plain" (ws://) or "tls" (wss://)
	Redis            bool    `json:"redis"`    // limits shared through a redis-server
}

func reportConfig(c Config) ReportConfig {
	return ReportConfig{
		Duration: c.Duration.String(), Concurrency: c.Concurrency, FaultRate: c.FaultRate, Faults: c.Faults, Seed: c.Seed,
		CallTimeout: c.CallTimeout.String(), Profile: c.Profile,
		WriteTimeout: c.WriteTimeout.String(), MaxStalledBytes: c.MaxStalledBytes, MaxMessageBytes: c.MaxMessageBytes,
		HandshakeTimeout: c.HandshakeTimeout.String(), PoolMaxIdle: c.PoolMaxIdle.String(),
		Margins: c.Margins, Settle: c.Settle.String(), Upstream: string(c.Upstream), Redis: c.Redis,
	}
}

// check fills Problems and Pass.
func (r *Report) check(m Margins) {
	var p []string
	add := func(format string, args ...any) { p = append(p, fmt.Sprintf(format, args...)) }
	if r.Interrupted {
		add("the run was interrupted: the numbers are partial and the end state was not checked")
	}
	if r.Counts.Attempted == 0 && !r.Interrupted {
		add("no sessions ran")
	}
	if n := r.Counts.Unexplained; n > 0 {
		add("%d session(s) ended in a way no injected fault explains: normal sessions that did not complete, "+
			"or faulty ones that did not end as their fault must (see Unexplained)", n)
	}
	if !r.GatewayAlive {
		add("the gateway exited during the soak (%s); see gateway.log", r.GatewayExit)
	} else if r.GatewayExit != "" {
		add("the gateway exited with %s when stopped", r.GatewayExit)
	}
	for _, l := range r.LogProblems {
		add("the gateway's log shows: %s", l)
	}
	if !r.Interrupted && r.Counts.Attempted > 0 {
		if !r.Settled {
			add("the gateway did not settle within %s after the load (last reading: %d sessions open, %d warm sockets)",
				r.Config.Settle, r.End.SessionsOpen, r.End.WarmSockets)
		}
		p = append(p, resourceProblems(r.Start, r.End, m)...)
		if ended := sum(r.GatewayOutcomes); ended != int64(r.Counts.Upgraded) {
			add("the gateway counted %d ended sessions, but %d of the soak's sessions were upgraded", ended, r.Counts.Upgraded)
		}
	}
	if r.ScrapeFailures > 0 && len(r.Readings) == 0 {
		add("every /metrics scrape failed (%d)", r.ScrapeFailures)
	}
	r.Problems, r.Pass = p, len(p) == 0
}

// resourceProblems compares the end reading to the start within margins.
func resourceProblems(start, end Reading, m Margins) []string {
	var p []string
	over := func(name string, s, e, allowed int64, format func(int64) string) {
		if e-s > allowed {
			p = append(p, fmt.Sprintf("%s did not come back: start %s, end %s (%s allowed)", name, format(s), format(e), "+"+format(allowed)))
		}
	}
	itoa := func(v int64) string { return fmt.Sprint(v) }
	over("resident memory", start.RSS, end.RSS, m.rssAllowed(start.RSS), formatBytes)
	over("live heap", start.HeapAlloc, end.HeapAlloc, m.HeapBytes, formatBytes)
	over("goroutines", start.Goroutines, end.Goroutines, m.Goroutines, itoa)
	over("open file descriptors", start.FDs, end.FDs, m.FDs, itoa)
	if end.SessionsOpen != 0 {
		p = append(p, fmt.Sprintf("%d sessions still open after every client finished", end.SessionsOpen))
	}
	return p
}

func sum(m map[string]int64) int64 {
	var n int64
	for _, v := range m {
		n += v
	}
	return n
}

// write saves summary.md and results.json in r.Dir.
func (r *Report) write() error {
	r.MarkdownPath = filepath.Join(r.Dir, "summary.md")
	r.JSONPath = filepath.Join(r.Dir, "results.json")
	if err := os.WriteFile(r.MarkdownPath, []byte(r.Markdown()), 0o644); err != nil {
		return fmt.Errorf("write summary: %w", err)
	}
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return fmt.Errorf("encode results: %w", err)
	}
	if err := os.WriteFile(r.JSONPath, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("write results: %w", err)
	}
	return nil
}

// Markdown renders the report for people.
func (r *Report) Markdown() string {
	var b strings.Builder
	verdict := "PASS"
	if !r.Pass {
		verdict = "FAIL"
	}
	c := r.Config
	fmt.Fprintf(&b, "# rtgate soak: %s\n\n", verdict)
	fmt.Fprintf(&b, "%s of load (%s wall), %d concurrent sessions, %.0f%% with an injected fault (seed %d); "+
		"gateway pool auto (min 0, idle %s), WRITE_TIMEOUT_SECS %s, MAX_STALLED_BYTES %d, MAX_MESSAGE_BYTES %d, handshake timeout %s; %s upstream.\n\n",
		c.Duration, r.Wall.Round(time.Second), c.Concurrency, 100*c.FaultRate, c.Seed, c.PoolMaxIdle,
		c.WriteTimeout, c.MaxStalledBytes, c.MaxMessageBytes, c.HandshakeTimeout, proc.Upstream(c.Upstream).Describe())
	if len(r.Problems) > 0 {
		b.WriteString("**Problems:**\n\n")
		for _, p := range r.Problems {
			b.WriteString("- " + p + "\n")
		}
		b.WriteString("\n")
	}

	n := r.Counts
	b.WriteString("## Sessions\n\n")
	b.WriteString(report.MarkdownTable([]string{"attempted", "completed", "failed", "unexplained"}, "rrrr",
		[][]string{{itoa(n.Attempted), itoa(n.Completed), itoa(n.Failed), itoa(n.Unexplained)}}))
	b.WriteString("\nA session fails when it does not complete a call; every failure must be one the soak injected.\n\n")

	b.WriteString("### Failed, by cause\n\n")
	var rows [][]string
	for _, cause := range load.FailureClasses(n.FailedByCause) {
		var from []string
		unexplained := 0
		for _, k := range n.Kinds {
			if v := k.Causes[cause]; v > 0 {
				from = append(from, fmt.Sprintf("%s %d", k.Kind, v))
			}
			unexplained += k.UnexplainedCauses[cause]
		}
		rows = append(rows, []string{cause, itoa(n.FailedByCause[cause]), itoa(unexplained), strings.Join(from, ", ")})
	}
	if len(rows) == 0 {
		b.WriteString("None.\n\n")
	} else {
		b.WriteString(report.MarkdownTable([]string{"cause", "sessions", "unexplained", "from"}, "lrrl", rows) + "\n")
	}

	b.WriteString("### By kind\n\n")
	rows = nil
	for _, k := range n.Kinds {
		var ended []string
		for _, cause := range load.FailureClasses(k.Causes) {
			ended = append(ended, fmt.Sprintf("%s %d", cause, k.Causes[cause]))
		}
		rows = append(rows, []string{string(k.Kind), k.Fault, itoa(k.Attempted), itoa(k.Completed), itoa(k.Unexplained),
			strings.Join(ended, ", "), formatDuration(k.Took.P50), formatDuration(k.Took.Max)})
	}
	b.WriteString(report.MarkdownTable([]string{"kind", "injected fault", "attempted", "completed", "unexplained", "how they ended", "p50", "max"},
		"llrrrlrr", rows) + "\n")

	if len(n.Examples) > 0 {
		fmt.Fprintf(&b, "### Unexplained (%d", n.Unexplained)
		if len(n.Examples) < n.Unexplained {
			fmt.Fprintf(&b, ", first %d", len(n.Examples))
		}
		b.WriteString(")\n\n")
		rows = nil
		for _, e := range n.Examples {
			k := "-"
			if e.Plan.After > 0 {
				k = itoa(e.Plan.After)
			}
			rows = append(rows, []string{itoa(e.Index), string(e.Plan.Kind), k, e.Cause, strings.ReplaceAll(e.Detail, "|", "/"),
				formatDuration(e.Took)})
		}
		b.WriteString(report.MarkdownTable([]string{"session", "kind", "k", "cause", "detail", "after"}, "rlrllr", rows) + "\n")
	}

	b.WriteString("## Gateway resources\n\n")
	m := c.Margins
	row := func(name string, s, p, e, allowed int64, f func(int64) string) []string {
		a := "-"
		if allowed >= 0 {
			a = "+" + f(allowed)
		}
		return []string{name, f(s), f(p), f(e), signed(e-s, f), a}
	}
	b.WriteString(report.MarkdownTable([]string{"", "start", "peak", "end", "end - start", "allowed"}, "lrrrrr", [][]string{
		row("resident memory", r.Start.RSS, r.Peak.RSS, r.End.RSS, m.rssAllowed(r.Start.RSS), formatBytes),
		row("live heap", r.Start.HeapAlloc, r.Peak.HeapAlloc, r.End.HeapAlloc, m.HeapBytes, formatBytes),
		row("heap in use", r.Start.HeapInuse, r.Peak.HeapInuse, r.End.HeapInuse, -1, formatBytes),
		row("goroutines", r.Start.Goroutines, r.Peak.Goroutines, r.End.Goroutines, m.Goroutines, itoa64),
		row("open fds", r.Start.FDs, r.Peak.FDs, r.End.FDs, m.FDs, itoa64),
		row("sessions open", r.Start.SessionsOpen, r.Peak.SessionsOpen, r.End.SessionsOpen, 0, itoa64),
		row("warm pool sockets", r.Start.WarmSockets, r.Peak.WarmSockets, r.End.WarmSockets, -1, itoa64),
	}))
	settled := fmt.Sprintf("%s after the load stopped, once no session was open and the pool was empty", r.SettleTook.Round(time.Second))
	if !r.Settled {
		settled = fmt.Sprintf("when the settle time (%s) ran out", c.Settle)
	}
	fmt.Fprintf(&b, "\nStart: before the first session; end: %s. Both after a forced garbage collection. "+
		"Peak: the highest of %d readings, one every second", settled, len(r.Readings))
	if r.ScrapeFailures > 0 {
		fmt.Fprintf(&b, " (%d scrapes failed)", r.ScrapeFailures)
	}
	b.WriteString(".\n\n")
	if len(r.OpenSockets) > 0 {
		b.WriteString("The gateway's TCP sockets at the end (local, remote, state):\n\n")
		for _, s := range r.OpenSockets {
			b.WriteString("    " + s + "\n")
		}
		b.WriteString("\n")
	}

	b.WriteString("## The gateway's own count\n\n")
	var outs []string
	for _, o := range load.FailureClasses(r.GatewayOutcomes) {
		outs = append(outs, fmt.Sprintf("%s %d", o, r.GatewayOutcomes[o]))
	}
	fmt.Fprintf(&b, "rtgate_sessions_total during the soak: %d (%s); the soak's upgraded sessions: %d.\n",
		sum(r.GatewayOutcomes), strings.Join(outs, ", "), n.Upgraded)
	if t := r.PoolHits + r.PoolMisses; t > 0 {
		fmt.Fprintf(&b, "Warm pool: %d hits, %d misses (%.0f%% hits).\n", r.PoolHits, r.PoolMisses, 100*float64(r.PoolHits)/float64(t))
	}
	if r.Config.Redis {
		fmt.Fprintf(&b, "Shared limits (REDIS_URL, a limited key): %d Redis outage(s), %d connect(s) decided alone meanwhile.\n",
			r.RedisOutages, r.RedisAlone)
	}
	return b.String()
}

func itoa(v int) string     { return fmt.Sprint(v) }
func itoa64(v int64) string { return fmt.Sprint(v) }

func signed(v int64, f func(int64) string) string {
	if v < 0 {
		return "-" + f(-v)
	}
	return "+" + f(v)
}

// formatBytes prints a byte count in MiB with one decimal (KiB below 1 MiB).
func formatBytes(v int64) string {
	if v < 1<<20 {
		return fmt.Sprintf("%.1f KiB", float64(v)/(1<<10))
	}
	return fmt.Sprintf("%.1f MiB", float64(v)/(1<<20))
}

func formatDuration(d time.Duration) string {
	if d < time.Second {
		return fmt.Sprintf("%d ms", d.Milliseconds())
	}
	return fmt.Sprintf("%.1f s", d.Seconds())
}
