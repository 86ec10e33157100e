package compare

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"rtgate/bench/load"
	"rtgate/bench/proc"
)

func TestParsePoolCounters(t *testing.T) {
	tests := []struct {
		name              string
		text              string
		wantHits, wantMis float64
		wantErr           bool
	}{
		{"plain", "# HELP rtgate_pool_hits_total hits\n# TYPE rtgate_pool_hits_total counter\nrtgate_pool_hits_total 76\nrtgate_pool_misses_total 24\n", 76, 24, false},
		{"labels summed", "rtgate_pool_hits_total{upstream=\"a\"} 10\nrtgate_pool_hits_total{upstream=\"b\",x=\"}\"} 5\nrtgate_pool_misses_total{upstream=\"a\"} 1e1\n", 15, 10, false},
		{"absent", "go_goroutines 12\nrtgate_pool_size 64\n", -1, -1, false},
		{"only hits", "rtgate_pool_hits_total 3\n", 3, -1, false},
		{"similar names ignored", "rtgate_pool_hits_total_created 1.7e9\nrtgate_pool_hits_total 2\nrtgate_pool_misses_total 0\n", 2, 0, false},
		{"timestamp", "rtgate_pool_hits_total 4 1700000000000\nrtgate_pool_misses_total 1 1700000000000\n", 4, 1, false},
		{"label values with commas and quotes", "rtgate_pool_hits_total{model=\"a,b\",note=\"say \\\"hi\\\", }\"} 6\nrtgate_pool_misses_total{model=\"a,b\"} 2\n", 6, 2, false},
		{"bad value", "rtgate_pool_hits_total many\n", 0, 0, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h, m, err := parsePoolCounters(strings.NewReader(tc.text))
			if (err != nil) != tc.wantErr {
				t.Fatalf("error %v, want error %v", err, tc.wantErr)
			}
			if !tc.wantErr && (h != tc.wantHits || m != tc.wantMis) {
				t.Errorf("hits %v misses %v, want %v %v", h, m, tc.wantHits, tc.wantMis)
			}
		})
	}
}

func TestHitRate(t *testing.T) {
	ok := func(h, m float64) poolCounters { return poolCounters{Hits: h, Misses: m, OK: true} }
	if r := hitRate(ok(10, 10), ok(86, 34)); r == nil || *r != 0.76 {
		t.Errorf("hit rate %v, want 0.76", r)
	}
	for name, pair := range map[string][2]poolCounters{
		"unknown":    {{}, ok(1, 1)},
		"no traffic": {ok(5, 5), ok(5, 5)},
		"reset":      {ok(9, 9), ok(1, 1)},
	} {
		if r := hitRate(pair[0], pair[1]); r != nil {
			t.Errorf("%s: hit rate %v, want nil", name, *r)
		}
	}
}

func TestProfileArgsAndFloor(t *testing.T) {
	p := DefaultProfile()
	if got := p.Floor(); got != 1517*time.Millisecond {
		t.Errorf("default floor %v, want 1517ms", got)
	}
	got := strings.Join(p.args(), " ")
	want := "-upgrade-delay 150ms -session-delay 7ms -first-audio-delay 400ms -deltas 25 -delta-bytes 4800 -delta-interval 40ms"
	if got != want {
		t.Errorf("args %q, want %q", got, want)
	}
	if got := p.FloorFor(3); got != 4237*time.Millisecond {
		t.Errorf("floor of 3 turns %v, want 4237ms (150 + 7 + 3 x (400 + 24 x 40))", got)
	}
	if p.FloorFor(0) != p.Floor() {
		t.Errorf("floor of 0 turns %v, want one turn's %v", p.FloorFor(0), p.Floor())
	}
	if a := (Profile{}).args(); a[7] != "-1" {
		t.Errorf("zero deltas must mean none (-1) for mockai, got %q", a[7])
	}
}

