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

	mu      sync.Mutex
	connect trace.Span // nil once ended
	attrs   []attribute.KeyValue

	// Read path only.
	respStart, firstOut, speechStart time.Time
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
// the first of its response costs a comparison.
func (s *Session) Mark(m protocol.TurnMark) {
	if s == nil {
		return
	}
	switch m {
	case protocol.FirstOutput:
		if s.firstOut.IsZero() && !s.respStart.IsZero() {
			s.firstOut = time.Now()
		}
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

// Event reads a whole event the turns asked for: session.created ends the
// connect span and names the upstream session; response.done makes the
// generation's span.
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
		ID     string `json:"id"`
		Status string `json:"status"`
		Usage  *struct {
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
		attribute.StringSlice("gen_ai.response.finish_reasons", []string{r.Status}),
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
