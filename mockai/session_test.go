package mockai_test

import (
	"encoding/base64"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"rtgate/mockai"
)

func TestSessionCreated(t *testing.T) {
	t.Parallel()
	srv := start(t, mockai.Config{})
	tests := []struct {
		name, path, wantModel string
	}{
		{"openai", "/v1/realtime?model=gpt-realtime-mini", "gpt-realtime-mini"},
		{"azure ga", "/openai/v1/realtime?model=my-deployment", "my-deployment"},
		{"azure preview", "/openai/realtime?api-version=2025-04-01-preview&deployment=dep1", "dep1"},
		{"call control socket", "/v1/realtime?call_id=rtc_123", "gpt-realtime"},
		{"transcription", "/v1/realtime?intent=transcription", "gpt-realtime"},
	}
	ids := map[string]bool{}
	for _, tt := range tests {
		c, _, err := dial(t, "ws://"+srv.Addr()+tt.path, nil, nil)
		if err != nil {
			t.Fatalf("%s: dial: %v", tt.name, err)
		}
		ev := expect(t, c, "session.created")
		checks := map[string]any{
			"session.type":                            "realtime",
			"session.object":                          "realtime.session",
			"session.model":                           tt.wantModel,
			"session.audio.input.format.type":         "audio/pcm",
			"session.audio.input.format.rate":         24000.0,
			"session.audio.output.format.type":        "audio/pcm",
			"session.audio.output.format.rate":        24000.0,
			"session.audio.output.voice":              "alloy",
			"session.audio.input.turn_detection.type": "server_vad",
			"session.tool_choice":                     "auto",
			"session.max_output_tokens":               "inf",
		}
		for path, want := range checks {
			if got := ev.get(path); got != want {
				t.Errorf("%s: %s = %v, want %v", tt.name, path, got, want)
			}
		}
		if !strings.HasPrefix(ev.str("event_id"), "event_") {
			t.Errorf("%s: event_id %q", tt.name, ev.str("event_id"))
		}
		if mods, _ := ev.get("session.output_modalities").([]any); len(mods) != 1 || mods[0] != "audio" {
			t.Errorf("%s: output_modalities %v", tt.name, ev.get("session.output_modalities"))
		}
		if ev.str("session.instructions") == "" {
			t.Errorf("%s: no instructions", tt.name)
		}
		if exp := int64(ev.num("session.expires_at")); exp < time.Now().Add(59*time.Minute).Unix() {
			t.Errorf("%s: expires_at %d is not about an hour ahead", tt.name, exp)
		}
		id := ev.str("session.id")
		if !strings.HasPrefix(id, "sess_") || ids[id] {
			t.Errorf("%s: session id %q is malformed or repeated", tt.name, id)
		}
		ids[id] = true
	}

	recs := srv.Records()
	if len(recs) != len(tests) {
		t.Fatalf("%d records, want %d", len(recs), len(tests))
	}
	for i, r := range recs {
		if !ids[r.SessionID] || r.Path+"?"+r.Query != tests[i].path {
			t.Errorf("record %d = %s?%s session %q, want %s with an issued session", i, r.Path, r.Query, r.SessionID, tests[i].path)
		}
	}
	if st := srv.Stats(); st.Sessions != int64(len(tests)) || st.Upgrades != int64(len(tests)) {
		t.Errorf("stats %+v, want %d sessions and upgrades", st, len(tests))
	}
}

func TestMissingModelIsBadRequest(t *testing.T) {
	t.Parallel()
	srv := start(t, mockai.Config{})
	for _, path := range []string{"/v1/realtime", "/v1/realtime?model=", "/openai/realtime?api-version=2025-04-01-preview"} {
		_, resp, err := dial(t, "ws://"+srv.Addr()+path, nil, nil)
		if err == nil || resp == nil || resp.StatusCode != 400 {
			t.Fatalf("%s: err %v, resp %v; want HTTP 400", path, err, resp)
		}
		if _, code, _ := httpErrorBody(t, resp); code != "missing_required_parameter" {
			t.Errorf("%s: code %q", path, code)
		}
	}
	if st := srv.Stats(); st.Rejected != 3 || st.Upgrades != 0 {
		t.Errorf("stats %+v, want 3 rejected and no upgrades", st)
	}
}