func TestRunValidation(t *testing.T) {
	base := DefaultConfig()
	base.OutDir = t.TempDir()
	tests := []struct {
		name    string
		mutate  func(c *Config)
		wantErr string
	}{
		{"no legs", func(c *Config) { c.Legs = nil }, "no legs"},
		{"unknown leg", func(c *Config) { c.Legs = []string{"direct", "tunnel"} }, `unknown leg "tunnel"`},
		{"bad pool", func(c *Config) { c.Pool = "0" }, "-pool"},
		{"zero calls", func(c *Config) { c.N = 0 }, "must be positive"},
		{"negative delay", func(c *Config) { c.Profile.SessionDelay = -1 }, "negative"},
		{"negative rate", func(c *Config) { c.Open.Rate = -1 }, "-rate"},
		{"rate without duration", func(c *Config) { c.Open.Duration = 0 }, "-duration"},
		{"call length past the timeout", func(c *Config) { c.Open.Length = load.Length{Kind: load.LengthExp, Mean: 5 * time.Second} }, "not below -t"},
		{"missing mockai", func(c *Config) { c.MockaiBin = filepath.Join(t.TempDir(), "nope") }, "build it first"},
		{"turns with live", func(c *Config) { c.Protocol, c.Turns, c.Open.Rate = load.ProtocolLive, 2, 0 }, "-turns 2"},
		{"gemini leg without gemini", func(c *Config) { c.Legs = []string{LegDirect, LegGemini} }, "-protocol gemini's"},
		{"gemini pool on", func(c *Config) { gemini(c); c.Legs = []string{LegDirect, LegPoolOn} }, "never warms Gemini sockets"},
		{"gemini with audio", func(c *Config) { gemini(c); c.Audio = true }, "does not take -audio"},
		{"gemini open loop", func(c *Config) { gemini(c); c.Open.Rate = 10 }, "closed-loop only"},
		{"gemini restart", func(c *Config) { gemini(c); c.Restart = true }, "without -restart"},
		{"missing gateway", func(c *Config) { c.MockaiBin = "/bin/true"; c.GatewayBin = filepath.Join(t.TempDir(), "nope") }, "build it first"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := base
			tc.mutate(&cfg)
			_, err := Run(context.Background(), cfg)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("error %v, want %q", err, tc.wantErr)
			}
		})
	}
}

// gemini makes c a -protocol gemini run.
func gemini(c *Config) {
	c.Protocol, c.Legs, c.Open.Rate = load.ProtocolGemini, slices.Clone(GeminiLegs), 0
}

// Binaries are built once per test process, into a temporary directory,
// with the go command that runs the tests.
var (
	buildOnce sync.Once
	buildDir  string
	buildErr  = map[string]error{}
)

func buildBinaries(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "wsbench-compare-bins-")
		if err != nil {
			buildErr["mockai"], buildErr["gateway"] = err, err
			return
		}
		buildDir = dir
		goBin, err := exec.LookPath("go")
		if err != nil {
			buildErr["mockai"], buildErr["gateway"] = err, err
			return
		}
		for _, name := range []string{"mockai", "gateway"} {
			cmd := exec.Command(goBin, "build", "-o", filepath.Join(dir, name), "rtgate/cmd/"+name)
			if out, err := cmd.CombinedOutput(); err != nil {
				buildErr[name] = err
				buildErr[name+"-output"] = &buildOutput{string(out)}
			}
		}
	})
	return buildDir
}

type buildOutput struct{ s string }

func (b *buildOutput) Error() string { return b.s }

func requireBinary(t *testing.T, name string) string {
	t.Helper()
	dir := buildBinaries(t)
	if err := buildErr[name]; err != nil {
		t.Fatalf("go build ./cmd/%s: %v\n%v", name, err, buildErr[name+"-output"])
	}
	return filepath.Join(dir, name)
}

func TestMain(m *testing.M) {
	code := m.Run()
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
	os.Exit(code)
}

