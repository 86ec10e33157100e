package mockai_test

import (
	"bytes"
	"crypto/tls"
	"encoding/json"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/gobwas/ws"

	"rtgate/mockai"
)

// socketReads reads the socket the way a reactor does (netpoll takes everything the
// kernel holds at once): each socket read takes up to 64 KiB, and the test counts
// them. Callers get the bytes in whatever pieces they ask for.
type socketReads struct {
	net.Conn
	pending []byte // read from the socket, not yet handed out
	reads   int    // socket reads that returned data
}

func (c *socketReads) Read(p []byte) (int, error) {
	if len(c.pending) == 0 {
		b := make([]byte, 64<<10)
		n, err := c.Conn.Read(b)
		if n == 0 {
			return 0, err
		}
		c.reads++
		c.pending = b[:n]
	}
	n := copy(p, c.pending)
	c.pending = c.pending[n:]
	return n, nil
}

const upgradeRequest = "GET /v1/realtime?model=gpt-realtime HTTP/1.1\r\nHost: mockai\r\nUpgrade: websocket\r\n" +
	"Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"

// With OneSegment the 101 and session.created reach the client in one socket read;
// over TLS they are two records, so crypto/tls hands out the 101 alone and keeps
// session.created, already read from the socket, to itself: the case issue 10 item 1
// is about. Without it (and with a session delay) they take two reads, which shows
// that the count can tell the difference.
func TestOneSegment(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name      string
		cfg       mockai.Config
		wantReads int
	}{
		{"tls one segment", mockai.Config{TLS: true, OneSegment: true}, 1},
		{"plain one segment", mockai.Config{OneSegment: true}, 1},
		{"tls separate writes", mockai.Config{TLS: true, SessionDelay: 300 * time.Millisecond}, 2},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := start(t, tt.cfg)
			raw, err := net.DialTimeout("tcp", srv.Addr(), ioTimeout)
			if err != nil {
				t.Fatal(err)
			}
			defer raw.Close()
			raw.SetDeadline(time.Now().Add(ioTimeout))
			sock := &socketReads{Conn: raw}
			var conn io.ReadWriter = sock
			if tt.cfg.TLS {
				cfg := trust(t, srv)
				cfg.ServerName = "127.0.0.1"
				tc := tls.Client(sock, cfg)
				if err := tc.Handshake(); err != nil {
					t.Fatalf("TLS handshake: %v", err)
				}
				conn = tc
			}
			before := sock.reads
			if _, err := io.WriteString(conn, upgradeRequest); err != nil {
				t.Fatal(err)
			}

			// The first read: over TLS exactly one record, the 101 and nothing more.
			buf := make([]byte, 64<<10)
			n, err := conn.Read(buf)
			if err != nil {
				t.Fatalf("reading the 101: %v", err)
			}
			first := buf[:n]
			if !bytes.HasPrefix(first, []byte("HTTP/1.1 101 ")) {
				t.Fatalf("first read %q, want a 101 response", first)
			}
			end := bytes.Index(first, []byte("\r\n\r\n"))
			if end < 0 {
				t.Fatalf("first read %q holds no complete response head", first)
			}
			rest := first[end+4:]
			if tt.cfg.TLS && len(rest) != 0 {
				t.Fatalf("crypto/tls returned %d bytes after the 101 in the same Read; want one record per Read", len(rest))
			}

			// session.created, from what is left of the first read and then the connection.
			r := io.MultiReader(bytes.NewReader(rest), conn)
			h, err := ws.ReadHeader(r)
			if err != nil {
				t.Fatalf("reading the first frame header: %v", err)
			}
			if h.OpCode != ws.OpText || !h.Fin || h.Masked {
				t.Fatalf("first frame %+v, want an unmasked final text frame", h)
			}
			payload := make([]byte, h.Length)
			if _, err := io.ReadFull(r, payload); err != nil {
				t.Fatalf("reading session.created: %v", err)
			}
			var ev struct{ Type string }
			if err := json.Unmarshal(payload, &ev); err != nil || ev.Type != "session.created" {
				t.Fatalf("first frame %.100q (%v), want session.created", payload, err)
			}
			if got := sock.reads - before; got != tt.wantReads {
				t.Errorf("101 and session.created took %d socket reads, want %d", got, tt.wantReads)
			}
			if strings.Contains(string(payload), "\r\n") {
				t.Errorf("session.created holds HTTP bytes: %.100q", payload)
			}
		})
	}
}
