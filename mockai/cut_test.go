package mockai_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"rtgate/mockai"
)

// A session cut by Config.Cut ends where the test asked, the way the
// relay under test will see it; with Times the next session lives.
func TestCut(t *testing.T) {
	t.Parallel()
	turn := []string{"response.create", "response.created", "rate_limits.updated",
		"response.output_audio.delta", "response.output_audio.delta", "response.output_audio_transcript.delta", "response.done"}
	tests := []struct {
		name   string
		cut    mockai.Cut
		tls    bool
		script []string
		check  func(t *testing.T, err error)
	}{
		{"drop after the first response", mockai.Cut{Kind: mockai.CutDrop, AfterResponses: 1, Times: 1}, false,
			turn, wantClose(websocket.CloseAbnormalClosure, "unexpected EOF")},
		{"close 1012 after the second response, TLS", mockai.Cut{Kind: mockai.CutClose, Code: 1012, AfterResponses: 2, Times: 1}, true,
			append(append([]string{}, turn...), turn...), wantClose(websocket.CloseServiceRestart, "mock: cut after 2 responses")},
		{"close 1011 by default", mockai.Cut{Kind: mockai.CutClose, AfterResponses: 1, Times: 1}, false,
			turn, wantClose(websocket.CloseInternalServerErr, "mock: cut after 1 responses")},
		{"drop during the first response", mockai.Cut{Kind: mockai.CutDrop, AfterResponses: 1, During: true, Times: 1}, false,
			turn[:4], wantClose(websocket.CloseAbnormalClosure, "unexpected EOF")},
		{"half a frame during the response", mockai.Cut{Kind: mockai.CutMidFrame, AfterResponses: 1, During: true, Times: 1}, true,
			turn[:4], func(t *testing.T, err error) {
				var ce *websocket.CloseError
				if err == nil || (errors.As(err, &ce) && ce.Code != websocket.CloseAbnormalClosure) {
					t.Errorf("read error %v, want the connection to end inside a frame", err)
				}
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := start(t, mockai.Config{TLS: tt.tls, Cut: tt.cut, AudioDeltas: 2})
			d := websocket.Dialer{HandshakeTimeout: ioTimeout, TLSClientConfig: trust(t, srv)}
			c, _, err := d.Dial(realtimeURL(srv, "gpt-realtime"), nil)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			expect(t, c, "session.created")
			tt.check(t, runScript(t, c, tt.script))

			// Times: 1, so the next session answers every turn.
			c2, _, err := d.Dial(realtimeURL(srv, "gpt-realtime"), nil)
			if err != nil {
				t.Fatal(err)
			}
			defer c2.Close()
			expect(t, c2, "session.created")
			for range 3 {
				for _, step := range turn {
					if step == "response.create" {
						send(t, c2, map[string]any{"type": step})
						continue
					}
					expect(t, c2, step)
				}
			}
		})
	}
}

func TestCutValidate(t *testing.T) {
	t.Parallel()
	for _, c := range []mockai.Cut{{Kind: "explode", AfterResponses: 1}, {Kind: mockai.CutDrop}, {Kind: mockai.CutClose, AfterResponses: 1, Code: 99}} {
		if _, err := mockai.Start(mockai.Config{Cut: c}, "127.0.0.1:0"); !errors.Is(err, mockai.ErrConfig) {
			t.Errorf("cut %+v: Start error %v, want ErrConfig", c, err)
		}
	}
}

