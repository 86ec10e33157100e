package mockai_test

import (
	"encoding/base64"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"rtgate/mockai"
)

// Turns against mockai: server VAD, text-only responses, tool-call
// chains, interruptions and the first-audio delay, with gorilla as the
// independent client, every case over ws:// and wss://.

// pcmChunk is 20 ms of 24 kHz PCM16: 960 bytes, two audio tokens.
const pcmChunk = 960

// speech is 20 ms of PCMPattern (peak 5,000): what server VAD hears as speech.
var speech = base64.StdEncoding.EncodeToString(mockai.PCMPattern(pcmChunk))

// silence is 20 ms of zeros.
var silence = base64.StdEncoding.EncodeToString(make([]byte, pcmChunk))

func appendChunks(t *testing.T, c *websocket.Conn, audio string, n int) {
	t.Helper()
	for range n {
		send(t, c, map[string]any{"type": "input_audio_buffer.append", "audio": audio})
	}
}

// vadUpdate turns server VAD on with a 100 ms silence window; extra fields
// override its defaults.
func vadUpdate(extra map[string]any) map[string]any {
	td := map[string]any{"type": "server_vad", "silence_duration_ms": 100, "prefix_padding_ms": 20}
	for k, v := range extra {
		td[k] = v
	}
	return map[string]any{"type": "session.update", "session": map[string]any{
		"type": "realtime", "audio": map[string]any{"input": map[string]any{"turn_detection": td}}}}
}

// expectResponse reads a response's events after response.created and
// rate_limits.updated up to response.done, counting each type.
func expectResponse(t *testing.T, c *websocket.Conn) (done event, seen map[string]int) {
	t.Helper()
	seen = map[string]int{}
	for {
		ev := readEvent(t, c)
		typ := ev.str("type")
		seen[typ]++
		if typ == "response.done" {
			return ev, seen
		}
		if typ == "error" {
			t.Fatalf("error during the response: %v", ev)
		}
	}
}

