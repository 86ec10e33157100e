package mockai_test

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"rtgate/mockai"
)

// GPT-Live against mockai with gorilla as the independent client, every
// case over ws:// and wss://.

// overTLS runs fn with a plain and a TLS server made from cfg.
func overTLS(t *testing.T, cfg mockai.Config, fn func(t *testing.T, srv *mockai.Server)) {
	for _, tls := range []bool{false, true} {
		name := map[bool]string{false: "ws", true: "wss"}[tls]
		t.Run(name, func(t *testing.T) {
			c := cfg
			c.TLS = tls
			fn(t, start(t, c))
		})
	}
}

// liveURL is srv's URL for path under /v1 (ws:// or wss://).
func liveURL(srv *mockai.Server, path string) string { return srv.BaseURL() + path }

// httpBase is srv's http(s)://host:port.
func httpBase(srv *mockai.Server) string {
	u := strings.TrimSuffix(srv.BaseURL(), "/v1")
	return strings.Replace(strings.Replace(u, "wss://", "https://", 1), "ws://", "http://", 1)
}

func liveDial(t *testing.T, srv *mockai.Server, url string, hdr http.Header) (*websocket.Conn, *http.Response, error) {
	t.Helper()
	d := websocket.Dialer{HandshakeTimeout: ioTimeout, TLSClientConfig: trust(t, srv)}
	c, resp, err := d.Dial(url, hdr)
	if c != nil {
		t.Cleanup(func() { c.Close() })
	}
	return c, resp, err
}

// httpDo sends a request to srv (body JSON-encoded unless a string) and
// returns the status and body.
func httpDo(t *testing.T, srv *mockai.Server, method, path string, body any) (int, []byte, http.Header) {
	t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	default:
		data, err := json.Marshal(b)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(data)
	}
	req, err := http.NewRequest(method, httpBase(srv)+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Authorization", "Bearer sk-live")
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: trust(t, srv)}, Timeout: ioTimeout}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, data, resp.Header
}

// nextLive reads the next event that is not a session.usage.updated.
func nextLive(t *testing.T, c *websocket.Conn) event {
	t.Helper()
	for {
		ev := readEvent(t, c)
		if ev.str("type") != "session.usage.updated" {
			return ev
		}
	}
}

func expectLive(t *testing.T, c *websocket.Conn, typ string) event {
	t.Helper()
	ev := nextLive(t, c)
	if got := ev.str("type"); got != typ {
		t.Fatalf("got %q (%v), want %q", got, ev, typ)
	}
	return ev
}

// untilLive reads until an event of type typ, skipping others.
func untilLive(t *testing.T, c *websocket.Conn, typ string) event {
	t.Helper()
	for {
		if ev := readEvent(t, c); ev.str("type") == typ {
			return ev
		}
	}
}

// isDrop says err is a connection lost without a close frame.
func isDrop(err error) bool {
	var ce *websocket.CloseError
	return err != nil && (!errors.As(err, &ce) || ce.Code == websocket.CloseAbnormalClosure)
}

func startEvent(session map[string]any) map[string]any {
	return map[string]any{"type": "session.start", "event_id": "evt_start", "session": session}
}

// startLive opens a primary socket and starts a session with config.
func startLive(t *testing.T, srv *mockai.Server, config map[string]any) (*websocket.Conn, event) {
	t.Helper()
	c, _, err := liveDial(t, srv, liveURL(srv, "/live/sessions"), bearer("sk-live"))
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	send(t, c, startEvent(config))
	return c, expectLive(t, c, "session.started")
}

// chunk is 100 ms of 24 kHz PCM16 (4,800 bytes) as base64.
var chunk = base64.StdEncoding.EncodeToString(mockai.PCMPattern(4800))

func liveAppend(t *testing.T, c *websocket.Conn) {
	t.Helper()
	send(t, c, map[string]any{"type": "session.input_audio.append", "audio": chunk})
}

