package mockai_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"rtgate/mockai"
)

// With FaultsFromQuery each connection picks its fault in the query, and the fault
// is that connection's alone.
func TestFaultsFromQuery(t *testing.T) {
	t.Parallel()
	srv := start(t, mockai.Config{FaultsFromQuery: true, StallFor: 300 * time.Millisecond})
	tests := []struct {
		name   string
		query  string
		script []string // as in TestFaults
		check  func(t *testing.T, err error)
	}{
		{
			name:   "close, default after 1",
			query:  "&fault=close",
			script: []string{"session.created"},
			check:  wantClose(websocket.CloseInternalServerErr, "mock: closing after 1 frames"),
		},
		{
			name:   "close mid-response",
			query:  "&fault=close&fault_after=3",
			script: []string{"session.created", "response.create", "response.created", "rate_limits.updated"},
			check:  wantClose(websocket.CloseInternalServerErr, "mock: closing after 3 frames"),
		},
		{
			name:   "drop during audio",
			query:  "&fault=drop&fault_after=4",
			script: []string{"session.created", "response.create", "response.created", "rate_limits.updated", "response.output_audio.delta"},
			check:  wantClose(websocket.CloseAbnormalClosure, "unexpected EOF"),
		},
		{
			name:   "malformed",
			query:  "&fault=malformed&fault_after=2",
			script: []string{"session.created", "response.create", "response.created"},
			check: func(t *testing.T, err error) {
				if err == nil || !strings.Contains(err.Error(), "opcode") {
					t.Errorf("read error %v, want a protocol error about the opcode", err)
				}
			},
		},
		{
			// A stalled connection answers nothing, then is dropped after StallFor.
			name:   "stall",
			query:  "&fault=stall",
			script: []string{"session.created", "response.create"},
			check: func(t *testing.T, err error) {
				// The unread response.create turns the close into a reset.
				var ce *websocket.CloseError
				if errors.As(err, &ce) && ce.Code != websocket.CloseAbnormalClosure ||
					err == nil || !strings.Contains(err.Error(), "reset") && !strings.Contains(err.Error(), "EOF") {
					t.Errorf("read error %v, want the connection dropped without a close frame", err)
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c, _, err := dial(t, realtimeURL(srv, "gpt-realtime")+tt.query, nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			tt.check(t, runScript(t, c, tt.script))
		})
	}

	// A connection without a fault on the same server is untouched by the others.
	c, _ := connect(t, srv, nil)
	send(t, c, map[string]any{"type": "response.create"})
	for {
		ev := readEvent(t, c)
		if ev.str("type") == "response.done" {
			if got := ev.str("response.status"); got != "completed" {
				t.Errorf("plain connection: response status %q, want completed", got)
			}
			break
		}
	}
}

func TestFaultsFromQueryStatus(t *testing.T) {
	t.Parallel()
	srv := start(t, mockai.Config{FaultsFromQuery: true})
	for _, tt := range []struct {
		fault    string
		status   int
		wantCode string
	}{
		{"401", http.StatusUnauthorized, "invalid_api_key"},
		{"429", http.StatusTooManyRequests, "rate_limit_exceeded"},
		{"503", http.StatusServiceUnavailable, "server_error"},
	} {
		_, resp, err := dial(t, realtimeURL(srv, "gpt-realtime")+"&fault="+tt.fault, nil, nil)
		if !errors.Is(err, websocket.ErrBadHandshake) || resp == nil || resp.StatusCode != tt.status {
			t.Errorf("fault=%s: got %v (response %v), want HTTP %d", tt.fault, err, resp, tt.status)
			continue
		}
		if _, code, _ := httpErrorBody(t, resp); code != tt.wantCode {
			t.Errorf("fault=%s: error code %q, want %q", tt.fault, code, tt.wantCode)
		}
	}
	if st := srv.Stats(); st.Rejected != 3 || st.Upgrades != 0 {
		t.Errorf("stats %+v, want 3 rejected and no upgrades", st)
	}
}

func TestFaultsFromQueryBadValues(t *testing.T) {
	t.Parallel()
	srv := start(t, mockai.Config{FaultsFromQuery: true})
	for _, tt := range []struct{ query, wantInMessage string }{
		{"&fault=explode", `fault="explode"`},
		{"&fault=200", `fault="200"`},
		{"&fault=drop&fault_after=0", `fault_after="0"`},
		{"&fault=close&fault_after=soon", `fault_after="soon"`},
		{"&fault_after=3", "needs fault"},
		{"&fault=stall&fault_after=2", "takes no fault_after"},
		{"&fault=401&fault_after=2", "takes no fault_after"},
	} {
		_, resp, err := dial(t, realtimeURL(srv, "gpt-realtime")+tt.query, nil, nil)
		if !errors.Is(err, websocket.ErrBadHandshake) || resp == nil || resp.StatusCode != http.StatusBadRequest {
			t.Errorf("%s: got %v (response %v), want HTTP 400", tt.query, err, resp)
			continue
		}
		_, code, raw := httpErrorBody(t, resp)
		var body struct {
			Error struct{ Message string } `json:"error"`
		}
		_ = json.Unmarshal([]byte(raw), &body)
		if code != "invalid_value" || !strings.Contains(body.Error.Message, tt.wantInMessage) {
			t.Errorf("%s: error %s, want code invalid_value and a message containing %s", tt.query, raw, tt.wantInMessage)
		}
	}
}

// Without the knob the parameters mean nothing: the session runs normally.
func TestFaultsFromQueryOff(t *testing.T) {
	t.Parallel()
	srv := start(t, mockai.Config{})
	c, _, err := dial(t, realtimeURL(srv, "gpt-realtime")+"&fault=close&fault_after=1", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	expect(t, c, "session.created")
	send(t, c, map[string]any{"type": "response.create"})
	expect(t, c, "response.created")
}
