package compare

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"rtgate/bench/harness"
	"rtgate/bench/load"
	"rtgate/bench/proc"
	"rtgate/bench/report"
	"rtgate/bench/stats"
)

// The guardrails run (-protocol guardrails, issue 36): what the
// conversation record and each guardrail mode cost a session, against a
// gateway with neither, measured in the same run with the same calls. Every
// leg is a gateway of its own (pool off) whose CONFIG_FILE the run writes
// (gateway-<leg>.yaml): one deployment, openai/gpt-realtime on mockai, and
// what the leg turns on:
//
//	pool-off   nothing: the baseline
//	record     log_transcripts: true on the deployment (USAGE_LOG is set on
//	           every leg, so the record is written)
//	input      a default_on litellm_content_filter guardrail in mode
//	           realtime_input_transcription; the calls commit each turn
//	           and do not ask for an answer (load.FlowServerAnswers): the
//	           gateway answers once the transcript has passed
//	output     the same guardrail in mode realtime_output_transcription:
//	           the answer's audio waits for the check of the transcript
//	           that covers it
//	tool-none  no guardrail, calls that make a tool call each turn
//	           (load.FlowTool): the baseline of the next leg, whose calls
//	           differ from pool-off's
//	tool       the guardrail in mode realtime_tool_call, the same calls
//
// The other legs' calls (load.FlowCommit) commit each turn and send
// response.create. Every turn is a 100 ms append and a commit after
// session.created, and its first audio is measured from the commit: what
// the caller waits once they stop speaking. One mockai serves every leg,
// with the scripts the modes read: an input transcript, an output
// transcript of a dozen words (spread over the answer's audio deltas, so
// every leg relays the same transcript deltas) and tool arguments. No
// guardrail blocks anything: the blocked words appear in none of them, so
// the run measures the checks, not a refusal's extra turn.
//
// Per leg it reports the gateway's CPU per turn and its ratio to pool-off's,
// the gateway's RSS per session (the peak over the run less the idle
// gateway's, over the concurrency), and first audio p50/p95 over every turn
// with the difference from pool-off's; and how many guardrail checks ran
// (the admin /metrics' rtgate_guardrail_checks_total by outcome) and how
// many usage records hold a conversation, so a leg that measured nothing
// shows it.

// ProtocolGuardrails is -protocol guardrails. It is compare's, not a
// protocol the calls speak: they speak Realtime (legProtocol).
const ProtocolGuardrails load.Protocol = "guardrails"

// The guardrails run's legs besides LegPoolOff.
const (
	LegRecord   = "record"
	LegInput    = "input"
	LegOutput   = "output"
	LegToolNone = "tool-none"
	LegTool     = "tool"
)

// GuardrailLegs are the legs of a -protocol guardrails run, in table order.
var GuardrailLegs = []string{LegPoolOff, LegRecord, LegInput, LegOutput, LegToolNone, LegTool}

// guardrailOnly are the legs only a guardrails run has.
var guardrailOnly = []string{LegRecord, LegInput, LegOutput, LegToolNone, LegTool}

// The guardrails run's size unless flags say otherwise: 300 calls of 3
// turns, 150 at once, one run a leg, as the Gemini run's (900 turns a leg,
// so /proc's 10 ms ticks are a few percent of each leg's CPU); about 10 s a
// leg with the default profile (14 s for the tool legs, two responses a
// turn), so a little over a minute for the six.
const (
	GuardrailsN           = 300
	GuardrailsConcurrency = 150
	GuardrailsRuns        = 1
	GuardrailsTurns       = 3
)

const (
	// guardrailsKeyVar carries mockai's key to the legs' gateways: the
	// config file names the variable, never the key.
	guardrailsKeyVar = "RTGATE_BENCH_UPSTREAM_KEY"
	// guardrailName is the guardrail's name in the config and the metrics.
	guardrailName = "bench-filter"
)