// tinyConfig is a comparison small and fast enough for a unit test.
func tinyConfig(t *testing.T, legs ...string) Config {
	cfg := DefaultConfig()
	cfg.MockaiBin = requireBinary(t, "mockai")
	cfg.Legs = legs
	cfg.N, cfg.Concurrency, cfg.Runs = 20, 5, 2
	cfg.Timeout = 10 * time.Second
	cfg.Profile = Profile{UpgradeDelay: 2 * time.Millisecond, SessionDelay: time.Millisecond,
		FirstAudioDelay: 3 * time.Millisecond, Deltas: 3, DeltaBytes: 960, DeltaInterval: time.Millisecond}
	cfg.Warmup, cfg.Pause = 100*time.Millisecond, 0
	// A short steady-state leg: about 30 arrivals in 300 ms.
	cfg.Open = OpenLoop{Rate: 100, Spacing: load.SpacingPoisson, Duration: 300 * time.Millisecond, Seed: 2,
		Length: load.Length{Kind: load.LengthUniform, Min: 10 * time.Millisecond, Max: 40 * time.Millisecond, Mean: 25 * time.Millisecond}}
	cfg.OutDir = t.TempDir()
	cfg.Now = func() time.Time { return time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC) }
	return cfg
}

// runningChildren lists processes still running the binary at path, by
// reading /proc (the tests run on Linux).
func runningChildren(t *testing.T, path string) []int {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatalf("read /proc: %v", err)
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if exe, err := os.Readlink(filepath.Join("/proc", e.Name(), "exe")); err == nil && exe == path {
			pids = append(pids, pid)
		}
	}
	return pids
}

