package tracing

import (
	"context"
	"encoding/json"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"rtgate/server/protocol"
)

// Session is one session's spans. The connect path (Attached, Failed) and
// the upstream's read path (Mark, Event) drive it; its own mutex guards
// what both touch. A nil Session does nothing.
type Session struct {
	t   *Tracer
	ctx context.Context // the connect span's: the parent of the session's spans

	// mu is a leaf, taken under the relay's client lock (the watch's turn
	// marks) and at the session's end.
	mu      sync.Mutex
	connect trace.Span // nil once ended
	attrs   []attribute.KeyValue

	// Read path only.
	respStart, firstOut, speechStart time.Time
	liveStart                        time.Time // GPT-Live: the open turn's start (its last input speech)
	liveSpoke                        bool      // the open Live turn's answer has spoken
}

// Context carries the connect span, for the dial race's events (hedges).
func (s *Session) Context(parent context.Context) context.Context {
	if s == nil {
		return parent
	}
	return trace.ContextWithSpan(parent, trace.SpanFromContext(s.ctx))
}

// Attached records that the session's upstream is w's, from the warm pool
// or a dial; the connect span ends when that upstream is ready (its
// session.created).
func (s *Session) Attached(w Where, poolHit bool) {
	if s == nil {
		return
	}
	attrs := []attribute.KeyValue{
		attribute.String("gen_ai.provider.name", w.Provider),
		attribute.String("gen_ai.request.model", w.Model),
		attribute.String("rtgate.deployment", w.Deployment),
		attribute.String("server.address", w.Host),
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.attrs = attrs
	if s.connect != nil {
		s.connect.SetAttributes(attrs...)
		s.connect.SetAttributes(attribute.Bool("rtgate.pool.hit", poolHit))
		s.connect.AddEvent("upstream.attached", trace.WithAttributes(attribute.Bool("rtgate.pool.hit", poolHit)))
	}
}

// Grouped names the connect span for group: a GPT-Live session's model
// group is known only once its session.start is read, after the span began.
func (s *Session) Grouped(group string) {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.connect != nil {
		s.connect.SetName("rtgate.connect " + group)
		s.connect.SetAttributes(attribute.String("rtgate.model_group", group))
	}
}

// Failed ends the connect span with an error: no upstream, or the client
// left first.
func (s *Session) Failed(why string) {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.connect != nil {
		s.connect.SetStatus(codes.Error, why)
		s.connect.End()
		s.connect = nil
	}
}

// End is the session's end: a connect span still open (the upstream never
// got ready) ends as failed.
func (s *Session) End() { s.Failed("the session ended before its upstream was ready") }

// Mark notes the time of an event the session's turns see; a delta after
// the first of its response costs a comparison. A GPT-Live turn (the turn
// table of server/turns: its last input transcript delta to its answer's
// first output audio) is a span of its own, made at that first audio.
func (s *Session) Mark(m protocol.TurnMark) {
	if s == nil {
		return
	}
	switch m {
	case protocol.FirstOutput:
		if s.firstOut.IsZero() && !s.respStart.IsZero() {
			s.firstOut = time.Now()
		}
		if !s.liveSpoke && !s.liveStart.IsZero() {
			s.liveSpoke = true
			now := time.Now()
			s.span("live_turn", s.liveStart, now, trace.SpanKindClient,
				attribute.String("gen_ai.operation.name", "live_turn"),
				attribute.Float64("rtgate.first_output_ms", float64(now.Sub(s.liveStart).Microseconds())/1000))
		}
	case protocol.InputSpeech:
		s.liveStart, s.liveSpoke = time.Now(), false // a new turn, or the user still talking
	case protocol.TurnStart:
		s.respStart, s.firstOut = time.Now(), time.Time{}
	case protocol.SpeechStart:
		s.speechStart = time.Now()
	case protocol.SpeechEnd:
		if !s.speechStart.IsZero() {
			s.span("user_speech", s.speechStart, time.Now(), trace.SpanKindInternal,
				attribute.String("gen_ai.operation.name", "user_speech"))
			s.speechStart = time.Time{}
		}
	}
}

// Event reads a whole event the turns asked for: session.created (GPT-Live:
// session.started) ends the connect span and names the upstream session;
// response.done makes the generation's span.
func (s *Session) Event(m protocol.TurnMark, p []byte) {
	if s == nil {
		return
	}
	switch m {
	case protocol.TurnConfig:
		s.configured(p)
	case protocol.TurnEnd:
		s.generation(p)
	}
}

func (s *Session) configured(p []byte) {
	var ev struct {
		Session struct {
			ID string `json:"id"`
		} `json:"session"`
	}
	_ = json.Unmarshal(p, &ev)
	s.mu.Lock()
	defer s.mu.Unlock()
	if ev.Session.ID != "" && !hasKey(s.attrs, "gen_ai.realtime_session.id") {
		s.attrs = append(s.attrs, attribute.String("gen_ai.realtime_session.id", ev.Session.ID))
	}
	if s.connect != nil {
		s.connect.SetAttributes(s.attrs...)
		s.connect.AddEvent("upstream.ready")
		s.connect.End()
		s.connect = nil
	}
}

func hasKey(attrs []attribute.KeyValue, k attribute.Key) bool {
	for _, a := range attrs {
		if a.Key == k {
			return true
		}
	}
	return false
}

// doneEvent is what a generation span reads of response.done.
type doneEvent struct {
	Response struct {
		ID            string `json:"id"`
		Status        string `json:"status"`
		StatusDetails *struct {
			Reason string `json:"reason"`
		} `json:"status_details"`
		Output []struct {
			Type string `json:"type"`
		} `json:"output"`
		Usage *struct {
			InputTokens  int64 `json:"input_tokens"`
			OutputTokens int64 `json:"output_tokens"`
			Input        struct {
				Text   int64 `json:"text_tokens"`
				Audio  int64 `json:"audio_tokens"`
				Cached int64 `json:"cached_tokens"`
				Detail struct {
					Audio int64 `json:"audio_tokens"`
				} `json:"cached_tokens_details"`
			} `json:"input_token_details"`
			Output struct {
				Text      int64 `json:"text_tokens"`
				Audio     int64 `json:"audio_tokens"`
				Reasoning int64 `json:"reasoning_tokens"`
			} `json:"output_token_details"`
		} `json:"usage"`
	} `json:"response"`
}

// generation makes the span of the response that p (its response.done)
// ends: from its response.created to now, with its first output as an
// event and its usage by modality.
func (s *Session) generation(p []byte) {
	start, first := s.respStart, s.firstOut
	s.respStart, s.firstOut = time.Time{}, time.Time{}
	if start.IsZero() {
		return // its response.created passed before the session was traced
	}
	var ev doneEvent
	_ = json.Unmarshal(p, &ev)
	r := ev.Response
	attrs := []attribute.KeyValue{
		attribute.String("gen_ai.operation.name", "realtime_inference"),
		attribute.String("gen_ai.response.id", r.ID),
		attribute.StringSlice("gen_ai.response.finish_reasons", []string{finishReason(r.Status, r.StatusDetails, r.Output)}),
		attribute.String("rtgate.response.status", r.Status),
	}
	if u := r.Usage; u != nil {
		attrs = append(attrs,
			attribute.Int64("gen_ai.usage.input_tokens", u.InputTokens),
			attribute.Int64("gen_ai.usage.output_tokens", u.OutputTokens),
			attribute.Int64("gen_ai.usage.text.input_tokens", u.Input.Text),
			attribute.Int64("gen_ai.usage.audio.input_tokens", u.Input.Audio),
			attribute.Int64("gen_ai.usage.cache_read.input_tokens", u.Input.Cached),
			attribute.Int64("gen_ai.usage.audio.cache_read.input_tokens", u.Input.Detail.Audio),
			attribute.Int64("gen_ai.usage.text.output_tokens", u.Output.Text),
			attribute.Int64("gen_ai.usage.audio.output_tokens", u.Output.Audio),
			attribute.Int64("gen_ai.usage.reasoning.output_tokens", u.Output.Reasoning))
	}
	sp := s.span("realtime_inference", start, time.Time{}, trace.SpanKindClient, attrs...)
	if !first.IsZero() {
		sp.AddEvent("gen_ai.first_output", trace.WithTimestamp(first),
			trace.WithAttributes(attribute.Float64("rtgate.first_output_ms", float64(first.Sub(start).Microseconds())/1000)))
	}
	if r.Status == "failed" {
		sp.SetStatus(codes.Error, "response failed")
	}
	sp.End()
}

// finishReason maps how a response ended to the GenAI conventions' finish
// reason: completed is stop (tool_calls when it called a tool),
// incomplete is its reason (max_output_tokens: length; content_filter),
// cancelled its reason (turn_detected, client_cancelled), failed error.
func finishReason(status string, details *struct {
	Reason string `json:"reason"`
}, output []struct {
	Type string `json:"type"`
}) string {
	reason := ""
	if details != nil {
		reason = details.Reason
	}
	switch status {
	case "completed":
		for _, o := range output {
			if o.Type == "function_call" || o.Type == "mcp_call" {
				return "tool_calls"
			}
		}
		return "stop"
	case "incomplete":
		switch reason {
		case "max_output_tokens":
			return "length"
		case "":
			return "incomplete"
		}
		return reason // content_filter
	case "cancelled":
		if reason == "" {
			return "cancelled"
		}
		return reason
	case "failed":
		return "error"
	}
	return status
}

// span starts a span named op (and the model) at start, a child of the
// connect span, with the session's attributes; a non-zero end ends it.
func (s *Session) span(op string, start, end time.Time, kind trace.SpanKind, attrs ...attribute.KeyValue) trace.Span {
	s.mu.Lock()
	common := s.attrs
	s.mu.Unlock()
	name := op
	for _, a := range common {
		if a.Key == "gen_ai.request.model" {
			name += " " + a.Value.AsString()
		}
	}
	_, sp := s.t.tracer.Start(s.ctx, name, trace.WithSpanKind(kind), trace.WithTimestamp(start),
		trace.WithAttributes(common...), trace.WithAttributes(attrs...))
	if !end.IsZero() {
		sp.End(trace.WithTimestamp(end))
	}
	return sp
}

// Guardrail records a guardrail's check as a span (rtgate.guardrail) from
// start to end: its name, mode and outcome (passed, blocked, error_open,
// error_closed).
func (s *Session) Guardrail(name, mode, outcome string, start, end time.Time) {
	if s == nil {
		return
	}
	sp := s.span("rtgate.guardrail", start, time.Time{}, trace.SpanKindInternal,
		attribute.String("rtgate.guardrail.name", name), attribute.String("rtgate.guardrail.mode", mode),
		attribute.String("rtgate.guardrail.outcome", outcome))
	if outcome == "blocked" || outcome == "error_closed" {
		sp.SetStatus(codes.Error, outcome)
	}
	sp.End(trace.WithTimestamp(end))
}