// TestLiveSession: the whole life of a WebSocket session on both routes:
// session.started with a live_ id, model, status and expires_at; every
// append answered with transcripts and PCM output; usage reported on the
// schedule as the cumulative input seconds; session.close answered with
// session.closed (close_requested, the final seconds), then close 1000.
func TestLiveSession(t *testing.T) {
	overTLS(t, mockai.Config{Live: mockai.LiveConfig{UsageInterval: 10 * time.Millisecond, MaxDuration: time.Hour}}, func(t *testing.T, srv *mockai.Server) {
		for _, path := range []string{"/v1/live/sessions", "/openai/v1/live/sessions"} {
			t.Run(path, func(t *testing.T) {
				url := strings.TrimSuffix(srv.BaseURL(), "/v1") + path
				c, _, err := liveDial(t, srv, url, bearer("sk-live"))
				if err != nil {
					t.Fatalf("dial: %v", err)
				}
				before := time.Now()
				send(t, c, startEvent(map[string]any{"model": "gpt-live-1", "instructions": "Be brief.",
					"audio": map[string]any{"format": map[string]any{"type": "audio/pcm", "rate": 24000}, "output": map[string]any{"voice": "marin"}}}))
				st := expectLive(t, c, "session.started")
				id := st.str("session.id")
				if !strings.HasPrefix(id, "live_") || st.str("session.model") != "gpt-live-1" || st.str("session.status") != "active" ||
					st.str("client_event_id") != "evt_start" || st.str("session.instructions") != "Be brief." {
					t.Fatalf("session.started %v", st)
				}
				if exp := int64(st.num("session.expires_at")); exp < before.Add(time.Hour).Unix()-1 || exp > time.Now().Add(time.Hour).Unix()+1 {
					t.Fatalf("expires_at %d, want about an hour from now", exp)
				}
				for i := range 3 {
					liveAppend(t, c)
					in := expectLive(t, c, "session.input_transcript.delta")
					if in.num("start_ms") != i*100 || in.num("end_ms") != (i+1)*100 || in.str("delta") != mockai.LiveTranscript {
						t.Fatalf("input transcript %v", in)
					}
					out := expectLive(t, c, "session.output_audio.delta")
					pcm, err := base64.StdEncoding.DecodeString(out.str("delta"))
					if err != nil || !bytes.Equal(pcm, mockai.PCMPattern(4800)) {
						t.Fatalf("output audio is not the 4800-byte PCM pattern: %v", err)
					}
					expectLive(t, c, "session.output_transcript.delta")
				}
				// The schedule reports 0.3 s once it has seen all three appends.
				for {
					ev := readEvent(t, c)
					if ev.str("type") != "session.usage.updated" {
						t.Fatalf("got %v, want only usage updates", ev)
					}
					if s, _ := ev.get("usage.seconds").(float64); s == 0.3 {
						break
					} else if s > 0.3 {
						t.Fatalf("usage.seconds %v, want at most 0.3", s)
					}
				}
				send(t, c, map[string]any{"type": "session.close"})
				closed := expectLive(t, c, "session.closed")
				if closed.str("reason") != "close_requested" || closed.get("usage.seconds") != 0.3 || closed.str("session.id") != id {
					t.Fatalf("session.closed %v", closed)
				}
				expectClose(t, c, websocket.CloseNormalClosure, "session closed")
				recs := srv.LiveSessions()
				last := recs[len(recs)-1]
				if last.ID != id || last.State != "closed" || last.Reason != "close_requested" || !last.ClosedSent || last.Seconds != 0.3 || last.Key != "sk-live" {
					t.Fatalf("record %+v", last)
				}
			})
		}
	})
}