func TestSessionUpdate(t *testing.T) {
	t.Parallel()
	srv := start(t, mockai.Config{})
	c, created := connect(t, srv, nil)
	send(t, c, map[string]any{"type": "session.update", "session": map[string]any{
		"type":         "realtime",
		"instructions": "Be brief.",
		"audio":        map[string]any{"output": map[string]any{"voice": "marin"}},
		"id":           "sess_forged",
	}})
	ev := expect(t, c, "session.updated")
	checks := map[string]any{
		"session.instructions":       "Be brief.",
		"session.audio.output.voice": "marin",
		"session.audio.input":        nil, // shallow merge: "audio" was replaced whole
		"session.model":              "gpt-realtime",
		"session.id":                 created.str("session.id"),
		"session.tool_choice":        "auto",
	}
	for path, want := range checks {
		if got := ev.get(path); got != want {
			t.Errorf("%s = %v, want %v", path, got, want)
		}
	}
	// The merge persists: a second update keeps the first one's instructions.
	send(t, c, map[string]any{"type": "session.update", "session": map[string]any{"type": "realtime", "tool_choice": "none"}})
	ev = expect(t, c, "session.updated")
	if ev.str("session.instructions") != "Be brief." || ev.str("session.tool_choice") != "none" {
		t.Errorf("second update lost state: %v", ev["session"])
	}
}

// appendAudio sends n raw bytes of audio as base64.
func appendAudio(t *testing.T, c *websocket.Conn, n int) {
	t.Helper()
	send(t, c, map[string]any{"type": "input_audio_buffer.append", "audio": base64.StdEncoding.EncodeToString(make([]byte, n))})
}

// usageOf pulls response.done's usage into a comparable struct.
type tokens struct{ total, in, out, inText, inAudio, inImage, inCached, outText, outAudio int }

func usageOf(ev event) tokens {
	return tokens{
		total: ev.num("response.usage.total_tokens"), in: ev.num("response.usage.input_tokens"), out: ev.num("response.usage.output_tokens"),
		inText: ev.num("response.usage.input_token_details.text_tokens"), inAudio: ev.num("response.usage.input_token_details.audio_tokens"),
		inImage: ev.num("response.usage.input_token_details.image_tokens"), inCached: ev.num("response.usage.input_token_details.cached_tokens"),
		outText: ev.num("response.usage.output_token_details.text_tokens"), outAudio: ev.num("response.usage.output_token_details.audio_tokens"),
	}
}

// wantTokens builds the documented usage: input text 10, output text 5, audio bytes/480.
func wantTokens(inAudio, outAudio int) tokens {
	return tokens{total: 15 + inAudio + outAudio, in: 10 + inAudio, out: 5 + outAudio, inText: 10, inAudio: inAudio, outText: 5, outAudio: outAudio}
}

