package routes

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"rtgate/server/guardrail"
)

// Guardrails, in LiteLLM's configuration shape (its proxy config's top-level
// guardrails list), with the realtime modes and fields LiteLLM's realtime
// guardrails use and rtgate's own (realtime_tool_call):
//
//	guardrails:
//	  - guardrail_name: no-secrets
//	    litellm_params:
//	      guardrail: litellm_content_filter     # or generic_guardrail_api
//	      mode: [realtime_input_transcription, realtime_tool_call]
//	      default_on: true                      # every session; else a key's or ?guardrails=
//	      blocked_words:
//	        - keyword: password                 # or just the word
//	          action: BLOCK
//	      patterns:
//	        - pattern_type: regex
//	          pattern: '\b\d{13,19}\b'
//	          name: card_number
//	          action: BLOCK
//	      on_error: fail_closed                 # or fail_open (LiteLLM: unreachable_fallback)
//	      timeout: 2                            # seconds per check
//	      end_session_after_n_fails: 3
//	      on_violation: warn                    # or end_session
//	      realtime_violation_message: "Sorry, I can't help with that."
//	      holdback_ms: 300                      # output: how long audio waits for its text's check
//	      transcript_lag_ms: 0                  # output: how far the transcript runs behind the audio
//	  - guardrail_name: vendor
//	    litellm_params:
//	      guardrail: generic_guardrail_api
//	      mode: pre_call
//	      api_base: http://guard.internal:8080  # /beta/litellm_basic_guardrail_api appended
//	      api_key: os.environ/GUARD_API_KEY
//	      headers: {X-Team: voice}
//	      additional_provider_specific_params: {threshold: 0.8}
//
// A key names the guardrails its sessions run beyond the default ones
// (keys[].guardrails); a connection may add more (?guardrails=a,b), never
// remove any.

// guardrailEntry is one guardrails item as written.
type guardrailEntry struct {
	Name          yaml.Node `yaml:"guardrail_name"`
	LiteLLMParams yaml.Node `yaml:"litellm_params"`
	// LiteLLM's guardrail_info (a description): accepted and ignored.
	GuardrailInfo yaml.Node `yaml:"guardrail_info" rtgate:"ignored"`
}

// guardrailParams is an entry's litellm_params as written.
type guardrailParams struct {
	Guardrail           yaml.Node `yaml:"guardrail"`
	Mode                yaml.Node `yaml:"mode"`
	DefaultOn           yaml.Node `yaml:"default_on"`
	OnError             yaml.Node `yaml:"on_error"`
	UnreachableFallback yaml.Node `yaml:"unreachable_fallback"`
	Timeout             yaml.Node `yaml:"timeout"`
	EndAfter            yaml.Node `yaml:"end_session_after_n_fails"`
	OnViolation         yaml.Node `yaml:"on_violation"`
	ViolationMessage    yaml.Node `yaml:"realtime_violation_message"`
	BlockedWords        yaml.Node `yaml:"blocked_words"`
	Patterns            yaml.Node `yaml:"patterns"`
	// rtgate's own, for realtime_output_transcription: how long audio
	// may wait for its text's check, and how late the transcript may run
	// behind its audio (server/guarded's output.go).
	HoldbackMs       yaml.Node `yaml:"holdback_ms"`
	TranscriptLagMs  yaml.Node `yaml:"transcript_lag_ms"`
	APIBase          yaml.Node `yaml:"api_base"`
	APIKey           yaml.Node `yaml:"api_key"`
	Headers          yaml.Node `yaml:"headers"`
	AdditionalParams yaml.Node `yaml:"additional_provider_specific_params"`
}

// blockedWord is a blocked_words item written as a mapping.
type blockedWord struct {
	Keyword     yaml.Node `yaml:"keyword"`
	Action      yaml.Node `yaml:"action"`
	Description yaml.Node `yaml:"description" rtgate:"ignored"`
}

// patternEntry is a patterns item.
type patternEntry struct {
	PatternType yaml.Node `yaml:"pattern_type"`
	Pattern     yaml.Node `yaml:"pattern"`
	Name        yaml.Node `yaml:"name"`
	Action      yaml.Node `yaml:"action"`
}

// guardrails reads the guardrails section into t.Guardrails.
func (l *loader) guardrails(n *yaml.Node, path string, t *Table) {
	if !given(n) {
		return
	}
	items, ok := l.list(n, path, "guardrails")
	if !ok {
		return
	}
	t.Guardrails = map[string]*guardrail.Guardrail{}
	for i, item := range items {
		itemPath := fmt.Sprintf("%s[%d]", path, i)
		var e guardrailEntry
		if !l.decodeMapping(item, itemPath, &e) {
			continue
		}
		if !given(&e.Name) || !given(&e.LiteLLMParams) {
			l.fail(deref(item), itemPath, "needs a guardrail_name and litellm_params")
			continue
		}
		name, ok := l.str(&e.Name, join(itemPath, "guardrail_name"))
		if !ok {
			continue
		}
		if _, dup := t.Guardrails[name]; dup {
			l.fail(deref(&e.Name), join(itemPath, "guardrail_name"), "the name %q is already used", name)
			continue
		}
		before := len(l.errs)
		spec := l.guardrailSpec(&e.LiteLLMParams, join(itemPath, "litellm_params"))
		if len(l.errs) > before {
			continue
		}
		spec.Name = name
		g, err := guardrail.New(spec, nil)
		if err != nil {
			l.fail(deref(item), itemPath, "%v", err)
			continue
		}
		t.Guardrails[name] = g
		t.guardrailOrder = append(t.guardrailOrder, name)
	}
}

