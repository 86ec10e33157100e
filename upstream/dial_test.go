package upstream

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cloudwego/netpoll"
	"github.com/gorilla/websocket"
)

func TestParseSourceIPs(t *testing.T) {
	cases := []struct {
		in   string
		want string
		bad  bool
	}{
		{in: "127.0.0.2", want: "127.0.0.2"},
		{in: "127.0.0.1-127.0.0.3", want: "127.0.0.1 127.0.0.2 127.0.0.3"},
		{in: "10.0.0.5, 127.0.0.7-127.0.0.8", want: "10.0.0.5 127.0.0.7 127.0.0.8"},
		{in: "::1", want: "::1"},
		{in: "127.0.0.9-127.0.0.3", bad: true},
		{in: "127.0.0.1-127.0.1.3", bad: true},
		{in: "nope", bad: true},
		{in: " , ", bad: true},
	}
	for _, tc := range cases {
		ips, err := ParseSourceIPs(tc.in)
		if tc.bad {
			if err == nil {
				t.Fatalf("%q: want an error, got %v", tc.in, ips)
			}
			continue
		}
		var got []string
		for _, ip := range ips {
			got = append(got, ip.String())
		}
		if err != nil || strings.Join(got, " ") != tc.want {
			t.Fatalf("%q: got %v %v, want %s", tc.in, got, err, tc.want)
		}
	}
}

// TestDialSpreadsOverSourceIPs dials a loopback upstream from several
// loopback source addresses and checks which ones the upstream saw.
func TestDialSpreadsOverSourceIPs(t *testing.T) {
	var mu sync.Mutex
	seen := map[string]int{}
	up := websocket.Upgrader{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host, _, _ := net.SplitHostPort(r.RemoteAddr)
		mu.Lock()
		seen[host]++
		mu.Unlock()
		c, err := up.Upgrade(w, r, nil)
		if err != nil {
			return
		}
		_ = c.WriteMessage(websocket.TextMessage, []byte(`{"type":"session.created"}`))
		_ = c.Close()
	}))
	defer srv.Close()
	ips, _ := ParseSourceIPs("127.0.0.2-127.0.0.4")
	d := &Dialer{Timeout: 5 * time.Second, SourceIPs: ips}
	u, _ := url.Parse("ws" + strings.TrimPrefix(srv.URL, "http") + "/v1/realtime?model=m")
	for range 6 {
		c, err := d.Dial(t.Context(), Target{URL: u, Header: http.Header{}})
		if err != nil {
			t.Fatalf("dial: %v", err)
		}
		c.Endpoint.Close()
	}
	mu.Lock()
	defer mu.Unlock()
	for _, ip := range []string{"127.0.0.2", "127.0.0.3", "127.0.0.4"} {
		if seen[ip] != 2 {
			t.Fatalf("upstream saw %v, want two dials from each of 127.0.0.2-4", seen)
		}
	}
}

// TestDialTimesOutOnSilentUpstream dials an upstream that accepts TCP and
// never answers: the TLS handshake (wss://) or the upgrade (ws://) waits in
// a blocking read, and the dial timeout must end it.
func TestDialTimesOutOnSilentUpstream(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var held []net.Conn
	var mu sync.Mutex
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			held = append(held, c)
			mu.Unlock()
		}
	}()
	defer func() {
		mu.Lock()
		defer mu.Unlock()
		for _, c := range held {
			_ = c.Close()
		}
	}()
	const timeout = 300 * time.Millisecond
	for _, scheme := range []string{"ws", "wss"} {
		t.Run(scheme, func(t *testing.T) {
			d := &Dialer{Timeout: timeout}
			u, _ := url.Parse(scheme + "://" + ln.Addr().String() + "/v1/realtime?model=m")
			done := make(chan error, 1)
			go func() {
				c, err := d.Dial(t.Context(), Target{URL: u, Header: http.Header{}})
				if err == nil {
					c.Endpoint.Close()
				}
				done <- err
			}()
			var err error
			select {
			case err = <-done:
			case <-time.After(timeout + 10*time.Second): // a hang, not a slow machine
				t.Fatalf("dial to a silent upstream still waiting %v after its %v timeout", 10*time.Second, timeout)
			}
			if err == nil {
				t.Fatal("dial to a silent upstream succeeded")
			}
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("dial error %v, want it to wrap context.DeadlineExceeded", err)
			}
		})
	}
}

// TestDialFailsWhenItsDeadlineClosesAtTheEnd: a deadline that passes just as
// the handshake completes starts the socket's Close in another goroutine
// (context.AfterFunc), which Dial can no longer stop. Dial used to return
// that socket as a success, and the Close could then land after the session
// installed its read handler (under inline handlers, a spinning poller;
// issue 20, path 4). Now the dial fails. Over ws:// and wss://.
func TestDialFailsWhenItsDeadlineClosesAtTheEnd(t *testing.T) {
	up := websocket.Upgrader{}
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := up.Upgrade(w, r, nil)
		if err != nil {
			return
		}
		_ = c.WriteMessage(websocket.TextMessage, []byte(`{"type":"session.created"}`))
		_, _, _ = c.ReadMessage() // until the gateway's side closes
		_ = c.Close()
	})
	for _, secure := range []bool{false, true} {
		name := map[bool]string{false: "ws", true: "wss"}[secure]
		t.Run(name, func(t *testing.T) {
			var srv *httptest.Server
			d := &Dialer{Timeout: 5 * time.Second}
			if secure {
				srv = httptest.NewTLSServer(handler)
				d.TLSConfig = srv.Client().Transport.(*http.Transport).TLSClientConfig
			} else {
				srv = httptest.NewServer(handler)
			}
			defer srv.Close()
			u, _ := url.Parse(name + strings.TrimPrefix(srv.URL, map[bool]string{false: "http", true: "https"}[secure]) + "/v1/realtime?model=m")
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			d.afterHandshake = func(conn netpoll.Connection) {
				cancel() // the deadline passes now: its Close starts
				deadline := time.Now().Add(5 * time.Second)
				for conn.IsActive() && time.Now().Before(deadline) {
					time.Sleep(time.Millisecond)
				}
			}
			c, err := d.Dial(ctx, Target{URL: u, Header: http.Header{}})
			if err == nil {
				active := c.Endpoint.Conn().IsActive()
				c.Endpoint.Close()
				t.Fatalf("dial succeeded with a socket its deadline closed (still active: %v)", active)
			}
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("dial failed with %v, want the context's end", err)
			}
		})
	}
}

// TestDialTriesARefusedConnectTwice: a connect netpoll reports closed
// before it completed (a refusal here; under the race detector also a
// hang-up meant for an earlier socket of the same number) is tried once
// more, and the error says so.
func TestDialTriesARefusedConnectTwice(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close() // nothing listens there now
	d := &Dialer{Timeout: 5 * time.Second}
	u, _ := url.Parse("ws://" + addr + "/v1/realtime")
	_, err = d.Dial(context.Background(), Target{URL: u})
	if err == nil || !strings.Contains(err.Error(), "tried twice") {
		t.Fatalf("dial to a closed port: %v, want the refusal, tried twice", err)
	}
}
