package report

import (
	"bytes"
	"encoding/xml"
	"strings"
	"testing"
	"time"

	"rtgate/bench/load"
	"rtgate/bench/stats"
)

const ms = time.Millisecond

func sum(n int, p50, p95, p99, max time.Duration) stats.Summary {
	return stats.Summary{N: n, Min: p50 / 2, P50: p50, P95: p95, P99: p99, Max: max}
}

func TestFormatMS(t *testing.T) {
	tests := []struct {
		d    time.Duration
		want string
	}{
		{0, "0.00 ms"},
		{50 * time.Microsecond, "0.05 ms"},
		{1234 * time.Microsecond, "1.23 ms"},
		{9994 * time.Microsecond, "9.99 ms"},
		{10 * ms, "10.0 ms"},
		{276 * ms, "276.0 ms"},
		{1970400 * time.Microsecond, "1970.4 ms"},
	}
	for _, tc := range tests {
		if got := FormatMS(tc.d); got != tc.want {
			t.Errorf("FormatMS(%v) = %q, want %q", tc.d, got, tc.want)
		}
	}
}

func TestRunMarkdownGolden(t *testing.T) {
	s := load.Summary{
		Calls: 5000, OK: 4990, SuccessRate: 0.998,
		Dial:       sum(4998, 276*ms, 410*ms, 520*ms, 901*ms),
		Session:    sum(4995, 7*ms, 12500*time.Microsecond, 30*ms, 41*ms),
		FirstAudio: sum(4990, 400*ms, 450*ms, 480*ms, 600*ms),
		Total:      sum(4990, 816*ms, 2152*ms, 2400*ms, 3100*ms),
		Failures:   map[string]int{"timeout_done": 3, "handshake_429": 7},
		Wall:       12500 * ms, CPU: 1850 * ms, CPUPer1000: 370 * ms, Throughput: 400,
	}
	want := `calls 5000, ok 4990 (99.8%), wall 12.5 s, 400.0 calls/s

| phase | n | p50 | p95 | p99 | max |
|---|---:|---:|---:|---:|---:|
| dial | 4998 | 276.0 ms | 410.0 ms | 520.0 ms | 901.0 ms |
| session | 4995 | 7.00 ms | 12.5 ms | 30.0 ms | 41.0 ms |
| first audio | 4990 | 400.0 ms | 450.0 ms | 480.0 ms | 600.0 ms |
| total | 4990 | 816.0 ms | 2152.0 ms | 2400.0 ms | 3100.0 ms |

| failure | calls |
|---|---:|
| handshake_429 | 7 |
| timeout_done | 3 |

wsbench CPU: 1850 ms user+sys, 370.0 ms per 1,000 calls
`
	if got := RunMarkdown(s); got != want {
		t.Errorf("RunMarkdown:\n%s\nwant:\n%s", got, want)
	}
}

func TestRunMarkdownNothingReached(t *testing.T) {
	s := load.Summary{Calls: 2, Failures: map[string]int{"dial": 2}}
	got := RunMarkdown(s)
	if !strings.Contains(got, "| total | 0 | - | - | - | - |") || !strings.Contains(got, "| dial | 2 |") {
		t.Errorf("unexpected rendering:\n%s", got)
	}
}

func TestComparisonMarkdownGolden(t *testing.T) {
	hit := 0.76
	direct := &Leg{Name: "Direct", Summary: load.Summary{SuccessRate: 1,
		Dial: sum(10, 276*ms, 0, 0, 0), Session: sum(10, 7*ms, 0, 0, 0), FirstAudio: sum(10, 400*ms, 0, 0, 0),
		Total: sum(10, 816*ms, 2152*ms, 2400*ms, 0), CPUPer1000: 250 * ms}}
	off := &Leg{Name: "Gateway pool off", Summary: load.Summary{SuccessRate: 0.999,
		Dial: sum(10, 150*ms, 0, 0, 0), Session: sum(10, 367*ms, 0, 0, 0), FirstAudio: sum(10, 401*ms, 0, 0, 0),
		Total: sum(10, 1100*ms, 2300*ms, 2500*ms, 0), CPUPer1000: 251 * ms}}
	on := &Leg{Name: "Gateway pool on", PoolHitRate: &hit, Summary: load.Summary{SuccessRate: 1,
		Dial: sum(10, 158*ms, 0, 0, 0), Session: sum(10, 40*time.Microsecond, 0, 0, 0), FirstAudio: sum(10, 400*ms, 0, 0, 0),
		Total: sum(10, 700*ms, 1970*ms, 2400*ms, 0), CPUPer1000: 249 * ms}}
	want := `| metric | Direct | Gateway pool off | Gateway pool on | overhead (pool on vs direct) | pool on vs direct |
|---|---:|---:|---:|---:|---:|
| success | 100.0% | 99.9% | 100.0% |  |  |
| dial p50 | 276.0 ms | 150.0 ms | 158.0 ms | -118.0 ms | 43% faster |
| session p50 | 7.00 ms | 367.0 ms | 0.04 ms | -6.96 ms | 99% faster |
| 1st-audio p50 | 400.0 ms | 401.0 ms | 400.0 ms | +0.00 ms | same |
| total p50 | 816.0 ms | 1100.0 ms | 700.0 ms | -116.0 ms | 14% faster |
| total p95 | 2152.0 ms | 2300.0 ms | 1970.0 ms | -182.0 ms | 8% faster |
| total p99 | 2400.0 ms | 2500.0 ms | 2400.0 ms | +0.00 ms | same |
| pool hit rate | n/a | n/a | 76.0% |  |  |
| wsbench CPU / 1k calls | 250 ms | 251 ms | 249 ms |  |  |
`
	if got := (Comparison{Direct: direct, PoolOff: off, PoolOn: on}).Markdown(); got != want {
		t.Errorf("comparison:\n%s\nwant:\n%s", got, want)
	}

	slower := *on
	slower.Summary.Total = sum(10, 900*ms, 2152*ms, 2400*ms, 0)
	if got := (Comparison{Direct: direct, PoolOn: &slower}).Markdown(); !strings.Contains(got, "| total p50 | 816.0 ms | 900.0 ms | +84.0 ms | 10% slower |") {
		t.Errorf("slower leg rendering:\n%s", got)
	}

	wantDirectOnly := `| metric | Direct |
|---|---:|
| success | 100.0% |
| dial p50 | 276.0 ms |
| session p50 | 7.00 ms |
| 1st-audio p50 | 400.0 ms |
| total p50 | 816.0 ms |
| total p95 | 2152.0 ms |
| total p99 | 2400.0 ms |
| pool hit rate | n/a |
| wsbench CPU / 1k calls | 250 ms |
`
	if got := (Comparison{Direct: direct}).Markdown(); got != wantDirectOnly {
		t.Errorf("direct only:\n%s\nwant:\n%s", got, wantDirectOnly)
	}
}