func TestResponseFlow(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		cfg        mockai.Config
		input      func(t *testing.T, c *websocket.Conn) // audio sent before response.create
		wantDeltas int
		wantBytes  int
		want       tokens
	}{
		{
			name: "defaults, committed audio",
			input: func(t *testing.T, c *websocket.Conn) {
				appendAudio(t, c, 4800)
				appendAudio(t, c, 2400)
				send(t, c, map[string]any{"type": "input_audio_buffer.commit"})
				expect(t, c, "input_audio_buffer.committed")
			},
			wantDeltas: 5, wantBytes: 4800,
			want: wantTokens(15, 50),
		},
		{
			name:       "uncommitted audio rounds down",
			cfg:        mockai.Config{AudioDeltas: 3, AudioDeltaBytes: 960},
			input:      func(t *testing.T, c *websocket.Conn) { appendAudio(t, c, 1000) },
			wantDeltas: 3, wantBytes: 960,
			want: wantTokens(2, 6),
		},
		{
			name: "clear drops uncommitted audio only",
			cfg:  mockai.Config{AudioDeltas: 1, AudioDeltaBytes: 48000},
			input: func(t *testing.T, c *websocket.Conn) {
				appendAudio(t, c, 960)
				send(t, c, map[string]any{"type": "input_audio_buffer.commit"})
				expect(t, c, "input_audio_buffer.committed")
				appendAudio(t, c, 4800)
				send(t, c, map[string]any{"type": "input_audio_buffer.clear"})
				expect(t, c, "input_audio_buffer.cleared")
				appendAudio(t, c, 480)
			},
			wantDeltas: 1, wantBytes: 48000,
			want: wantTokens(3, 100),
		},
		{
			name:       "no audio deltas",
			cfg:        mockai.Config{AudioDeltas: -1},
			input:      func(t *testing.T, c *websocket.Conn) {},
			wantDeltas: 0,
			want:       wantTokens(0, 0),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := start(t, tt.cfg)
			c, _ := connect(t, srv, nil)
			tt.input(t, c)
			for round := 0; round < 2; round++ {
				send(t, c, map[string]any{"type": "response.create"})
				created := expect(t, c, "response.created")
				respID := created.str("response.id")
				if !strings.HasPrefix(respID, "resp_") || created.str("response.status") != "in_progress" {
					t.Fatalf("response.created = %v", created)
				}
				rl := expect(t, c, "rate_limits.updated")
				if lims, _ := rl["rate_limits"].([]any); len(lims) == 0 {
					t.Errorf("rate_limits.updated without limits: %v", rl)
				}
				var itemID string
				for i := 0; i < tt.wantDeltas; i++ {
					d := expect(t, c, "response.output_audio.delta")
					pcm, err := base64.StdEncoding.DecodeString(d.str("delta"))
					if err != nil || len(pcm) != tt.wantBytes {
						t.Fatalf("delta %d: %d bytes (%v), want %d", i, len(pcm), err, tt.wantBytes)
					}
					if i == 0 {
						itemID = d.str("item_id")
					}
					if d.str("response_id") != respID || d.str("item_id") != itemID || itemID == "" ||
						d.num("output_index") != 0 || d.num("content_index") != 0 {
						t.Fatalf("delta %d fields: %v", i, d)
					}
				}
				tr := expect(t, c, "response.output_audio_transcript.delta")
				if tr.str("response_id") != respID || tr.str("delta") == "" {
					t.Errorf("transcript delta %v", tr)
				}
				done := expect(t, c, "response.done")
				if done.str("response.id") != respID || done.str("response.status") != "completed" {
					t.Errorf("response.done = %v", done)
				}
				want := tt.want
				if round == 1 { // the input audio was used up by the first response
					want = wantTokens(0, tt.want.outAudio)
				}
				if got := usageOf(done); got != want {
					t.Errorf("round %d usage %+v, want %+v", round, got, want)
				}
			}
		})
	}
}

