package mockai_test

import (
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"rtgate/mockai"
)

// The client here is gorilla's, independent of the server's code: it sees
// only what goes over the wire, as a relay in front of xAI would.

// xaiURL is where a gateway deployment with api_base srv.XAIBaseURL()
// dials: <base>/realtime?model=..., with the scheme made ws(s).
func xaiURL(srv *mockai.Server, model string) string {
	base := srv.XAIBaseURL()
	base = "ws" + strings.TrimPrefix(base, "http")
	return base + "/realtime?model=" + model
}

// dialXAI opens an xAI socket with key as a bearer.
func dialXAI(t *testing.T, srv *mockai.Server, key string) *websocket.Conn {
	t.Helper()
	c, resp, err := dial(t, xaiURL(srv, "grok-voice-latest"), bearer(key), nil)
	if err != nil {
		t.Fatalf("dial xAI: %v (%v)", err, resp)
	}
	return c
}

// maxEvents bounds every loop that reads events.
const maxEvents = 500

// nextNonPing reads the next event that is not an xAI ping.
func nextNonPing(t *testing.T, c *websocket.Conn) event {
	t.Helper()
	for range maxEvents {
		ev := readEvent(t, c)
		if ev.str("type") != "ping" {
			return ev
		}
	}
	t.Fatalf("only pings in %d events", maxEvents)
	return nil
}

// expectXAI reads the next event that is not a ping and fails unless it has type typ.
func expectXAI(t *testing.T, c *websocket.Conn, typ string) event {
	t.Helper()
	ev := nextNonPing(t, c)
	if got := ev.str("type"); got != typ {
		t.Fatalf("got event %q (%v), want %q", got, ev, typ)
	}
	return ev
}

// xaiUntilDone reads the events (pings left out) up to and including response.done.
func xaiUntilDone(t *testing.T, c *websocket.Conn) []event {
	t.Helper()
	var evs []event
	for range maxEvents {
		ev := nextNonPing(t, c)
		evs = append(evs, ev)
		if ev.str("type") == "response.done" {
			return evs
		}
	}
	t.Fatalf("no response.done in %d events", maxEvents)
	return nil
}

func types(evs []event) []string {
	out := make([]string, len(evs))
	for i, ev := range evs {
		out[i] = ev.str("type")
	}
	return out
}

// openXAI dials and reads the opening events up to the first ping.
func openXAI(t *testing.T, srv *mockai.Server) (*websocket.Conn, []event) {
	t.Helper()
	c := dialXAI(t, srv, "xai-key")
	var opening []event
	for range 5 {
		ev := readEvent(t, c)
		opening = append(opening, ev)
		if ev.str("type") == "ping" {
			return c, opening
		}
	}
	t.Fatalf("no ping among the opening events %v", types(opening))
	return nil, nil
}

func TestXAIOpening(t *testing.T) {
	for _, tt := range []struct {
		name string
		cfg  mockai.Config
		want []string
	}{
		// xAI until May 2026, the default: what a relay must repair for
		// OpenAI clients, which wait for session.created.
		{"conversation first", mockai.Config{}, []string{"conversation.created", "ping"}},
		// xAI since May 2026 (LiteLLM #28424).
		{"session.created first", mockai.Config{XAISessionCreated: true}, []string{"session.created", "conversation.created", "ping"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			srv := start(t, tt.cfg)
			c, opening := openXAI(t, srv)
			if got := types(opening); strings.Join(got, ",") != strings.Join(tt.want, ",") {
				t.Fatalf("opening events %v, want %v", got, tt.want)
			}
			for _, ev := range opening {
				switch ev.str("type") {
				case "conversation.created":
					if ev.str("conversation.object") != "realtime.conversation" || !strings.HasPrefix(ev.str("conversation.id"), "conv_") {
						t.Errorf("conversation.created %v: want conversation {id conv_..., object realtime.conversation}", ev)
					}
				case "ping":
					if ev.num("timestamp") <= 0 || ev.str("event_id") == "" {
						t.Errorf("ping %v: want event_id and a timestamp in ms", ev)
					}
				case "session.created":
					if ev.str("session.voice") != "eve" || ev.str("session.model") != "grok-voice-latest" {
						t.Errorf("session.created %v: want voice eve at the top level, model grok-voice-latest", ev)
					}
				}
			}
			// The session works: session.update is answered, never with a
			// late session.created in between.
			send(t, c, map[string]any{"type": "session.update", "session": map[string]any{"instructions": "hi"}})
			expectXAI(t, c, "session.updated")
			if s := srv.Stats(); s.Sessions != 1 || s.XAIPings < 1 {
				t.Errorf("stats %+v: want 1 session and a ping counted", s)
			}
		})
	}
}

