package transcript

import (
	"encoding/json"
	"errors"
	"regexp"
	"regexp/syntax"
	"slices"
	"strings"
	"testing"
)

func mustRule(t *testing.T, pattern, label string) Rule {
	t.Helper()
	r, err := NewRule(pattern, label)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestRedaction: every text the record keeps passes the rules first, and
// the secret is nowhere in the record, neither in a snapshot nor at Close,
// including a number the upstream sent over two deltas.
func TestRedaction(t *testing.T) {
	const card, email = "4111 1111 1111 1111", "ann@example.com"
	rules := []Rule{mustRule(t, `\b\d(?:[ -]?\d){12,15}\b`, "CARD"), mustRule(t, `[\w.+-]+@[\w-]+\.[\w.]+`, "EMAIL")}
	tests := []struct {
		name  string
		steps []step
		want  []string
		n     int // redactions
	}{
		{
			name:  "the user's transcript",
			steps: []step{committed("u1"), heardDelta("u1", "my card is 4111"), heard("u1", "my card is "+card)},
			want:  []string{"transcript user u1: my card is [CARD]"},
			n:     1,
		},
		{
			name:  "the user's text, two rules",
			steps: []step{userText("u1", "user", "mail "+email+" or call, card "+card)},
			want:  []string{"text user u1: mail [EMAIL] or call, card [CARD]"},
			n:     2,
		},
		{
			name:  "the assistant's partial transcript, the number across two deltas",
			steps: []step{saidDelta("r1", "a1", "Your card 4111 1111"), saidDelta("r1", "a1", " 1111 1111 is on file")},
			want:  []string{"transcript assistant a1: Your card [CARD] is on file [partial]"},
			n:     1,
		},
		{
			name: "a tool call's arguments and its output",
			steps: []step{
				{up, `{"type":"response.function_call_arguments.done","response_id":"r1","item_id":"fc1","call_id":"c1","name":"charge","arguments":` + q(`{"card":"`+card+`"}`) + `}`},
				toolOutput("c1", `{"receipt_to":"`+email+`"}`),
			},
			want: []string{`tool_call assistant fc1 c1 charge({"card":"[CARD]"})`, `tool_output tool c1={"receipt_to":"[EMAIL]"}`},
			n:    2,
		},
		{
			name:  "a Live transcript across deltas, and a Live tool output",
			steps: []step{liveHeard("it's 4111 1111 "), liveHeard("1111 1111"), {lcl, `{"type":"response.item.create","item":{"type":"function_call_output","call_id":"c","output":[{"type":"input_text","text":"` + email + `"}]}}`}},
			want:  []string{"transcript user: it's [CARD]", "tool_output tool c=[EMAIL]"},
			n:     2,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newRecorder(t, 0, rules...)
			feed(t, r, tt.steps...)
			snap := r.Snapshot()
			rec := r.Close()
			if got := lines(rec); !slices.Equal(got, tt.want) {
				t.Fatalf("record:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tt.want, "\n"))
			}
			if rec.Redactions != tt.n {
				t.Fatalf("%d redactions, want %d", rec.Redactions, tt.n)
			}
			for name, r := range map[string]Record{"snapshot": snap, "record": rec} {
				b, err := json.Marshal(r)
				if err != nil {
					t.Fatal(err)
				}
				for _, secret := range []string{card, email, "4111", "ann@"} {
					if strings.Contains(string(b), secret) {
						t.Fatalf("the %s holds %q: %s", name, secret, b)
					}
				}
			}
		})
	}
}

func TestRedactRules(t *testing.T) {
	tests := []struct {
		name, pattern, label, in, want string
		n                              int
	}{
		{"every match", `\d{3}`, "N", "123 and 456", "[N] and [N]", 2},
		{"empty matches replace nothing", `\d*`, "N", "a1b22c", "a[N]b[N]c", 2},
		{"no match", `zzz`, "Z", "plain", "plain", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rules, err := compile([]Rule{{Pattern: regexp.MustCompile(tt.pattern), Label: tt.label}})
			if err != nil {
				t.Fatal(err)
			}
			if got, n := redact(rules, tt.in); got != tt.want || n != tt.n {
				t.Fatalf("redact(%q) = %q, %d; want %q, %d", tt.in, got, n, tt.want, tt.n)
			}
		})
	}
}

func TestBadRules(t *testing.T) {
	_, err := NewRule(`(unclosed`, "X")
	var syn *syntax.Error
	if !errors.Is(err, ErrRule) || !errors.As(err, &syn) {
		t.Fatalf("a bad pattern: %v, want ErrRule wrapping the regexp's error", err)
	}
	if _, err := NewRule(`x`, ""); !errors.Is(err, ErrRule) {
		t.Fatalf("no label: %v, want ErrRule", err)
	}
	if _, err := New(0, []Rule{{Label: "X"}}, nil); !errors.Is(err, ErrRule) {
		t.Fatalf("a rule without a pattern: %v, want ErrRule", err)
	}
}