// TestLiveFirstEvent: anything but a valid session.start first gets an
// error event and close 4000 "invalid_request_error.<code>"; the strict
// configuration names the field it refuses.
func TestLiveFirstEvent(t *testing.T) {
	good := map[string]any{"model": "gpt-live-1"}
	with := func(k string, v any) map[string]any {
		m := map[string]any{"model": "gpt-live-1"}
		m[k] = v
		return m
	}
	tests := []struct {
		name       string
		mt         int
		frame      any
		code       string
		param      string
		clientEvID string
	}{
		{"response.create first", websocket.TextMessage, map[string]any{"type": "response.create", "event_id": "e1"}, "session_not_started", "", "e1"},
		{"append first", websocket.TextMessage, map[string]any{"type": "session.input_audio.append", "audio": chunk}, "session_not_started", "", ""},
		{"binary first", websocket.BinaryMessage, "\x00\x01", "session_not_started", "", ""},
		{"not JSON", websocket.TextMessage, "session.start", "session_not_started", "", ""},
		{"realtime-shaped voice", websocket.TextMessage, startEvent(with("voice", "marin")), "unknown_parameter", "session.voice", "evt_start"},
		{"nested unknown", websocket.TextMessage, startEvent(with("audio", map[string]any{"output": map[string]any{"voice": "marin", "speed": 1.2}})), "unknown_parameter", "session.audio.output.speed", "evt_start"},
		{"unknown format field", websocket.TextMessage, startEvent(with("audio", map[string]any{"format": map[string]any{"type": "audio/pcm", "channels": 2}})), "unknown_parameter", "session.audio.format.channels", "evt_start"},
		{"bad rate", websocket.TextMessage, startEvent(with("audio", map[string]any{"format": map[string]any{"type": "audio/pcm", "rate": 8000}})), "invalid_value", "session.audio.format.rate", "evt_start"},
		{"no model", websocket.TextMessage, startEvent(map[string]any{"instructions": "x"}), "missing_required_parameter", "session.model", "evt_start"},
		{"no session", websocket.TextMessage, map[string]any{"type": "session.start"}, "missing_required_parameter", "session", ""},
		{"responses without model", websocket.TextMessage, startEvent(with("delegation", map[string]any{"type": "responses", "responses": map[string]any{}})), "missing_required_parameter", "session.delegation.responses.model", "evt_start"},
		{"unknown delegation", websocket.TextMessage, startEvent(with("delegation", map[string]any{"type": "robots"})), "invalid_value", "session.delegation.type", "evt_start"},
		{"store not bool", websocket.TextMessage, startEvent(with("store", "yes")), "invalid_type", "session.store", "evt_start"},
	}
	overTLS(t, mockai.Config{}, func(t *testing.T, srv *mockai.Server) {
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				c, _, err := liveDial(t, srv, liveURL(srv, "/live/sessions"), nil)
				if err != nil {
					t.Fatal(err)
				}
				var data []byte
				if s, ok := tt.frame.(string); ok {
					data = []byte(s)
				} else {
					data, _ = json.Marshal(tt.frame)
				}
				sendRaw(t, c, tt.mt, data)
				ev := readEvent(t, c)
				if ev.str("type") != "error" || ev.str("error.code") != tt.code || ev.str("error.param") != tt.param ||
					ev.str("error.type") != "invalid_request_error" || ev.str("error.message") == "" || ev.str("error.client_event_id") != tt.clientEvID {
					t.Fatalf("got %v, want error %s param %q", ev, tt.code, tt.param)
				}
				expectClose(t, c, 4000, "invalid_request_error."+tt.code)
			})
		}
		// The good start works on the same server.
		c, _ := startLive(t, srv, good)
		send(t, c, map[string]any{"type": "session.close"})
		expectLive(t, c, "session.closed")
	})
}

// TestLiveBadEventsAfterStart: once started, a bad event gets an error and
// the session goes on.
func TestLiveBadEventsAfterStart(t *testing.T) {
	tests := []struct {
		name  string
		mt    int
		frame string
		code  string
		param string
	}{
		{"binary frame", websocket.BinaryMessage, "\x00\x01\x02", "invalid_value", ""},
		{"not JSON", websocket.TextMessage, "{", "invalid_value", ""},
		{"second start", websocket.TextMessage, `{"type":"session.start","session":{"model":"gpt-live-1"}}`, "session_already_started", ""},
		{"update voice", websocket.TextMessage, `{"type":"session.update","session":{"audio":{"output":{"voice":"cedar"}}}}`, "unknown_parameter", "session.audio"},
		{"append without audio", websocket.TextMessage, `{"type":"session.input_audio.append"}`, "missing_required_parameter", "audio"},
		{"append not base64", websocket.TextMessage, `{"type":"session.input_audio.append","audio":"!!"}`, "invalid_value", "audio"},
		{"response.create without delegation", websocket.TextMessage, `{"type":"response.create"}`, "delegation_required", ""},
		{"unknown type", websocket.TextMessage, `{"type":"input_audio_buffer.append","audio":""}`, "invalid_value", "type"},
		{"no type", websocket.TextMessage, `{"audio":""}`, "missing_required_parameter", "type"},
	}
	overTLS(t, mockai.Config{Live: mockai.LiveConfig{UsageInterval: -1}}, func(t *testing.T, srv *mockai.Server) {
		c, _ := startLive(t, srv, map[string]any{"model": "gpt-live-1"})
		for _, tt := range tests {
			sendRaw(t, c, tt.mt, []byte(tt.frame))
			ev := readEvent(t, c)
			if ev.str("type") != "error" || ev.str("error.code") != tt.code || ev.str("error.param") != tt.param {
				t.Fatalf("%s: got %v, want error %s param %q", tt.name, ev, tt.code, tt.param)
			}
		}
		send(t, c, map[string]any{"type": "session.input_audio.mute", "event_id": "m1"})
		if ev := expectLive(t, c, "session.input_audio.muted"); ev.str("client_event_id") != "m1" {
			t.Fatalf("muted %v", ev)
		}
		send(t, c, map[string]any{"type": "session.update", "session": map[string]any{"triggers": []any{}}})
		expectLive(t, c, "session.updated")
		send(t, c, map[string]any{"type": "session.close"})
		expectLive(t, c, "session.closed")
		expectClose(t, c, websocket.CloseNormalClosure, "session closed")
	})
}

