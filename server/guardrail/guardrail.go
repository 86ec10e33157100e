// Package guardrail is the checking side of rtgate's realtime guardrails
// (issue 36, part 2): given what was said or called in a Realtime or
// GPT-Live session, it decides whether to let it through. Holding and
// releasing events, cancelling responses and speaking the warning are the
// relay's (package guarded); this package only decides, and counts.
//
// A guardrail is one entry of the config file's `guardrails:` list, in
// LiteLLM's configuration shape, which package routes parses into a Spec:
//
//	guardrails:
//	  - guardrail_name: no-bombs
//	    litellm_params:
//	      guardrail: litellm_content_filter   # or generic_guardrail_api
//	      mode: [realtime_input_transcription, realtime_tool_call]
//	      default_on: true                    # every session runs it
//	      on_error: fail_closed               # or fail_open
//	      on_violation: warn                  # or end_session
//	      end_session_after_n_fails: 3
//	      realtime_violation_message: "Sorry, I can't help with that."
//	      blocked_words: [bomb, make a weapon]
//	      patterns:
//	        - {pattern_type: regex, name: us_ssn, pattern: '\b\d{3}-\d{2}-\d{4}\b'}
//
// Two kinds:
//   - ContentFilter (LiteLLM's litellm_content_filter): blocked words and
//     phrases, matched case-insensitively as whole words in any script, and
//     named regular expressions (Go RE2), run in process in microseconds;
//   - GenericAPI (LiteLLM's generic_guardrail_api): an HTTP endpoint any
//     guardrail vendor can implement, POST {api_base}/beta/litellm_basic_guardrail_api,
//     so guardrail services written for LiteLLM plug in unchanged.
//
// The modes say when a guardrail runs: on the user's transcribed speech
// before the model answers and on the user's input_text items (LiteLLM's
// two), on a function call's name and arguments before the client gets it,
// and on the assistant's transcript as it streams (rtgate's two). A check
// reads whole texts: a word split across two transcript deltas is seen only
// if the caller passes the transcript so far (or a window across the
// seam), not each delta alone.
//
// A check that cannot decide (timeout, HTTP error, an answer it cannot
// read) follows the guardrail's on_error: fail closed (the default, as in
// LiteLLM: an unavailable safety control blocks) or fail open (the
// conversation goes on; the verdict says Errored and the metrics count it,
// so a silently bypassed control stays visible).
package guardrail

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"slices"
	"strings"
	"time"
)

// Mode is when a guardrail runs (litellm_params.mode).
type Mode string

const (
	// InputTranscription checks the user's transcribed speech before the
	// model answers (LiteLLM's).
	InputTranscription Mode = "realtime_input_transcription"
	// PreCall checks the user's input_text items (LiteLLM's).
	PreCall Mode = "pre_call"
	// ToolCall checks a function call's name and arguments before the
	// client gets it (rtgate's).
	ToolCall Mode = "realtime_tool_call"
	// OutputTranscription checks the assistant's transcript as it streams
	// (rtgate's).
	OutputTranscription Mode = "realtime_output_transcription"
)

// AllModes lists every mode this package knows, in a stable order.
func AllModes() []Mode {
	return []Mode{InputTranscription, PreCall, ToolCall, OutputTranscription}
}

// Known reports whether m is one of AllModes.
func (m Mode) Known() bool {
	switch m {
	case InputTranscription, PreCall, ToolCall, OutputTranscription:
		return true
	}
	return false
}

// Kind is what a guardrail is (litellm_params.guardrail).
type Kind string

const (
	// ContentFilter is the built-in keyword and regex guardrail (LiteLLM's name).
	ContentFilter Kind = "litellm_content_filter"
	// GenericAPI is LiteLLM's Generic Guardrail API over HTTP.
	GenericAPI Kind = "generic_guardrail_api"
)

const (
	// DefaultTimeout bounds one check when Spec.Timeout is 0. A voice turn
	// waits for input checks, so this is the longest a silent guardrail
	// service can hold a reply before on_error decides.
	DefaultTimeout = 2 * time.Second
	// DefaultViolationMessage is what the model is asked to say on a block
	// when Spec.ViolationMessage is empty.
	DefaultViolationMessage = "Sorry, I can't help with that."
	// MaxResponseBytes bounds what is read of a Generic Guardrail API answer;
	// a longer answer is an error (on_error decides).
	MaxResponseBytes = 1 << 20
	// maxReasonBytes bounds a blocked_reason taken from a guardrail service,
	// since it ends up in error events, logs and the conversation record.
	maxReasonBytes = 512
)