// At its cap a session gets session_expired and close 1001, even in the
// middle of a response; expires_at announced the cap.
func TestSessionCap(t *testing.T) {
	t.Parallel()
	const capDur = 1500 * time.Millisecond
	srv := start(t, mockai.Config{SessionCap: capDur, AudioDeltas: 1000, AudioDeltaInterval: 20 * time.Millisecond})
	before := time.Now()
	c, created := connect(t, srv, nil)
	exp := int64(created.num("session.expires_at"))
	if exp < before.Unix() || exp > before.Add(capDur).Unix()+1 {
		t.Errorf("expires_at %d, want about %d", exp, before.Add(capDur).Unix())
	}
	send(t, c, map[string]any{"type": "response.create"})
	var expired event
	for expired == nil {
		ev := readEvent(t, c)
		if ev.str("type") == "error" {
			expired = ev
		}
	}
	if expired.str("error.code") != "session_expired" || !strings.Contains(expired.str("error.message"), "maximum duration") {
		t.Errorf("error %v, want session_expired", expired)
	}
	expectClose(t, c, websocket.CloseGoingAway, "Your session hit the maximum duration of 1.5s.")
}

// Received lists what one upstream session got, in order, with the ids the
// client gave.
func TestReceived(t *testing.T) {
	t.Parallel()
	srv := start(t, mockai.Config{})
	c, created := connect(t, srv, nil)
	send(t, c, map[string]any{"type": "session.update", "session": map[string]any{"type": "realtime", "instructions": "be brief"}})
	expect(t, c, "session.updated")
	for _, id := range []string{"item_a", "item_b"} {
		send(t, c, map[string]any{"type": "conversation.item.create", "item": map[string]any{"id": id, "type": "message", "role": "user",
			"content": []any{map[string]any{"type": "input_text", "text": "hi " + id}}}})
		expect(t, c, "conversation.item.added")
		expect(t, c, "conversation.item.done")
	}
	got := srv.Received(created.str("session.id"))
	var types []string
	for _, e := range got {
		types = append(types, e.Type)
	}
	if strings.Join(types, ",") != "session.update,conversation.item.create,conversation.item.create" ||
		!strings.Contains(string(got[1].Event), `"item_a"`) || !strings.Contains(string(got[2].Event), `"item_b"`) {
		t.Errorf("received %v", got)
	}
	if other := srv.Received("sess_none"); len(other) != 0 {
		t.Errorf("an unknown session received %v", other)
	}
}

// A GPT-Live session's answers count as responses for Config.Cut: cut after
// the first answer's output transcript, or during it (after its output
// audio, before its transcript); the session.start a session received is
// in its Received record.
func TestCutLive(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name  string
		cut   mockai.Cut
		reads []string
		check func(t *testing.T, err error)
	}{
		{"close 1012 after the first answer", mockai.Cut{Kind: mockai.CutClose, Code: 1012, AfterResponses: 1, Times: 1},
			[]string{"session.input_transcript.delta", "session.output_audio.delta", "session.output_transcript.delta"},
			wantClose(websocket.CloseServiceRestart, "mock: cut after 1 responses")},
		{"drop during the first answer", mockai.Cut{Kind: mockai.CutDrop, AfterResponses: 1, During: true, Times: 1},
			[]string{"session.input_transcript.delta", "session.output_audio.delta"},
			wantClose(websocket.CloseAbnormalClosure, "unexpected EOF")},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := start(t, mockai.Config{Cut: tt.cut, Live: mockai.LiveConfig{UsageInterval: -1}})
			c, started := startLive(t, srv, map[string]any{"model": "gpt-live-1", "instructions": "kept"})
			liveAppend(t, c)
			for _, typ := range tt.reads {
				expectLive(t, c, typ)
			}
			_, _, err := c.ReadMessage()
			tt.check(t, err)
			got := srv.Received(started.str("session.id"))
			if len(got) == 0 || got[0].Type != "session.start" || !strings.Contains(string(got[0].Event), `"kept"`) {
				t.Errorf("received %+v, want the session.start first", got)
			}
			// Times: 1, so the next session answers.
			c2, _ := startLive(t, srv, map[string]any{"model": "gpt-live-1"})
			liveAppend(t, c2)
			expectLive(t, c2, "session.input_transcript.delta")
			expectLive(t, c2, "session.output_audio.delta")
			expectLive(t, c2, "session.output_transcript.delta")
		})
	}
}