// guardrailSpec reads an entry's litellm_params.
func (l *loader) guardrailSpec(n *yaml.Node, path string) guardrail.Spec {
	var spec guardrail.Spec
	var p guardrailParams
	if !l.decodeMapping(n, path, &p) {
		return spec
	}
	if !given(&p.Guardrail) {
		l.fail(deref(n), path, "guardrail is missing (litellm_content_filter or generic_guardrail_api)")
	} else if s, ok := l.str(&p.Guardrail, join(path, "guardrail")); ok {
		spec.Kind = guardrail.Kind(s)
	}
	if !given(&p.Mode) {
		l.fail(deref(n), path, "mode is missing")
	} else {
		spec.Modes = l.guardrailModes(&p.Mode, join(path, "mode"))
	}
	if b := l.boolean(&p.DefaultOn, join(path, "default_on")); b != nil {
		spec.DefaultOn = *b
	}
	for _, f := range []struct {
		n    *yaml.Node
		name string
	}{{&p.UnreachableFallback, "unreachable_fallback"}, {&p.OnError, "on_error"}} {
		if !given(f.n) {
			continue
		}
		if s, ok := l.str(f.n, join(path, f.name)); ok {
			switch s {
			case "fail_open":
				spec.FailOpen = true
			case "fail_closed":
				spec.FailOpen = false
			default:
				l.fail(deref(f.n), join(path, f.name), "%q is not fail_open or fail_closed", s)
			}
		}
	}
	var secs float64
	l.number(&p.Timeout, join(path, "timeout"), &secs, "%q is not a number of seconds (at least 0)")
	spec.Timeout = time.Duration(secs * float64(time.Second))
	l.wholeNumber(&p.EndAfter, join(path, "end_session_after_n_fails"), &spec.EndSessionAfterNFails,
		"%q is not a whole number of at least 0")
	if given(&p.OnViolation) {
		if s, ok := l.str(&p.OnViolation, join(path, "on_violation")); ok {
			switch s {
			case "warn":
			case "end_session":
				spec.EndSessionOnViolation = true
			default:
				l.fail(deref(&p.OnViolation), join(path, "on_violation"), "%q is not warn or end_session", s)
			}
		}
	}
	if given(&p.ViolationMessage) {
		spec.ViolationMessage, _ = l.str(&p.ViolationMessage, join(path, "realtime_violation_message"))
	}
	var holdback, lag float64
	l.number(&p.HoldbackMs, join(path, "holdback_ms"), &holdback, "%q is not a number of milliseconds (at least 0)")
	l.number(&p.TranscriptLagMs, join(path, "transcript_lag_ms"), &lag, "%q is not a number of milliseconds (at least 0)")
	spec.Holdback = time.Duration(holdback * float64(time.Millisecond))
	spec.TranscriptLag = time.Duration(lag * float64(time.Millisecond))
	if given(&p.BlockedWords) {
		spec.BlockedWords = l.blockedWords(&p.BlockedWords, join(path, "blocked_words"))
	}
	if given(&p.Patterns) {
		spec.Patterns = l.patterns(&p.Patterns, join(path, "patterns"))
	}
	if given(&p.APIBase) {
		spec.APIBase, _ = l.env(&p.APIBase, join(path, "api_base"))
	}
	if given(&p.APIKey) {
		spec.APIKey, _ = l.env(&p.APIKey, join(path, "api_key"))
	}
	if given(&p.Headers) {
		var h map[string]string
		if err := deref(&p.Headers).Decode(&h); err != nil {
			l.fail(deref(&p.Headers), join(path, "headers"), "must be a mapping of header names to values")
		}
		spec.Headers = h
	}
	if given(&p.AdditionalParams) {
		var m map[string]any
		if err := deref(&p.AdditionalParams).Decode(&m); err != nil {
			l.fail(deref(&p.AdditionalParams), join(path, "additional_provider_specific_params"), "must be a mapping")
		}
		spec.AdditionalParams = m
	}
	return spec
}