// What mockai says in a guardrails run, and what the guardrail blocks: none
// of the blocked words is in any of the texts.
const (
	benchInputTranscript  = "what time does the pharmacy on main street open tomorrow"
	benchOutputTranscript = "Sure, the pharmacy on Main Street opens at nine tomorrow morning, goodbye."
	benchToolArguments    = `{"order_id":"A-1001","include_history":false}`
)

var benchBlockedWords = []string{"password", "launch code", "social security number"}

// guardrailModes is the guardrail mode of each guardrail leg.
var guardrailModes = map[string]string{
	LegInput:  "realtime_input_transcription",
	LegOutput: "realtime_output_transcription",
	LegTool:   "realtime_tool_call",
}

// guardrailsMockArgs are mockai's scripts for a guardrails run.
func guardrailsMockArgs() []string {
	return []string{"-input-transcript", benchInputTranscript, "-output-transcript", benchOutputTranscript,
		"-tool-arguments", benchToolArguments}
}

// guardrailsConfig is leg id's CONFIG_FILE: the deployment on mockai's
// Realtime base (upstream), and the leg's record or guardrail.
func guardrailsConfig(id, upstream string) string {
	var b strings.Builder
	fmt.Fprintf(&b, `# the -protocol guardrails run's %s leg (bench/compare)
model_list:
  - model_name: gpt-realtime
    litellm_params:
      model: openai/gpt-realtime
      api_base: %s
      api_key: os.environ/%s
`, id, upstream, guardrailsKeyVar)
	if id == LegRecord {
		b.WriteString("      log_transcripts: true\n")
	}
	if mode, ok := guardrailModes[id]; ok {
		fmt.Fprintf(&b, `guardrails:
  - guardrail_name: %s
    litellm_params:
      guardrail: litellm_content_filter
      mode: %s
      default_on: true
      blocked_words:
`, guardrailName, mode)
		for _, w := range benchBlockedWords {
			fmt.Fprintf(&b, "        - keyword: %s\n          action: BLOCK\n", w)
		}
	}
	return b.String()
}

// guardrailsConfigFile writes leg id's CONFIG_FILE into dir and returns its
// path.
func guardrailsConfigFile(dir, id string, mock *proc.Mockai) (string, error) {
	path := filepath.Join(dir, "gateway-"+id+".yaml")
	if err := os.WriteFile(path, []byte(guardrailsConfig(id, mock.Base)), 0o600); err != nil {
		return "", fmt.Errorf("guardrails config: %w", err)
	}
	return path, nil
}

// legFlow is what each turn of leg id's calls sends.
func legFlow(p load.Protocol, id string) load.Flow {
	if p != ProtocolGuardrails {
		return load.FlowTurns
	}
	switch id {
	case LegInput:
		return load.FlowServerAnswers
	case LegTool, LegToolNone:
		return load.FlowTool
	}
	return load.FlowCommit
}

// guardrailLegName is leg id's name in a guardrails run's tables.
func guardrailLegName(id string) string {
	switch id {
	case LegPoolOff:
		return "pool-off (none)"
	case LegRecord:
		return "record"
	case LegInput:
		return "input guardrail"
	case LegOutput:
		return "output guardrail"
	case LegToolNone:
		return "tool calls, none"
	case LegTool:
		return "tool guardrail"
	}
	return legNames[id]
}

