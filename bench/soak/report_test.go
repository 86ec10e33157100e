package soak

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// records are a small soak: what happened, and whether it is explained.
func sampleTally() *Tally {
	t := NewTally()
	for range 5 {
		t.Add(Record{Plan: Plan{Kind: Normal}, Cause: CauseCompleted, Took: 300 * time.Millisecond, Upgraded: true})
	}
	t.Add(Record{Index: 7, Plan: Plan{Kind: Normal}, Cause: "timeout_done", Detail: "read | timed out", Upgraded: true})
	t.Add(Record{Plan: Plan{Kind: UpstreamClose, After: 3}, Cause: "unexpected_close_1011",
		Detail: "websocket: close 1011: mock: closing after 3 frames", Upgraded: true})
	t.Add(Record{Index: 9, Plan: Plan{Kind: UpstreamClose, After: 5}, Cause: "unexpected_close_1011",
		Detail: "websocket: close 1011: mock: closing after 3 frames", Upgraded: true})
	t.Add(Record{Plan: Plan{Kind: UpstreamDrop, After: 1}, Cause: "unexpected_close_1011",
		Detail: "upstream connection lost", Upgraded: true})
	t.Add(Record{Plan: Plan{Kind: GarbageRequest}, Cause: "http_400"})
	return t
}

func TestTally(t *testing.T) {
	c := sampleTally().Counts()
	if c.Attempted != 10 || c.Completed != 5 || c.Failed != 5 || c.Upgraded != 9 || c.Unexplained != 2 {
		t.Errorf("counts %+v, want 10 attempted, 5 completed, 5 failed, 9 upgraded, 2 unexplained", c)
	}
	if got := c.FailedByCause; got["unexpected_close_1011"] != 3 || got["timeout_done"] != 1 || got["http_400"] != 1 || len(got) != 3 {
		t.Errorf("failed by cause %v", got)
	}
	if len(c.Examples) != 2 || c.Examples[0].Index != 7 || c.Examples[1].Index != 9 {
		t.Errorf("unexplained examples %+v, want sessions 7 and 9", c.Examples)
	}
	var kinds []Kind
	for _, k := range c.Kinds {
		kinds = append(kinds, k.Kind)
	}
	if want := []Kind{Normal, UpstreamDrop, UpstreamClose, GarbageRequest}; !slices.Equal(kinds, want) {
		t.Errorf("kinds %v, want them in report order: %v", kinds, want)
	}
	closeKind := c.Kinds[2]
	if closeKind.Attempted != 2 || closeKind.Unexplained != 1 || closeKind.UnexplainedCauses["unexpected_close_1011"] != 1 {
		t.Errorf("upstream_close counts %+v", closeKind)
	}
	if c.Kinds[0].Took.N != 6 || c.Kinds[0].Took.P50 != 300*time.Millisecond {
		t.Errorf("normal durations %+v", c.Kinds[0].Took)
	}
}

func TestTallyKeepsFewExamples(t *testing.T) {
	tl := NewTally()
	for i := range maxUnexplained + 50 {
		tl.Add(Record{Index: i, Plan: Plan{Kind: Normal}, Cause: "timeout_done"})
	}
	c := tl.Counts()
	if c.Unexplained != maxUnexplained+50 || len(c.Examples) != maxUnexplained {
		t.Errorf("%d unexplained, %d examples; want all counted and %d kept", c.Unexplained, len(c.Examples), maxUnexplained)
	}
}

// cleanReport is a run in which everything held.
func cleanReport() *Report {
	tl := NewTally()
	tl.Add(Record{Plan: Plan{Kind: Normal}, Cause: CauseCompleted, Upgraded: true})
	tl.Add(Record{Plan: Plan{Kind: Upstream401}, Cause: "error_event_upstream_unavailable", Detail: "HTTP 401", Upgraded: true})
	return &Report{
		Config:          reportConfig(DefaultConfig()),
		Counts:          tl.Counts(),
		GatewayOutcomes: map[string]int64{"client_closed": 1, "upstream_unavailable": 1},
		Start:           Reading{RSS: 20 << 20, HeapAlloc: 3 << 20, HeapInuse: 4 << 20, Goroutines: 11, FDs: 15},
		Peak:            Reading{RSS: 90 << 20, HeapAlloc: 70 << 20, HeapInuse: 80 << 20, Goroutines: 250, FDs: 400, SessionsOpen: 100},
		End:             Reading{RSS: 30 << 20, HeapAlloc: 5 << 20, HeapInuse: 9 << 20, Goroutines: 12, FDs: 15},
		Settled:         true,
		GatewayAlive:    true,
	}
}

