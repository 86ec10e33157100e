package guardrail

import (
	"context"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestNewValidates(t *testing.T) {
	ok := filterSpec([]string{"bomb"})
	tests := []struct {
		name string
		edit func(s *Spec)
		want string // the error, in part; every error names the guardrail
	}{
		{"no name", func(s *Spec) { s.Name = " " }, "guardrail_name is empty"},
		{"unknown kind", func(s *Spec) { s.Kind = "aporia" }, `litellm_params.guardrail "aporia" is not supported`},
		{"no kind", func(s *Spec) { s.Kind = "" }, `litellm_params.guardrail "" is not supported`},
		{"no modes", func(s *Spec) { s.Modes = nil }, "litellm_params.mode is empty"},
		{"unknown mode", func(s *Spec) { s.Modes = []Mode{PreCall, "post_call"} }, `litellm_params.mode "post_call" is not supported`},
		{"bad regex", func(s *Spec) { s.Patterns = []NamedPattern{{Name: "ssn", Pattern: `(\d+`}} }, "patterns[0] (ssn): error parsing regexp"},
		{"lookahead (not RE2)", func(s *Spec) { s.Patterns = []NamedPattern{{Pattern: `a(?=b)`}} }, "patterns[0] (patterns[0])"},
		{"empty pattern", func(s *Spec) { s.Patterns = []NamedPattern{{Name: "x"}} }, "patterns[0] (x): pattern is empty"},
		{"empty word", func(s *Spec) { s.BlockedWords = []string{"bomb", "  "} }, "blocked_words[1] is empty"},
		{"filter without words or patterns", func(s *Spec) { s.BlockedWords = nil }, "needs blocked_words or patterns"},
		{"generic without api_base", func(s *Spec) { s.Kind = GenericAPI }, "needs litellm_params.api_base"},
		{"generic with a bad api_base", func(s *Spec) { s.Kind, s.APIBase = GenericAPI, "guard.local:8080" }, "not an http:// or https:// URL"},
		{"generic with unencodable params", func(s *Spec) {
			s.Kind, s.APIBase, s.AdditionalParams = GenericAPI, "http://127.0.0.1:1", map[string]any{"f": func() {}}
		}, "additional_provider_specific_params"},
		{"negative timeout", func(s *Spec) { s.Timeout = -time.Second }, "timeout -1s is negative"},
		{"negative fails", func(s *Spec) { s.EndSessionAfterNFails = -1 }, "end_session_after_n_fails -1 is negative"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := ok
			s.Modes = []Mode{InputTranscription}
			tc.edit(&s)
			g, err := New(s, nil)
			if err == nil {
				t.Fatalf("New accepted it: %v", g.Spec())
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q does not say %q", err, tc.want)
			}
			if s.Name == "filter" && !strings.Contains(err.Error(), `guardrail "filter"`) {
				t.Fatalf("error %q does not name the guardrail", err)
			}
		})
	}
}

func TestSpecDefaultsAndAccessors(t *testing.T) {
	s := filterSpec([]string{"bomb"})
	s.Modes = []Mode{ToolCall, InputTranscription, ToolCall}
	s.DefaultOn, s.EndSessionAfterNFails, s.EndSessionOnViolation = true, 3, true
	g := mustNew(t, s)
	s.BlockedWords[0] = "changed" // the guardrail keeps its own copy
	got := g.Spec()
	if got.Timeout != DefaultTimeout || got.ViolationMessage != DefaultViolationMessage ||
		!reflect.DeepEqual(got.Modes, []Mode{ToolCall, InputTranscription}) || got.BlockedWords[0] != "bomb" {
		t.Fatalf("spec %v: want defaults filled, modes once each, its own words", got)
	}
	if !g.DefaultOn() || g.EndSessionAfterNFails() != 3 || !g.EndSessionOnViolation() ||
		g.ViolationMessage() != DefaultViolationMessage || g.Kind() != ContentFilter {
		t.Fatal("accessors disagree with the spec")
	}
	if !g.Runs(ToolCall) || !g.Runs(InputTranscription) || g.Runs(OutputTranscription) || g.Runs(PreCall) {
		t.Fatal("Runs disagrees with the modes")
	}
	if !g.Check(context.Background(), Input{Texts: []string{"a bomb"}}).Blocked {
		t.Fatal("editing the caller's spec changed the guardrail")
	}
}