func TestResponseCancel(t *testing.T) {
	t.Parallel()
	srv := start(t, mockai.Config{AudioDeltas: 1000, AudioDeltaBytes: 960, AudioDeltaInterval: 2 * time.Millisecond})
	c, _ := connect(t, srv, nil)
	send(t, c, map[string]any{"type": "response.create"})
	expect(t, c, "response.created")
	expect(t, c, "rate_limits.updated")
	expect(t, c, "response.output_audio.delta")
	send(t, c, map[string]any{"type": "response.create", "event_id": "evt_second"})
	send(t, c, map[string]any{"type": "response.cancel"})

	deltas, errs, done := untilDone(t, c)
	deltas++ // the one read above
	if !slices.ContainsFunc(errs, func(ev event) bool {
		return ev.str("error.code") == "conversation_already_has_active_response" && ev.str("error.event_id") == "evt_second"
	}) {
		t.Error("a second response.create during a response got no conversation_already_has_active_response error")
	}
	if done.str("response.status") != "cancelled" || done.str("response.status_details.reason") != "client_cancelled" {
		t.Errorf("response.done = %v, want status cancelled", done["response"])
	}
	if deltas >= 1000 {
		t.Errorf("all %d deltas were sent despite the cancel", deltas)
	}
	// Usage counts exactly the audio that was sent, and no transcript.
	want := tokens{total: 10 + deltas*2, in: 10, out: deltas * 2, inText: 10, outAudio: deltas * 2}
	if got := usageOf(done); got != want {
		t.Errorf("usage %+v, want %+v (%d deltas)", got, want, deltas)
	}

	send(t, c, map[string]any{"type": "response.cancel", "event_id": "evt_late"})
	if ev := expect(t, c, "error"); ev.str("error.code") != "response_cancel_not_active" || ev.str("error.event_id") != "evt_late" {
		t.Errorf("cancel without a response: %v", ev)
	}
	send(t, c, map[string]any{"type": "response.create"}) // a new response can start
	expect(t, c, "response.created")
}

// untilDone reads a response's events up to its response.done: the audio
// deltas counted, the errors among them, and the response.done. Any other
// event fails the test.
func untilDone(t *testing.T, c *websocket.Conn) (deltas int, errs []event, done event) {
	t.Helper()
	for done == nil {
		ev := readEvent(t, c)
		switch ev.str("type") {
		case "response.output_audio.delta":
			deltas++
		case "error":
			errs = append(errs, ev)
		case "response.done":
			done = ev
		default:
			t.Fatalf("unexpected event %v", ev)
		}
	}
	return deltas, errs, done
}

// TestResponseCancelLate: with CancelLate a cancel crosses the response's
// own end: the error response_cancel_not_active (naming the cancel) comes
// first, then the response ends completed, billed the deltas sent.
func TestResponseCancelLate(t *testing.T) {
	t.Parallel()
	srv := start(t, mockai.Config{AudioDeltas: 1000, AudioDeltaBytes: 960, AudioDeltaInterval: 2 * time.Millisecond, CancelLate: true})
	c, _ := connect(t, srv, nil)
	send(t, c, map[string]any{"type": "response.create"})
	expect(t, c, "response.created")
	expect(t, c, "rate_limits.updated")
	expect(t, c, "response.output_audio.delta")
	send(t, c, map[string]any{"type": "response.cancel", "event_id": "evt_cancel"})
	deltas, errs, done := untilDone(t, c)
	deltas++ // the one read above
	if len(errs) == 0 || slices.ContainsFunc(errs, func(ev event) bool {
		return ev.str("error.code") != "response_cancel_not_active" || ev.str("error.event_id") != "evt_cancel"
	}) {
		t.Errorf("errors before the response.done %v, want response_cancel_not_active for evt_cancel", errs)
	}
	if done.str("response.status") != "completed" || deltas >= 1000 {
		t.Errorf("response.done status %q after %d deltas, want completed at once", done.str("response.status"), deltas)
	}
	if got := usageOf(done); got.outAudio != deltas*2 {
		t.Errorf("usage %+v, want the %d deltas sent", got, deltas)
	}
}

func TestConversationItemCreate(t *testing.T) {
	t.Parallel()
	srv := start(t, mockai.Config{})
	c, _ := connect(t, srv, nil)
	item := map[string]any{"id": "item_client1", "type": "message", "role": "user",
		"content": []any{map[string]any{"type": "input_text", "text": "hi"}}}
	send(t, c, map[string]any{"type": "conversation.item.create", "item": item})
	for _, typ := range []string{"conversation.item.added", "conversation.item.done"} {
		ev := expect(t, c, typ)
		if ev.str("item.id") != "item_client1" || ev.str("item.role") != "user" || ev.get("previous_item_id") != nil {
			t.Errorf("%s = %v", typ, ev)
		}
	}
	// Without an id the server assigns one, and chains previous_item_id.
	send(t, c, map[string]any{"type": "conversation.item.create", "item": map[string]any{"type": "message", "role": "user"}})
	ev := expect(t, c, "conversation.item.added")
	if !strings.HasPrefix(ev.str("item.id"), "item_") || ev.str("previous_item_id") != "item_client1" {
		t.Errorf("second item: %v", ev)
	}
	expect(t, c, "conversation.item.done")
}

