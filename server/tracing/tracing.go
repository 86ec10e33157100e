// Package tracing exports OpenTelemetry traces of voice sessions: a short
// span for each connect, one span per generation (a response) and, for
// GPT-Live, one per turn (live_turn: its input transcript to its answer's
// first audio), per the
// GenAI semantic conventions' realtime draft (docs/turns-and-traces.md, "Tracing"). It is off
// unless the standard OpenTelemetry environment names an exporter or an
// OTLP endpoint; then the exporter (contrib autoexport), the sampler and the
// resource all come from that environment.
//
// No span stays open for a whole session: the connect span ends when the
// upstream is ready (session.created; GPT-Live's session.started), a generation span is made when its response is done
// (from the times its events arrived), and a user-speech span when speech
// ends. Export never holds up the relay: spans go through the SDK's batch
// processor, in front of which a bounded count of spans waiting to be
// exported drops (and counts, rtgate_trace_spans_dropped_total) whatever
// would overflow its queue.
package tracing

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/contrib/exporters/autoexport"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// Conventions is the GenAI semantic conventions release the span names and
// attributes follow (the realtime spans are a draft on top of it).
const Conventions = "semantic-conventions-genai v0.1.0 (Development), realtime draft"

// defaultQueue is the batch processor's queue when OTEL_BSP_MAX_QUEUE_SIZE
// does not say (the SDK's default too).
const defaultQueue = 2048

// Tracer makes the sessions' spans; nil is off (every method of a nil
// Session is a no-op too).
type Tracer struct {
	tp     *sdktrace.TracerProvider
	tracer trace.Tracer
	prop   propagation.TextMapPropagator
	m      *metrics
}

// Enabled reports whether the environment (look) asks for traces: an
// exporter other than none, or an OTLP endpoint, and the SDK not disabled.
func Enabled(look func(string) (string, bool)) bool {
	get := func(k string) string { v, _ := look(k); return strings.TrimSpace(v) }
	if strings.EqualFold(get("OTEL_SDK_DISABLED"), "true") {
		return false
	}
	if exp := get("OTEL_TRACES_EXPORTER"); exp != "" {
		return !strings.EqualFold(exp, "none")
	}
	return get("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
}

// FromEnv starts tracing as the environment says, or returns nil when it
// asks for none (Enabled). Its metrics go to reg.
func FromEnv(ctx context.Context, reg prometheus.Registerer, log *slog.Logger) (*Tracer, error) {
	if !Enabled(os.LookupEnv) {
		return nil, nil
	}
	exp, err := autoexport.NewSpanExporter(ctx)
	if err != nil {
		return nil, fmt.Errorf("OpenTelemetry trace exporter (OTEL_TRACES_EXPORTER, OTEL_EXPORTER_OTLP_*): %w", err)
	}
	res, err := resource.New(ctx, resource.WithAttributes(attribute.String("service.name", "rtgate")),
		resource.WithFromEnv(), resource.WithTelemetrySDK())
	if err != nil {
		return nil, fmt.Errorf("OpenTelemetry resource (OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES): %w", err)
	}
	queue := defaultQueue
	if v, ok := os.LookupEnv("OTEL_BSP_MAX_QUEUE_SIZE"); ok {
		if n, err := strconv.Atoi(strings.TrimSpace(v)); err == nil && n > 0 {
			queue = n
		}
	}
	m := newMetrics(reg)
	bounded := &boundedProcessor{limit: int64(queue), m: m}
	// The batch processor reads OTEL_BSP_SCHEDULE_DELAY and the other
	// OTEL_BSP_* settings itself; it never blocks (no WithBlocking).
	bounded.SpanProcessor = sdktrace.NewBatchSpanProcessor(&countingExporter{SpanExporter: exp, p: bounded},
		sdktrace.WithMaxQueueSize(queue))
	// Without WithSampler the SDK reads OTEL_TRACES_SAMPLER(_ARG).
	tp := sdktrace.NewTracerProvider(sdktrace.WithResource(res), sdktrace.WithSpanProcessor(bounded))
	log.Info("tracing on", "exporter", envOr("OTEL_TRACES_EXPORTER", "otlp"),
		"protocol", envOr("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"), "conventions", Conventions)
	return &Tracer{tp: tp, tracer: tp.Tracer("rtgate"), m: m,
		prop: propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})}, nil
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

