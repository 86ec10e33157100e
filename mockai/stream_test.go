package mockai_test

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"rtgate/mockai"
)

// Stream mode stays quiet until the client's first message, then paces one
// delta per interval (on schedule: a late one is sent at once, so the count
// follows the clock) and reads the client's appends without answering them.
func TestStream(t *testing.T) {
	t.Parallel()
	srv := start(t, mockai.Config{Stream: mockai.StreamConfig{Interval: 10 * time.Millisecond}})
	c, _ := connect(t, srv, nil)

	// A warm pool's unclaimed socket: nothing arrives before the client speaks.
	c.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	if _, msg, err := c.ReadMessage(); err == nil {
		t.Fatalf("frame before the client sent anything: %.80s", msg)
	} else if ne, ok := errors.AsType[net.Error](err); !ok || !ne.Timeout() {
		t.Fatalf("read: %v", err)
	}
	// gorilla cannot read after a timeout; a fresh connection goes on.
	c.Close()
	c, _ = connect(t, srv, nil)

	appendEv := []byte(`{"type":"input_audio_buffer.append","audio":"` + base64.StdEncoding.EncodeToString(make([]byte, 480)) + `"}`)
	sendRaw(t, c, websocket.TextMessage, appendEv)
	const window = 300 * time.Millisecond
	start := time.Now()
	deltas := 0
	for time.Since(start) < window {
		c.SetReadDeadline(time.Now().Add(ioTimeout))
		_, msg, err := c.ReadMessage()
		if err != nil {
			t.Fatal(err)
		}
		var ev struct {
			Type, Delta string
		}
		if err := json.Unmarshal(msg, &ev); err != nil || ev.Type != "response.output_audio.delta" {
			t.Fatalf("frame %.80s (%v): want only audio deltas", msg, err)
		}
		if !strings.HasPrefix(string(msg), `{"type":"response.output_audio.delta"`) {
			t.Errorf("type is not first: %.60s", msg)
		}
		pcm, err := base64.StdEncoding.DecodeString(ev.Delta)
		if err != nil || len(pcm) != 480 { // 10 ms of 24 kHz PCM16
			t.Fatalf("delta of %d bytes (%v), want 480", len(pcm), err)
		}
		deltas++
		if deltas%5 == 0 {
			sendRaw(t, c, websocket.TextMessage, appendEv) // appends are read, not answered
		}
	}
	// A steady pace: at most one delta per interval (plus the first, at once),
	// and, since late ones are caught up, not many fewer.
	slots := int(time.Since(start) / (10 * time.Millisecond))
	if limit, least := slots+2, slots/2; deltas > limit || deltas < least {
		t.Errorf("%d deltas in %v at a 10 ms interval; want %d to %d", deltas, time.Since(start), least, limit)
	}
	// Every append sent reaches mockai (the last ones may still be in flight).
	sent := int64(1 + deltas/5)
	var st mockai.Stats
	for deadline := time.Now().Add(ioTimeout); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if st = srv.Stats(); st.FramesIn >= sent {
			break
		}
	}
	if st.FramesIn != sent {
		t.Errorf("mockai read %d frames, want the %d appends sent", st.FramesIn, sent)
	}
}

func TestStreamConfig(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		cfg  mockai.Config
		want string
	}{
		{"with echo", mockai.Config{Echo: true, Stream: mockai.StreamConfig{Interval: time.Second}}, "cannot be combined"},
		{"odd bytes", mockai.Config{Stream: mockai.StreamConfig{Interval: time.Second, Bytes: 3}}, "even number"},
		{"bytes without interval", mockai.Config{Stream: mockai.StreamConfig{Bytes: 960}}, "need a stream interval"},
		{"negative", mockai.Config{Stream: mockai.StreamConfig{Interval: -time.Second}}, "negative"},
		{"too fast", mockai.Config{Stream: mockai.StreamConfig{Interval: time.Microsecond}}, "at least 1ms"},
	} {
		srv, err := mockai.Start(tt.cfg, "127.0.0.1:0")
		if err == nil {
			srv.Close()
		}
		if err == nil || !errors.Is(err, mockai.ErrConfig) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: error %v, want ErrConfig with %q", tt.name, err, tt.want)
		}
	}
}