func TestTurns(t *testing.T) {
	t.Parallel()
	tools := []any{map[string]any{"type": "function", "name": "get_weather", "description": "weather", "parameters": map[string]any{"type": "object"}}}
	tests := []struct {
		name string
		cfg  mockai.Config
		run  func(t *testing.T, c *websocket.Conn)
	}{
		{"server VAD: speech, the silence window, an automatic response", mockai.Config{}, func(t *testing.T, c *websocket.Conn) {
			send(t, c, vadUpdate(nil))
			expect(t, c, "session.updated")
			appendChunks(t, c, silence, 2) // 40 ms before the speech
			appendChunks(t, c, speech, 5)  // 100 ms of speech
			started := expect(t, c, "input_audio_buffer.speech_started")
			if got := started.num("audio_start_ms"); got != 20 { // 40 ms less the 20 ms prefix padding
				t.Errorf("audio_start_ms %d, want 20", got)
			}
			appendChunks(t, c, silence, 4) // 80 ms: inside the 100 ms window
			send(t, c, map[string]any{"type": "input_audio_buffer.clear"})
			// Answered in order: nothing was stopped before the clear.
			expect(t, c, "input_audio_buffer.cleared")
			appendChunks(t, c, speech, 5)
			appendChunks(t, c, silence, 5) // 100 ms: the window is over
			stopped := expect(t, c, "input_audio_buffer.speech_stopped")
			if stopped.str("item_id") != started.str("item_id") {
				t.Errorf("speech_stopped item %q, speech_started item %q", stopped.str("item_id"), started.str("item_id"))
			}
			// 2+5+4+5+5 chunks of 20 ms: the window is included, as OpenAI documents.
			if got := stopped.num("audio_end_ms"); got != 420 {
				t.Errorf("audio_end_ms %d, want 420", got)
			}
			if ev := expect(t, c, "input_audio_buffer.committed"); ev.str("item_id") != started.str("item_id") {
				t.Errorf("committed item %q, want the speech's %q", ev.str("item_id"), started.str("item_id"))
			}
			expect(t, c, "response.created")
			done, seen := expectResponse(t, c)
			if done.str("response.status") != "completed" || seen["response.output_audio.delta"] != 5 {
				t.Errorf("automatic response: status %q, %d audio deltas", done.str("response.status"), seen["response.output_audio.delta"])
			}
			// The 10 chunks after the clear, 2 tokens each.
			if got := usageOf(done); got != wantTokens(20, 50) {
				t.Errorf("usage %+v, want %+v", got, wantTokens(20, 50))
			}
		}},
		{"server VAD with create_response false: committed, no response", mockai.Config{}, func(t *testing.T, c *websocket.Conn) {
			send(t, c, vadUpdate(map[string]any{"create_response": false}))
			expect(t, c, "session.updated")
			appendChunks(t, c, speech, 2)
			appendChunks(t, c, silence, 5)
			expect(t, c, "input_audio_buffer.speech_started")
			expect(t, c, "input_audio_buffer.speech_stopped")
			expect(t, c, "input_audio_buffer.committed")
			send(t, c, map[string]any{"type": "input_audio_buffer.clear"})
			expect(t, c, "input_audio_buffer.cleared") // not response.created
		}},
		{"no VAD unless session.update asks for it", mockai.Config{}, func(t *testing.T, c *websocket.Conn) {
			appendChunks(t, c, speech, 5)
			appendChunks(t, c, silence, 50)
			send(t, c, map[string]any{"type": "input_audio_buffer.commit"})
			expect(t, c, "input_audio_buffer.committed")
			send(t, c, vadUpdate(nil))
			expect(t, c, "session.updated")
			send(t, c, map[string]any{"type": "session.update", "session": map[string]any{"type": "realtime",
				"audio": map[string]any{"input": map[string]any{"turn_detection": nil}}}})
			expect(t, c, "session.updated")
			appendChunks(t, c, speech, 5)
			appendChunks(t, c, silence, 50)
			send(t, c, map[string]any{"type": "input_audio_buffer.commit"})
			expect(t, c, "input_audio_buffer.committed") // no speech events once VAD is off again
		}},
		{"speech during a response interrupts it: turn_detected", mockai.Config{AudioDeltas: 1000, AudioDeltaBytes: pcmChunk, AudioDeltaInterval: 2 * time.Millisecond}, func(t *testing.T, c *websocket.Conn) {
			send(t, c, vadUpdate(nil))
			expect(t, c, "session.updated")
			send(t, c, map[string]any{"type": "response.create"})
			expect(t, c, "response.created")
			expect(t, c, "rate_limits.updated")
			expect(t, c, "response.output_audio.delta")
			appendChunks(t, c, speech, 1)
			var done event
			sawStart := false
			for done == nil {
				switch ev := readEvent(t, c); ev.str("type") {
				case "input_audio_buffer.speech_started":
					sawStart = true
				case "response.done":
					done = ev
				}
			}
			if !sawStart {
				t.Error("no speech_started before the interrupted response's response.done")
			}
			if done.str("response.status") != "cancelled" || done.str("response.status_details.reason") != "turn_detected" {
				t.Errorf("response.done %v, want cancelled, turn_detected", done["response"])
			}
			// The speech goes on to a new turn with its own response.
			appendChunks(t, c, silence, 5)
			expect(t, c, "input_audio_buffer.speech_stopped")
			expect(t, c, "input_audio_buffer.committed")
			expect(t, c, "response.created")
		}},
		{"interrupt_response false: speech leaves the response alone", mockai.Config{AudioDeltas: 200, AudioDeltaBytes: pcmChunk, AudioDeltaInterval: 2 * time.Millisecond}, func(t *testing.T, c *websocket.Conn) {
			send(t, c, vadUpdate(map[string]any{"interrupt_response": false, "create_response": false}))
			expect(t, c, "session.updated")
			send(t, c, map[string]any{"type": "response.create"})
			expect(t, c, "response.created")
			expect(t, c, "rate_limits.updated")
			expect(t, c, "response.output_audio.delta")
			appendChunks(t, c, speech, 1)
			var done event
			deltas, sawStart := 1, false
			for done == nil {
				switch ev := readEvent(t, c); ev.str("type") {
				case "input_audio_buffer.speech_started":
					sawStart = true
				case "response.output_audio.delta":
					deltas++
				case "response.done":
					done = ev
				}
			}
			if !sawStart {
				t.Error("no speech_started during the response")
			}
			if done.str("response.status") != "completed" || deltas != 200 {
				t.Errorf("response.done %v after %d deltas, want completed after 200", done["response"], deltas)
			}
		}},
		{"text-only session: output_text deltas, no audio", mockai.Config{}, func(t *testing.T, c *websocket.Conn) {
			send(t, c, map[string]any{"type": "session.update", "session": map[string]any{"type": "realtime", "output_modalities": []string{"text"}}})
			expect(t, c, "session.updated")
			send(t, c, map[string]any{"type": "response.create"})
			created := expect(t, c, "response.created")
			if m, _ := created.get("response.output_modalities").([]any); len(m) != 1 || m[0] != "text" {
				t.Errorf("response.created output_modalities %v, want [text]", created.get("response.output_modalities"))
			}
			expect(t, c, "rate_limits.updated")
			text := ""
			for range 3 {
				text += expect(t, c, "response.output_text.delta").str("delta")
			}
			if ev := expect(t, c, "response.output_text.done"); ev.str("text") != text || text != "Hello from mockai." {
				t.Errorf("output_text.done text %q, deltas %q", ev.str("text"), text)
			}
			done := expect(t, c, "response.done")
			out, _ := done.get("response.output").([]any)
			item, _ := out[0].(map[string]any)
			content, _ := item["content"].([]any)
			part, _ := content[0].(map[string]any)
			if part["type"] != "output_text" || part["text"] != "Hello from mockai." {
				t.Errorf("response.done content %v", part)
			}
			if got := usageOf(done); got != wantTokens(0, 0) {
				t.Errorf("usage %+v, want %+v", got, wantTokens(0, 0))
			}
		}},
		{"text for one response, asked in response.create", mockai.Config{}, func(t *testing.T, c *websocket.Conn) {
			send(t, c, map[string]any{"type": "response.create", "response": map[string]any{"output_modalities": []string{"text"}}})
			expect(t, c, "response.created")
			_, seen := expectResponse(t, c)
			if seen["response.output_text.delta"] != 3 || seen["response.output_audio.delta"] != 0 {
				t.Errorf("text response sent %v", seen)
			}
			send(t, c, map[string]any{"type": "response.create"}) // the next one speaks again
			expect(t, c, "response.created")
			if _, seen := expectResponse(t, c); seen["response.output_audio.delta"] != 5 {
				t.Errorf("audio response sent %v", seen)
			}
		}},
		{"tool chain: function call, the client's output, then speech", mockai.Config{}, func(t *testing.T, c *websocket.Conn) {
			send(t, c, map[string]any{"type": "session.update", "session": map[string]any{"type": "realtime", "tools": tools}})
			expect(t, c, "session.updated")
			send(t, c, map[string]any{"type": "response.create", "response": map[string]any{"tool_choice": "required"}})
			expect(t, c, "response.created")
			expect(t, c, "rate_limits.updated")
			added := expect(t, c, "response.output_item.added")
			callID := added.str("item.call_id")
			if added.str("item.type") != "function_call" || added.str("item.name") != "get_weather" || callID == "" {
				t.Fatalf("output_item.added %v", added["item"])
			}
			expect(t, c, "response.function_call_arguments.delta")
			if ev := expect(t, c, "response.function_call_arguments.done"); ev.str("call_id") != callID || ev.str("arguments") != "{}" {
				t.Errorf("arguments.done %v", ev)
			}
			if ev := expect(t, c, "response.output_item.done"); ev.str("item.status") != "completed" || ev.str("item.arguments") != "{}" {
				t.Errorf("output_item.done %v", ev["item"])
			}
			done := expect(t, c, "response.done")
			if done.str("response.status") != "completed" {
				t.Errorf("tool response status %q", done.str("response.status"))
			}
			if got := usageOf(done); got != wantTokens(0, 0) {
				t.Errorf("tool response usage %+v, want %+v (no audio)", got, wantTokens(0, 0))
			}
			send(t, c, map[string]any{"type": "conversation.item.create", "item": map[string]any{
				"type": "function_call_output", "call_id": callID, "output": `{"sunny":true}`}})
			expect(t, c, "conversation.item.added")
			expect(t, c, "conversation.item.done")
			// Still "required", but after the tool's output the answer is speech.
			send(t, c, map[string]any{"type": "response.create", "response": map[string]any{"tool_choice": "required"}})
			expect(t, c, "response.created")
			done, seen := expectResponse(t, c)
			if done.str("response.status") != "completed" || seen["response.output_audio.delta"] != 5 || seen["response.output_item.added"] != 0 {
				t.Errorf("after the tool output: status %q, events %v", done.str("response.status"), seen)
			}
		}},
		{"tool choice naming a function, from the session; auto speaks", mockai.Config{}, func(t *testing.T, c *websocket.Conn) {
			more := append([]any{map[string]any{"type": "function", "name": "hang_up"}}, tools...)
			send(t, c, map[string]any{"type": "session.update", "session": map[string]any{"type": "realtime", "tools": more,
				"tool_choice": map[string]any{"type": "function", "name": "get_weather"}}})
			expect(t, c, "session.updated")
			send(t, c, map[string]any{"type": "response.create"})
			expect(t, c, "response.created")
			expect(t, c, "rate_limits.updated")
			if ev := expect(t, c, "response.output_item.added"); ev.str("item.name") != "get_weather" {
				t.Errorf("called %q, want get_weather", ev.str("item.name"))
			}
			expectResponse(t, c)
			send(t, c, map[string]any{"type": "response.create", "response": map[string]any{"tool_choice": "auto"}})
			expect(t, c, "response.created")
			if _, seen := expectResponse(t, c); seen["response.output_audio.delta"] != 5 {
				t.Errorf("tool_choice auto: %v, want speech", seen)
			}
		}},
		{"required without tools speaks", mockai.Config{}, func(t *testing.T, c *websocket.Conn) {
			send(t, c, map[string]any{"type": "response.create", "response": map[string]any{"tool_choice": "required"}})
			expect(t, c, "response.created")
			if _, seen := expectResponse(t, c); seen["response.output_audio.delta"] != 5 {
				t.Errorf("no tools: %v, want speech", seen)
			}
		}},
		{"response.cancel during a tool call: client_cancelled", mockai.Config{FirstAudioDelay: time.Minute}, func(t *testing.T, c *websocket.Conn) {
			send(t, c, map[string]any{"type": "session.update", "session": map[string]any{"type": "realtime", "tools": tools, "tool_choice": "required"}})
			expect(t, c, "session.updated")
			send(t, c, map[string]any{"type": "response.create"})
			expect(t, c, "response.created")
			expect(t, c, "rate_limits.updated")
			expect(t, c, "response.output_item.added")
			send(t, c, map[string]any{"type": "response.cancel"})
			if ev := expect(t, c, "response.output_item.done"); ev.str("item.status") != "incomplete" {
				t.Errorf("cancelled call item %v", ev["item"])
			}
			done := expect(t, c, "response.done")
			if done.str("response.status") != "cancelled" || done.str("response.status_details.reason") != "client_cancelled" {
				t.Errorf("response.done %v", done["response"])
			}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			overTLS(t, tc.cfg, func(t *testing.T, srv *mockai.Server) {
				c, _, err := liveDial(t, srv, realtimeURL(srv, "gpt-realtime"), nil)
				if err != nil {
					t.Fatalf("dial: %v", err)
				}
				expect(t, c, "session.created")
				tc.run(t, c)
			})
		})
	}
}

