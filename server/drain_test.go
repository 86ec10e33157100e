package server

import (
	"net/http"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"rtgate/mockai"
)

func TestDrainLetsLiveSessionsFinishThenCloses1001(t *testing.T) {
	mock := startMock(t, mockai.Config{})
	g := startGateway(t, mock, withPool(2, nil))
	waitWarm(t, g, 2)
	live := g.dial(t, "model=gpt-realtime", bearer(testMasterKey))
	read(t, live)

	done := make(chan bool, 1)
	go func() { done <- g.srv.Drain(time.Second) }()
	waitFor(t, "draining", g.srv.Draining)

	req, _ := http.NewRequest("GET", "http://x/health", nil)
	if status, body := httpDo(t, g, req); status != 503 || body["status"] != "draining" {
		t.Fatalf("/health while draining: %d %v", status, body)
	}
	if status, code, _ := dialStatus(t, g, bearer(testMasterKey)); status != 503 || code != "draining" {
		t.Fatalf("a new connect while draining got %d %q, want 503 draining", status, code)
	}
	waitFor(t, "the warm sockets to close", func() bool { return mock.Stats().Active == 1 })

	// The live session still works during the drain...
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
}

func TestDrainIsCleanWhenSessionsEnd(t *testing.T) {
	mock := startMock(t, mockai.Config{})
	g := startGateway(t, mock, nil)
	live := g.dial(t, "model=gpt-realtime", bearer(testMasterKey))
	read(t, live)
	done := make(chan bool, 1)
	start := time.Now()
	go func() { done <- g.srv.Drain(30 * time.Second) }()
	waitFor(t, "draining", g.srv.Draining)
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
