package mockai_test

import (
	"bytes"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"rtgate/mockai"
)

func TestEcho(t *testing.T) {
	t.Parallel()
	srv := start(t, mockai.Config{Echo: true})
	c, _ := connect(t, srv, nil) // session.created still comes first

	big := bytes.Repeat([]byte("A"), 200_000) // spans many reads and writes
	tests := []struct {
		name string
		mt   int
		data []byte
	}{
		// A client event is echoed, not answered (no session.updated).
		{"client event", websocket.TextMessage, []byte(`{"type":"session.update","session":{"type":"realtime"}}`)},
		{"not json", websocket.TextMessage, []byte("hello, not JSON")},
		{"binary", websocket.BinaryMessage, []byte{0, 1, 2, 0xff}},
		{"empty", websocket.TextMessage, []byte{}},
		{"large", websocket.TextMessage, big},
	}
	for _, tt := range tests {
		sendRaw(t, c, tt.mt, tt.data)
		c.SetReadDeadline(time.Now().Add(ioTimeout))
		mt, got, err := c.ReadMessage()
		if err != nil {
			t.Fatalf("%s: read: %v", tt.name, err)
		}
		if mt != tt.mt || !bytes.Equal(got, tt.data) {
			t.Errorf("%s: got type %d, %d bytes (%.40q); want type %d, the %d bytes sent",
				tt.name, mt, len(got), got, tt.mt, len(tt.data))
		}
	}

	// Several messages in flight come back in order.
	for _, m := range []string{"one", "two", "three"} {
		sendRaw(t, c, websocket.TextMessage, []byte(m))
	}
	for _, want := range []string{"one", "two", "three"} {
		c.SetReadDeadline(time.Now().Add(ioTimeout))
		if _, got, err := c.ReadMessage(); err != nil || string(got) != want {
			t.Fatalf("pipelined: got %q, %v; want %q", got, err, want)
		}
	}

	// Close frames are still answered with the same code and reason.
	c.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(4001, "bye"), time.Now().Add(ioTimeout))
	expectClose(t, c, 4001, "bye")

	if st := srv.Stats(); st.FramesIn != int64(len(tests)+3) || st.FramesOut != int64(len(tests)+3+1) {
		t.Errorf("stats %+v: want %d frames in and %d out (echoes plus session.created)", st, len(tests)+3, len(tests)+4)
	}
}