func TestXAIPingsKeepComing(t *testing.T) {
	srv := start(t, mockai.Config{XAIPingInterval: 5 * time.Millisecond})
	c, _ := openXAI(t, srv)
	pings := 1
	for i := 0; pings < 4 && i < maxEvents; i++ {
		ev := readEvent(t, c)
		if ev.str("type") != "ping" {
			t.Fatalf("idle session sent %v, want only pings", ev)
		}
		pings++
	}
	if pings < 4 {
		t.Fatalf("%d pings, want 4", pings)
	}
	if got := srv.Stats().XAIPings; got < 4 {
		t.Errorf("Stats.XAIPings %d, want at least 4", got)
	}
}

// noIndices are the events xAI sends without output_index and content_index.
var noIndices = map[string]bool{
	"response.output_item.added": true, "response.output_item.done": true,
	"response.content_part.added": true, "response.content_part.done": true,
	"response.output_text.delta": true, "response.output_text.done": true,
	"response.output_audio_transcript.delta": true, "response.output_audio_transcript.done": true,
	"response.output_audio.delta": true, "response.output_audio.done": true,
	"response.function_call_arguments.delta": true, "response.function_call_arguments.done": true,
}

func TestXAIResponseShape(t *testing.T) {
	tool := map[string]any{"type": "function", "name": "lookup", "parameters": map[string]any{"type": "object"}}
	for _, tt := range []struct {
		name   string
		update map[string]any // session.update before response.create
		want   []string       // the events after response.created and rate_limits.updated
		part   string         // the content part type in response.done ("" for a call)
	}{
		{
			name: "audio",
			want: []string{"response.output_item.added", "response.content_part.added",
				"response.output_audio.delta", "response.output_audio.delta", "response.output_audio.delta",
				"response.output_audio.delta", "response.output_audio.delta", "response.output_audio_transcript.delta",
				"response.output_audio.done", "response.output_audio_transcript.done", "response.content_part.done",
				"response.output_item.done", "response.done"},
			part: "audio",
		},
		{
			name:   "text",
			update: map[string]any{"output_modalities": []string{"text"}},
			want: []string{"response.output_item.added", "response.content_part.added",
				"response.output_text.delta", "response.output_text.delta", "response.output_text.delta",
				"response.output_text.done", "response.content_part.done", "response.output_item.done", "response.done"},
			part: "text",
		},
		{
			name:   "tool call",
			update: map[string]any{"tools": []any{tool}, "tool_choice": "required"},
			want: []string{"response.output_item.added", "conversation.item.added",
				"response.function_call_arguments.delta", "response.function_call_arguments.done",
				"response.output_item.done", "response.done"},
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			srv := start(t, mockai.Config{})
			c, _ := openXAI(t, srv)
			if tt.update != nil {
				send(t, c, map[string]any{"type": "session.update", "session": tt.update})
				expectXAI(t, c, "session.updated")
			}
			send(t, c, map[string]any{"type": "response.create"})
			created := expectXAI(t, c, "response.created")
			expectXAI(t, c, "rate_limits.updated")
			evs := xaiUntilDone(t, c)
			if got := types(evs); strings.Join(got, ",") != strings.Join(tt.want, ",") {
				t.Fatalf("events %v,\nwant %v", got, tt.want)
			}
			for _, ev := range append(evs, created) {
				typ := ev.str("type")
				if noIndices[typ] && (ev.get("output_index") != nil || ev.get("content_index") != nil) {
					t.Errorf("%s carries an index: %v", typ, ev)
				}
				switch typ {
				case "response.created", "response.done":
					if u, ok := ev.get("response.usage").(map[string]any); !ok || len(u) != 0 {
						t.Errorf("%s usage %v, want {}", typ, ev.get("response.usage"))
					}
				case "response.content_part.added":
					if ev.str("part.type") != tt.part {
						t.Errorf("content_part.added part %v, want type %q", ev.get("part"), tt.part)
					}
				case "response.content_part.done":
					if _, has := ev["part"]; has {
						t.Errorf("content_part.done has part: %v", ev)
					}
				case "conversation.item.added":
					if ev.str("item.type") != "function_call" || ev.str("item.role") != "tool" || ev.str("item.name") != "lookup" {
						t.Errorf("conversation.item.added %v: want the function_call item with role tool", ev)
					}
				case "response.output_item.added":
					if role := ev.get("item.role"); tt.part == "" && role != nil {
						t.Errorf("output_item.added of the call has role %v, want none (only conversation.item.added says tool)", role)
					}
				case "response.function_call_arguments.done":
					if ev.str("name") != "lookup" || ev.str("call_id") == "" || ev.str("arguments") != "{}" {
						t.Errorf("function_call_arguments.done %v", ev)
					}
				case "response.output_audio.delta":
					if ev.str("delta") == "" || ev.str("item_id") == "" || ev.str("response_id") == "" {
						t.Errorf("audio delta %v: want delta, item_id and response_id", ev)
					}
				}
			}
			done := evs[len(evs)-1]
			out, _ := done.get("response.output").([]any)
			if len(out) != 1 {
				t.Fatalf("response.done output %v, want one item", done.get("response.output"))
			}
			if tt.part != "" {
				item := event(out[0].(map[string]any))
				content, _ := item.get("content").([]any)
				if len(content) != 1 || event(content[0].(map[string]any)).str("type") != tt.part {
					t.Errorf("response.done content %v, want one part of type %q", item.get("content"), tt.part)
				}
			}
		})
	}
}

