package compare

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"rtgate/bench/load"
	"rtgate/bench/proc"
	"rtgate/bench/report"
	"rtgate/bench/stats"
)

// The Gemini run (-protocol gemini). The gateway serves Google's Gemini
// Live API behind the OpenAI Realtime API by translating every message
// both ways (server/providers/gemini), where OpenAI's and Azure's frames
// pass verbatim. What that costs is the gateway's CPU, so the run measures
// the same calls three ways, against one mockai:
//
//	direct    a Gemini Live client (load.ProtocolGemini) straight to
//	          mockai's Gemini endpoint: what Gemini itself takes
//	gemini    wsbench's Realtime client to a gateway whose group is a
//	          gemini/ deployment on that mockai: the translated session
//	pool-off  the Realtime leg's pool-off gateway, OpenAI's protocol
//	          verbatim: the baseline the translation is set against
//
// with the same calls (N x runs, the same turns each), and reports the
// gateway's CPU per turn on the translated leg against the verbatim one, as
// a ratio, from the same run. There is no pool-on leg: the gateway never
// warms Gemini sockets (a Gemini socket says nothing before the client's
// setup, docs/providers.md), so both gateway legs dial every session.

// LegGemini is the translated leg of a -protocol gemini run.
const LegGemini = "gemini"

// GeminiLegs are the legs of a -protocol gemini run, in table order.
var GeminiLegs = []string{LegDirect, LegGemini, LegPoolOff}

// The Gemini run's size unless flags say otherwise: 300 calls of 3 turns,
// 150 at once, one run a leg: two waves of about 4.3 s with the default
// profile, so about half a minute for the three legs with their starts on
// a 2-core box (make bench's Gemini step), and 900 turns a gateway leg, so
// that /proc's 10 ms CPU ticks are a few percent of each leg's CPU.
const (
	GeminiN           = 300
	GeminiConcurrency = 150
	GeminiRuns        = 1
	GeminiTurns       = 3
)

const (
	// geminiGroup is the model group of the translated leg's gateway.
	geminiGroup = "gemini-voice"
	// geminiKeyVar carries mockai's key to that gateway: the config file
	// names the variable, never the key.
	geminiKeyVar = "RTGATE_BENCH_GEMINI_KEY"
)

// geminiModel is the deployment's model, and the one a direct call sets up.
const geminiModel = "gemini-3.8-live"

// geminiConfigFile writes the translated leg's CONFIG_FILE into dir: one
// group, a gemini/ deployment with mockai's root as api_base (its Gemini
// endpoint's path is the deployment's default) and the key from the
// environment. It returns its path.
func geminiConfigFile(dir string, mock *proc.Mockai) (string, error) {
	path := filepath.Join(dir, "gateway-gemini.yaml")
	body := fmt.Sprintf(`# the -protocol gemini run's translated leg (bench/compare)
model_list:
  - model_name: %s
    litellm_params:
      model: gemini/%s
      api_base: %s
      api_key: os.environ/%s
`, geminiGroup, geminiModel, mockRoot(mock), geminiKeyVar)
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		return "", fmt.Errorf("gemini config: %w", err)
	}
	return path, nil
}

// mockRoot is mockai's root, ws://host:port or wss://host:port.
func mockRoot(mock *proc.Mockai) string { return strings.TrimSuffix(mock.Base, "/v1") }

// geminiURL is mockai's Gemini Live endpoint, for the direct leg.
func geminiURL(mock *proc.Mockai) string { return mockRoot(mock) + load.GeminiPath }

// legProtocol is what leg id's calls speak: a Gemini run's gateway legs
// take wsbench's Realtime client.
func legProtocol(p load.Protocol, id string) load.Protocol {
	if (p == load.ProtocolGemini && id != LegDirect) || p == ProtocolGuardrails {
		return load.ProtocolRealtime
	}
	return p
}

// legName is leg id's name in the tables.
func legName(p load.Protocol, id string) string {
	if p == ProtocolGuardrails {
		return guardrailLegName(id)
	}
	if p == load.ProtocolGemini {
		switch id {
		case LegDirect:
			return "Direct (Gemini Live)"
		case LegGemini:
			return "Gateway → Gemini (translated)"
		case LegPoolOff:
			return "Gateway pool off, Realtime (verbatim)"
		}
	}
	return legNames[id]
}

