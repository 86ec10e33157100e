package guarded

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/gobwas/ws"

	"rtgate/frames"
	"rtgate/server/guardrail"
)

// Relay is what a guarded session needs of its relay (poller.Session):
// a way to send what a check let go, from the check's own goroutine, and
// to end the session.
type Relay interface {
	// SendUpstreamRaw sends masked client frames to the upstream.
	SendUpstreamRaw(frame []byte) bool
	// ReleaseToClient sends the client messages the upstream's
	// translator held back, or the gateway's own, read by the session's
	// accounting and recording as they go: take, run under the relay's
	// client lock (as the translator is), says which.
	ReleaseToClient(take func() [][]byte) bool
	// Terminate ends the session: notice (an error event) to the client,
	// then the close.
	Terminate(code ws.StatusCode, reason string, notice []byte)
}

// Config is one guarded session's.
type Config struct {
	Guardrails guardrail.Set
	Relay      Relay
	// CallID and KeyAlias go to the guardrails with every check (a
	// Generic Guardrail API sees them as litellm_call_id and
	// request_data.user_api_key_alias).
	CallID, KeyAlias string
	// Metrics counts and times the checks (nil: not counted).
	Metrics *guardrail.Metrics
	// OnAction hears every check's outcome (the conversation record, the
	// log); it must not block.
	OnAction func(Action)
	Log      *slog.Logger
}

// Action is one check's outcome, for the record.
type Action struct {
	At        time.Time
	Mode      guardrail.Mode
	ItemID    string // the user item, or the function call's item
	Verdict   guardrail.Verdict
	Latency   time.Duration
	Ended     bool // the session was ended for it
	Checked   string
	Tool      string // the function's name (tool calls)
	Arguments string
}

// Session is one guarded session's state, shared by its two translators
// and the checks they start. Lock order: the relay's locks (the
// translators run under them) before mu; nothing is sent to the relay
// while mu is held.
type Session struct {
	cfg                   Config
	input, preCall, tools guardrail.Set
	outputs               guardrail.Set
	holdback              time.Duration // how long audio waits for its text's check (output.go)
	transcriptLag         time.Duration // how late the transcript may come after its audio (output.go)
	ctx                   context.Context
	cancel                context.CancelFunc
	violationMessage      string
	endAfter              int
	endOnViolation        bool
	mu                    sync.Mutex
	ended                 bool
	fails                 int
	listen                listenState
	text                  textState
	calls                 callState
	output                outputState
}

// DefaultTranscriptionModel is the input transcription the gateway turns on
// for a session whose client has not, so that its user's speech can be
// checked; it is billed to the client's key like the client's own.
const DefaultTranscriptionModel = "gpt-4o-mini-transcribe"

// New readies a guarded session; its translators are FromClient and
// FromUpstream. Close ends its checks.
func New(cfg Config) *Session {
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	s := &Session{cfg: cfg, input: cfg.Guardrails.For(guardrail.InputTranscription),
		preCall: cfg.Guardrails.For(guardrail.PreCall), tools: cfg.Guardrails.For(guardrail.ToolCall),
		outputs: cfg.Guardrails.For(guardrail.OutputTranscription)}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.listen.clientAuto = true // OpenAI's default: server VAD answers each turn
	s.listen.awaiting, s.listen.arrived = map[string]bool{}, map[string]bool{}
	s.calls.byItem = map[string]*call{}
	if len(s.input) > 0 {
		// The client's events wait for the session's start: the
		// gateway's own session.update (answers off, transcription on)
		// must reach the upstream before any turn the client commits,
		// or that turn would be answered unchecked, or never (listen.go).
		s.text.holding = true
	}
	// The strictest settings of the session's guardrails apply; the
	// spoken warning is the input guardrails' (only they speak one).
	for _, set := range []guardrail.Set{s.input, s.preCall, s.tools, s.outputs} {
		for _, g := range set {
			sp := g.Spec()
			if sp.EndSessionAfterNFails > 0 && (s.endAfter == 0 || sp.EndSessionAfterNFails < s.endAfter) {
				s.endAfter = sp.EndSessionAfterNFails
			}
			s.endOnViolation = s.endOnViolation || sp.EndSessionOnViolation
		}
	}
	for _, g := range s.input {
		if s.violationMessage == "" {
			s.violationMessage = g.Spec().ViolationMessage
		}
	}
	if s.violationMessage == "" {
		s.violationMessage = guardrail.DefaultViolationMessage
	}
	// The output guardrails' most patient settings apply; none sets a
	// holdback: DefaultHoldback.
	for _, g := range s.outputs {
		sp := g.Spec()
		s.holdback = max(s.holdback, sp.Holdback)
		s.transcriptLag = max(s.transcriptLag, sp.TranscriptLag)
	}
	if s.holdback == 0 {
		s.holdback = DefaultHoldback
	}
	return s
}

// Active reports whether any guardrail of the session reads its events.
func (s *Session) Active() bool { return len(s.input)+len(s.preCall)+len(s.tools)+len(s.outputs) > 0 }

// Close stops the session's checks in flight (the session ended).
func (s *Session) Close() {
	s.mu.Lock()
	s.ended = true
	s.mu.Unlock()
	s.cancel()
}

// check runs set on in and reports the outcome.
func (s *Session) check(set guardrail.Set, mode guardrail.Mode, in guardrail.Input) (guardrail.Verdict, time.Duration) {
	in.Mode, in.CallID, in.KeyAlias, in.Metrics = mode, s.cfg.CallID, s.cfg.KeyAlias, s.cfg.Metrics
	start := time.Now()
	v := set.Check(s.ctx, in)
	return v, time.Since(start)
}

// act tells Config.OnAction.
func (s *Session) act(a Action) {
	if s.cfg.OnAction != nil {
		s.cfg.OnAction(a)
	}
}

// violation counts a block and reports whether it ends the session
// (on_violation end_session, or end_session_after_n_fails reached).
func (s *Session) violation() (end bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fails++
	end = s.endOnViolation || s.endAfter > 0 && s.fails >= s.endAfter
	if end {
		s.ended = true
	}
	return end
}

// end ends the session for a violation: the client gets the error, then
// the close (1008, policy violation).
func (s *Session) end(errorEvent []byte) {
	s.cfg.Relay.Terminate(ws.StatusPolicyViolation, "guardrail violation", frames.AppendFrame(nil, ws.OpText, errorEvent, false))
}

// toUpstream sends the gateway's own client events, in order.
func (s *Session) toUpstream(events ...[]byte) {
	var b []byte
	for _, e := range events {
		b = frames.AppendFrame(b, ws.OpText, e, true)
	}
	if len(b) > 0 {
		s.cfg.Relay.SendUpstreamRaw(b)
	}
}

// toClient sends the gateway's own events to the client (a violation's
// error), read by the session's accounting and recording as the relay's
// are.
func (s *Session) toClient(events ...[]byte) {
	if len(events) > 0 {
		s.cfg.Relay.ReleaseToClient(func() [][]byte { return events })
	}
}