func TestXAIVoices(t *testing.T) {
	type tc struct {
		name      string
		session   map[string]any
		wantVoice string // session.voice in session.updated and the response's voice
	}
	var cases []tc
	for _, v := range mockai.XAIVoices() {
		cases = append(cases, tc{v, map[string]any{"voice": v}, v})
	}
	cases = append(cases,
		tc{"capitalised", map[string]any{"voice": "Ara"}, "Ara"},
		// OpenAI's place for the voice: xAI reads only the top level.
		tc{"at audio.output.voice", map[string]any{"audio": map[string]any{"output": map[string]any{"voice": "rex"}}}, "eve"},
	)
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			srv := start(t, mockai.Config{})
			c, _ := openXAI(t, srv)
			send(t, c, map[string]any{"type": "session.update", "session": tt.session})
			if got := expectXAI(t, c, "session.updated").str("session.voice"); got != tt.wantVoice {
				t.Errorf("session.updated voice %q, want %q", got, tt.wantVoice)
			}
			send(t, c, map[string]any{"type": "response.create"})
			if got := expectXAI(t, c, "response.created").str("response.audio.output.voice"); got != tt.wantVoice {
				t.Errorf("response voice %q, want %q", got, tt.wantVoice)
			}
			xaiUntilDone(t, c)
		})
	}
}