// checkGuardrails lists what a -protocol guardrails run cannot do, and
// the guardrail legs in other runs.
func (c Config) checkGuardrails() []error {
	if c.Protocol != ProtocolGuardrails {
		for _, l := range c.Legs {
			if slices.Contains(guardrailOnly, l) {
				return []error{fmt.Errorf("the %s leg is -protocol guardrails'", l)}
			}
		}
		return nil
	}
	var errs []error
	for _, l := range c.Legs {
		if _, ok := legNames[l]; ok && !slices.Contains(GuardrailLegs, l) {
			errs = append(errs, fmt.Errorf("-protocol guardrails has no %s leg (want %s)", l, strings.Join(GuardrailLegs, ", ")))
		}
	}
	if c.Instances > 1 || c.Restart {
		errs = append(errs, fmt.Errorf("-protocol guardrails runs one gateway a leg without -restart"))
	}
	if c.Audio {
		errs = append(errs, fmt.Errorf("-protocol guardrails does not take -audio: its calls append 100 ms and commit each turn"))
	}
	if c.Open.Rate > 0 {
		errs = append(errs, fmt.Errorf("-protocol guardrails is closed-loop only (-rate 0)"))
	}
	return errs
}

// GuardrailActivity is what a guardrails run's leg shows it did, beside
// its calls: nil outside guardrails runs.
type GuardrailActivity struct {
	// Checks are rtgate_guardrail_checks_total by outcome (pass, block,
	// error_open, error_closed) at the end of the leg; nil when /metrics
	// could not be read.
	Checks map[string]float64
	// Records is how many of the leg's usage records hold a conversation.
	Records int
}

// readGuardrailActivity reads a leg's gateway /metrics and usage log.
func readGuardrailActivity(ctx context.Context, metricsURL, usageLog string) *GuardrailActivity {
	a := &GuardrailActivity{Records: conversationRecords(usageLog)}
	if m, err := scrapeMetrics(ctx, metricsURL); err == nil {
		a.Checks = m.SumBy("rtgate_guardrail_checks_total", "outcome")
	}
	return a
}

// scrapeMetrics reads a Prometheus text endpoint.
func scrapeMetrics(ctx context.Context, url string) (harness.Metrics, error) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("metrics: HTTP %d", resp.StatusCode)
	}
	return harness.ParseMetrics(resp.Body)
}

// conversationRecords counts the usage records of path that hold a
// conversation record with at least one entry.
func conversationRecords(path string) int {
	f, err := os.Open(path)
	if err != nil {
		return 0
	}
	defer f.Close()
	n := 0
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		var r struct {
			Conversation *struct {
				Entries []json.RawMessage `json:"entries"`
			} `json:"conversation"`
		}
		if json.Unmarshal(sc.Bytes(), &r) == nil && r.Conversation != nil && len(r.Conversation.Entries) > 0 {
			n++
		}
	}
	return n
}

// turnFirstAudio is every turn's first audio of a leg's calls, turn 1 and
// the later ones together (in a guardrails run every turn is alike).
func turnFirstAudio(leg *LegResult) stats.Summary {
	var all []time.Duration
	for _, run := range leg.Runs {
		for _, s := range run.Result.Samples {
			if s.Reached >= load.PhaseFirstAudio {
				all = append(all, s.FirstAudio)
			}
			all = append(all, s.LaterFirstAudio...)
		}
	}
	return stats.Summarize(all)
}

// rssPerSession is a leg's gateway memory per session: its RSS at its peak
// over the runs less its RSS idle before them, over the sessions open at
// once (0 when unknown).
func rssPerSession(g *GatewayUsage, concurrency int) int64 {
	if g == nil || g.IdleRSS <= 0 || concurrency <= 0 {
		return 0
	}
	return max(g.PeakRSS-g.IdleRSS, 0) / int64(concurrency)
}

// LegCost is one leg's cost against a baseline leg of the same run.
type LegCost struct {
	Leg, Baseline string // leg ids
	// CPUPerTurn and BaseCPUPerTurn are the gateway's CPU per turn;
	// CPURatio is their ratio (0 when either is unknown).
	CPUPerTurn, BaseCPUPerTurn time.Duration
	CPURatio                   float64
	// FirstAudio and BaseFirstAudio cover every turn.
	FirstAudio, BaseFirstAudio stats.Summary
	// TotalP50 and BaseTotalP50 are the successful calls' total p50.
	TotalP50, BaseTotalP50 time.Duration
	// RSSPerSession and BaseRSSPerSession are rssPerSession's.
	RSSPerSession, BaseRSSPerSession int64
}

