package server

import (
	"bytes"
	"compress/gzip"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	common "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"rtgate/mockai"
)

// otlpReceiver is an OTLP/HTTP trace receiver: it decodes each export with
// the official protobuf types and keeps the spans (with their resource's
// service.name). release, when set, holds every export until it is closed.
type otlpReceiver struct {
	srv     *httptest.Server
	release chan struct{}

	mu       sync.Mutex
	spans    []*tracepb.Span
	services []string
	requests int
}

func startOTLPReceiver(t *testing.T, hold bool) *otlpReceiver {
	t.Helper()
	r := &otlpReceiver{}
	if hold {
		r.release = make(chan struct{})
	}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.URL.Path != "/v1/traces" || req.Method != http.MethodPost {
			http.Error(w, "not an OTLP trace export", http.StatusNotFound)
			return
		}
		if r.release != nil {
			<-r.release
		}
		var body io.Reader = req.Body
		if req.Header.Get("Content-Encoding") == "gzip" {
			zr, err := gzip.NewReader(req.Body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			body = zr
		}
		raw, _ := io.ReadAll(body)
		var ex coltrace.ExportTraceServiceRequest
		if err := proto.Unmarshal(raw, &ex); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		r.mu.Lock()
		r.requests++
		for _, rs := range ex.GetResourceSpans() {
			service := attrString(rs.GetResource().GetAttributes(), "service.name")
			for _, ss := range rs.GetScopeSpans() {
				for _, sp := range ss.GetSpans() {
					r.spans = append(r.spans, sp)
					r.services = append(r.services, service)
				}
			}
		}
		r.mu.Unlock()
		out, _ := proto.Marshal(&coltrace.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(out)
	}))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *otlpReceiver) named(prefix string) []*tracepb.Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []*tracepb.Span
	for _, sp := range r.spans {
		if strings.HasPrefix(sp.GetName(), prefix) {
			out = append(out, sp)
		}
	}
	return out
}

func attrString(kvs []*common.KeyValue, key string) string {
	for _, kv := range kvs {
		if kv.GetKey() == key {
			return kv.GetValue().GetStringValue()
		}
	}
	return ""
}

func attrInt(kvs []*common.KeyValue, key string) (int64, bool) {
	for _, kv := range kvs {
		if kv.GetKey() == key {
			return kv.GetValue().GetIntValue(), true
		}
	}
	return 0, false
}

// tracingEnv points the gateway's OpenTelemetry environment at r.
func tracingEnv(t *testing.T, r *otlpReceiver) {
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", r.srv.URL)
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
	t.Setenv("OTEL_SERVICE_NAME", "rtgate-under-test")
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "20")
	t.Setenv("OTEL_TRACES_SAMPLER", "parentbased_always_on")
}