func checkResults(t *testing.T, out *Outcome, cfg Config) {
	t.Helper()
	if want := filepath.Join(cfg.OutDir, "compare-20260501-120000"); out.Dir != want {
		t.Errorf("results in %s, want %s", out.Dir, want)
	}
	raw, err := os.ReadFile(out.JSONPath)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Config struct {
			Upstream string `json:"upstream"`
			OpenLoop *struct {
				Rate       float64 `json:"rate"`
				CallLength string  `json:"call_length"`
				Seed       uint64  `json:"seed"`
			} `json:"open_loop"`
		} `json:"config"`
		Table     string `json:"table_markdown"`
		OpenTable string `json:"open_loop_table_markdown"`
		Legs      []struct {
			ID       string `json:"id"`
			Combined struct {
				Calls int `json:"calls"`
				OK    int `json:"ok"`
			} `json:"combined"`
			Spread map[string]float64 `json:"p50_spread_ms"`
			Runs   []struct {
				P50     map[string]float64 `json:"p50_ms"`
				Samples []map[string]any   `json:"samples"`
			} `json:"runs"`
			Open *struct {
				Summary struct {
					Calls    int           `json:"calls"`
					OK       int           `json:"ok"`
					OpenLoop load.OpenLoop `json:"open_loop"`
				} `json:"summary"`
				Samples []map[string]any `json:"samples"`
			} `json:"open_loop"`
		} `json:"legs"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatalf("results.json: %v", err)
	}
	if doc.Config.Upstream != string(cfg.Upstream) {
		t.Errorf("results.json upstream %q, want %q", doc.Config.Upstream, cfg.Upstream)
	}
	if len(doc.Legs) != len(cfg.Legs) {
		t.Fatalf("%d legs in JSON, want %d", len(doc.Legs), len(cfg.Legs))
	}
	for i, leg := range doc.Legs {
		if leg.ID != cfg.Legs[i] {
			t.Errorf("leg %d is %q, want %q", i, leg.ID, cfg.Legs[i])
		}
		if leg.Combined.Calls != cfg.N*cfg.Runs || leg.Combined.OK != cfg.N*cfg.Runs {
			t.Errorf("%s: %d/%d ok, want all %d", leg.ID, leg.Combined.OK, leg.Combined.Calls, cfg.N*cfg.Runs)
		}
		if len(leg.Runs) != cfg.Runs {
			t.Fatalf("%s: %d runs, want %d", leg.ID, len(leg.Runs), cfg.Runs)
		}
		for _, run := range leg.Runs {
			if len(run.Samples) != cfg.N || run.P50["total"] <= 0 {
				t.Errorf("%s: run with %d samples, total p50 %v", leg.ID, len(run.Samples), run.P50["total"])
			}
		}
		for _, phase := range []string{"dial", "session", "first_audio", "total"} {
			if _, ok := leg.Spread[phase]; !ok {
				t.Errorf("%s: no p50 spread for %s", leg.ID, phase)
			}
		}
		// The open-loop run: every arrival of the one schedule made, and
		// the same schedule for every leg.
		o := leg.Open
		want := len(Schedule(cfg.Open))
		if o == nil || o.Summary.OpenLoop.Scheduled != want || o.Summary.OK != want || len(o.Samples) != want ||
			o.Summary.OpenLoop.Dropped+o.Summary.OpenLoop.Delayed != 0 {
			t.Errorf("%s: open loop %+v, want all %d scheduled arrivals made and ok", leg.ID, o, want)
		}
	}
	if c := doc.Config.OpenLoop; c == nil || c.Rate != cfg.Open.Rate || c.CallLength != cfg.Open.Length.String() || c.Seed != cfg.Open.Seed {
		t.Errorf("results.json open-loop config %+v, want %+v", c, cfg.Open)
	}
	if doc.Table != out.Comparison.Markdown() {
		t.Errorf("JSON table differs from the printed one")
	}
	if doc.OpenTable == "" || doc.OpenTable != out.OpenMarkdown() {
		t.Errorf("JSON open-loop table %q differs from the printed one %q", doc.OpenTable, out.OpenMarkdown())
	}
	html, err := os.ReadFile(out.HTMLPath)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(html), "<svg"); n != 4 {
		t.Errorf("HTML has %d charts, want 4 (dial, session, first audio, total)", n)
	}
	for _, want := range []string{"Comparison (closed loop)", "Open loop (steady state): " + cfg.Open.Describe(), "Direct (open loop)"} {
		if !strings.Contains(string(html), want) {
			t.Errorf("HTML report does not say %q", want)
		}
	}
	if want := cfg.Upstream.Describe() + " upstream"; !strings.Contains(string(html), want) {
		t.Errorf("HTML report does not say %q", want)
	}
	if strings.Contains(string(html), "<script") {
		t.Errorf("HTML report must not need scripts")
	}
}

// TestCompareDirect runs the direct leg for real: mockai as a separate
// process, wsbench in this one.
func TestCompareDirect(t *testing.T) {
	cfg := tinyConfig(t, LegDirect)
	out, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	checkResults(t, out, cfg)
	table := out.Comparison.Markdown()
	if !strings.HasPrefix(table, "| metric | Direct |\n") || !strings.Contains(table, "| success | 100.0% |") ||
		!strings.Contains(table, "| pool hit rate | n/a |") {
		t.Errorf("table:\n%s", table)
	}
	// The profile's floor is a lower bound on every successful call.
	if p50 := out.Comparison.Direct.Summary.Total.P50; p50 < cfg.Profile.Floor() {
		t.Errorf("total p50 %v below the mockai floor %v", p50, cfg.Profile.Floor())
	}
	if pids := runningChildren(t, cfg.MockaiBin); len(pids) > 0 {
		t.Errorf("mockai still running after Run: pids %v", pids)
	}
}

func TestCompareCancelStopsChildren(t *testing.T) {
	cfg := tinyConfig(t, LegDirect)
	cfg.N, cfg.Runs = 100000, 1
	cfg.Profile.FirstAudioDelay = 50 * time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(700*time.Millisecond, cancel)
	start := time.Now()
	_, err := Run(ctx, cfg)
	if err == nil || !strings.Contains(err.Error(), "context canceled") {
		t.Fatalf("error %v, want context canceled", err)
	}
	if time.Since(start) > 20*time.Second {
		t.Errorf("cancel took %v", time.Since(start))
	}
	if pids := runningChildren(t, cfg.MockaiBin); len(pids) > 0 {
		t.Errorf("mockai still running after cancel: pids %v", pids)
	}
}

func TestCompareGatewayExitsEarly(t *testing.T) {
	cfg := tinyConfig(t, LegPoolOff)
	cfg.GatewayBin = "/bin/false"
	_, err := Run(context.Background(), cfg)
	if err == nil || !strings.Contains(err.Error(), "gateway exited early") {
		t.Fatalf("error %v, want a clear early-exit error", err)
	}
	if pids := runningChildren(t, cfg.MockaiBin); len(pids) > 0 {
		t.Errorf("mockai still running after a failed leg: pids %v", pids)
	}
}

// TestCompareAllLegs is the whole comparison at a tiny size. It needs
// ./cmd/gateway to build and to serve /health, the pool settings and the
// upstream relay.
// It runs over both upstreams: mockai over TLS (the default: the direct leg
// trusts its certificate, the gateway through UPSTREAM_CA_FILE) and plain.
func TestCompareAllLegs(t *testing.T) {
	for _, up := range []proc.Upstream{proc.UpstreamTLS, proc.UpstreamPlain} {
		t.Run(string(up), func(t *testing.T) { compareAllLegs(t, up) })
	}
}

func compareAllLegs(t *testing.T, up proc.Upstream) {
	cfg := tinyConfig(t, AllLegs...)
	cfg.GatewayBin = requireBinary(t, "gateway")
	cfg.Pool = "4"
	cfg.Upstream = up
	out, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	checkResults(t, out, cfg)
	table := out.Comparison.Markdown()
	for _, want := range []string{
		"| metric | Direct | Gateway pool off | Gateway pool on | Gateway pool on, Redis limits | overhead (pool on vs direct) | pool on vs direct |",
		"| success | 100.0% | 100.0% | 100.0% | 100.0% |",
		"| pool hit rate | n/a | n/a |",
	} {
		if !strings.Contains(table, want) {
			t.Errorf("table lacks %q:\n%s", want, table)
		}
	}
	n := len(Schedule(cfg.Open))
	open := out.OpenMarkdown()
	for _, want := range []string{
		"| metric | Direct | Gateway pool off | Gateway pool on | Gateway pool on, Redis limits | overhead (pool on vs direct) | pool on vs direct |",
		"| success | 100.0% | 100.0% | 100.0% | 100.0% |",
		"| session p99 |",
		"| exchange p99 (total - held) |",
		fmt.Sprintf("| arrivals (offered rate) | %d (", n),
		"| dropped / delayed at cap | 0 / 0 | 0 / 0 | 0 / 0 | 0 / 0 |  |  |",
		"| pool hit rate | n/a | n/a |",
	} {
		if !strings.Contains(open, want) {
			t.Errorf("open-loop table lacks %q:\n%s", want, open)
		}
	}
	checkGatewayUsage(t, out, cfg)
	if gw := out.GatewayMarkdown(); !strings.Contains(gw, "| Gateway pool off | ") || !strings.Contains(gw, "| Gateway pool on, Redis limits | ") {
		t.Errorf("gateway process table:\n%s", gw)
	}
	for _, bin := range []string{cfg.MockaiBin, cfg.GatewayBin} {
		if pids := runningChildren(t, bin); len(pids) > 0 {
			t.Errorf("%s still running: %v", filepath.Base(bin), pids)
		}
	}
}

// checkGatewayUsage: every gateway leg measured its gateway over its
// closed-loop calls and turns (the open-loop run not included), direct none.
func checkGatewayUsage(t *testing.T, out *Outcome, cfg Config) {
	t.Helper()
	for _, leg := range out.Legs {
		g := leg.Gateway
		if leg.ID == LegDirect {
			if g != nil {
				t.Errorf("direct leg has gateway usage %+v", g)
			}
			continue
		}
		if want := cfg.N * cfg.Runs; g == nil || g.Calls != want || g.Turns != want*max(cfg.Turns, 1) || g.PeakRSS <= 0 {
			t.Errorf("%s: gateway usage %+v, want %d calls of %d turns and an RSS", leg.ID, g, want, max(cfg.Turns, 1))
		}
	}
}

// The Live pool's counters are read by their own names, and the Realtime
// pool's are not taken for them.
func TestParseLivePoolCounters(t *testing.T) {
	text := "rtgate_pool_hits_total 9\nrtgate_pool_misses_total 9\nrtgate_live_pool_hits_total{model=\"gpt-live-1\",key=\"ab\"} 7\nrtgate_live_pool_misses_total{model=\"gpt-live-1\",key=\"ab\"} 3\n"
	h, m, err := parsePoolCountersOf(strings.NewReader(text), livePoolPrefix)
	if err != nil || h != 7 || m != 3 {
		t.Fatalf("live: hits %v misses %v err %v, want 7 and 3", h, m, err)
	}
}