// TestXAIServerVAD plays one spoken turn: the VAD commits it, and a
// response follows only when turn_detection says create_response: xAI,
// unlike OpenAI, does not default it to true.
func TestXAIServerVAD(t *testing.T) {
	speech := base64.StdEncoding.EncodeToString(mockai.PCMPattern(4800)) // 100 ms, loud
	silence := base64.StdEncoding.EncodeToString(make([]byte, 300*48))   // 300 ms > silence_duration_ms
	for _, tt := range []struct {
		name     string
		session  map[string]any
		response bool
	}{
		{"top level, create_response unset", map[string]any{"turn_detection": map[string]any{"type": "server_vad"}}, false},
		{"top level, create_response true", map[string]any{"turn_detection": map[string]any{"type": "server_vad", "create_response": true}}, true},
		{"nested, create_response unset", map[string]any{"audio": map[string]any{"input": map[string]any{
			"turn_detection": map[string]any{"type": "server_vad"}}}}, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			srv := start(t, mockai.Config{})
			c, _ := openXAI(t, srv)
			send(t, c, map[string]any{"type": "session.update", "session": tt.session})
			expectXAI(t, c, "session.updated")
			send(t, c, map[string]any{"type": "input_audio_buffer.append", "audio": speech})
			expectXAI(t, c, "input_audio_buffer.speech_started")
			send(t, c, map[string]any{"type": "input_audio_buffer.append", "audio": silence})
			expectXAI(t, c, "input_audio_buffer.speech_stopped")
			expectXAI(t, c, "input_audio_buffer.committed")
			// A response the VAD started is announced before the server reads
			// anything more, so the event after this item tells.
			send(t, c, map[string]any{"type": "conversation.item.create", "item": map[string]any{
				"type": "message", "role": "user", "content": []any{map[string]any{"type": "input_text", "text": "and?"}}}})
			next := nextNonPing(t, c).str("type")
			if tt.response {
				if next != "response.created" {
					t.Fatalf("after the turn: %q, want response.created", next)
				}
				if evs := xaiUntilDone(t, c); evs[len(evs)-1].str("response.status") != "completed" {
					t.Errorf("response %v", evs[len(evs)-1])
				}
				return
			}
			if next != "conversation.item.added" {
				t.Fatalf("after the turn: %q, want conversation.item.added (no response without create_response)", next)
			}
		})
	}
}

func TestXAIClientSecrets(t *testing.T) {
	const key = "xai-api-key"
	srv := start(t, mockai.Config{Key: key})
	endpoint := srv.XAIBaseURL() + "/realtime/client_secrets"
	for _, tt := range []struct {
		name   string
		key    string
		body   string
		status int
		ttl    time.Duration // with 200
	}{
		{"no body", key, "", http.StatusOK, 600 * time.Second},
		{"expires_after", key, `{"expires_after":{"seconds":300}}`, http.StatusOK, 300 * time.Second},
		{"session is not supported", key, `{"session":{"type":"realtime","model":"grok-voice-latest"}}`, http.StatusBadRequest, 0},
		{"anchor is not supported", key, `{"expires_after":{"anchor":"created_at","seconds":300}}`, http.StatusBadRequest, 0},
		{"zero seconds", key, `{"expires_after":{"seconds":0}}`, http.StatusBadRequest, 0},
		{"not JSON", key, `expires`, http.StatusBadRequest, 0},
		{"wrong key", "sk-other", "", http.StatusUnauthorized, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			req, err := http.NewRequest(http.MethodPost, endpoint, strings.NewReader(tt.body))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Authorization", "Bearer "+tt.key)
			req.Header.Set("Content-Type", "application/json")
			before := time.Now().Unix()
			resp, err := (&http.Client{Timeout: ioTimeout}).Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			after := time.Now().Unix()
			data, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != tt.status {
				t.Fatalf("status %d (%s), want %d", resp.StatusCode, data, tt.status)
			}
			var body map[string]any
			if err := json.Unmarshal(data, &body); err != nil {
				t.Fatalf("body %s: %v", data, err)
			}
			if tt.status != http.StatusOK {
				if code, _ := body["code"].(string); code == "" || body["error"] == nil {
					t.Errorf("error body %s: want xAI's {code, error}", data)
				}
				return
			}
			value, _ := body["value"].(string)
			exp, _ := body["expires_at"].(float64)
			ttl := int64(tt.ttl / time.Second)
			if value == "" || int64(exp) < before+ttl || int64(exp) > after+ttl || len(body) != 2 {
				t.Fatalf("body %s: want {value, expires_at} with expires_at %d s from now", data, ttl)
			}
			// The secret opens an xAI socket like the key does.
			c := dialXAI(t, srv, value)
			expectXAI(t, c, "conversation.created")
		})
	}
	// Minting needs the API key itself.
	resp, err := (&http.Client{Timeout: ioTimeout}).Post(endpoint, "application/json", strings.NewReader(""))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("no key: status %d, want 401", resp.StatusCode)
	}
	// Every request is on record, as it arrived and as it was answered.
	reqs := srv.XAISecretRequests()
	if len(reqs) != 8 {
		t.Fatalf("%d requests on record, want 8", len(reqs))
	}
	if r := reqs[2]; r.Status != http.StatusBadRequest || r.Key != key || !strings.Contains(string(r.Body), `"session"`) {
		t.Errorf("record of the request with a session: %+v", r)
	}
	if r := reqs[7]; r.Status != http.StatusUnauthorized || r.Key != "" {
		t.Errorf("record of the request without a key: %+v", r)
	}
}

