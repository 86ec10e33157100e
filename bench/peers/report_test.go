package peers

import (
	"math"
	"strings"
	"testing"
	"time"
)

// fakeRun builds a successful run with the given figures.
func fakeRun(round int, sys string, perSession float64, p50, p99 float64, rate1k, cpu1k, rateAudio, cpuAudio float64) Run {
	return Run{
		Upstream: "plain", Round: round, System: sys,
		Memory:  &Memory{Held: 1000, PerSession: perSession, ProxyIdleRSS: 10 << 20},
		Latency: &Latency{P50us: p50, P99us: p99, Seconds: 4, OtherCPU: 0.2},
		Throughput: []Throughput{
			{Load: "1KiB", PerSecond: rate1k, CPUPer100kRoundTrips: cpu1k, Seconds: 5, OtherCPU: 0.5},
			{Load: "audio", PerSecond: rateAudio, CPUPer100kRoundTrips: cpuAudio, Seconds: 5},
		},
	}
}

func fakeResults() *Results {
	res := &Results{Started: time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)}
	res.Machine = Machine{CPU: "Test CPU", Cores: 2, MemoryGB: 24, Kernel: "6.1", Go: "go1.26",
		Versions: map[string]string{SysNginx: "nginx/1.22.1"}, Binaries: map[string]string{"gateway": "0123456789ab"}}
	res.Options.Systems = []string{SysDirect, SysNginx, SysHAProxy, SysCaddy, SysPoolOff}
	res.Options.Upstreams = []string{"plain"}
	res.Options.Rounds = 2
	res.Options.Sessions = 1000
	res.Options.VoiceSessions, res.Options.TLSVoiceSessions = 500, 300
	res.Runs = []Run{
		fakeRun(1, SysDirect, 0, 100, 1000, 90000, 0, 40000, 0),
		fakeRun(1, SysNginx, 10*1024, 300, 3000, 60000, 0.5, 30000, 2.0),
		fakeRun(1, SysHAProxy, 4*1024, 250, 2000, 50000, 0.4, 20000, 1.0),
		{Upstream: "plain", Round: 1, System: SysCaddy, Error: "caddy: process exited"},
		// A run over the other upstream is not mixed into the plain table.
		{Upstream: "tls", Round: 1, System: SysPoolOff, Memory: &Memory{Held: 10, PerSession: 1 << 30}},
		fakeRun(1, SysPoolOff, 8*1024, 350, 1500, 55000, 0.6, 25000, 1.5),
		fakeRun(2, SysPoolOff, 6*1024, 450, 2500, 45000, 0.4, 15000, 0.5),
		fakeRun(2, SysCaddy, 20*1024, 200, 2000, 40000, 0.8, 10000, 4.0),
		fakeRun(2, SysHAProxy, 4*1024, 250, 2000, 50000, 0.4, 20000, 1.0),
		fakeRun(2, SysNginx, 10*1024, 300, 3000, 60000, 0.5, 30000, 2.0),
		fakeRun(2, SysDirect, 0, 200, 1000, 90000, 0, 40000, 0),
	}
	voice := map[string]float64{SysNginx: 0.46, SysHAProxy: 0.57, SysPoolOff: 0.69, SysCaddy: 0.1}
	for i := range res.Runs {
		if r := &res.Runs[i]; r.Error == "" && voice[r.System] > 0 {
			r.Voice = &Voice{CoresPer1000: voice[r.System], RecvExpected: 1000, Received: 990, Seconds: 10}
			if r.System == SysCaddy { // fell behind: its CPU is no figure, and not the best peer's
				r.Voice.Received = 500
			}
			if r.System == SysNginx && r.Round == 2 { // crowded by other jobs: left out of the median
				r.Voice.CoresPer1000, r.Voice.Disturbed = 0.1, true
			}
		}
		if r := &res.Runs[i]; r.System == SysPoolOff {
			r.Memory.GatewayHeapPerSession, r.Memory.GOGC = 3*1024, "default (100)"
		}
	}
	return res
}

func metricIndex(t *testing.T, head string) int {
	for k, m := range metrics {
		if m.head == head {
			return k
		}
	}
	t.Fatalf("no metric %q", head)
	return -1
}