// checkGemini lists what a -protocol gemini run cannot do.
func (c Config) checkGemini() []error {
	if c.Protocol != load.ProtocolGemini {
		if slices.Contains(c.Legs, LegGemini) {
			return []error{fmt.Errorf("the %s leg is -protocol gemini's", LegGemini)}
		}
		return nil
	}
	var errs []error
	for _, l := range c.Legs {
		switch l {
		case LegDirect, LegGemini, LegPoolOff:
		case LegPoolOn, LegPoolOnRedis, LegPoolFixed:
			errs = append(errs, fmt.Errorf("-protocol gemini has no %s leg: the gateway never warms Gemini sockets (docs/providers.md)", l))
		}
	}
	if c.Instances > 1 || c.Restart {
		errs = append(errs, fmt.Errorf("-protocol gemini runs one gateway without -restart"))
	}
	if c.Audio {
		// The bench's input audio is silence: Gemini hears no speech in it,
		// and after a commit the gateway leaves the answer to Gemini for 3 s
		// (server/providers/gemini autoAnswerWait), so a translated call
		// would wait for an answer that never comes.
		errs = append(errs, fmt.Errorf("-protocol gemini does not take -audio: silence makes no Gemini turn, and after a commit the gateway waits for Gemini to answer on its own"))
	}
	if c.Open.Rate > 0 {
		errs = append(errs, fmt.Errorf("-protocol gemini is closed-loop only (-rate 0)"))
	}
	return errs
}

// GatewayUsage is what a leg's gateway process used during its closed-loop
// runs, from /proc: CPU summed over the runs (each read just before the run
// and just after it), the largest RSS read while they ran.
type GatewayUsage struct {
	CPU     time.Duration
	PeakRSS int64 // bytes
	// IdleRSS is the RSS read just before the first run: the gateway
	// started, healthy and warmed up, no session yet.
	IdleRSS int64
	// Ticks is CPU in /proc's USER_HZ ticks (10 ms): the reading's grain.
	Ticks uint64
	// Calls and Turns are the runs' calls and the turns that streamed audio
	// (a call's turns up to the first that failed).
	Calls, Turns int
}

// PerTurn is the CPU per turn that streamed audio (0 without any).
func (g *GatewayUsage) PerTurn() time.Duration {
	if g == nil || g.Turns == 0 {
		return 0
	}
	return g.CPU / time.Duration(g.Turns)
}

// PerCall is the CPU per call (0 without any).
func (g *GatewayUsage) PerCall() time.Duration {
	if g == nil || g.Calls == 0 {
		return 0
	}
	return g.CPU / time.Duration(g.Calls)
}

// jsonGatewayUsage is GatewayUsage in results.json.
type jsonGatewayUsage struct {
	CPUMS        float64 `json:"cpu_ms"`
	CPUTicks     uint64  `json:"cpu_ticks"`
	PeakRSSBytes int64   `json:"peak_rss_bytes"`
	IdleRSSBytes int64   `json:"idle_rss_bytes"`
	Calls        int     `json:"calls"`
	Turns        int     `json:"turns"`
	PerCallMS    float64 `json:"cpu_per_call_ms"`
	PerTurnMS    float64 `json:"cpu_per_turn_ms"`
}

func gatewayUsageJSON(g *GatewayUsage) *jsonGatewayUsage {
	if g == nil {
		return nil
	}
	return &jsonGatewayUsage{CPUMS: stats.Millis(g.CPU), CPUTicks: g.Ticks, PeakRSSBytes: g.PeakRSS, IdleRSSBytes: g.IdleRSS, Calls: g.Calls, Turns: g.Turns,
		PerCallMS: stats.Millis(g.PerCall()), PerTurnMS: stats.Millis(g.PerTurn())}
}

// turnsStreamed counts the turns of samples that reached their first audio.
func turnsStreamed(samples []load.Sample) int {
	n := 0
	for _, s := range samples {
		if s.Reached >= load.PhaseFirstAudio {
			n += 1 + len(s.LaterFirstAudio)
		}
	}
	return n
}