func TestXAISecretOnlyOpensXAI(t *testing.T) {
	srv := start(t, mockai.Config{Key: "xai-api-key", RejectStatus: http.StatusUnauthorized})
	req, _ := http.NewRequest(http.MethodPost, srv.XAIBaseURL()+"/realtime/client_secrets", nil)
	req.Header.Set("Authorization", "Bearer xai-api-key")
	resp, err := (&http.Client{Timeout: ioTimeout}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var body struct {
		Value string `json:"value"`
	}
	err = json.NewDecoder(resp.Body).Decode(&body)
	resp.Body.Close()
	if err != nil || body.Value == "" {
		t.Fatalf("mint: %v %+v", err, body)
	}
	for _, tt := range []struct {
		url  string
		want int // HTTP status of the refusal, 0 for an upgrade
	}{
		{xaiURL(srv, "grok-voice-latest"), 0},
		{realtimeURL(srv, "gpt-realtime"), http.StatusUnauthorized}, // a secret is xAI's
	} {
		_, resp, err := dial(t, tt.url, bearer(body.Value), nil)
		switch {
		case tt.want == 0 && err != nil:
			t.Errorf("%s: %v, want an upgrade", tt.url, err)
		case tt.want != 0 && (resp == nil || resp.StatusCode != tt.want):
			t.Errorf("%s: %v, want HTTP %d", tt.url, err, tt.want)
		}
	}
}

func TestXAIRecords(t *testing.T) {
	srv := start(t, mockai.Config{})
	c, _ := openXAI(t, srv)
	send(t, c, map[string]any{"type": "session.update", "session": map[string]any{"voice": "leo"}})
	expectXAI(t, c, "session.updated")
	connect(t, srv, nil)
	recs := srv.Records()
	if len(recs) != 2 {
		t.Fatalf("%d records, want 2", len(recs))
	}
	x, o := recs[0], recs[1]
	if x.Dialect != "xai" || x.Path != "/xai/v1/realtime" || x.Key != "xai-key" || !strings.HasPrefix(x.SessionID, "sess_") {
		t.Errorf("xAI record %+v", x)
	}
	if o.Dialect != "" {
		t.Errorf("OpenAI record says dialect %q", o.Dialect)
	}
	got := srv.Received(x.SessionID)
	if len(got) != 1 || got[0].Type != "session.update" {
		t.Errorf("received %+v, want the session.update", got)
	}
	if s := srv.Stats(); s.Sessions != 2 || s.Upgrades != 2 {
		t.Errorf("stats %+v: want 2 sessions and upgrades", s)
	}
}

func TestXAIConfigValidation(t *testing.T) {
	for _, tt := range []struct {
		interval time.Duration
		ok       bool
	}{
		{0, true}, {-1, true}, {time.Millisecond, true}, {500 * time.Microsecond, false},
	} {
		srv, err := mockai.Start(mockai.Config{XAIPingInterval: tt.interval}, "127.0.0.1:0")
		if srv != nil {
			srv.Close()
		}
		if (err == nil) != tt.ok {
			t.Errorf("XAIPingInterval %v: err %v, want ok %v", tt.interval, err, tt.ok)
		}
	}
}