// Spec is one configured guardrail as the config file's `guardrails:` entry
// gives it (parsed by package routes, env references already resolved).
//
// Spec holds a secret (APIKey, and possibly header values); its String,
// GoString and LogValue methods print it with those redacted.
type Spec struct {
	Name      string // guardrail_name
	Kind      Kind   // litellm_params.guardrail
	Modes     []Mode // litellm_params.mode (one or a list)
	DefaultOn bool   // litellm_params.default_on: applies to every session
	// FailOpen is on_error (or LiteLLM's unreachable_fallback) fail_open:
	// a check that errors passes. false (the default) fails closed.
	FailOpen bool
	// Timeout bounds one check; 0 means DefaultTimeout.
	Timeout time.Duration
	// EndSessionAfterNFails ends the session after this many blocks; 0 = never.
	EndSessionAfterNFails int
	// EndSessionOnViolation is on_violation: end_session (default warn).
	EndSessionOnViolation bool
	// ViolationMessage is realtime_violation_message; "" means
	// DefaultViolationMessage.
	ViolationMessage string
	// Holdback (holdback_ms, OutputTranscription) is how long the relay
	// holds the assistant's audio for the check of the transcript covering
	// it; past it audio goes on unchecked. 0 means the relay's default.
	// This package only carries it.
	Holdback time.Duration
	// TranscriptLag (transcript_lag_ms, OutputTranscription) is carried for
	// the relay (package guarded), which says what it means; this package
	// does not read it.
	TranscriptLag time.Duration

	// ContentFilter:

	// BlockedWords are matched case-insensitively as whole words or phrases
	// (the words of a phrase may be separated by any run of white space).
	BlockedWords []string
	// Patterns are regular expressions (Go RE2), case-sensitive unless they
	// say (?i). A block names the pattern, never the text it matched.
	Patterns []NamedPattern

	// GenericAPI:

	// APIBase is the service's URL; /beta/litellm_basic_guardrail_api is
	// appended unless it already ends with it.
	APIBase string
	// APIKey is sent as the header x-api-key. It is never logged nor put in
	// an error.
	APIKey string
	// Headers are sent with every request (after Content-Type, before x-api-key).
	Headers map[string]string
	// AdditionalParams is additional_provider_specific_params, sent as is.
	AdditionalParams map[string]any
}

// NamedPattern is one content-filter regular expression. Name is what a
// block reports; "" reports it as patterns[i].
type NamedPattern struct{ Name, Pattern string }

// FunctionCall is one function call a check reads. (It cannot be named
// ToolCall: that is the mode.)
type FunctionCall struct{ ID, Name, Arguments string }

// Input is what one check reads.
type Input struct {
	// Mode is the mode being checked; it labels the metrics and the log.
	Mode      Mode
	Texts     []string
	ToolCalls []FunctionCall
	// Response marks the model's output (transcripts, tool calls): the
	// Generic API's input_type "response" rather than "request".
	Response bool
	// CallID is the session id, sent as litellm_call_id.
	CallID string
	// TraceID is sent as litellm_trace_id; "" sends CallID (a session is one
	// conversation).
	TraceID string
	// KeyAlias is the client's key name, sent as request_data.user_api_key_alias.
	KeyAlias string
	// Model is the session's model, sent as model when not "".
	Model string
	// Metrics, when not nil, counts the check. It rides on the Input
	// because guardrails are built where the config is read (package
	// routes) and the registry is known where sessions run.
	Metrics *Metrics
}

// Verdict is a check's outcome. The zero Verdict passes.
type Verdict struct {
	Blocked bool
	// Guardrail names the guardrail that blocked, errored or intervened.
	Guardrail string
	// Reason is the service's blocked_reason, or which blocked word or which
	// pattern (by name, never the matched text) matched, or the error.
	Reason string
	// Errored says a guardrail failed (timeout, HTTP error, bad answer) and
	// its on_error decided Blocked.
	Errored bool
	// Intervened is a Generic API's GUARDRAIL_INTERVENED: the service
	// rewrote the texts. A voice gateway cannot unsay what was said, so it
	// passes; Texts carries the rewrite for the record.
	Intervened bool
	Texts      []string
}

// Guardrail is one ready guardrail, safe for concurrent use.
type Guardrail struct {
	spec    Spec
	timeout time.Duration
	filter  *contentFilter // Kind ContentFilter
	api     *genericAPI    // Kind GenericAPI
}