// TestTracesToOTLP: with the OpenTelemetry environment set, a session
// whose client sent a traceparent gives a connect span parented by it and,
// under the connect span, a user-speech span and one realtime_inference
// span per response with the GenAI attributes, exported over OTLP/HTTP to a
// real receiver. Plain and TLS upstreams.
func TestTracesToOTLP(t *testing.T) {
	poolSchemes(t, func(t *testing.T, tls bool) {
		recv := startOTLPReceiver(t, false)
		tracingEnv(t, recv)
		mock := startPoolMock(t, mockai.Config{FirstAudioDelay: 10 * time.Millisecond}, tls)
		g := startGateway(t, mock, func(c *Settings) {
			if tls {
				c.UpstreamRoots = trustMock(t, mock)
			}
		})
		const traceID, parentID = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
		h := bearer(testMasterKey)
		h.Set("traceparent", "00-"+traceID+"-"+parentID+"-01")
		c := g.dial(t, "model=gpt-realtime", h)
		created, _ := readUntil(t, c, "session.created")
		upstreamSession := created.str("session", "id")
		// A manual response, then a server-VAD turn.
		send(t, c, map[string]any{"type": "response.create"})
		readUntil(t, c, "response.done")
		vadTurn(t, c, 100)
		readUntil(t, c, "response.done")
		_ = c.WriteMessage(websocket.CloseMessage, websocket.FormatCloseMessage(1000, ""))
		closeOf(t, c)
		waitFor(t, "the session to end", func() bool { return g.srv.SessionsOpen() == 0 })
		waitFor(t, "the spans to be exported", func() bool {
			return len(recv.named("realtime_inference")) >= 2 && len(recv.named("rtgate.connect")) >= 1 && len(recv.named("user_speech")) >= 1
		})

		connects := recv.named("rtgate.connect")
		if len(connects) != 1 {
			t.Fatalf("%d connect spans, want 1", len(connects))
		}
		cs := connects[0]
		if got := hex.EncodeToString(cs.GetTraceId()); got != traceID {
			t.Errorf("connect span trace %s, want the client's %s", got, traceID)
		}
		if got := hex.EncodeToString(cs.GetParentSpanId()); got != parentID {
			t.Errorf("connect span parent %s, want the client's span %s", got, parentID)
		}
		if cs.GetKind() != tracepb.Span_SPAN_KIND_SERVER || cs.GetName() != "rtgate.connect gpt-realtime" {
			t.Errorf("connect span %q kind %v", cs.GetName(), cs.GetKind())
		}
		for k, want := range map[string]string{"gen_ai.provider.name": "openai", "gen_ai.request.model": "gpt-realtime",
			"gen_ai.realtime_session.id": upstreamSession, "rtgate.model_group": "gpt-realtime"} {
			if got := attrString(cs.GetAttributes(), k); got != want {
				t.Errorf("connect span %s = %q, want %q", k, got, want)
			}
		}
		if !strings.HasPrefix(upstreamSession, "sess_") {
			t.Errorf("upstream session id %q", upstreamSession)
		}
		var events []string
		for _, e := range cs.GetEvents() {
			events = append(events, e.GetName())
		}
		if !strings.Contains(strings.Join(events, ","), "upstream.attached,upstream.ready") {
			t.Errorf("connect span events %v", events)
		}

		gens := recv.named("realtime_inference")
		if len(gens) != 2 {
			t.Fatalf("%d generation spans, want 2", len(gens))
		}
		for _, sp := range append(gens, recv.named("user_speech")...) {
			if !bytes.Equal(sp.GetTraceId(), cs.GetTraceId()) || !bytes.Equal(sp.GetParentSpanId(), cs.GetSpanId()) {
				t.Errorf("span %q is not a child of the connect span", sp.GetName())
			}
			if got := attrString(sp.GetAttributes(), "gen_ai.realtime_session.id"); got != upstreamSession {
				t.Errorf("span %q realtime session %q, want %q", sp.GetName(), got, upstreamSession)
			}
		}
		for _, sp := range gens {
			a := sp.GetAttributes()
			if sp.GetName() != "realtime_inference gpt-realtime" || sp.GetKind() != tracepb.Span_SPAN_KIND_CLIENT ||
				attrString(a, "gen_ai.operation.name") != "realtime_inference" || attrString(a, "gen_ai.provider.name") != "openai" ||
				!strings.HasPrefix(attrString(a, "gen_ai.response.id"), "resp_") {
				t.Errorf("generation span %q kind %v attributes %v", sp.GetName(), sp.GetKind(), a)
			}
			// mockai's usage: 10 input text tokens, output audio 5 deltas.
			for k, want := range map[string]int64{"gen_ai.usage.text.input_tokens": 10, "gen_ai.usage.reasoning.output_tokens": 0,
				"gen_ai.usage.audio.cache_read.input_tokens": 0} {
				if got, ok := attrInt(a, k); !ok || got != want {
					t.Errorf("generation %s = %d (%v), want %d", k, got, ok, want)
				}
			}
			if out, _ := attrInt(a, "gen_ai.usage.output_tokens"); out <= 0 {
				t.Errorf("generation output tokens %d", out)
			}
			if in, _ := attrInt(a, "gen_ai.usage.input_tokens"); in < 10 {
				t.Errorf("generation input tokens %d", in)
			}
			if len(sp.GetEvents()) != 1 || sp.GetEvents()[0].GetName() != "gen_ai.first_output" ||
				sp.GetEvents()[0].GetTimeUnixNano() <= sp.GetStartTimeUnixNano() || sp.GetEndTimeUnixNano() < sp.GetEvents()[0].GetTimeUnixNano() {
				t.Errorf("generation events %v", sp.GetEvents())
			}
		}
		if audioIn, _ := attrInt(gens[1].GetAttributes(), "gen_ai.usage.audio.input_tokens"); audioIn == 0 {
			t.Errorf("the VAD turn's generation has no audio input tokens")
		}
		recv.mu.Lock()
		services := recv.services
		recv.mu.Unlock()
		for _, s := range services {
			if s != "rtgate-under-test" {
				t.Errorf("service.name %q, want OTEL_SERVICE_NAME's", s)
			}
		}
	})
}