// firstOutput asks c for a response and says whether audio came first
// (true), or whether, with the delay still running, a response.cancel ended
// it without any (false). A slow side is set to a minute, so the cancel
// always lands inside the delay: no clock is read.
func firstOutput(t *testing.T, c *websocket.Conn, slow bool) bool {
	t.Helper()
	send(t, c, map[string]any{"type": "response.create"})
	expect(t, c, "response.created")
	expect(t, c, "rate_limits.updated")
	if slow {
		send(t, c, map[string]any{"type": "response.cancel"})
	}
	ev := readEvent(t, c)
	switch ev.str("type") {
	case "response.output_audio.delta":
		expectResponse(t, c)
		return true
	case "response.done":
		return false
	}
	t.Fatalf("unexpected %v", ev)
	return false
}

func TestFirstAudioDelayKnobs(t *testing.T) {
	t.Parallel()
	overTLS(t, mockai.Config{FaultsFromQuery: true}, func(t *testing.T, srv *mockai.Server) {
		connect := func(query string) *websocket.Conn {
			c, _, err := liveDial(t, srv, realtimeURL(srv, "gpt-realtime")+query, nil)
			if err != nil {
				t.Fatalf("dial %q: %v", query, err)
			}
			expect(t, c, "session.created")
			return c
		}
		setDelay := func(v string, want int) {
			t.Helper()
			status, body, _ := httpDo(t, srv, http.MethodPost, "/mock/config?first_audio_delay="+v, nil)
			if status != want {
				t.Fatalf("POST first_audio_delay=%s: %d %s, want %d", v, status, body, want)
			}
		}
		current := func() string {
			t.Helper()
			status, body, _ := httpDo(t, srv, http.MethodGet, "/mock/config", nil)
			var cfg struct {
				FirstAudioDelay string `json:"first_audio_delay"`
			}
			if status != http.StatusOK || json.Unmarshal(body, &cfg) != nil {
				t.Fatalf("GET /mock/config: %d %s", status, body)
			}
			return cfg.FirstAudioDelay
		}

		pinnedSlow := connect("&first_audio_delay=1m")
		pinnedFast := connect("&first_audio_delay=0s")
		setDelay("1m", http.StatusOK)
		if got := current(); got != "1m0s" {
			t.Errorf("GET /mock/config first_audio_delay %q, want 1m0s", got)
		}
		followsServer := connect("")
		if firstOutput(t, followsServer, true) {
			t.Error("after POST first_audio_delay=1m a response had audio at once")
		}
		if !firstOutput(t, pinnedFast, false) {
			t.Error("a connection with first_audio_delay=0s in its query followed the server's 1m")
		}
		setDelay("0s", http.StatusOK)
		// The same connection speeds up: the delay is read per response.
		if !firstOutput(t, followsServer, false) {
			t.Error("after POST first_audio_delay=0s no audio came")
		}
		if firstOutput(t, pinnedSlow, true) {
			t.Error("a connection with first_audio_delay=1m in its query followed the server's 0s")
		}

		for _, bad := range []string{"soon", "-1s", "2m"} {
			setDelay(bad, http.StatusBadRequest)
			_, resp, err := liveDial(t, srv, realtimeURL(srv, "gpt-realtime")+"&first_audio_delay="+bad, nil)
			if err == nil || resp == nil || resp.StatusCode != http.StatusBadRequest {
				t.Errorf("first_audio_delay=%s in the query: %v, want HTTP 400", bad, err)
			}
		}
		if status, _, _ := httpDo(t, srv, http.MethodPost, "/mock/config", nil); status != http.StatusBadRequest {
			t.Errorf("POST /mock/config with nothing to change: %d, want 400", status)
		}
		if got := current(); got != "0s" {
			t.Errorf("bad values changed the delay to %q", got)
		}
	})
}