// TestLiveResponsesDelegation: response.create on a session delegating to
// Responses plays a turn wrapped in response.event, ending in
// response.completed with the backend model and its token usage.
func TestLiveResponsesDelegation(t *testing.T) {
	overTLS(t, mockai.Config{Live: mockai.LiveConfig{UsageInterval: -1}}, func(t *testing.T, srv *mockai.Server) {
		c, _ := startLive(t, srv, map[string]any{"model": "gpt-live-1",
			"delegation": map[string]any{"type": "responses", "responses": map[string]any{"model": "gpt-5.2-mini"}}})
		send(t, c, map[string]any{"type": "response.create", "event_id": "rc1"})
		del := expectLive(t, c, "session.delegation.created")
		if del.str("client_event_id") != "rc1" || del.str("delegation.target") != "responses" || !strings.HasPrefix(del.str("delegation.id"), "del_") {
			t.Fatalf("delegation %v", del)
		}
		var inner []string
		for range 3 {
			ev := expectLive(t, c, "response.event")
			if ev.str("delegation_id") != del.str("delegation.id") {
				t.Fatalf("response.event %v not tied to the delegation", ev)
			}
			inner = append(inner, ev.str("event.type"))
			if ev.str("event.type") == "response.completed" {
				if ev.str("event.response.model") != "gpt-5.2-mini" || ev.num("event.response.usage.total_tokens") != 150 ||
					ev.num("event.response.usage.input_tokens") != 120 || ev.num("event.response.usage.output_tokens") != 30 ||
					ev.str("event.response.id") != del.str("delegation.response_id") {
					t.Fatalf("response.completed %v", ev)
				}
			}
		}
		if strings.Join(inner, ",") != "response.created,response.output_text.delta,response.completed" {
			t.Fatalf("inner events %v", inner)
		}
	})
}

// TestLiveSideband: a sideband sees session.started, the primary's audio
// reflected both ways with its timeline, and can close the session; with
// graceful_close it gets close 1000, without it the connection drops.
func TestLiveSideband(t *testing.T) {
	overTLS(t, mockai.Config{Live: mockai.LiveConfig{UsageInterval: -1}}, func(t *testing.T, srv *mockai.Server) {
		for _, graceful := range []bool{true, false} {
			t.Run(fmt.Sprint("graceful=", graceful), func(t *testing.T) {
				c, st := startLive(t, srv, map[string]any{"model": "gpt-live-1"})
				id := st.str("session.id")
				url := liveURL(srv, "/live/sessions/"+id+"/attach")
				if graceful {
					url += "?graceful_close=true"
				}
				sb, _, err := liveDial(t, srv, url, bearer("sk-live"))
				if err != nil {
					t.Fatal(err)
				}
				if ev := expectLive(t, sb, "session.started"); ev.str("session.id") != id {
					t.Fatalf("sideband session.started %v", ev)
				}
				liveAppend(t, c)
				in := expectLive(t, sb, "session.input_audio.append")
				if in.str("audio") != chunk || in.num("start_ms") != 0 || in.num("end_ms") != 100 {
					t.Fatalf("reflected input %v", in)
				}
				out := expectLive(t, sb, "session.output_audio.delta")
				if out.str("delta") == "" || out.num("start_ms") != 0 || out.num("end_ms") != 100 {
					t.Fatalf("reflected output %v", out)
				}
				send(t, sb, map[string]any{"type": "session.close"})
				for _, conn := range []*websocket.Conn{sb, c} {
					for {
						ev := nextLive(t, conn)
						if ev.str("type") == "session.closed" {
							if ev.str("reason") != "close_requested" || ev.get("usage.seconds") != 0.1 {
								t.Fatalf("session.closed %v", ev)
							}
							break
						}
					}
				}
				expectClose(t, c, websocket.CloseNormalClosure, "session closed")
				_, err = tryRead(sb)
				var ce *websocket.CloseError
				isClose := errors.As(err, &ce)
				if graceful && (!isClose || ce.Code != websocket.CloseNormalClosure) || !graceful && !isDrop(err) {
					t.Fatalf("graceful=%v: sideband ended with %v", graceful, err)
				}
			})
		}
		_, resp, err := liveDial(t, srv, liveURL(srv, "/live/sessions/live_nope/attach"), nil)
		if err == nil || resp == nil || resp.StatusCode != http.StatusNotFound {
			t.Fatalf("attach to an unknown session: %v %v", err, resp)
		}
		if _, code, _ := httpErrorBody(t, resp); code != "session_not_found" {
			t.Fatalf("code %q", code)
		}
	})
}

