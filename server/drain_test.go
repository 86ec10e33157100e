package server

import (
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"rtgate/mockai"
)

// TestDrainSteps walks Drain's steps on one gateway, over ws:// and wss://
// upstreams: during the grace /health is 503 and a connect is served; then
// the listener refuses new TCP connections, the warm sockets close, live
// sessions keep working, and at the timeout they get an error event and 1001.
func TestDrainSteps(t *testing.T) {
	for _, tc := range []struct {
		name string
		mock func(t *testing.T) *mockai.Server
	}{
		{"ws", func(t *testing.T) *mockai.Server { return startMock(t, mockai.Config{}) }},
		{"wss", startTLSMock},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mock := tc.mock(t)
			g := startGateway(t, mock, withPool(2, func(c *Settings) {
				c.DrainGrace = 500 * time.Millisecond
				if mock.CertPEM() != nil {
					c.UpstreamRoots = trustMock(t, mock)
				}
			}))
			waitWarm(t, g, 2)
			live := g.dial(t, "model=gpt-realtime", bearer(testMasterKey))
			read(t, live)

			done := make(chan bool, 1)
			go func() { done <- g.srv.Drain(time.Second) }()
			waitFor(t, "draining", g.srv.draining.Load)

			req, _ := http.NewRequest("GET", "http://x/health", nil)
			if status, body := httpDo(t, g, req); status != 503 || body["status"] != "draining" {
				t.Fatalf("/health while draining: %d %v", status, body)
			}
			// Still in the grace: a connect is a normal session.
			during := g.dial(t, "model=gpt-realtime", bearer(testMasterKey))
			if e := read(t, during); e.typ() != "session.created" {
				t.Fatalf("a connect during the grace got %v", e.typ())
			}
			_ = during.WriteMessage(websocket.CloseMessage, websocket.FormatCloseMessage(1000, "bye"))
			closeOf(t, during)

			waitFor(t, "the listener to stop accepting", func() bool {
				c, err := net.DialTimeout("tcp", g.addr, time.Second)
				if err == nil {
					_ = c.Close()
				}
				return err != nil
			})
			waitFor(t, "the warm sockets to close", func() bool { return mock.Stats().Active == 1 })

			// The live session still works...
			send(t, live, map[string]any{"type": "session.update", "session": map[string]any{"type": "realtime"}})
			if e := read(t, live); e.typ() != "session.updated" {
				t.Fatalf("live session got %v while draining", e.typ())
			}
			// ...until the drain timeout, when it is told why and closed with 1001.
			e := read(t, live)
			if e.typ() != "error" || e.str("error", "code") != "server_shutting_down" {
				t.Fatalf("got %v, want a server_shutting_down event", e)
			}
			if ce := closeOf(t, live); ce.Code != 1001 || ce.Text != "gateway shutting down" {
				t.Fatalf("close %d %q, want 1001 gateway shutting down", ce.Code, ce.Text)
			}
			select {
			case clean := <-done:
				if clean {
					t.Fatal("Drain reported a clean drain although a session had to be closed")
				}
			case <-time.After(10 * time.Second):
				t.Fatal("Drain did not return")
			}
		})
	}
}

func TestDrainIsCleanWhenSessionsEnd(t *testing.T) {
	mock := startMock(t, mockai.Config{})
	g := startGateway(t, mock, func(c *Settings) { c.DrainGrace = 0 })
	live := g.dial(t, "model=gpt-realtime", bearer(testMasterKey))
	read(t, live)
	done := make(chan bool, 1)
	start := time.Now()
	go func() { done <- g.srv.Drain(30 * time.Second) }()
	waitFor(t, "draining", g.srv.draining.Load)
	_ = live.WriteMessage(websocket.CloseMessage, websocket.FormatCloseMessage(1000, "bye"))
	closeOf(t, live)
	select {
	case clean := <-done:
		if !clean {
			t.Fatal("Drain was not clean although the only session ended by itself")
		}
		if time.Since(start) > 10*time.Second {
			t.Fatal("Drain waited for its timeout although no session was left")
		}
	case <-time.After(15 * time.Second):
		t.Fatal("Drain did not return after the last session ended")
	}
}