// rssSampleEvery is how often the gateway's RSS is read during a run.
const rssSampleEvery = 200 * time.Millisecond

// meter reads a gateway's usage around one run: begin before it, end after
// it; in between it reads the RSS every rssSampleEvery.
type meter struct {
	gw     *proc.Gateway
	before proc.Usage
	stop   chan struct{}
	wg     sync.WaitGroup
	peak   int64 // written by the reader goroutine, read after wg.Wait
}

// startMeter reads gw's usage now and starts its RSS readings; an error
// (no /proc: not Linux) starts nothing.
func startMeter(gw *proc.Gateway) (*meter, error) {
	before, err := gw.Usage()
	if err != nil {
		return nil, fmt.Errorf("gateway usage: %w", err)
	}
	m := &meter{gw: gw, before: before, peak: before.RSS, stop: make(chan struct{})}
	m.wg.Go(func() {
		t := time.NewTicker(rssSampleEvery)
		defer t.Stop()
		for {
			select {
			case <-m.stop:
				return
			case <-t.C:
				if u, err := gw.Usage(); err == nil {
					m.peak = max(m.peak, u.RSS)
				}
			}
		}
	})
	return m, nil
}

// finish waits settle for the gateway to finish its last sessions' ends
// (the client's last close frame comes before the gateway has logged the
// session), reads its usage and adds the run's to g.
func (m *meter) finish(ctx context.Context, settle time.Duration, g *GatewayUsage) error {
	t := time.NewTimer(settle)
	select {
	case <-t.C:
	case <-ctx.Done():
		t.Stop()
	}
	close(m.stop)
	m.wg.Wait()
	after, err := m.gw.Usage()
	if err != nil {
		return fmt.Errorf("gateway usage: %w", err)
	}
	ticks := after.Ticks - m.before.Ticks
	g.Ticks += ticks
	g.CPU += time.Duration(proc.Usage{Ticks: ticks}.CPUSeconds() * float64(time.Second))
	g.PeakRSS = max(g.PeakRSS, m.peak, after.RSS)
	return nil
}

// meterSettle is the pause after a run before the gateway's CPU is read.
const meterSettle = 100 * time.Millisecond

// GeminiRatio is the point of the Gemini run: the gateway's CPU per turn on
// translated sessions over that on verbatim ones, same calls, same run.
type GeminiRatio struct {
	Translated, Verbatim time.Duration // CPU per turn
	Ratio                float64
}

// geminiRatio is the run's ratio, nil unless both gateway legs ran and
// streamed turns.
func (out *Outcome) geminiRatio() *GeminiRatio {
	var tr, vb *GatewayUsage
	for _, leg := range out.Legs {
		switch leg.ID {
		case LegGemini:
			tr = leg.Gateway
		case LegPoolOff:
			vb = leg.Gateway
		}
	}
	if tr.PerTurn() <= 0 || vb.PerTurn() <= 0 {
		return nil
	}
	return &GeminiRatio{Translated: tr.PerTurn(), Verbatim: vb.PerTurn(), Ratio: float64(tr.PerTurn()) / float64(vb.PerTurn())}
}