// TestLiveWebRTC: the create answers 201 with a live_ id and an SDP
// answer; the session's simulated media reaches a sideband as reflected
// audio and growing usage; hangup ends it. Bad bodies are refused with
// the field they got wrong.
func TestLiveWebRTC(t *testing.T) {
	offer := "v=0\r\no=- 1 2 IN IP4 127.0.0.1\r\ns=-\r\nt=0 0\r\nm=audio 9 UDP/TLS/RTP/SAVPF 111\r\na=mid:0\r\n"
	overTLS(t, mockai.Config{Key: "sk-live", Live: mockai.LiveConfig{UsageInterval: 5 * time.Millisecond, MediaInterval: 5 * time.Millisecond}}, func(t *testing.T, srv *mockai.Server) {
		for _, tt := range []struct {
			name   string
			body   any
			status int
			code   string
			param  string
		}{
			{"no transport", map[string]any{"session": map[string]any{"model": "gpt-live-1"}}, 400, "missing_required_parameter", "transport"},
			{"websocket transport", map[string]any{"session": map[string]any{"model": "gpt-live-1"}, "transport": map[string]any{"type": "websocket", "sdp": offer}}, 400, "invalid_value", "transport.type"},
			{"not an offer", map[string]any{"session": map[string]any{"model": "gpt-live-1"}, "transport": map[string]any{"type": "webrtc", "sdp": "hello"}}, 400, "invalid_offer", "transport.sdp"},
			{"audio.format on WebRTC", map[string]any{"session": map[string]any{"model": "gpt-live-1", "audio": map[string]any{"format": map[string]any{"type": "audio/pcm"}}}, "transport": map[string]any{"type": "webrtc", "sdp": offer}}, 400, "unknown_parameter", "session.audio.format"},
			{"no model", map[string]any{"session": map[string]any{}, "transport": map[string]any{"type": "webrtc", "sdp": offer}}, 400, "missing_required_parameter", "session.model"},
			{"not JSON", "{", 400, "invalid_json", ""},
		} {
			status, body, _ := httpDo(t, srv, "POST", "/v1/live/sessions", tt.body)
			var e struct{ Error struct{ Code, Param string } }
			_ = json.Unmarshal(body, &e)
			if status != tt.status || e.Error.Code != tt.code || e.Error.Param != tt.param {
				t.Errorf("%s: %d %s, want %d %s %s", tt.name, status, body, tt.status, tt.code, tt.param)
			}
		}
		status, body, _ := httpDo(t, srv, "POST", "/v1/live/sessions", map[string]any{
			"session":   map[string]any{"model": "gpt-live-1", "instructions": strings.Repeat("long instructions ", 20000)},
			"transport": map[string]any{"type": "webrtc", "sdp": offer}})
		var created struct {
			Session   struct{ ID string }
			Transport struct{ Type, SDP string }
		}
		if err := json.Unmarshal(body, &created); err != nil || status != http.StatusCreated || !strings.HasPrefix(created.Session.ID, "live_") ||
			created.Transport.Type != "webrtc" || !strings.HasPrefix(created.Transport.SDP, "v=0\r\n") {
			t.Fatalf("create (a body over 64 KiB): %d %.300s", status, body)
		}
		sb, _, err := liveDial(t, srv, liveURL(srv, "/live/sessions/"+created.Session.ID+"/attach?graceful_close=true"), bearer("sk-live"))
		if err != nil {
			t.Fatal(err)
		}
		expectLive(t, sb, "session.started")
		seen := map[string]bool{}
		var last float64
		for len(seen) < 3 || last < 0.1 {
			ev := readEvent(t, sb)
			seen[ev.str("type")] = true
			if s, ok := ev.get("usage.seconds").(float64); ok {
				if s < last {
					t.Fatalf("usage.seconds went down: %v after %v", s, last)
				}
				last = s
			}
		}
		if !seen["session.input_audio.append"] || !seen["session.output_audio.delta"] || !seen["session.usage.updated"] {
			t.Fatalf("sideband saw %v", seen)
		}
		if status, body, _ := httpDo(t, srv, "POST", "/v1/live/sessions/"+created.Session.ID+"/hangup", nil); status != http.StatusOK || len(body) != 0 {
			t.Fatalf("hangup: %d %s", status, body)
		}
		for {
			if ev := readEvent(t, sb); ev.str("type") == "session.closed" {
				if s, _ := ev.get("usage.seconds").(float64); ev.str("reason") != "close_requested" || s < last {
					t.Fatalf("session.closed %v (last usage %v)", ev, last)
				}
				break
			}
		}
		expectClose(t, sb, websocket.CloseNormalClosure, "session closed")
		req, _ := http.NewRequest("POST", httpBase(srv)+"/v1/live/sessions", strings.NewReader("{}"))
		req.Header.Set("Authorization", "Bearer sk-wrong")
		hc := &http.Client{Transport: &http.Transport{TLSClientConfig: trust(t, srv)}, Timeout: ioTimeout}
		resp, err := hc.Do(req)
		if err != nil || resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("wrong key: %v %v", err, resp)
		}
		resp.Body.Close()
	})
}

