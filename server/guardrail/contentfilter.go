package guardrail

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"unicode"
	"unicode/utf8"
)

// contentFilter is the in-process guardrail: blocked words and named
// patterns over the texts, tool names and tool arguments of an Input.
//
// Blocked words are not regular expressions: RE2's \b knows only ASCII, and
// an alternation of 20 words each with its own Unicode boundaries costs
// Go's regexp engine some 150 µs over a 200-character transcript, which an
// output guardrail pays on every transcript delta. Instead the text is case
// folded once (RE2's (?i) folding) and each word is searched with
// strings.Index and its boundaries checked by hand: a few µs in all.
type contentFilter struct {
	words    []blockedWord
	patterns []namedRegexp
}

type blockedWord struct {
	word        string // as configured, for the reason
	folded      string // fold(word)
	left, right bool   // the start, the end needs a word boundary
}

type namedRegexp struct {
	name string
	re   *regexp.Regexp
}

func newContentFilter(words []string, patterns []NamedPattern) (*contentFilter, error) {
	if len(words) == 0 && len(patterns) == 0 {
		return nil, errors.New("litellm_content_filter needs blocked_words or patterns, and has neither")
	}
	f := &contentFilter{}
	for i, w := range words {
		w = strings.TrimSpace(w)
		if w == "" {
			return nil, fmt.Errorf("blocked_words[%d] is empty", i)
		}
		first, _ := utf8.DecodeRuneInString(w)
		last, _ := utf8.DecodeLastRuneInString(w)
		f.words = append(f.words, blockedWord{word: w, folded: fold(w),
			left: needsBoundary(first), right: needsBoundary(last)})
	}
	for i, p := range patterns {
		name := p.Name
		if name == "" {
			name = fmt.Sprintf("patterns[%d]", i)
		}
		if p.Pattern == "" {
			return nil, fmt.Errorf("patterns[%d] (%s): pattern is empty", i, name)
		}
		re, err := regexp.Compile(p.Pattern)
		if err != nil {
			return nil, fmt.Errorf("patterns[%d] (%s): %w", i, name, err)
		}
		f.patterns = append(f.patterns, namedRegexp{name: name, re: re})
	}
	return f, nil
}

// fold is s case folded as RE2's (?i) folds (each rune to the smallest of
// its simple case-folding orbit, so "K", "k" and the Kelvin sign are one),
// with every run of white space made one space: a transcript may put a
// double space, a newline or a no-break space between a phrase's words.
func fold(s string) string {
	var b strings.Builder
	b.Grow(len(s))
	space := false
	for _, r := range s {
		switch {
		case r < utf8.RuneSelf:
			if r == ' ' || r >= '\t' && r <= '\r' {
				space = true
				continue
			}
			if r >= 'a' && r <= 'z' {
				r -= 'a' - 'A'
			}
		case unicode.IsSpace(r) || unicode.Is(unicode.Z, r):
			space = true
			continue
		default:
			orig := r
			for f := unicode.SimpleFold(orig); f != orig; f = unicode.SimpleFold(f) {
				r = min(r, f) // an orbit is at most four runes: back at orig, the loop ends
			}
		}
		if space {
			if b.Len() > 0 {
				b.WriteByte(' ')
			}
			space = false
		}
		b.WriteRune(r)
	}
	return b.String()
}

// isWordRune: letters, combining marks, digits and underscore, in any script.
func isWordRune(r rune) bool {
	return r == '_' || unicode.IsLetter(r) || unicode.IsMark(r) || unicode.IsNumber(r)
}

// needsBoundary says a word edge at r must not continue into a neighbouring
// word rune: "ass" does not match "classic", while "c++" matches "c++,"
// (its end is no word rune, so needs no boundary). Scripts written without
// spaces between words (Chinese, Japanese, Thai, Lao, Khmer, Myanmar) and
// Korean, whose particles attach to the noun, would never match as whole
// words, so theirs match anywhere.
func needsBoundary(r rune) bool {
	return isWordRune(r) && !unicode.In(r, unicode.Han, unicode.Hiragana, unicode.Katakana,
		unicode.Hangul, unicode.Thai, unicode.Lao, unicode.Khmer, unicode.Myanmar)
}

// in reports whether w occurs in the folded text as a whole word. Each
// miss moves the search on by at least one byte, so the loop ends.
func (w *blockedWord) in(text string) bool {
	for from := 0; from <= len(text)-len(w.folded); {
		i := strings.Index(text[from:], w.folded)
		if i < 0 {
			return false
		}
		i += from
		end := i + len(w.folded)
		before, _ := utf8.DecodeLastRuneInString(text[:i])
		after, _ := utf8.DecodeRuneInString(text[end:])
		if (!w.left || i == 0 || !isWordRune(before)) && (!w.right || end == len(text) || !isWordRune(after)) {
			return true
		}
		from = i + 1
	}
	return false
}

// check reads every text, then every tool call's name and arguments; the
// arguments both raw and as the strings of their JSON, so an escape
// ("\nbomb", "\u0062omb") does not hide a word.
func (f *contentFilter) check(in Input) Verdict {
	for _, t := range in.Texts {
		if reason, ok := f.match(t); ok {
			return Verdict{Blocked: true, Reason: reason}
		}
	}
	for _, c := range in.ToolCalls {
		for _, part := range []struct{ what, text string }{
			{"name", c.Name}, {"arguments", c.Arguments}, {"arguments", jsonStrings(c.Arguments)},
		} {
			if reason, ok := f.match(part.text); ok {
				return Verdict{Blocked: true, Reason: fmt.Sprintf("%s in tool call %q %s", reason, c.Name, part.what)}
			}
		}
	}
	return Verdict{}
}

// match returns which blocked word or pattern text contains, first words in
// configured order then patterns in configured order.
func (f *contentFilter) match(text string) (string, bool) {
	if text == "" {
		return "", false
	}
	if len(f.words) > 0 {
		folded := fold(text)
		for i := range f.words {
			if f.words[i].in(folded) {
				return fmt.Sprintf("blocked word %q", f.words[i].word), true
			}
		}
	}
	for _, p := range f.patterns {
		if p.re.MatchString(text) {
			return fmt.Sprintf("pattern %q", p.name), true
		}
	}
	return "", false
}

// jsonStrings is every string (keys and values) in the JSON text s, one a
// line; "" when s holds none or is not JSON. The decoder consumes s as it
// goes, so the loop ends.
func jsonStrings(s string) string {
	if !strings.ContainsRune(s, '"') {
		return ""
	}
	dec := json.NewDecoder(strings.NewReader(s))
	var b strings.Builder
	for {
		tok, err := dec.Token()
		if err != nil { // io.EOF at the end, or s is not (or no longer) JSON
			break
		}
		if str, ok := tok.(string); ok {
			b.WriteString(str)
			b.WriteByte('\n')
		}
	}
	return b.String()
}