func TestCheck(t *testing.T) {
	m := DefaultConfig().Margins // +24 MiB or +50% RSS, +8 MiB heap, +5 goroutines, +5 fds
	tests := []struct {
		name   string
		change func(r *Report)
		want   string // in a problem; "" for a pass
	}{
		{"clean", func(*Report) {}, ""},
		{"unexplained", func(r *Report) { r.Counts.Unexplained = 3 }, "3 session(s) ended in a way no injected fault explains"},
		{"rss", func(r *Report) { r.End.RSS = 45 << 20 }, "resident memory did not come back: start 20.0 MiB, end 45.0 MiB (+24.0 MiB allowed)"},
		{"rss by fraction", func(r *Report) { r.Start.RSS, r.End.RSS = 60<<20, 91<<20 }, "resident memory did not come back"},
		{"rss within the fraction", func(r *Report) { r.Start.RSS, r.End.RSS = 60<<20, 89<<20 }, ""},
		{"heap", func(r *Report) { r.End.HeapAlloc = 12 << 20 }, "live heap did not come back: start 3.0 MiB, end 12.0 MiB (+8.0 MiB allowed)"},
		{"heap in use is not checked", func(r *Report) { r.End.HeapInuse = 40 << 20 }, ""},
		{"goroutines", func(r *Report) { r.End.Goroutines = 17 }, "goroutines did not come back: start 11, end 17"},
		{"fds", func(r *Report) { r.End.FDs = 21 }, "open file descriptors did not come back: start 15, end 21"},
		{"sessions left", func(r *Report) { r.End.SessionsOpen = 2 }, "2 sessions still open"},
		{"not settled", func(r *Report) { r.Settled = false }, "did not settle"},
		{"crash", func(r *Report) { r.GatewayAlive, r.GatewayExit = false, "signal: segmentation fault" }, "exited during the soak (signal: segmentation fault)"},
		{"log", func(r *Report) { r.LogProblems = []string{"panic: boom"} }, "the gateway's log shows: panic: boom"},
		{"count mismatch", func(r *Report) { r.GatewayOutcomes["client_lost"] = 1 }, "counted 3 ended sessions, but 2"},
		{"interrupted", func(r *Report) { r.Interrupted = true }, "interrupted"},
		{"nothing ran", func(r *Report) { r.Counts = Counts{}; r.GatewayOutcomes = nil }, "no sessions ran"},
	}
	for _, tt := range tests {
		r := cleanReport()
		tt.change(r)
		r.check(m)
		joined := strings.Join(r.Problems, "\n")
		switch {
		case tt.want == "" && (!r.Pass || len(r.Problems) > 0):
			t.Errorf("%s: problems %q, want a pass", tt.name, joined)
		case tt.want != "" && (r.Pass || !strings.Contains(joined, tt.want)):
			t.Errorf("%s: pass %v, problems %q; want a failure naming %q", tt.name, r.Pass, joined, tt.want)
		}
	}
	// Within the margins is not a problem.
	r := cleanReport()
	r.End = Reading{RSS: r.Start.RSS + 24<<20, HeapAlloc: r.Start.HeapAlloc + 8<<20, Goroutines: 16, FDs: 20}
	r.check(m)
	if !r.Pass {
		t.Errorf("values at the margins: problems %q, want a pass", r.Problems)
	}
}

func TestMarkdownAndFiles(t *testing.T) {
	r := cleanReport()
	r.Counts = sampleTally().Counts()
	r.GatewayOutcomes = map[string]int64{"client_closed": 6, "upstream_closed": 2, "upstream_lost": 1}
	r.PoolHits, r.PoolMisses = 3, 1
	r.Dir = t.TempDir()
	r.check(DefaultConfig().Margins)
	md := r.Markdown()
	for _, want := range []string{
		"# rtgate soak: FAIL",
		"- 2 session(s) ended in a way no injected fault explains",
		"| 10 | 5 | 5 | 2 |", // attempted, completed, failed, unexplained
		"| unexpected_close_1011 | 3 | 1 | upstream_drop 1, upstream_close 2 |",
		"| 7 | normal | - | timeout_done | read / timed out |", // table pipes escaped
		"| 9 | upstream_close | 5 | unexpected_close_1011 |",
		"| resident memory | 20.0 MiB | 90.0 MiB | 30.0 MiB | +10.0 MiB | +24.0 MiB |",
		"| live heap | 3.0 MiB | 70.0 MiB | 5.0 MiB | +2.0 MiB | +8.0 MiB |",
		"| heap in use | 4.0 MiB | 80.0 MiB | 9.0 MiB | +5.0 MiB | - |",
		"| sessions open | 0 | 100 | 0 | +0 | +0 |",
		"rtgate_sessions_total during the soak: 9 (client_closed 6, upstream_closed 2, upstream_lost 1); the soak's upgraded sessions: 9.",
		"3 hits, 1 misses (75% hits)",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("Markdown lacks %q:\n%s", want, md)
		}
	}
	if err := r.write(); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(r.Dir, "summary.md")); err != nil || string(b) != md {
		t.Errorf("summary.md: %v, or it differs from Markdown()", err)
	}
	b, err := os.ReadFile(filepath.Join(r.Dir, "results.json"))
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Pass     bool     `json:"pass"`
		Problems []string `json:"problems"`
		Sessions struct {
			Attempted   int            `json:"attempted"`
			Unexplained int            `json:"unexplained"`
			ByCause     map[string]int `json:"failed_by_cause"`
			Examples    []struct {
				Plan  Plan   `json:"plan"`
				Cause string `json:"cause"`
			} `json:"unexplained_examples"`
		} `json:"sessions"`
		End Reading `json:"end"`
	}
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatalf("results.json: %v", err)
	}
	if got.Pass || len(got.Problems) != 1 || got.Sessions.Attempted != 10 || got.Sessions.Unexplained != 2 ||
		got.Sessions.ByCause["http_400"] != 1 || len(got.Sessions.Examples) != 2 ||
		got.Sessions.Examples[1].Plan != (Plan{Kind: UpstreamClose, After: 5}) || got.End.RSS != 30<<20 {
		t.Errorf("results.json round trip: %+v", got)
	}
}