// TestLiveForkAndContent: a stored session, once closed, gives its
// recording (a stereo WAV as long as its usage) and can be forked over
// WebRTC (POST) and WebSocket (session.start with no model); an unstored
// or active one cannot.
func TestLiveForkAndContent(t *testing.T) {
	offer := "v=0\r\no=- 1 2 IN IP4 127.0.0.1\r\ns=-\r\nt=0 0\r\n"
	overTLS(t, mockai.Config{Live: mockai.LiveConfig{UsageInterval: -1}}, func(t *testing.T, srv *mockai.Server) {
		c, st := startLive(t, srv, map[string]any{"model": "gpt-live-1.1", "store": true})
		id := st.str("session.id")
		fork := map[string]any{"transport": map[string]any{"type": "webrtc", "sdp": offer}}
		if status, body, _ := httpDo(t, srv, "POST", "/v1/live/sessions/"+id+"/fork", fork); status != http.StatusConflict {
			t.Fatalf("fork of an active session: %d %s", status, body)
		}
		if status, _, _ := httpDo(t, srv, "GET", "/v1/live/sessions/"+id+"/content", nil); status != http.StatusConflict {
			t.Fatalf("content of an active session: %d", status)
		}
		for range 20 { // 2 s of input
			liveAppend(t, c)
		}
		send(t, c, map[string]any{"type": "session.close"})
		if ev := untilLive(t, c, "session.closed"); ev.get("usage.seconds") != 2.0 {
			t.Fatalf("session.closed %v", ev)
		}

		status, wav, hdr := httpDo(t, srv, "GET", "/v1/live/sessions/"+id+"/content", nil)
		const dataLen = 2 * 24000 * 2 * 2
		if status != http.StatusOK || hdr.Get("Content-Type") != "audio/wav" || len(wav) != 44+dataLen ||
			string(wav[:4]) != "RIFF" || string(wav[8:16]) != "WAVEfmt " || binary.LittleEndian.Uint16(wav[22:]) != 2 ||
			binary.LittleEndian.Uint32(wav[24:]) != 24000 || binary.LittleEndian.Uint32(wav[40:]) != dataLen {
			t.Fatalf("content: %d %s, %d bytes", status, hdr.Get("Content-Type"), len(wav))
		}

		status, body, _ := httpDo(t, srv, "POST", "/v1/live/sessions/"+id+"/fork", fork)
		var forked struct{ Session struct{ ID string } }
		if json.Unmarshal(body, &forked) != nil || status != http.StatusCreated || !strings.HasPrefix(forked.Session.ID, "live_") || forked.Session.ID == id {
			t.Fatalf("fork: %d %s", status, body)
		}

		fc, _, err := liveDial(t, srv, liveURL(srv, "/live/sessions/"+id+"/fork"), nil)
		if err != nil {
			t.Fatal(err)
		}
		send(t, fc, startEvent(map[string]any{"model": "gpt-live-1"}))
		if ev := readEvent(t, fc); ev.str("error.code") != "unknown_parameter" || ev.str("error.param") != "session.model" {
			t.Fatalf("fork with a model: %v", ev)
		}
		fc, _, err = liveDial(t, srv, liveURL(srv, "/live/sessions/"+id+"/fork"), nil)
		if err != nil {
			t.Fatal(err)
		}
		send(t, fc, startEvent(map[string]any{"client": map[string]any{}}))
		if ev := readEvent(t, fc); ev.str("error.code") != "unknown_parameter" || ev.str("error.param") != "session.client" {
			t.Fatalf("WebSocket fork with client overrides: %v", ev)
		}
		fc, _, err = liveDial(t, srv, liveURL(srv, "/live/sessions/"+id+"/fork"), nil)
		if err != nil {
			t.Fatal(err)
		}
		send(t, fc, startEvent(map[string]any{}))
		if ev := expectLive(t, fc, "session.started"); ev.str("session.model") != "gpt-live-1.1" || ev.str("session.id") == id {
			t.Fatalf("fork session.started %v", ev)
		}

		c2, st2 := startLive(t, srv, map[string]any{"model": "gpt-live-1"})
		send(t, c2, map[string]any{"type": "session.close"})
		expectLive(t, c2, "session.closed")
		if status, body, _ := httpDo(t, srv, "POST", "/v1/live/sessions/"+st2.str("session.id")+"/fork", fork); status != http.StatusBadRequest || !strings.Contains(string(body), "session_not_stored") {
			t.Fatalf("fork of an unstored session: %d %s", status, body)
		}
		if _, resp, err := liveDial(t, srv, liveURL(srv, "/live/sessions/live_nope/fork"), nil); err == nil || resp.StatusCode != http.StatusNotFound {
			t.Fatalf("WS fork of an unknown session: %v", err)
		}
	})
}

