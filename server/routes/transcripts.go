package routes

import (
	"fmt"
	"regexp"

	"go.yaml.in/yaml/v3"

	"rtgate/server/transcript"
)

// Transcripts is the conversation record's configuration, the config
// file's transcripts section (rtgate's own; LiteLLM has no name for it):
//
//	transcripts:
//	  max_bytes: 262144          # text one session's record holds
//	  redact:                    # applied, in order, before anything is kept
//	    - pattern: '\b\d{13,19}\b'
//	      label: CARD
//
// Whether a session is recorded at all is its key's and its deployment's
// log_transcripts (ClientKey.LogTranscripts, Deployment.LogTranscripts).
type Transcripts struct {
	// MaxBytes bounds the text one session's record holds; 0 means the
	// default (server/transcript's).
	MaxBytes int
	// Redact are the rules every recorded text passes through, in order.
	Redact []transcript.Rule
}

// transcriptsSection is the transcripts section as written.
type transcriptsSection struct {
	MaxBytes yaml.Node `yaml:"max_bytes"`
	Redact   yaml.Node `yaml:"redact"`
}

// redactEntry is one redact rule as written.
type redactEntry struct {
	Pattern yaml.Node `yaml:"pattern"`
	Label   yaml.Node `yaml:"label"`
}

// labelChars is what a redaction label may hold: it is written into
// transcripts as [LABEL], and read by people and tools.
var labelChars = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,64}$`)

// transcripts reads the transcripts section into t.Transcripts.
func (l *loader) transcripts(n *yaml.Node, path string, t *Table) {
	if !given(n) {
		return
	}
	var s transcriptsSection
	if !l.decodeMapping(n, path, &s) {
		return
	}
	l.wholeNumber(&s.MaxBytes, join(path, "max_bytes"), &t.Transcripts.MaxBytes,
		"%q is not a whole number of bytes (at least 0)")
	if !given(&s.Redact) {
		return
	}
	items, ok := l.list(&s.Redact, join(path, "redact"), "redaction rules")
	if !ok {
		return
	}
	for i, item := range items {
		itemPath := fmt.Sprintf("%s[%d]", join(path, "redact"), i)
		var e redactEntry
		if !l.decodeMapping(item, itemPath, &e) {
			continue
		}
		if !given(&e.Pattern) || !given(&e.Label) {
			l.fail(deref(item), itemPath, "needs a pattern and a label")
			continue
		}
		pattern, ok1 := l.str(&e.Pattern, join(itemPath, "pattern"))
		label, ok2 := l.str(&e.Label, join(itemPath, "label"))
		if !ok1 || !ok2 {
			continue
		}
		if !labelChars.MatchString(label) {
			l.fail(deref(&e.Label), join(itemPath, "label"), "%q must be 1 to 64 letters, digits, '_', '.' or '-'", label)
			continue
		}
		re, err := regexp.Compile(pattern)
		if err != nil {
			l.fail(deref(&e.Pattern), join(itemPath, "pattern"), "is not a regular expression (Go's RE2 syntax): %v", err)
			continue
		}
		t.Transcripts.Redact = append(t.Transcripts.Redact, transcript.Rule{Pattern: re, Label: label})
	}
}