// geminiRows is the Gemini run's table: per leg, what compare reports for
// the others, then the gateway's process.
func (out *Outcome) geminiRows() (header []string, rows [][]string) {
	header = []string{"metric"}
	for _, leg := range out.Legs {
		header = append(header, leg.Name)
	}
	row := func(name string, cell func(*LegResult) string) {
		r := []string{name}
		for _, leg := range out.Legs {
			r = append(r, cell(leg))
		}
		rows = append(rows, r)
	}
	pct := func(name string, pick func(load.Summary) stats.Summary) {
		for _, p := range []struct {
			at  string
			get func(stats.Summary) time.Duration
		}{{"p50", func(s stats.Summary) time.Duration { return s.P50 }},
			{"p95", func(s stats.Summary) time.Duration { return s.P95 }},
			{"p99", func(s stats.Summary) time.Duration { return s.P99 }}} {
			row(name+" "+p.at, func(l *LegResult) string { return phaseCell(pick(l.Combined), p.get) })
		}
	}
	row("success", func(l *LegResult) string {
		return fmt.Sprintf("%.1f%% (%d/%d)", 100*l.Combined.SuccessRate, l.Combined.OK, l.Combined.Calls)
	})
	row("failures", func(l *LegResult) string { return failureCell(l.Combined.Failures) })
	row("dial p50", func(l *LegResult) string {
		return phaseCell(l.Combined.Dial, func(s stats.Summary) time.Duration { return s.P50 })
	})
	pct("session", func(s load.Summary) stats.Summary { return s.Session })
	pct("1st audio, turn 1", func(s load.Summary) stats.Summary { return s.FirstAudio })
	pct("1st audio, turns 2+", func(s load.Summary) stats.Summary {
		if s.LaterFirstAudio == nil {
			return stats.Summary{}
		}
		return *s.LaterFirstAudio
	})
	pct("total", func(s load.Summary) stats.Summary { return s.Total })
	gw := func(name string, cell func(*GatewayUsage) string) {
		row(name, func(l *LegResult) string {
			if l.Gateway == nil {
				return "-"
			}
			return cell(l.Gateway)
		})
	}
	gw("gateway CPU", func(g *GatewayUsage) string { return fmt.Sprintf("%.2f s", g.CPU.Seconds()) })
	gw("gateway CPU / call", func(g *GatewayUsage) string { return report.FormatMS(g.PerCall()) })
	gw("gateway CPU / turn", func(g *GatewayUsage) string { return report.FormatMS(g.PerTurn()) })
	gw("gateway RSS (peak)", func(g *GatewayUsage) string { return fmt.Sprintf("%.1f MiB", float64(g.PeakRSS)/(1<<20)) })
	row("wsbench CPU / 1k calls", func(l *LegResult) string {
		return fmt.Sprintf("%.0f ms", float64(l.Combined.CPUPer1000)/float64(time.Millisecond))
	})
	return header, rows
}

// failureCell lists failure classes with their counts, most frequent first.
func failureCell(f map[string]int) string {
	if len(f) == 0 {
		return "none"
	}
	var parts []string
	for _, class := range load.FailureClasses(f) {
		parts = append(parts, fmt.Sprintf("%s %d", class, f[class]))
	}
	return strings.Join(parts, ", ")
}

// GeminiMarkdown is the Gemini run's table ("" for another protocol).
func (out *Outcome) GeminiMarkdown() string {
	if out.Protocol != load.ProtocolGemini {
		return ""
	}
	header, rows := out.geminiRows()
	return report.MarkdownTable(header, "l"+strings.Repeat("r", len(header)-1), rows)
}

// GeminiSummary says what the Gemini run's table means: the CPU ratio, and
// what the legs do not have in common.
func (out *Outcome) GeminiSummary(cfg Config) string {
	var b strings.Builder
	if r := out.geminiRatio(); r != nil {
		fmt.Fprintf(&b, "gateway CPU per turn, translated (Gemini) vs verbatim (Realtime, pool off): %s vs %s = %.2fx (%s a turn); "+
			"the same %d calls x %d turns on each leg, this run; CPU from /proc in 10 ms ticks, connection set-up included\n",
			report.FormatMS(r.Translated), report.FormatMS(r.Verbatim), r.Ratio, signedMS(r.Translated-r.Verbatim),
			cfg.N*cfg.Runs, max(cfg.Turns, 1))
	} else {
		b.WriteString("gateway CPU per turn: no ratio (it needs both gateway legs, gemini and pool-off, with turns that streamed audio)\n")
	}
	b.WriteString("no pool-on leg: the gateway never warms Gemini sockets (a Gemini socket says nothing before the client's setup; docs/providers.md), so both gateway legs dial every session\n")
	b.WriteString("session: direct = setup sent -> setupComplete (mockai's session delay); through the gateway = 101 -> session.created, " +
		"which the gateway sends once its upstream is connected and before Gemini has the setup (it goes with the first event), " +
		"so there mockai's session delay is part of turn 1's first audio\n")
	return b.String()
}

func signedMS(d time.Duration) string {
	if d < 0 {
		return "-" + report.FormatMS(-d)
	}
	return "+" + report.FormatMS(d)
}