// New validates s and makes it ready. Errors name the guardrail and the
// field. A nil client means a default one; either way redirects are not
// followed (a redirect would carry x-api-key to wherever it points), so a
// 3xx answer is an error.
func New(s Spec, client *http.Client) (*Guardrail, error) {
	if strings.TrimSpace(s.Name) == "" {
		return nil, errors.New("guardrail: guardrail_name is empty")
	}
	fail := func(format string, args ...any) error {
		return fmt.Errorf("guardrail %q: "+format, append([]any{s.Name}, args...)...)
	}
	s = cloneSpec(s)
	if len(s.Modes) == 0 {
		return nil, fail("litellm_params.mode is empty (one or more of %s)", modeList())
	}
	var uniq []Mode
	for _, m := range s.Modes {
		if !m.Known() {
			return nil, fail("litellm_params.mode %q is not supported (one or more of %s)", m, modeList())
		}
		if !slices.Contains(uniq, m) {
			uniq = append(uniq, m)
		}
	}
	s.Modes = uniq
	if s.Timeout < 0 {
		return nil, fail("timeout %s is negative", s.Timeout)
	}
	if s.Holdback < 0 {
		return nil, fail("holdback_ms %s is negative", s.Holdback)
	}
	if s.TranscriptLag < 0 {
		return nil, fail("transcript_lag_ms %s is negative", s.TranscriptLag)
	}
	if s.EndSessionAfterNFails < 0 {
		return nil, fail("litellm_params.end_session_after_n_fails %d is negative", s.EndSessionAfterNFails)
	}
	if s.ViolationMessage == "" {
		s.ViolationMessage = DefaultViolationMessage
	}
	g := &Guardrail{spec: s, timeout: s.Timeout}
	if g.timeout == 0 {
		g.timeout = DefaultTimeout
	}
	var err error
	switch s.Kind {
	case ContentFilter:
		g.filter, err = newContentFilter(s.BlockedWords, s.Patterns)
	case GenericAPI:
		g.api, err = newGenericAPI(s, client)
	default:
		return nil, fail("litellm_params.guardrail %q is not supported (%s or %s)", s.Kind, ContentFilter, GenericAPI)
	}
	if err != nil {
		return nil, fail("%w", err)
	}
	return g, nil
}

func modeList() string {
	modes := AllModes()
	names := make([]string, len(modes))
	for i, m := range modes {
		names[i] = string(m)
	}
	return strings.Join(names, ", ")
}

// cloneSpec copies s's slices and maps, so a Guardrail shares nothing with
// its caller.
func cloneSpec(s Spec) Spec {
	s.Modes = slices.Clone(s.Modes)
	s.BlockedWords = slices.Clone(s.BlockedWords)
	s.Patterns = slices.Clone(s.Patterns)
	s.Headers = maps.Clone(s.Headers)
	s.AdditionalParams = maps.Clone(s.AdditionalParams)
	return s
}

// Name is the guardrail's guardrail_name.
func (g *Guardrail) Name() string { return g.spec.Name }

// Kind is the guardrail's kind.
func (g *Guardrail) Kind() Kind { return g.spec.Kind }

// Spec returns a copy of the guardrail's spec with the defaults filled in
// (Timeout, ViolationMessage) and Modes without duplicates.
func (g *Guardrail) Spec() Spec {
	s := cloneSpec(g.spec)
	s.Timeout = g.timeout
	return s
}

// DefaultOn says the guardrail applies to every session.
func (g *Guardrail) DefaultOn() bool { return g.spec.DefaultOn }

// EndSessionOnViolation says a block ends the session (on_violation: end_session).
func (g *Guardrail) EndSessionOnViolation() bool { return g.spec.EndSessionOnViolation }

// EndSessionAfterNFails is after how many blocks the session ends; 0 = never.
func (g *Guardrail) EndSessionAfterNFails() int { return g.spec.EndSessionAfterNFails }

// ViolationMessage is what the model is asked to say on a block.
func (g *Guardrail) ViolationMessage() string { return g.spec.ViolationMessage }

// Runs reports whether the guardrail runs in mode m.
func (g *Guardrail) Runs(m Mode) bool { return slices.Contains(g.spec.Modes, m) }

// Check runs the guardrail once, bounded by its timeout. When it cannot
// decide, on_error does: fail open gives Verdict{Errored: true}, fail closed
// Verdict{Blocked: true, Errored: true}. A check cut short because ctx ended
// (the session closed, or Set.Check no longer needed it) is neither counted
// (in.Metrics): it says nothing about the guardrail. Check logs nothing:
// the verdict carries the error for the caller's record.
func (g *Guardrail) Check(ctx context.Context, in Input) Verdict {
	start := time.Now()
	var (
		v   Verdict
		err error
	)
	if g.filter != nil {
		// In process and bounded by the text's length: no timer to arm.
		v = g.filter.check(in)
	} else {
		cctx, cancel := context.WithTimeout(ctx, g.timeout)
		v, err = g.api.check(cctx, in)
		if err != nil && ctx.Err() == nil && errors.Is(cctx.Err(), context.DeadlineExceeded) {
			err = fmt.Errorf("timed out after %s: %w", g.timeout, err)
		}
		cancel()
	}
	v.Guardrail = g.spec.Name
	outcome := outcomePass
	if err != nil {
		v = Verdict{Guardrail: g.spec.Name, Errored: true, Blocked: !g.spec.FailOpen, Reason: err.Error()}
		outcome = outcomeErrorClosed
		if g.spec.FailOpen {
			outcome = outcomeErrorOpen
		}
	} else if v.Blocked {
		outcome = outcomeBlock
	}
	if ctx.Err() == nil {
		in.Metrics.observe(g.spec.Name, in.Mode, outcome, time.Since(start))
	}
	return v
}