// TestLiveCallControls: accept, reject, refer and hangup with their body
// rules and states, on an inbound SIP call announced through /mock/live/incoming.
func TestLiveCallControls(t *testing.T) {
	overTLS(t, mockai.Config{Live: mockai.LiveConfig{UsageInterval: -1}}, func(t *testing.T, srv *mockai.Server) {
		incoming := func() string {
			status, body, _ := httpDo(t, srv, "POST", "/mock/live/incoming", nil)
			var r struct{ ID string }
			if json.Unmarshal(body, &r) != nil || status != http.StatusCreated {
				t.Fatalf("incoming: %d %s", status, body)
			}
			return r.ID
		}
		ring1, ring2 := incoming(), incoming()
		base := "/v1/live/sessions/"
		for _, tt := range []struct {
			name, path string
			body       any
			status     int
			code       string
		}{
			{"unknown session", base + "live_nope/accept", map[string]any{}, 404, "session_not_found"},
			{"refer while ringing", base + ring1 + "/refer", map[string]any{"target_uri": "tel:+15550100"}, 409, "invalid_state"},
			{"reject without status", base + ring1 + "/reject", map[string]any{}, 400, "invalid_value"},
			{"reject 200", base + ring1 + "/reject", map[string]any{"status_code": 200}, 400, "invalid_value"},
			{"reject 486", base + ring1 + "/reject", map[string]any{"status_code": 486}, 200, ""},
			{"accept rejected", base + ring1 + "/accept", map[string]any{"session": map[string]any{"type": "live", "model": "gpt-live-1"}}, 409, "invalid_state"},
			{"accept without session", base + ring2 + "/accept", map[string]any{}, 400, "missing_required_parameter"},
			{"accept realtime type", base + ring2 + "/accept", map[string]any{"session": map[string]any{"type": "realtime", "model": "gpt-live-1"}}, 400, "invalid_value"},
			{"accept unknown field", base + ring2 + "/accept", map[string]any{"session": map[string]any{"type": "live", "model": "gpt-live-1", "voice": "x"}}, 400, "unknown_parameter"},
			{"accept", base + ring2 + "/accept", map[string]any{"session": map[string]any{"type": "live", "model": "gpt-live-1"}}, 200, ""},
			{"accept twice", base + ring2 + "/accept", map[string]any{"session": map[string]any{"type": "live", "model": "gpt-live-1"}}, 409, "invalid_state"},
			{"refer bad uri", base + ring2 + "/refer", map[string]any{"target_uri": "https://example.com"}, 400, "invalid_value"},
			{"refer", base + ring2 + "/refer", map[string]any{"target_uri": "sip:desk@example.com"}, 200, ""},
			{"hangup with a body", base + ring2 + "/hangup", map[string]any{"now": true}, 400, "unknown_parameter"},
			{"hangup", base + ring2 + "/hangup", nil, 200, ""},
			{"hangup again", base + ring2 + "/hangup", nil, 409, "invalid_state"},
		} {
			status, body, _ := httpDo(t, srv, "POST", tt.path, tt.body)
			var e struct{ Error struct{ Code string } }
			_ = json.Unmarshal(body, &e)
			if status != tt.status || e.Error.Code != tt.code || (status == 200 && len(body) != 0) {
				t.Errorf("%s: %d %s, want %d %s", tt.name, status, body, tt.status, tt.code)
			}
		}
		for _, r := range srv.LiveSessions() {
			switch r.ID {
			case ring1:
				if r.State != "closed" || r.Reason != "rejected" {
					t.Errorf("rejected call %+v", r)
				}
			case ring2:
				if r.State != "closed" || r.Reason != "close_requested" || r.Model != "gpt-live-1" || r.Transport != "sip" ||
					strings.Join(r.Actions, ",") != "accept,refer,hangup" {
					t.Errorf("accepted call %+v", r)
				}
			}
		}
	})
}