func TestSummarize(t *testing.T) {
	sums := Summarize(fakeResults(), "plain")
	if len(sums) != 5 || sums[0].System != SysDirect || sums[4].System != SysPoolOff {
		t.Fatalf("summaries %+v, want the five systems in the options' order", sums)
	}
	gw := sums[4]
	// Memory: mean of 8 KiB and 6 KiB. Added p50: (350-100) and (450-200) against the
	// same round's direct run.
	if got := median(gw.Values[0]); got != 7*1024 {
		t.Errorf("gateway memory median = %v, want 7168", got)
	}
	if got := gw.Values[metricIndex(t, "added p50")]; len(got) != 2 || got[0] != 250 || got[1] != 250 {
		t.Errorf("gateway added p50 per round = %v, want [250 250]", got)
	}
	if !math.IsNaN(median(sums[0].Values[0])) {
		t.Errorf("direct has a memory figure %v; it has no proxy", sums[0].Values[0])
	}
	caddy := sums[3]
	if len(caddy.Errors) != 1 || !strings.Contains(caddy.Errors[0], "round 1") || len(caddy.Values[0]) != 1 {
		t.Errorf("caddy: errors %v, values %v; want round 1's failure and round 2's figures", caddy.Errors, caddy.Values[0])
	}
}

func TestMarkdown(t *testing.T) {
	md := Markdown(fakeResults())
	rows := map[string]string{}
	for line := range strings.SplitSeq(md, "\n") {
		if f := strings.Split(line, "|"); len(f) > 2 {
			name := strings.TrimSpace(f[1])
			if _, seen := rows[name]; !seen { // first table: the summary
				rows[name] = line
			}
		}
	}
	tests := []struct {
		system string
		want   []string
	}{
		// Best peer memory is HAProxy's 4 KiB; the gateway's mean 7 KiB is 1.75x.
		// Best peer 1 KiB rate is nginx's 60000; the gateway's mean 50000 is 0.83x.
		// Best peer audio CPU is HAProxy's 1.0 s; the gateway's mean 1.0 s is 1.00x.
		// Caddy's added p50 is 0, so no ratio can be taken against it.
		// Best voice CPU is nginx's 0.46 cores; the gateway's 0.69 is 1.50x.
		{SysPoolOff, []string{"| 0.69 (1.50×) | 99.0% |", "| 7.0 KiB (1.75×) | 3.0 KiB |", "| 50000 (0.83×) |", "| 1.00 s (1.00×) |", "| 250 µs |", "| 1000 µs (1.00×) |"}},
		{SysHAProxy, []string{"| 4.0 KiB (1.00×) |", "| 10.0 MiB |"}},
		// Caddy's only successful round: its added p50 is 200-200 = 0, no ratio.
		{SysCaddy, []string{"| 20.0 KiB (5.00×) |", "| 0 µs |", "| — | 50.0% |"}},
		{SysDirect, []string{"| direct | — | — | — | 150 µs | baseline | baseline | 90000 | — | 40000 | — |"}},
	}
	for _, tt := range tests {
		row, ok := rows[tt.system]
		if !ok {
			t.Errorf("no row for %s in:\n%s", tt.system, md)
			continue
		}
		for _, w := range tt.want {
			if !strings.Contains(row, w) {
				t.Errorf("%s row %q lacks %q", tt.system, row, w)
			}
		}
	}
	for _, w := range []string{
		"2026-11-30", "Test CPU, 2 cores", "nginx/1.22.1", "bin/gateway sha256 0123456789ab", "Held sessions: 1000 over a plain upstream",
		"Every round", "| 8.0 KiB / 6.0 KiB (±14%) |", // the gateway's memory per round, ± half its range
		"**caddy failed** (round 1: caddy: process exited)",
		"p50 150 µs", // direct's mean round trip
		"### plain ws:// upstream", "per 100,000 round trips",
		"at most 0.10 cores",
		"voice: CPU cores / 1,000 sessions (measured at 500)", "median shown",
		"| 0.46 / — |",             // nginx's voice CPU: round 2 was disturbed
		"used more than 0.5 cores", // and the note says why
		"GOGC default (100), GOMEMLIMIT ",
	} {
		if !strings.Contains(md, w) {
			t.Errorf("table lacks %q:\n%s", w, md)
		}
	}
}

// The summary is the median of the rounds: one disturbed round of three moves
// nothing; two rounds give their mean; rounds without the figure are skipped.
func TestMedian(t *testing.T) {
	nan := math.NaN()
	tests := []struct {
		in         []float64
		want, half float64 // median; spread in percent
	}{
		{[]float64{1.0, 1.1, 1.9}, 1.1, 100 * 0.9 / 1.1},
		{[]float64{2, 1}, 1.5, 100 / 1.5},
		{[]float64{nan, 3, nan}, 3, nan},
		{[]float64{4, 4, 4, 4}, 4, 0},
		{nil, nan, nan},
	}
	same := func(a, b float64) bool { return (math.IsNaN(a) && math.IsNaN(b)) || math.Abs(a-b) < 1e-9 }
	for _, tt := range tests {
		if got := median(tt.in); !same(got, tt.want) {
			t.Errorf("median(%v) = %v, want %v", tt.in, got, tt.want)
		}
		if got := spread(tt.in); !same(got, tt.half) {
			t.Errorf("spread(%v) = %v, want %v", tt.in, got, tt.half)
		}
	}
}