// P50Delta and P95Delta are the first-audio percentiles' differences from
// the baseline's.
func (c LegCost) P50Delta() time.Duration { return c.FirstAudio.P50 - c.BaseFirstAudio.P50 }
func (c LegCost) P95Delta() time.Duration { return c.FirstAudio.P95 - c.BaseFirstAudio.P95 }

// leg is the run's leg id, nil without it.
func (out *Outcome) leg(id string) *LegResult {
	for _, l := range out.Legs {
		if l.ID == id {
			return l
		}
	}
	return nil
}

// cost is leg id's cost against leg base, nil unless both ran.
func (out *Outcome) cost(id, base string) *LegCost {
	l, b := out.leg(id), out.leg(base)
	if l == nil || b == nil {
		return nil
	}
	c := &LegCost{Leg: id, Baseline: base, CPUPerTurn: l.Gateway.PerTurn(), BaseCPUPerTurn: b.Gateway.PerTurn(),
		FirstAudio: turnFirstAudio(l), BaseFirstAudio: turnFirstAudio(b), TotalP50: l.Combined.Total.P50, BaseTotalP50: b.Combined.Total.P50,
		RSSPerSession: rssPerSession(l.Gateway, out.Concurrency), BaseRSSPerSession: rssPerSession(b.Gateway, out.Concurrency)}
	if c.CPUPerTurn > 0 && c.BaseCPUPerTurn > 0 {
		c.CPURatio = float64(c.CPUPerTurn) / float64(c.BaseCPUPerTurn)
	}
	return c
}

// guardrailCosts are each leg's costs: against pool-off, and the tool
// guardrail's against tool-none too (its calls are tool-none's).
func (out *Outcome) guardrailCosts() []*LegCost {
	var costs []*LegCost
	for _, l := range out.Legs {
		if l.ID == LegPoolOff {
			continue
		}
		if c := out.cost(l.ID, LegPoolOff); c != nil {
			costs = append(costs, c)
		}
		if l.ID == LegTool {
			if c := out.cost(LegTool, LegToolNone); c != nil {
				costs = append(costs, c)
			}
		}
	}
	return costs
}