// Shutdown exports what is queued (within ctx) and stops.
func (t *Tracer) Shutdown(ctx context.Context) error {
	if t == nil {
		return nil
	}
	return t.tp.Shutdown(ctx)
}

// metrics count what the exporter did with the spans.
type metrics struct {
	dropped, exported, failed prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		dropped: prometheus.NewCounter(prometheus.CounterOpts{Name: "rtgate_trace_spans_dropped_total",
			Help: "Spans dropped because the export queue (OTEL_BSP_MAX_QUEUE_SIZE) was full: the relay never waits for the exporter."}),
		exported: prometheus.NewCounter(prometheus.CounterOpts{Name: "rtgate_trace_spans_exported_total",
			Help: "Spans handed to the exporter in a batch that it sent."}),
		failed: prometheus.NewCounter(prometheus.CounterOpts{Name: "rtgate_trace_spans_export_failed_total",
			Help: "Spans in batches the exporter failed to send."}),
	}
	reg.MustRegister(m.dropped, m.exported, m.failed)
	return m
}

// boundedProcessor wraps the batch processor, which drops spans when its
// queue is full without saying so: it counts the spans handed on and not yet
// exported, and drops (and counts) a span that would go past the queue's
// size itself.
type boundedProcessor struct {
	sdktrace.SpanProcessor
	pending atomic.Int64
	limit   int64
	m       *metrics
}

func (p *boundedProcessor) OnEnd(s sdktrace.ReadOnlySpan) {
	if !s.SpanContext().IsSampled() {
		return // the batch processor would ignore it too
	}
	if p.pending.Add(1) > p.limit {
		p.pending.Add(-1)
		p.m.dropped.Inc()
		return
	}
	p.SpanProcessor.OnEnd(s)
}

// countingExporter tells the bounded processor when spans have left.
type countingExporter struct {
	sdktrace.SpanExporter
	p *boundedProcessor
}

func (e *countingExporter) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	err := e.SpanExporter.ExportSpans(ctx, spans)
	e.p.pending.Add(-int64(len(spans)))
	if err != nil {
		e.p.m.failed.Add(float64(len(spans)))
	} else {
		e.p.m.exported.Add(float64(len(spans)))
	}
	return err
}

// Where a session goes, for its spans' attributes.
type Where struct {
	Group      string // the model group the client asked for
	Deployment string // rtgate's deployment name
	Provider   string // gen_ai.provider.name: openai or azure.ai.openai
	Model      string // the upstream model (gen_ai.request.model)
	Host       string // server.address of the upstream
}

// Start begins a session's connect span at start (when its upgrade request
// was read), a child of the traceparent in the client's headers h when it
// sent one.
func (t *Tracer) Start(h http.Header, start time.Time, sessionID, group string) *Session {
	if t == nil {
		return nil
	}
	parent := t.prop.Extract(context.Background(), propagation.HeaderCarrier(h))
	ctx, span := t.tracer.Start(parent, "rtgate.connect "+group, trace.WithSpanKind(trace.SpanKindServer),
		trace.WithTimestamp(start), trace.WithAttributes(
			attribute.String("rtgate.session.id", sessionID), attribute.String("rtgate.model_group", group)))
	if !span.IsRecording() {
		// Not sampled (OTEL_TRACES_SAMPLER, or the client's traceparent
		// said so): the session's other spans share the trace's verdict,
		// so the session costs nothing more.
		span.End()
		return nil
	}
	return &Session{t: t, connect: span, ctx: ctx}
}