// TestLiveFaults: the Realtime side's fault knobs work on Live sockets
// (frames counted from session.started), plus Live's own: no
// session.closed, expiry, and both chosen per connection in the query.
func TestLiveFaults(t *testing.T) {
	start := startEvent(map[string]any{"model": "gpt-live-1"})
	for _, tt := range []struct {
		name  string
		cfg   mockai.Config
		query string
		// check plays the session after the dial.
		check func(t *testing.T, c *websocket.Conn)
	}{
		{"drop after session.started", mockai.Config{DropAfterFrames: 1}, "", func(t *testing.T, c *websocket.Conn) {
			send(t, c, start)
			expectLive(t, c, "session.started")
			if _, err := tryRead(c); !isDrop(err) {
				t.Fatalf("want a dropped connection, got %v", err)
			}
		}},
		{"close after 2 frames", mockai.Config{FaultsFromQuery: true}, "?fault=close&fault_after=2", func(t *testing.T, c *websocket.Conn) {
			send(t, c, start)
			expectLive(t, c, "session.started")
			liveAppend(t, c)
			expectLive(t, c, "session.input_transcript.delta")
			expectClose(t, c, websocket.CloseInternalServerErr, "mock: closing after 2 frames")
		}},
		{"no session.closed", mockai.Config{Live: mockai.LiveConfig{NoClosed: true}}, "", func(t *testing.T, c *websocket.Conn) {
			send(t, c, start)
			expectLive(t, c, "session.started")
			send(t, c, map[string]any{"type": "session.close"})
			expectClose(t, c, websocket.CloseNormalClosure, "session closed")
		}},
		{"no session.closed from the query", mockai.Config{FaultsFromQuery: true}, "?fault=no_closed", func(t *testing.T, c *websocket.Conn) {
			send(t, c, start)
			expectLive(t, c, "session.started")
			send(t, c, map[string]any{"type": "session.close"})
			expectClose(t, c, websocket.CloseNormalClosure, "session closed")
		}},
		{"expiry", mockai.Config{Live: mockai.LiveConfig{MaxDuration: 50 * time.Millisecond, UsageInterval: -1}}, "", func(t *testing.T, c *websocket.Conn) {
			send(t, c, start)
			expectLive(t, c, "session.started")
			if ev := expectLive(t, c, "session.closed"); ev.str("reason") != "expired" {
				t.Fatalf("session.closed %v", ev)
			}
			expectClose(t, c, websocket.CloseNormalClosure, "session closed")
		}},
		{"stall from the query", mockai.Config{FaultsFromQuery: true, StallFor: 50 * time.Millisecond}, "?fault=stall", func(t *testing.T, c *websocket.Conn) {
			send(t, c, start)
			if ev, err := tryRead(c); !isDrop(err) {
				t.Fatalf("a stalled socket answered %v %v", ev, err)
			}
		}},
		{"no session.start in time", mockai.Config{Live: mockai.LiveConfig{StartTimeout: 50 * time.Millisecond}}, "", func(t *testing.T, c *websocket.Conn) {
			if ev := readEvent(t, c); ev.str("error.code") != "session_start_timeout" {
				t.Fatalf("got %v, want error session_start_timeout", ev)
			}
			expectClose(t, c, 4000, "invalid_request_error.session_start_timeout")
		}},
		{"session.start in time", mockai.Config{Live: mockai.LiveConfig{StartTimeout: time.Minute}}, "", func(t *testing.T, c *websocket.Conn) {
			send(t, c, start)
			expectLive(t, c, "session.started")
			send(t, c, map[string]any{"type": "session.close"})
			expectLive(t, c, "session.closed")
		}},
		{"slow start", mockai.Config{SessionDelay: 20 * time.Millisecond, FirstAudioDelay: 20 * time.Millisecond}, "", func(t *testing.T, c *websocket.Conn) {
			send(t, c, start)
			expectLive(t, c, "session.started")
			liveAppend(t, c)
			expectLive(t, c, "session.input_transcript.delta")
			expectLive(t, c, "session.output_audio.delta")
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			overTLS(t, tt.cfg, func(t *testing.T, srv *mockai.Server) {
				c, _, err := liveDial(t, srv, liveURL(srv, "/live/sessions"+tt.query), nil)
				if err != nil {
					t.Fatal(err)
				}
				tt.check(t, c)
			})
		})
	}
	overTLS(t, mockai.Config{FaultsFromQuery: true}, func(t *testing.T, srv *mockai.Server) {
		_, resp, err := liveDial(t, srv, liveURL(srv, "/live/sessions?fault=429"), nil)
		if err == nil || resp == nil || resp.StatusCode != http.StatusTooManyRequests {
			t.Fatalf("fault=429: %v %v", err, resp)
		}
	})
	overTLS(t, mockai.Config{Key: "sk-live"}, func(t *testing.T, srv *mockai.Server) {
		c, _, err := liveDial(t, srv, liveURL(srv, "/live/sessions"), bearer("sk-wrong"))
		if err != nil {
			t.Fatal(err)
		}
		if ev := readEvent(t, c); ev.str("error.code") != "invalid_api_key" {
			t.Fatalf("wrong key: %v", ev)
		}
		expectClose(t, c, 4000, "invalid_request_error.invalid_api_key")
	})
}