// guardrailRows is the guardrails run's table: per leg, its calls, its
// first audio and the gateway's CPU and memory, each against pool-off's.
func (out *Outcome) guardrailRows() (header []string, rows [][]string) {
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
	vsBase := func(name string, cell func(*LegCost) string) {
		row(name, func(l *LegResult) string {
			if l.ID == LegPoolOff {
				return "-"
			}
			c := out.cost(l.ID, LegPoolOff)
			if c == nil {
				return "-"
			}
			return cell(c)
		})
	}
	gw := func(name string, cell func(*GatewayUsage) string) {
		row(name, func(l *LegResult) string {
			if l.Gateway == nil {
				return "-"
			}
			return cell(l.Gateway)
		})
	}
	row("success", func(l *LegResult) string {
		return fmt.Sprintf("%.1f%% (%d/%d)", 100*l.Combined.SuccessRate, l.Combined.OK, l.Combined.Calls)
	})
	row("failures", func(l *LegResult) string { return failureCell(l.Combined.Failures) })
	row("guardrail checks", func(l *LegResult) string {
		if l.Guard == nil || l.Guard.Checks == nil {
			return "-"
		}
		return checksCell(l.Guard.Checks)
	})
	row("conversation records", func(l *LegResult) string {
		if l.Guard == nil {
			return "-"
		}
		return fmt.Sprint(l.Guard.Records)
	})
	fa := func(name string, get func(stats.Summary) time.Duration) {
		row(name, func(l *LegResult) string { return phaseCell(turnFirstAudio(l), get) })
	}
	fa("1st audio p50 (every turn)", func(s stats.Summary) time.Duration { return s.P50 })
	vsBase("  vs pool-off", func(c *LegCost) string { return signedMS(c.P50Delta()) })
	fa("1st audio p95 (every turn)", func(s stats.Summary) time.Duration { return s.P95 })
	vsBase("  vs pool-off", func(c *LegCost) string { return signedMS(c.P95Delta()) })
	row("total p50", func(l *LegResult) string {
		return phaseCell(l.Combined.Total, func(s stats.Summary) time.Duration { return s.P50 })
	})
	// A call's end: what the output guardrail's holdback adds to the
	// audio after the first delta shows here.
	vsBase("  vs pool-off", func(c *LegCost) string { return signedMS(c.TotalP50 - c.BaseTotalP50) })
	gw("gateway CPU / turn", func(g *GatewayUsage) string { return report.FormatMS(g.PerTurn()) })
	vsBase("  vs pool-off", func(c *LegCost) string {
		if c.CPURatio == 0 {
			return "-"
		}
		return fmt.Sprintf("%.2fx", c.CPURatio)
	})
	gw("gateway RSS idle / peak", func(g *GatewayUsage) string {
		return fmt.Sprintf("%.1f / %.1f MiB", float64(g.IdleRSS)/(1<<20), float64(g.PeakRSS)/(1<<20))
	})
	gw("gateway RSS / session", func(g *GatewayUsage) string { return kib(rssPerSession(g, out.Concurrency)) })
	vsBase("  vs pool-off", func(c *LegCost) string { return signedKiB(c.RSSPerSession - c.BaseRSSPerSession) })
	row("wsbench CPU / 1k calls", func(l *LegResult) string {
		return fmt.Sprintf("%.0f ms", float64(l.Combined.CPUPer1000)/float64(time.Millisecond))
	})
	return header, rows
}

// checksCell lists guardrail check outcomes with their counts, most first,
// the ones that never happened left out ("none" without any).
func checksCell(m map[string]float64) string {
	var outcomes []string
	for o, n := range m {
		if n > 0 {
			outcomes = append(outcomes, o)
		}
	}
	if len(outcomes) == 0 {
		return "none"
	}
	slices.SortFunc(outcomes, func(a, b string) int {
		if m[a] != m[b] {
			if m[a] > m[b] {
				return -1
			}
			return 1
		}
		return strings.Compare(a, b)
	})
	parts := make([]string, len(outcomes))
	for i, o := range outcomes {
		parts[i] = fmt.Sprintf("%s %.0f", o, m[o])
	}
	return strings.Join(parts, ", ")
}

func kib(b int64) string { return fmt.Sprintf("%.1f KiB", float64(b)/1024) }

func signedKiB(b int64) string {
	if b < 0 {
		return "-" + kib(-b)
	}
	return "+" + kib(b)
}

// GuardrailsMarkdown is the guardrails run's table ("" for another protocol).
func (out *Outcome) GuardrailsMarkdown() string {
	if out.Protocol != ProtocolGuardrails {
		return ""
	}
	header, rows := out.guardrailRows()
	return report.MarkdownTable(header, "l"+strings.Repeat("r", len(header)-1), rows)
}

