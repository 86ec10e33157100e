package mockai_test

import (
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"rtgate/mockai"
)

func TestFaults(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		cfg  mockai.Config
		// events the client sees before the fault; "response.create" in the list means
		// the client sends it at that point instead of reading.
		script []string
		check  func(t *testing.T, err error)
	}{
		{
			name:   "close after session.created",
			cfg:    mockai.Config{CloseAfterFrames: 1},
			script: []string{"session.created"},
			check:  wantClose(websocket.CloseInternalServerErr, "mock: closing after 1 frames"),
		},
		{
			name:   "close after 3 frames, mid-response",
			cfg:    mockai.Config{CloseAfterFrames: 3},
			script: []string{"session.created", "response.create", "response.created", "rate_limits.updated"},
			check:  wantClose(websocket.CloseInternalServerErr, "mock: closing after 3 frames"),
		},
		{
			name:   "drop after session.created",
			cfg:    mockai.Config{DropAfterFrames: 1},
			script: []string{"session.created"},
			check:  wantClose(websocket.CloseAbnormalClosure, "unexpected EOF"), // EOF, no close frame
		},
		{
			name:   "drop during audio",
			cfg:    mockai.Config{DropAfterFrames: 4},
			script: []string{"session.created", "response.create", "response.created", "rate_limits.updated", "response.output_audio.delta"},
			check:  wantClose(websocket.CloseAbnormalClosure, "unexpected EOF"),
		},
		{
			name:   "malformed frame",
			cfg:    mockai.Config{MalformedAfterFrames: 1},
			script: []string{"session.created"},
			check: func(t *testing.T, err error) {
				var ce *websocket.CloseError
				if err == nil || errors.As(err, &ce) || !strings.Contains(err.Error(), "opcode") {
					t.Errorf("read error %v, want a protocol error about the opcode", err)
				}
			},
		},
		{
			name:   "malformed over TLS",
			cfg:    mockai.Config{MalformedAfterFrames: 2, TLS: true},
			script: []string{"session.created", "response.create", "response.created"},
			check: func(t *testing.T, err error) {
				if err == nil || !strings.Contains(err.Error(), "opcode") {
					t.Errorf("read error %v, want a protocol error about the opcode", err)
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := start(t, tt.cfg)
			d := websocket.Dialer{HandshakeTimeout: ioTimeout, TLSClientConfig: trust(t, srv)}
			c, _, err := d.Dial(realtimeURL(srv, "gpt-realtime"), nil)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			tt.check(t, runScript(t, c, tt.script))
		})
	}
}

func wantClose(code int, reason string) func(t *testing.T, err error) {
	return func(t *testing.T, err error) {
		t.Helper()
		var ce *websocket.CloseError
		if !errors.As(err, &ce) || ce.Code != code || ce.Text != reason {
			t.Errorf("read error %v, want close %d %q", err, code, reason)
		}
	}
}

// With StopReading the server never answers, and a client that keeps writing ends up
// blocked once the socket buffers are full.
func TestStopReading(t *testing.T) {
	t.Parallel()
	srv := start(t, mockai.Config{StopReading: true})
	c, _ := connect(t, srv, nil)
	chunk := []byte(`{"type":"input_audio_buffer.append","audio":"` + strings.Repeat("A", 1<<20) + `"}`)
	const maxChunks = 128 // far more than loopback socket buffers hold
	for i := 0; ; i++ {
		if i == maxChunks {
			t.Fatalf("wrote %d MiB without blocking", maxChunks)
		}
		c.SetWriteDeadline(time.Now().Add(300 * time.Millisecond))
		if err := c.WriteMessage(websocket.TextMessage, chunk); err != nil {
			var ne net.Error
			if !errors.As(err, &ne) || !ne.Timeout() {
				t.Fatalf("write %d failed with %v, want a timeout", i, err)
			}
			break
		}
	}
	if st := srv.Stats(); st.FramesIn != 0 || st.FramesOut != 1 || st.Active != 1 {
		t.Errorf("stats %+v, want nothing read, only session.created sent, still open", st)
	}
}