// guardrailModes reads mode: one name or a list.
func (l *loader) guardrailModes(n *yaml.Node, path string) []guardrail.Mode {
	nodes := []*yaml.Node{n}
	if deref(n).Kind == yaml.SequenceNode {
		nodes = deref(n).Content
	}
	var modes []guardrail.Mode
	for _, m := range nodes {
		s, ok := l.str(m, path)
		if !ok {
			continue
		}
		switch mode := guardrail.Mode(s); mode {
		case guardrail.InputTranscription, guardrail.PreCall, guardrail.ToolCall, guardrail.OutputTranscription:
			modes = append(modes, mode)
		default:
			l.fail(deref(m), path, "%q is not a realtime guardrail mode (%s, %s, %s or %s)", s,
				guardrail.InputTranscription, guardrail.PreCall, guardrail.ToolCall, guardrail.OutputTranscription)
		}
	}
	return modes
}

// blockedWords reads blocked_words: words, or LiteLLM's {keyword, action}
// (only action BLOCK: a voice gateway cannot mask what was said).
func (l *loader) blockedWords(n *yaml.Node, path string) []string {
	items, ok := l.list(n, path, "blocked words")
	if !ok {
		return nil
	}
	var words []string
	for i, item := range items {
		itemPath := fmt.Sprintf("%s[%d]", path, i)
		if deref(item).Kind == yaml.ScalarNode {
			if s, ok := l.str(item, itemPath); ok {
				words = append(words, s)
			}
			continue
		}
		var w blockedWord
		if !l.decodeMapping(item, itemPath, &w) {
			continue
		}
		if !given(&w.Keyword) {
			l.fail(deref(item), itemPath, "keyword is missing")
			continue
		}
		if !l.blockAction(&w.Action, join(itemPath, "action")) {
			continue
		}
		if s, ok := l.str(&w.Keyword, join(itemPath, "keyword")); ok {
			words = append(words, s)
		}
	}
	return words
}

// patterns reads patterns: LiteLLM's {pattern_type: regex, pattern, name,
// action}.
func (l *loader) patterns(n *yaml.Node, path string) []guardrail.NamedPattern {
	items, ok := l.list(n, path, "patterns")
	if !ok {
		return nil
	}
	var out []guardrail.NamedPattern
	for i, item := range items {
		itemPath := fmt.Sprintf("%s[%d]", path, i)
		var e patternEntry
		if !l.decodeMapping(item, itemPath, &e) {
			continue
		}
		if given(&e.PatternType) {
			if s, ok := l.str(&e.PatternType, join(itemPath, "pattern_type")); ok && s != "regex" {
				l.fail(deref(&e.PatternType), join(itemPath, "pattern_type"),
					"%q is not regex (LiteLLM's prebuilt patterns are not built in: write the regex)", s)
				continue
			}
		}
		if !given(&e.Pattern) {
			l.fail(deref(item), itemPath, "pattern is missing")
			continue
		}
		if !l.blockAction(&e.Action, join(itemPath, "action")) {
			continue
		}
		pat, ok := l.str(&e.Pattern, join(itemPath, "pattern"))
		if !ok {
			continue
		}
		name := "pattern " + strconv.Itoa(i)
		if given(&e.Name) {
			name, _ = l.str(&e.Name, join(itemPath, "name"))
		}
		out = append(out, guardrail.NamedPattern{Name: name, Pattern: pat})
	}
	return out
}

// blockAction accepts an absent action or BLOCK.
func (l *loader) blockAction(n *yaml.Node, path string) bool {
	if !given(n) {
		return true
	}
	s, ok := l.str(n, path)
	if ok && !strings.EqualFold(s, "BLOCK") {
		l.fail(deref(n), path, "%q is not BLOCK (a voice gateway cannot mask what was already said)", s)
		return false
	}
	return ok
}

// keyGuardrails reads a key's guardrails: names of the guardrails section.
func (l *loader) keyGuardrails(n *yaml.Node, path string, t *Table) []string {
	return l.names(n, path, "guardrail names", func(s string) bool { _, ok := t.Guardrails[s]; return ok },
		"%q is not a guardrail_name in guardrails")
}

// GuardrailsFor is the guardrails a session of key k runs: the default
// ones, the key's, and those its connection asks for by name (asked: the
// ?guardrails= list), each once, in the file's order. A connection can
// only add: an unknown name is an error naming it.
func (t *Table) GuardrailsFor(k *ClientKey, asked []string) (guardrail.Set, error) {
	on := map[string]bool{}
	for _, name := range t.guardrailOrder {
		if t.Guardrails[name].Spec().DefaultOn {
			on[name] = true
		}
	}
	if k != nil {
		for _, name := range k.Guardrails {
			on[name] = true
		}
	}
	for _, name := range asked {
		if name == "" {
			continue
		}
		if _, known := t.Guardrails[name]; !known {
			return nil, fmt.Errorf("guardrail %q is not configured", name)
		}
		on[name] = true
	}
	var set guardrail.Set
	for _, name := range t.guardrailOrder {
		if on[name] {
			set = append(set, t.Guardrails[name])
		}
	}
	return set, nil
}
