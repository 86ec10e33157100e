package huge

import (
	"fmt"
	"maps"
	"runtime"
	"slices"
	"strings"
	"time"
)

// Report is what a run measured.
type Report struct {
	Config  Config    `json:"-"` // has a writer and a clock
	Run     RunConfig `json:"config"`
	Layout  Layout    `json:"layout"`
	Started time.Time `json:"started"`
	Dir     string    `json:"dir"`
	// Host is the kernel settings read at the start.
	Host map[string]string `json:"host"`
	// Idle is before the clients started; AtOpen when the sessions were
	// open (or the wait for them ended); Held after HoldFor.
	Idle, AtOpen, Held Reading
	// Opened is the most sessions seen open while they were being
	// established, OpenTime when that count was first reached.
	Opened      int64         `json:"opened"`
	OpenTime    time.Duration `json:"open_time_ns"`
	Progress    []Point       `json:"progress"`
	Interrupted bool          `json:"interrupted"`
	Problems    []string      `json:"problems"`
}

// RunConfig is the part of Config a report keeps.
type RunConfig struct {
	Sessions    int    `json:"sessions"`
	Gateways    int    `json:"gateways"`
	Concurrency int    `json:"concurrency"`
	Upstream    string `json:"upstream"`
	OpenTimeout string `json:"open_timeout"`
	HoldFor     string `json:"hold_for"`
}

func runConfig(c Config) RunConfig {
	return RunConfig{Sessions: c.Sessions, Gateways: c.Gateways, Concurrency: c.Concurrency, Upstream: string(c.Upstream),
		OpenTimeout: c.OpenTimeout.String(), HoldFor: c.HoldFor.String()}
}

func (r *Report) problem(format string, args ...any) {
	r.Problems = append(r.Problems, fmt.Sprintf(format, args...))
}

// check notes what makes the figures incomplete.
func (r *Report) check() {
	if r.Interrupted {
		r.problem("interrupted: the figures are partial")
		return
	}
	if n := int64(r.Config.Sessions); r.Opened < n {
		r.problem("only %d of %d sessions were ever open at once (see the client logs in %s)", r.Opened, n, r.Dir)
	}
	if r.Held.SessionsOpen < r.Opened {
		r.problem("%d sessions open after the hold, %d before: %d lost while idle", r.Held.SessionsOpen, r.Opened, r.Opened-r.Held.SessionsOpen)
	}
	if r.Held.ClientsRunning < len(r.Layout.Clients) {
		r.problem("%d of %d client processes exited before the end", len(r.Layout.Clients)-r.Held.ClientsRunning, len(r.Layout.Clients))
	}
}

// Pass reports whether every session was established and held.
func (r *Report) Pass() bool { return len(r.Problems) == 0 }

// perSession is bytes per held session in KiB (0 without sessions).
func perSession(bytes int64, sessions int64) float64 {
	if sessions <= 0 {
		return 0
	}
	return float64(bytes) / float64(sessions) / 1024
}

// Markdown is the report as a page.
func (r *Report) Markdown() string {
	var b strings.Builder
	c, l := r.Config, r.Layout
	held := r.Held.SessionsOpen
	verdict := "PASS"
	if !r.Pass() {
		verdict = "INCOMPLETE"
	}
	fmt.Fprintf(&b, "# rtgate: %d idle sessions on one host: %s\n\n", c.Sessions, verdict)
	fmt.Fprintf(&b, "%s, %d cores (GOMAXPROCS of wsbench), %s upstream. %d gateway processes sharing one port (REUSEPORT=1, "+
		"each dialing from its own 127.0.0.x, pool off), %d mockai, %d client processes (`wsbench -hold`, %d opening at once each, "+
		"8 source addresses each); at most %d sockets a process under an open-file limit of %d. Held %v.\n\n",
		r.Started.Format("2006-01-02 15:04 MST"), runtime.NumCPU(), c.Upstream.Describe(), l.Gateways, l.Mockai, len(l.Clients),
		c.Concurrency, l.PerProcess, l.FileLimit, c.HoldFor)
	if len(r.Problems) > 0 {
		b.WriteString("**Problems:**\n\n")
		for _, p := range r.Problems {
			fmt.Fprintf(&b, "- %s\n", p)
		}
		b.WriteString("\n")
	}
	rate := 0.0
	if r.OpenTime > 0 {
		rate = float64(r.Opened) / r.OpenTime.Seconds()
	}
	lo, hi := minMax(r.Held.PerGateway)
	rows := [][2]string{
		{"sessions asked", fmt.Sprintf("%d", c.Sessions)},
		{"sessions open at once (establishment)", fmt.Sprintf("%d", r.Opened)},
		{"sessions held at the end", fmt.Sprintf("%d (per gateway %d-%d)", held, lo, hi)},
		{"establishment", fmt.Sprintf("%.1f s, %.0f sessions/s", r.OpenTime.Seconds(), rate)},
		{"gateway RSS per session", fmt.Sprintf("%.1f KiB (all gateways' RSS %.0f MiB / sessions held); growth over the idle gateways %.1f KiB",
			perSession(r.Held.GatewayRSS, held), mib(r.Held.GatewayRSS), perSession(r.Held.GatewayRSS-r.Idle.GatewayRSS, held))},
		{"gateway live heap per session", fmt.Sprintf("%.1f KiB (after a collection; growth over idle %.1f KiB)",
			perSession(r.Held.GatewayHeap, held), perSession(r.Held.GatewayHeap-r.Idle.GatewayHeap, held))},
		{"mockai RSS per session", fmt.Sprintf("%.1f KiB", perSession(r.Held.MockaiRSS, held))},
		{"client RSS per session", fmt.Sprintf("%.1f KiB", perSession(r.Held.ClientRSS, held))},
	}
	open := r.AtOpen.At.Sub(r.Idle.At).Seconds()
	hold := r.Held.At.Sub(r.AtOpen.At).Seconds()
	rows = append(rows,
		[2]string{"CPU while establishing (core-seconds)", fmt.Sprintf("gateways %.1f, mockai %.1f, clients %.1f (over %.0f s)",
			r.AtOpen.GatewayCPU-r.Idle.GatewayCPU, r.AtOpen.MockaiCPU-r.Idle.MockaiCPU, r.AtOpen.ClientCPU, open)},
		[2]string{"CPU while holding (core-seconds)", fmt.Sprintf("gateways %.2f, mockai %.2f, clients %.2f (over %.0f s)",
			r.Held.GatewayCPU-r.AtOpen.GatewayCPU, r.Held.MockaiCPU-r.AtOpen.MockaiCPU, r.Held.ClientCPU-r.AtOpen.ClientCPU, hold)},
	)
	b.WriteString("| figure | value |\n|---|---|\n")
	for _, row := range rows {
		fmt.Fprintf(&b, "| %s | %s |\n", row[0], row[1])
	}
	b.WriteString("\nHost settings:\n\n| setting | value |\n|---|---|\n")
	for _, k := range slices.Sorted(maps.Keys(r.Host)) {
		fmt.Fprintf(&b, "| %s | %s |\n", k, r.Host[k])
	}
	fmt.Fprintf(&b, "\nFiles: %s\n", r.Dir)
	return b.String()
}

func minMax(v []int64) (lo, hi int64) {
	if len(v) == 0 {
		return 0, 0
	}
	return slices.Min(v), slices.Max(v)
}