// Set is the guardrails one session runs: the default ones, its key's, and
// the ones its connection adds.
type Set []*Guardrail

// For returns the guardrails of s that run in mode m, in s's order.
func (s Set) For(m Mode) Set {
	var out Set
	for _, g := range s {
		if g.Runs(m) {
			out = append(out, g)
		}
	}
	return out
}

// Union returns s followed by those of more whose names s does not have yet:
// adding guardrails (?guardrails=) never drops or replaces one.
func (s Set) Union(more ...*Guardrail) Set {
	out := slices.Clone(s)
	for _, g := range more {
		if g != nil && !slices.ContainsFunc(out, func(h *Guardrail) bool { return h.Name() == g.Name() }) {
			out = append(out, g)
		}
	}
	return out
}

// Names lists the guardrails of s in order.
func (s Set) Names() []string {
	names := make([]string, len(s))
	for i, g := range s {
		names[i] = g.Name()
	}
	return names
}

// Check runs every guardrail of s concurrently, each bounded by its timeout,
// and returns the first block in s's order. It does not wait for what cannot
// change that: when a guardrail blocks and every one before it has passed,
// the later ones are cancelled (and not counted), and Check returns once
// they have stopped, which a cancelled HTTP request does at once. With no
// block it returns the first errored (failed open) verdict, else the first
// intervention, else the zero Verdict.
func (s Set) Check(ctx context.Context, in Input) Verdict {
	switch len(s) {
	case 0:
		return Verdict{}
	case 1:
		return s[0].Check(ctx, in)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type result struct {
		i int
		v Verdict
	}
	results := make(chan result, len(s)) // buffered: cancelled checks never block
	for i, g := range s {
		go func() { results <- result{i, g.Check(ctx, in)} }()
	}
	got := make([]Verdict, len(s))
	done := make([]bool, len(s))
	next := 0 // every guardrail before next has passed
	for received := 1; received <= len(s); received++ {
		r := <-results
		got[r.i], done[r.i] = r.v, true
		for ; next < len(s) && done[next]; next++ {
			if got[next].Blocked {
				cancel()
				for ; received < len(s); received++ { // no check outlives Check
					<-results
				}
				return got[next]
			}
		}
	}
	return firstNotice(got)
}

// CheckAll runs every guardrail of s concurrently and returns each one's
// verdict in s's order, for a record of what every guardrail said.
func (s Set) CheckAll(ctx context.Context, in Input) []Verdict {
	out := make([]Verdict, len(s))
	done := make(chan struct{}, len(s))
	for i, g := range s {
		go func() { out[i] = g.Check(ctx, in); done <- struct{}{} }()
	}
	for range len(s) {
		<-done
	}
	return out
}

// firstNotice is the first errored verdict of vs, else the first
// intervention, else the zero Verdict (none of vs blocks).
func firstNotice(vs []Verdict) Verdict {
	for _, v := range vs {
		if v.Errored {
			return v
		}
	}
	for _, v := range vs {
		if v.Intervened {
			return v
		}
	}
	return Verdict{}
}

// String prints s with the API key and header values redacted.
func (s Spec) String() string {
	r := s.redacted()
	type plain Spec // no String method: no recursion
	return fmt.Sprintf("%+v", plain(r))
}

// GoString is String, for %#v.
func (s Spec) GoString() string { return s.String() }

// LogValue logs s with the API key and header values redacted.
func (s Spec) LogValue() slog.Value {
	r := s.redacted()
	params, _ := json.Marshal(r.AdditionalParams)
	return slog.GroupValue(
		slog.String("name", r.Name), slog.String("kind", string(r.Kind)),
		slog.Any("modes", r.Modes), slog.Bool("default_on", r.DefaultOn),
		slog.Bool("fail_open", r.FailOpen), slog.Duration("timeout", r.Timeout),
		slog.String("api_base", r.APIBase), slog.String("api_key", r.APIKey),
		slog.Any("headers", r.Headers), slog.String("additional_params", string(params)),
		slog.Int("blocked_words", len(r.BlockedWords)), slog.Int("patterns", len(r.Patterns)))
}

const redactedValue = "[redacted]"

func (s Spec) redacted() Spec {
	s = cloneSpec(s)
	if s.APIKey != "" {
		s.APIKey = redactedValue
	}
	for k := range s.Headers {
		s.Headers[k] = redactedValue
	}
	s.APIBase = redactURL(s.APIBase)
	return s
}
