package transcript

import (
	"fmt"
	"regexp"
	"strings"
)

// Rule is a redaction rule: every match of Pattern in a text, transcript,
// tool argument or output is replaced by "[Label]" before the Recorder
// keeps it (an email address by [EMAIL], say). Rules apply in order, each
// to the text the previous ones left. Empty matches are ignored, so a
// pattern such as `\d*` replaces digits, not the gaps between characters.
type Rule struct {
	Pattern *regexp.Regexp
	Label   string
}

// NewRule compiles pattern into a Rule with label (configuration's shape:
// a regex and a label); the error wraps ErrRule and the regexp's error.
func NewRule(pattern, label string) (Rule, error) {
	if label == "" {
		return Rule{}, fmt.Errorf("%w: pattern %q has no label", ErrRule, pattern)
	}
	re, err := regexp.Compile(pattern)
	if err != nil {
		return Rule{}, fmt.Errorf("%w %s: %w", ErrRule, label, err)
	}
	return Rule{Pattern: re, Label: label}, nil
}

// rule is a Rule ready to apply: its replacement made once.
type rule struct {
	re   *regexp.Regexp
	repl string
}

// compile checks rules and makes their replacements.
func compile(rules []Rule) ([]rule, error) {
	out := make([]rule, 0, len(rules))
	for i, r := range rules {
		if r.Pattern == nil || r.Label == "" {
			return nil, fmt.Errorf("%w: rule %d needs a pattern and a label", ErrRule, i)
		}
		out = append(out, rule{re: r.Pattern, repl: "[" + r.Label + "]"})
	}
	return out, nil
}

// redact applies the rules to s: the text to keep, and how many matches
// were replaced.
func redact(rules []rule, s string) (string, int) {
	n := 0
	for _, r := range rules {
		if s == "" {
			break
		}
		locs := r.re.FindAllStringIndex(s, -1)
		if len(locs) == 0 {
			continue
		}
		var b strings.Builder
		last, hits := 0, 0
		for _, l := range locs {
			if l[0] == l[1] {
				continue // an empty match replaces nothing
			}
			if hits == 0 {
				b.Grow(len(s))
			}
			b.WriteString(s[last:l[0]])
			b.WriteString(r.repl)
			last = l[1]
			hits++
		}
		if hits == 0 {
			continue
		}
		b.WriteString(s[last:])
		s = b.String()
		n += hits
	}
	return s, n
}
