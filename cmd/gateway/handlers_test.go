package main

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"net/http"
	"testing"
	"time"

	"github.com/gorilla/websocket"
)

// TestHandlersRelayEveryByte runs the real binary with each of netpoll's
// runners (POLLER_HANDLERS pool and inline) in front of mockai -echo, over a
// plain and a TLS upstream, and pipelines messages from a byte to 200 KB
// through one session: every echo must come back whole and in order.
//
// With the binary's 512-byte netpoll buffers a message of 1 KiB or more
// never arrives in one of netpoll's reads, so under inline handlers every
// such frame goes through the read-ahead (Endpoint.readAhead for plain
// sockets, NBConn's for TLS), both directions: what this test guards is that
// reading past netpoll's buffer loses, duplicates and reorders nothing.
func TestHandlersRelayEveryByte(t *testing.T) {
	sizes := []int{1, 125, 1024, 1300, 6500, 16 << 10, 70000, 200000}
	for _, upstream := range []string{"plain", "tls"} {
		for _, handlers := range []string{"pool", "inline"} {
			t.Run(upstream+"/"+handlers, func(t *testing.T) {
				var up upstreamProc
				if upstream == "tls" {
					up = startMockai(t, "-echo")
				} else {
					up = upstreamProc{base: startMockaiProc(t, "-echo")}
				}
				g := startGatewayProc(t, up, 0, "POLLER_HANDLERS="+handlers)
				c, _, err := websocket.DefaultDialer.Dial("ws://"+g.addr()+"/v1/realtime?model=gpt-realtime",
					http.Header{"Authorization": {"Bearer sk-test"}})
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
				if _, p, err := c.ReadMessage(); err != nil || !bytes.Contains(p, []byte("session.created")) {
					t.Fatalf("first event %q, %v; want session.created", p, err)
				}

				const n = 64
				msgs := make([][]byte, n)
				rng := rand.New(rand.NewPCG(1, uint64(len(upstream)+len(handlers))))
				for i := range msgs {
					msgs[i] = make([]byte, max(8, sizes[i%len(sizes)]))
					for j := range msgs[i] {
						msgs[i][j] = byte(rng.Uint32())
					}
					binary.BigEndian.PutUint64(msgs[i], uint64(i))
				}
				sent := make(chan error, 1)
				go func() {
					for _, m := range msgs {
						if err := c.WriteMessage(websocket.BinaryMessage, m); err != nil {
							sent <- err
							return
						}
					}
					sent <- nil
				}()
				for i := range msgs {
					_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
					typ, p, err := c.ReadMessage()
					if err != nil {
						t.Fatalf("echo %d: %v", i, err)
					}
					if typ != websocket.BinaryMessage || !bytes.Equal(p, msgs[i]) {
						t.Fatalf("echo %d: %s", i, describeMismatch(p, msgs[i]))
					}
				}
				if err := <-sent; err != nil {
					t.Fatalf("sending: %v", err)
				}
			})
		}
	}
}

// describeMismatch says how an echo differs from what was sent.
func describeMismatch(got, want []byte) string {
	if len(got) >= 8 && binary.BigEndian.Uint64(got) != binary.BigEndian.Uint64(want) {
		return fmt.Sprintf("message number %d arrived in its place", binary.BigEndian.Uint64(got))
	}
	for i := range min(len(got), len(want)) {
		if got[i] != want[i] {
			return fmt.Sprintf("%d bytes (want %d), first difference at byte %d", len(got), len(want), i)
		}
	}
	return fmt.Sprintf("%d bytes, want %d", len(got), len(want))
}