// GuardrailsSummary says what the guardrails run's table means: each leg's
// cost in a line, and how it was measured.
func (out *Outcome) GuardrailsSummary(cfg Config) string {
	var b strings.Builder
	costs := out.guardrailCosts()
	if len(costs) == 0 {
		b.WriteString("no costs: they need the pool-off leg and another leg with turns that streamed audio\n")
	}
	for _, c := range costs {
		cpu := "CPU / turn unknown"
		if c.CPURatio > 0 {
			cpu = fmt.Sprintf("CPU / turn %s vs %s = %.2fx (%s a turn)", report.FormatMS(c.CPUPerTurn), report.FormatMS(c.BaseCPUPerTurn),
				c.CPURatio, signedMS(c.CPUPerTurn-c.BaseCPUPerTurn))
		}
		fmt.Fprintf(&b, "%s vs %s: %s; first audio p50 %s (%s), p95 %s (%s); call total p50 %s; RSS / session %s (%s)\n",
			c.Leg, c.Baseline, cpu, report.FormatMS(c.FirstAudio.P50), signedMS(c.P50Delta()),
			report.FormatMS(c.FirstAudio.P95), signedMS(c.P95Delta()), signedMS(c.TotalP50-c.BaseTotalP50),
			kib(c.RSSPerSession), signedKiB(c.RSSPerSession-c.BaseRSSPerSession))
	}
	fmt.Fprintf(&b, "the same %d calls x %d turns on each leg, this run; each turn a 100 ms append and a commit after session.created, "+
		"first audio from the commit; the tool legs' turns are a tool call, its output and the spoken answer, so tool is set against tool-none too\n",
		cfg.N*cfg.Runs, max(cfg.Turns, 1))
	b.WriteString("gateway CPU from /proc in 10 ms ticks over the turns that streamed audio, connection set-up included; " +
		"RSS / session = (peak RSS over the run - the idle gateway's RSS before it) / concurrent calls, from /proc, read every 200 ms (Go heap slack included)\n")
	return b.String()
}

// jsonLegCost is LegCost in results.json.
type jsonLegCost struct {
	Leg                  string  `json:"leg"`
	Baseline             string  `json:"baseline"`
	CPUPerTurnMS         float64 `json:"cpu_per_turn_ms"`
	BaseCPUPerTurnMS     float64 `json:"baseline_cpu_per_turn_ms"`
	CPURatio             float64 `json:"cpu_ratio,omitempty"`
	FirstAudioP50MS      float64 `json:"first_audio_p50_ms"`
	FirstAudioP95MS      float64 `json:"first_audio_p95_ms"`
	FirstAudioP50DeltaMS float64 `json:"first_audio_p50_delta_ms"`
	FirstAudioP95DeltaMS float64 `json:"first_audio_p95_delta_ms"`
	TotalP50DeltaMS      float64 `json:"total_p50_delta_ms"`
	RSSPerSessionBytes   int64   `json:"rss_per_session_bytes"`
	RSSPerSessionDelta   int64   `json:"rss_per_session_delta_bytes"`
}

func legCostsJSON(costs []*LegCost) []jsonLegCost {
	var out []jsonLegCost
	for _, c := range costs {
		out = append(out, jsonLegCost{Leg: c.Leg, Baseline: c.Baseline, CPUPerTurnMS: stats.Millis(c.CPUPerTurn),
			BaseCPUPerTurnMS: stats.Millis(c.BaseCPUPerTurn), CPURatio: c.CPURatio,
			FirstAudioP50MS: stats.Millis(c.FirstAudio.P50), FirstAudioP95MS: stats.Millis(c.FirstAudio.P95),
			FirstAudioP50DeltaMS: stats.Millis(c.P50Delta()), FirstAudioP95DeltaMS: stats.Millis(c.P95Delta()),
			TotalP50DeltaMS:    stats.Millis(c.TotalP50 - c.BaseTotalP50),
			RSSPerSessionBytes: c.RSSPerSession, RSSPerSessionDelta: c.RSSPerSession - c.BaseRSSPerSession})
	}
	return out
}

// jsonGuardrailActivity is GuardrailActivity in results.json.
type jsonGuardrailActivity struct {
	Checks  map[string]float64 `json:"guardrail_checks,omitempty"`
	Records int                `json:"conversation_records"`
}

func guardrailActivityJSON(a *GuardrailActivity) *jsonGuardrailActivity {
	if a == nil {
		return nil
	}
	return &jsonGuardrailActivity{Checks: a.Checks, Records: a.Records}
}