func TestSetForAndUnion(t *testing.T) {
	in := mustNew(t, Spec{Name: "in", Kind: ContentFilter, Modes: []Mode{InputTranscription}, BlockedWords: []string{"x"}})
	tools := mustNew(t, Spec{Name: "tools", Kind: ContentFilter, Modes: []Mode{ToolCall}, BlockedWords: []string{"x"}})
	both := mustNew(t, Spec{Name: "both", Kind: ContentFilter, Modes: []Mode{ToolCall, InputTranscription}, BlockedWords: []string{"x"}})
	s := Set{in, tools, both}
	if got := s.For(InputTranscription).Names(); !reflect.DeepEqual(got, []string{"in", "both"}) {
		t.Fatalf("For(input) = %v", got)
	}
	if got := s.For(OutputTranscription); len(got) != 0 {
		t.Fatalf("For(output) = %v", got.Names())
	}
	again := mustNew(t, Spec{Name: "in", Kind: ContentFilter, Modes: []Mode{PreCall}, BlockedWords: []string{"y"}})
	u := Set{in}.Union(tools, again, nil, both)
	if got := u.Names(); !reflect.DeepEqual(got, []string{"in", "tools", "both"}) || u[0] != in {
		t.Fatalf("Union = %v: want the first of each name, in order", got)
	}
}

// filterOf is a content filter blocking word.
func filterOf(t *testing.T, name, word string) *Guardrail {
	return mustNew(t, Spec{Name: name, Kind: ContentFilter, Modes: []Mode{InputTranscription}, BlockedWords: []string{word}})
}

func TestSetCheck(t *testing.T) {
	slowBlock := newFakeService(t, answer(`{"action":"BLOCKED","blocked_reason":"vendor says no"}`))
	broken := newFakeService(t, func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusBadGateway) })
	intervene := newFakeService(t, answer(`{"action":"GUARDRAIL_INTERVENED","texts":["***"]}`))
	api := func(name string, svc *fakeService, failOpen bool) *Guardrail {
		s := apiSpec(svc.URL)
		s.Name, s.FailOpen = name, failOpen
		return mustNew(t, s)
	}
	tests := []struct {
		name string
		set  Set
		text string
		want Verdict
	}{
		{"empty set passes", nil, "bomb", Verdict{}},
		{"all pass", Set{filterOf(t, "a", "bomb"), filterOf(t, "b", "gun")}, "hello", Verdict{}},
		{"first block in the set's order", Set{api("vendor", slowBlock, false), filterOf(t, "words", "bomb")}, "bomb",
			Verdict{Blocked: true, Guardrail: "vendor", Reason: "vendor says no"}},
		{"a later block when the first passes", Set{filterOf(t, "a", "gun"), filterOf(t, "b", "bomb")}, "bomb",
			Verdict{Blocked: true, Guardrail: "b", Reason: `blocked word "bomb"`}},
		{"fail closed blocks", Set{filterOf(t, "a", "gun"), api("down", broken, false)}, "hi",
			Verdict{Blocked: true, Errored: true, Guardrail: "down", Reason: "guardrail service answered HTTP 502"}},
		{"fail open passes, saying so", Set{api("down", broken, true), filterOf(t, "a", "gun")}, "hi",
			Verdict{Errored: true, Guardrail: "down", Reason: "guardrail service answered HTTP 502"}},
		{"a block beats a fail-open error", Set{api("down", broken, true), filterOf(t, "a", "bomb")}, "bomb",
			Verdict{Blocked: true, Guardrail: "a", Reason: `blocked word "bomb"`}},
		{"an intervention passes with its texts", Set{filterOf(t, "a", "gun"), api("redact", intervene, false)}, "hi",
			Verdict{Guardrail: "redact", Intervened: true, Texts: []string{"***"}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			v := tc.set.Check(context.Background(), Input{Mode: InputTranscription, Texts: []string{tc.text}})
			if !reflect.DeepEqual(v, tc.want) {
				t.Fatalf("got %+v, want %+v", v, tc.want)
			}
		})
	}
}