// Bad client events get an error event and the connection stays usable.
func TestInvalidEventsKeepConnectionOpen(t *testing.T) {
	t.Parallel()
	srv := start(t, mockai.Config{})
	tests := []struct {
		name      string
		mt        int
		msg       string
		wantCode  string
		wantParam any
		wantEvent any // error.event_id: the client's event_id, or nil
	}{
		{"not json", websocket.TextMessage, "hello", "invalid_value", nil, nil},
		{"unknown type", websocket.TextMessage, `{"type":"nope.nope","event_id":"evt_1"}`, "invalid_value", "type", "evt_1"},
		{"no type", websocket.TextMessage, `{"event_id":"evt_2"}`, "invalid_value", "type", "evt_2"},
		{"type not a string", websocket.TextMessage, `{"type":5}`, "invalid_value", nil, nil},
		{"binary frame", websocket.BinaryMessage, `{"type":"response.create"}`, "invalid_value", nil, nil},
		{"append without audio", websocket.TextMessage, `{"type":"input_audio_buffer.append"}`, "missing_required_parameter", "audio", nil},
		{"append bad base64", websocket.TextMessage, `{"type":"input_audio_buffer.append","audio":"@@@@"}`, "invalid_value", "audio", nil},
		{"update without session", websocket.TextMessage, `{"type":"session.update"}`, "missing_required_parameter", "session", nil},
		{"update bad session type", websocket.TextMessage, `{"type":"session.update","session":{"type":"chat"}}`, "invalid_value", "session.type", nil},
		{"item without item", websocket.TextMessage, `{"type":"conversation.item.create"}`, "missing_required_parameter", "item", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, _ := connect(t, srv, nil)
			sendRaw(t, c, tt.mt, []byte(tt.msg))
			ev := expect(t, c, "error")
			if ev.str("error.type") != "invalid_request_error" || ev.str("error.code") != tt.wantCode ||
				ev.get("error.param") != tt.wantParam || ev.get("error.event_id") != tt.wantEvent || ev.str("error.message") == "" {
				t.Errorf("error event %v, want code %q param %v event_id %v", ev, tt.wantCode, tt.wantParam, tt.wantEvent)
			}
			send(t, c, map[string]any{"type": "session.update", "session": map[string]any{"type": "realtime"}})
			expect(t, c, "session.updated")
		})
	}
}

// An append near OpenAI's 15 MiB limit is accepted and counted.
//
// The server unmasks, JSON-scans, unquotes and base64-decodes those 14.5 MiB one
// byte at a time; under -race that is several CPU-seconds, and on a loaded 2-core
// box far more wall time than ioTimeout, the hang guard every other read uses.
// So the write and the read that wait on that work are bounded by the test's own
// deadline instead: the test waits for response.created, however long the CPU
// it gets makes that take, and still fails (rather than hangs) if it never comes.
func TestLargeAppend(t *testing.T) {
	t.Parallel()
	srv := start(t, mockai.Config{AudioDeltas: -1})
	c, _ := connect(t, srv, nil)
	const raw = 3 * 3_800_000 // 14.5 MiB of base64
	msg := `{"type":"input_audio_buffer.append","audio":"` + strings.Repeat("A", raw/3*4) + `"}`
	sendRawWithin(t, c, websocket.TextMessage, []byte(msg), untilTestDeadline(t))
	send(t, c, map[string]any{"type": "response.create"})
	expectWithin(t, c, "response.created", untilTestDeadline(t))
	expect(t, c, "rate_limits.updated")
	expect(t, c, "response.output_audio_transcript.delta")
	done := expect(t, c, "response.done")
	if got := usageOf(done).inAudio; got != raw/480 {
		t.Errorf("input audio tokens %d, want %d", got, raw/480)
	}
}