// Without -faults-from-query the query's first_audio_delay is ignored, as
// the fault parameters are.
func TestFirstAudioDelayQueryNeedsFaultsFromQuery(t *testing.T) {
	t.Parallel()
	srv := start(t, mockai.Config{FirstAudioDelay: time.Minute})
	c, _, err := dial(t, realtimeURL(srv, "gpt-realtime")+"&first_audio_delay=0s", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	expect(t, c, "session.created")
	if firstOutput(t, c, true) {
		t.Error("first_audio_delay in the query applied without FaultsFromQuery")
	}
}

// TestTraceSink: POST /v1/traces takes an OTLP export, answers 200 and
// counts its bytes; other methods are not routed there.
func TestTraceSink(t *testing.T) {
	srv := start(t, mockai.Config{})
	base := "http://" + srv.Addr()
	resp, err := http.Post(base+"/v1/traces", "application/x-protobuf", strings.NewReader("0123456789"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || srv.Stats().TraceBytes != 10 {
		t.Fatalf("POST /v1/traces: %s, %d bytes counted, want 200 and 10", resp.Status, srv.Stats().TraceBytes)
	}
	resp, err = http.Get(base + "/v1/traces")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode == http.StatusOK {
		t.Fatal("GET /v1/traces answered 200")
	}
}

// TestCreatedWithFirstOutput: with the knob, response.created arrives only
// with the first output delta (after the first-audio delay), then the
// deltas; without it, at once. Audio, text and tool responses alike.
func TestCreatedWithFirstOutput(t *testing.T) {
	const delay = 150 * time.Millisecond
	overTLS(t, mockai.Config{FirstAudioDelay: delay, CreatedWithFirstOutput: true}, func(t *testing.T, srv *mockai.Server) {
		c, _, err := liveDial(t, srv, realtimeURL(srv, "gpt-realtime"), nil)
		if err != nil {
			t.Fatal(err)
		}
		expect(t, c, "session.created")
		send(t, c, map[string]any{"type": "session.update", "session": map[string]any{"type": "realtime",
			"tools": []any{map[string]any{"type": "function", "name": "f", "parameters": map[string]any{"type": "object"}}}}})
		expect(t, c, "session.updated")
		for _, resp := range []map[string]any{{}, {"output_modalities": []string{"text"}}, {"tool_choice": "required"}} {
			sent := time.Now()
			send(t, c, map[string]any{"type": "response.create", "response": resp})
			ev := readEvent(t, c)
			if ev.str("type") != "response.created" || time.Since(sent) < delay {
				t.Fatalf("%v: first event %s after %v, want response.created after the %v delay", resp, ev.str("type"), time.Since(sent), delay)
			}
			if next := readEvent(t, c).str("type"); next != "rate_limits.updated" {
				t.Fatalf("%v: after response.created %s", resp, next)
			}
			if done, _ := expectResponse(t, c); done.str("response.status") != "completed" {
				t.Fatalf("%v: %v", resp, done)
			}
		}
	})
}

// TestFailResponses: every response ends failed with a server_error and no
// output, after the first-audio delay.
func TestFailResponses(t *testing.T) {
	overTLS(t, mockai.Config{FailResponses: true, FirstAudioDelay: 20 * time.Millisecond}, func(t *testing.T, srv *mockai.Server) {
		c, _, err := liveDial(t, srv, realtimeURL(srv, "gpt-realtime"), nil)
		if err != nil {
			t.Fatal(err)
		}
		expect(t, c, "session.created")
		for range 2 {
			send(t, c, map[string]any{"type": "response.create"})
			expect(t, c, "response.created")
			done, seen := expectResponse(t, c)
			if done.str("response.status") != "failed" || done.str("response.status_details.error.type") != "server_error" ||
				seen["response.output_audio.delta"] != 0 {
				t.Fatalf("done %v, seen %v", done, seen)
			}
		}
	})
}

// TestOutOfBandResponse: a response.create with conversation "none" runs
// beside the active response (not refused), says conversation_id null,
// and adds nothing to the conversation.
func TestOutOfBandResponse(t *testing.T) {
	overTLS(t, mockai.Config{FirstAudioDelay: 100 * time.Millisecond}, func(t *testing.T, srv *mockai.Server) {
		c, _, err := liveDial(t, srv, realtimeURL(srv, "gpt-realtime"), nil)
		if err != nil {
			t.Fatal(err)
		}
		expect(t, c, "session.created")
		send(t, c, map[string]any{"type": "response.create"})
		voice := expect(t, c, "response.created")
		expect(t, c, "rate_limits.updated")
		send(t, c, map[string]any{"type": "response.create", "response": map[string]any{"conversation": "none",
			"output_modalities": []string{"text"}}})
		oob := expect(t, c, "response.created")
		if voice.get("response.conversation_id") == nil || oob.get("response.conversation_id") != nil {
			t.Fatalf("conversation ids: voice %v, out-of-band %v", voice.get("response.conversation_id"), oob.get("response.conversation_id"))
		}
		done := map[string]string{}
		for len(done) < 2 {
			ev := readEvent(t, c)
			switch ev.str("type") {
			case "error":
				t.Fatalf("error: %v", ev)
			case "response.done":
				done[ev.str("response.id")] = ev.str("response.status")
			}
		}
		if done[voice.str("response.id")] != "completed" || done[oob.str("response.id")] != "completed" {
			t.Fatalf("done %v", done)
		}
	})
}