// TestTracingNeverHoldsTheRelay: with a receiver that takes no export and a
// queue of 4 spans, sessions run as usual and the spans that do not fit
// are dropped and counted.
func TestTracingNeverHoldsTheRelay(t *testing.T) {
	recv := startOTLPReceiver(t, true)
	tracingEnv(t, recv)
	t.Setenv("OTEL_BSP_MAX_QUEUE_SIZE", "4")
	t.Setenv("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "2")
	mock := startMock(t, mockai.Config{})
	g := startGateway(t, mock, nil)
	t.Cleanup(func() { close(recv.release) }) // before the gateway's shutdown
	for range 6 {
		oneResponseSession(t, g, "model=gpt-realtime")
	}
	waitFor(t, "the sessions to end", func() bool { return g.srv.SessionsOpen() == 0 })
	if got := metricSum(t, g, "rtgate_trace_spans_dropped_total"); got < 12-4 {
		t.Fatalf("%v spans dropped, want at least 8 of 12 (a queue of 4, nothing exported)", got)
	}
}

// TestTracingOffByDefault: without the OpenTelemetry environment nothing is
// traced, and sessions run as ever.
func TestTracingOffByDefault(t *testing.T) {
	g := startGateway(t, startMock(t, mockai.Config{}), nil)
	oneResponseSession(t, g, "model=gpt-realtime")
	if g.srv.tracer != nil {
		t.Fatal("tracing is on with no OTEL_* environment")
	}
	if _, err := g.srv.reg.Gather(); err != nil {
		t.Fatal(err)
	}
	if got := gatheredWhere(t, g.srv.reg, "rtgate_trace_spans_exported_total", "", ""); got != 0 {
		t.Fatalf("spans exported with tracing off: %v", got)
	}
}

// TestUnsampledTraceparent: a client whose traceparent says "not sampled"
// gets no spans (the parent-based sampler follows it); the next session,
// without one, is traced.
func TestUnsampledTraceparent(t *testing.T) {
	recv := startOTLPReceiver(t, false)
	tracingEnv(t, recv)
	g := startGateway(t, startMock(t, mockai.Config{}), nil)
	h := bearer(testMasterKey)
	h.Set("traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00")
	c := g.dial(t, "model=gpt-realtime", h)
	readUntil(t, c, "session.created")
	send(t, c, map[string]any{"type": "response.create"})
	readUntil(t, c, "response.done")
	_ = c.WriteMessage(websocket.CloseMessage, websocket.FormatCloseMessage(1000, ""))
	closeOf(t, c)
	oneResponseSession(t, g, "model=gpt-realtime")
	waitFor(t, "the sampled session's spans", func() bool { return len(recv.named("realtime_inference")) >= 1 })
	ctx, cancel := contextWithTimeout(5 * time.Second)
	defer cancel()
	_ = g.srv.Shutdown(ctx) // every span exported
	connects := recv.named("rtgate.connect")
	if len(connects) != 1 || len(recv.named("realtime_inference")) != 1 {
		t.Fatalf("%d connect and %d generation spans, want 1 each (the unsampled session's none)",
			len(connects), len(recv.named("realtime_inference")))
	}
	if hex.EncodeToString(connects[0].GetTraceId()) == "0af7651916cd43dd8448eb211c80319c" {
		t.Fatal("the unsampled session was traced")
	}
}

// TestLiveTracesToOTLP: a GPT-Live session's connect span is named for its
// model group (known only from its session.start), ends at session.started
// (not the session's end, not as an error) and carries the Live session's
// id as gen_ai.realtime_session.id; each turn (its input transcript to its
// answer's first audio, the Live turn table) is a live_turn span under it.
// Plain and TLS upstreams.
func TestLiveTracesToOTLP(t *testing.T) {
	overBoth(t, mockai.Config{FirstAudioDelay: 30 * time.Millisecond}, func(t *testing.T, m *mockai.Server, trust func(*Settings)) {
		recv := startOTLPReceiver(t, false)
		tracingEnv(t, recv)
		g, _ := liveGateway(t, m, trust)
		c := g.dialLive(t, "sk-team-a-test")
		send(t, c, liveStart("gpt-live", nil))
		started := read(t, c)
		if started.typ() != "session.started" {
			t.Fatalf("first event %v", started)
		}
		startedAt := time.Now()
		liveID := started.str("session", "id")
		const turns = 2
		for range turns {
			appendAudio(t, c, liveSecond/10)
			readUntil(t, c, "session.output_audio.delta")
		}
		time.Sleep(100 * time.Millisecond) // the session outlives its connect span
		send(t, c, map[string]any{"type": "session.close"})
		readUntil(t, c, "session.closed")
		_ = c.Close()
		waitFor(t, "the session to end", func() bool { return g.srv.SessionsOpen() == 0 })
		waitFor(t, "the spans to be exported", func() bool {
			return len(recv.named("rtgate.connect")) >= 1 && len(recv.named("live_turn")) >= turns
		})
		connects := recv.named("rtgate.connect")
		if len(connects) != 1 {
			t.Fatalf("%d connect spans, want 1", len(connects))
		}
		cs := connects[0]
		if cs.GetName() != "rtgate.connect gpt-live" || attrString(cs.GetAttributes(), "rtgate.model_group") != "gpt-live" {
			t.Errorf("connect span %q, model group %q; want it named for gpt-live", cs.GetName(), attrString(cs.GetAttributes(), "rtgate.model_group"))
		}
		if got := attrString(cs.GetAttributes(), "gen_ai.realtime_session.id"); got != liveID || !strings.HasPrefix(liveID, "live_") {
			t.Errorf("connect span gen_ai.realtime_session.id %q, want the Live session's %q", got, liveID)
		}
		if cs.GetStatus().GetCode() == tracepb.Status_STATUS_CODE_ERROR {
			t.Errorf("connect span ended as an error: %q", cs.GetStatus().GetMessage())
		}
		if end := time.Unix(0, int64(cs.GetEndTimeUnixNano())); end.After(startedAt) {
			t.Errorf("connect span ended %v after session.started reached the client, want at it", end.Sub(startedAt))
		}
		spans := recv.named("live_turn")
		if len(spans) != turns {
			t.Fatalf("%d live_turn spans, want %d", len(spans), turns)
		}
		longest := time.Duration(0)
		for _, sp := range spans {
			a := sp.GetAttributes()
			if !bytes.Equal(sp.GetParentSpanId(), cs.GetSpanId()) || sp.GetName() != "live_turn gpt-live-1" ||
				attrString(a, "gen_ai.realtime_session.id") != liveID || attrString(a, "gen_ai.operation.name") != "live_turn" {
				t.Errorf("live_turn span %q attributes %v", sp.GetName(), a)
			}
			longest = max(longest, time.Duration(sp.GetEndTimeUnixNano()-sp.GetStartTimeUnixNano()))
		}
		// mockai sends the input transcript, then waits 30 ms before the
		// first audio; the gateway sees each when it arrives, so the span
		// may be a little shorter (29.05 ms once over wss:// on a loaded
		// box), but never near 0.
		if longest < 24*time.Millisecond {
			t.Errorf("the longest live_turn span took %v, want about the upstream's 30 ms to its first audio", longest)
		}
	})
}

// TestFinishReasons: the realtime_inference span's
// gen_ai.response.finish_reasons maps how the response ended: completed
// is stop, a tool call tool_calls, cancelled its reason. Plain and TLS
// upstreams.
func TestFinishReasons(t *testing.T) {
	overBoth(t, mockai.Config{FaultsFromQuery: true, FirstAudioDelay: 10 * time.Millisecond}, func(t *testing.T, mock *mockai.Server, trust func(*Settings)) {
		recv := startOTLPReceiver(t, false)
		tracingEnv(t, recv)
		g := startGateway(t, mock, trust)
		c := g.dial(t, "model=gpt-realtime", bearer(testMasterKey))
		readUntil(t, c, "session.created")
		send(t, c, map[string]any{"type": "response.create"})
		readUntil(t, c, "response.done")
		send(t, c, map[string]any{"type": "session.update", "session": map[string]any{"type": "realtime",
			"tools": []any{map[string]any{"type": "function", "name": "f", "parameters": map[string]any{"type": "object"}}}}})
		readUntil(t, c, "session.updated")
		send(t, c, map[string]any{"type": "response.create", "response": map[string]any{"tool_choice": "required"}})
		readUntil(t, c, "response.done")
		_ = c.Close()
		c = g.dial(t, "model=gpt-realtime&first_audio_delay=1m", bearer(testMasterKey))
		readUntil(t, c, "session.created")
		send(t, c, map[string]any{"type": "response.create"})
		readUntil(t, c, "response.created")
		send(t, c, map[string]any{"type": "response.cancel"})
		readUntil(t, c, "response.done")
		_ = c.Close()
		waitFor(t, "the spans to be exported", func() bool { return len(recv.named("realtime_inference")) >= 3 })
		var got []string
		for _, sp := range recv.named("realtime_inference") {
			for _, kv := range sp.GetAttributes() {
				if kv.GetKey() == "gen_ai.response.finish_reasons" {
					for _, v := range kv.GetValue().GetArrayValue().GetValues() {
						got = append(got, v.GetStringValue())
					}
				}
			}
		}
		slices.Sort(got)
		if want := []string{"client_cancelled", "stop", "tool_calls"}; !slices.Equal(got, want) {
			t.Errorf("finish reasons %v, want %v", got, want)
		}
	})
}