// TestSetCheckReturnsOnFirstBlock: a block by the first guardrail does not
// wait for a slow second one, which is cancelled and not counted. (Were it
// waited for, it would time out and count as error_closed.)
func TestSetCheckReturnsOnFirstBlock(t *testing.T) {
	hang := newFakeService(t, func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() })
	slow := apiSpec(hang.URL)
	slow.Name, slow.Timeout = "slow", 20*time.Second
	set := Set{filterOf(t, "words", "bomb"), mustNew(t, slow)}
	m := NewMetrics(prometheus.NewRegistry())
	v := set.Check(context.Background(), Input{Mode: InputTranscription, Texts: []string{"bomb"}, Metrics: m})
	if !v.Blocked || v.Guardrail != "words" {
		t.Fatalf("got %+v, want the words block", v)
	}
	if n := testutil.CollectAndCount(m.checks); n != 1 {
		t.Fatalf("%d series counted, want only words' block", n)
	}
	if got := testutil.ToFloat64(m.checks.WithLabelValues("words", string(InputTranscription), outcomeBlock)); got != 1 {
		t.Fatalf("words block counted %v times", got)
	}
}

func TestCheckAll(t *testing.T) {
	broken := newFakeService(t, func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusInternalServerError) })
	s := apiSpec(broken.URL)
	s.FailOpen = true
	set := Set{filterOf(t, "a", "bomb"), mustNew(t, s), filterOf(t, "c", "gun")}
	got := set.CheckAll(context.Background(), Input{Texts: []string{"a bomb"}})
	want := []Verdict{
		{Blocked: true, Guardrail: "a", Reason: `blocked word "bomb"`},
		{Errored: true, Guardrail: "vendor", Reason: "guardrail service answered HTTP 500"},
		{Guardrail: "c"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v, want %+v", got, want)
	}
}

func TestMetricsCountOutcomes(t *testing.T) {
	broken := newFakeService(t, func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusServiceUnavailable) })
	open, closed := apiSpec(broken.URL), apiSpec(broken.URL)
	open.Name, open.FailOpen = "open", true
	closed.Name = "closed"
	words := filterOf(t, "words", "bomb")
	gOpen, gClosed := mustNew(t, open), mustNew(t, closed)
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	m.Prepare(words, gOpen, gClosed)
	ctx := context.Background()
	for _, text := range []string{"bomb", "fine", "fine"} {
		words.Check(ctx, Input{Mode: InputTranscription, Texts: []string{text}, Metrics: m})
	}
	gOpen.Check(ctx, Input{Mode: ToolCall, Texts: []string{"x"}, Metrics: m})
	gClosed.Check(ctx, Input{Mode: InputTranscription, Texts: []string{"x"}, Metrics: m})
	gClosed.Check(ctx, Input{Mode: InputTranscription, Texts: []string{"x"}}) // no Metrics: not counted
	tests := []struct {
		guardrail string
		mode      Mode
		outcome   string
		want      float64
	}{
		{"words", InputTranscription, outcomeBlock, 1},
		{"words", InputTranscription, outcomePass, 2},
		{"words", InputTranscription, outcomeErrorClosed, 0},
		{"open", ToolCall, outcomeErrorOpen, 1},
		{"open", InputTranscription, outcomeErrorOpen, 0}, // prepared, never checked
		{"closed", InputTranscription, outcomeErrorClosed, 1},
		{"closed", ToolCall, outcomePass, 0},
	}
	for _, tc := range tests {
		if got := testutil.ToFloat64(m.checks.WithLabelValues(tc.guardrail, string(tc.mode), tc.outcome)); got != tc.want {
			t.Errorf("%s %s %s = %v, want %v", tc.guardrail, tc.mode, tc.outcome, got, tc.want)
		}
	}
	// Prepared series: 3 guardrails × 2 modes (apiSpec has two) or 1, × 4 outcomes.
	if n := testutil.CollectAndCount(m.checks); n != (1+2+2)*4 {
		t.Errorf("%d check series, want every prepared one", n)
	}
	if n := testutil.CollectAndCount(m.seconds); n != 1+2+2 {
		t.Errorf("%d latency series, want one per guardrail and mode", n)
	}
}