func TestHoldMarkdown(t *testing.T) {
	r := &load.HoldResult{
		Opening: []load.Sample{
			{Reached: load.PhaseSession, Dial: 2 * ms, Session: 1 * ms},
			{Reached: load.PhaseSession, Dial: 4 * ms, Session: 3 * ms},
			{Failure: "handshake_429"},
		},
		Established: 2, Held: 1, Failed: 1, ClosedClean: 1, Lost: map[string]int{"unexpected_close_1006": 1},
		OpenTime: 1500 * ms, Holding: 10 * time.Second, CPU: 20 * ms, MemPerSession: 9216,
	}
	got := HoldMarkdown(r)
	for _, want := range []string{
		"| attempted | 3 |", "| established | 2 |", "| held to the end | 1 |", "| failed to open | 1 |",
		"| closed cleanly | 1 |", "opened in 1.5 s, held for 10.0 s",
		"| dial | 2 | 2.00 ms | 4.00 ms | 4.00 ms | 4.00 ms |", "| session | 2 | 1.00 ms |",
		"| handshake_429 | 1 |", "| unexpected_close_1006 | 1 |", "9.0 KiB per established session",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("hold report lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "|  |") {
		t.Errorf("established sessions listed as failures:\n%s", got)
	}
	if strings.Contains(got, "first audio") {
		t.Errorf("hold report should not show phases a hold never runs:\n%s", got)
	}
}

func TestWriteHTML(t *testing.T) {
	series := func(name string, vals ...time.Duration) Series { return Series{Name: name, Sorted: vals} }
	p := Page{
		Title: "rtgate <comparison>", Generated: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC),
		Notes:  []string{"mockai profile: 150 ms upgrade"},
		Tables: []Table{{Title: "Summary", Header: []string{"metric", "Direct"}, Rows: [][]string{{"total p50", "816.0 ms"}}}},
		Charts: []Chart{
			{Title: "total", Series: []Series{series("Direct", 1*ms, 2*ms, 900*ms), series("Gateway <pool on>", 50*time.Microsecond, 3*ms)}},
			{Title: "session", Series: []Series{series("Direct")}},
		},
	}
	var buf bytes.Buffer
	if err := WriteHTML(&buf, p); err != nil {
		t.Fatal(err)
	}
	html := buf.String()
	for _, want := range []string{"<svg", "<path d=\"M", "Gateway &lt;pool on&gt; (n=2)", "rtgate &lt;comparison&gt;",
		"<td>816.0 ms</td>", "no samples", ">0.01<", ">1000<", "mockai profile"} {
		if !strings.Contains(html, want) {
			t.Errorf("HTML lacks %q", want)
		}
	}
	for _, banned := range []string{"<script", "http://cdn", "https://"} {
		if strings.Contains(html, banned) {
			t.Errorf("HTML must be self-contained, found %q", banned)
		}
	}
	// Every chart is well-formed XML on its own.
	for _, c := range p.Charts {
		if err := xml.Unmarshal([]byte(CDFSVG(c)), new(struct{})); err != nil {
			t.Errorf("chart %q is not well-formed SVG: %v", c.Title, err)
		}
	}
}

func TestVoiceMarkdown(t *testing.T) {
	md := VoiceMarkdown(&load.VoiceResult{Sessions: 10, Opened: 9, Failures: map[string]int{"handshake_429": 1},
		Lost: map[string]int{"unexpected_close_1006": 2}, Window: time.Second, Interval: 20 * time.Millisecond,
		SentExpected: 450, Sent: 440, LateSends: 11, MaxLate: 31 * time.Millisecond, RecvExpected: 450, Received: 405})
	for _, want := range []string{
		"| sessions opened | 9 of 10 |",
		"| appends sent | 440 of 450 | 97.8% |",
		"| late sends (> half an interval) | 11 | 2.5% |",
		"| deltas received | 405 of 450 | 90.0% |",
		"worst late send 31.0 ms",
		"| handshake_429 | 1 |",
		"| lost while streaming | sessions |", "| unexpected_close_1006 | 2 |",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("voice report lacks %q:\n%s", want, md)
		}
	}
}