func TestDelays(t *testing.T) {
	t.Parallel()
	const d = 150 * time.Millisecond
	srv := start(t, mockai.Config{UpgradeDelay: d, SessionDelay: d, FirstAudioDelay: d, AudioDeltas: 3, AudioDeltaInterval: d})
	t0 := time.Now()
	c, _, err := dial(t, realtimeURL(srv, "gpt-realtime"), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	t1 := time.Now()
	// Like @openai/agents-realtime: update before session.created has arrived.
	send(t, c, map[string]any{"type": "session.update", "session": map[string]any{"type": "realtime", "instructions": "early"}})
	expect(t, c, "session.created")
	t2 := time.Now()
	if ev := expect(t, c, "session.updated"); ev.str("session.instructions") != "early" {
		t.Errorf("early update lost: %v", ev)
	}
	send(t, c, map[string]any{"type": "response.create"})
	t3 := time.Now()
	expect(t, c, "response.created")
	expect(t, c, "rate_limits.updated")
	expect(t, c, "response.output_audio.delta")
	t4 := time.Now()
	expect(t, c, "response.output_audio.delta")
	expect(t, c, "response.output_audio.delta")
	t5 := time.Now()
	for _, g := range []struct {
		name     string
		got, min time.Duration
	}{
		// Each is measured from a point the client knows precedes the server's timer.
		{"upgrade", t1.Sub(t0), d},
		{"upgrade+session", t2.Sub(t0), 2 * d},
		{"first audio", t4.Sub(t3), d},
		{"first audio+2 intervals", t5.Sub(t3), 3 * d},
	} {
		if g.got < g.min {
			t.Errorf("%s delay %v, want at least %v", g.name, g.got, g.min)
		}
	}
}

// The server answers a client's close with the same code and reason.
func TestCloseEcho(t *testing.T) {
	t.Parallel()
	srv := start(t, mockai.Config{})
	for _, tt := range []struct {
		code   int
		reason string
	}{
		{websocket.CloseNormalClosure, "bye"},
		{4321, "custom reason"},
		{websocket.CloseNoStatusReceived, ""}, // sent as an empty close payload
	} {
		c, _ := connect(t, srv, nil)
		err := c.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(tt.code, tt.reason), time.Now().Add(ioTimeout))
		if err != nil {
			t.Fatal(err)
		}
		expectClose(t, c, tt.code, tt.reason)
	}
}

func TestPingPong(t *testing.T) {
	t.Parallel()
	srv := start(t, mockai.Config{})
	c, _ := connect(t, srv, nil)
	pong := make(chan string, 1)
	c.SetPongHandler(func(data string) error { pong <- data; return nil })
	if err := c.WriteControl(websocket.PingMessage, []byte("p1"), time.Now().Add(ioTimeout)); err != nil {
		t.Fatal(err)
	}
	send(t, c, map[string]any{"type": "input_audio_buffer.clear"})
	expect(t, c, "input_audio_buffer.cleared") // pong is handled while reading
	select {
	case got := <-pong:
		if got != "p1" {
			t.Errorf("pong %q, want p1", got)
		}
	default:
		t.Error("no pong before the next event")
	}
}

// Events carry their type first, as OpenAI's do: relays read only the
// start of a frame to learn its type.
func TestEventsStartWithTheirType(t *testing.T) {
	srv := start(t, mockai.Config{AudioDeltas: 1})
	c, _ := connect(t, srv, nil)
	send(t, c, map[string]any{"type": "response.create"})
	for range 5 {
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, p, err := c.ReadMessage()
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(string(p), `{"type":"`) {
			t.Fatalf("event does not start with its type: %.80s", p)
		}
		var ev map[string]any
		if err := json.Unmarshal(p, &ev); err != nil {
			t.Fatalf("event is not valid JSON: %v", err)
		}
	}
}
