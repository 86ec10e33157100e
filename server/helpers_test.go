package server

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"rtgate/internal/testwait"
	"rtgate/mockai"
)

const (
	testMasterKey   = "sk-gateway-master-test"
	testUpstreamKey = "sk-upstream-secret-test"
)

// gateway is a Server under test, listening on a free loopback port.
type gateway struct {
	srv  *Server
	addr string
	mock *mockai.Server
}

// startMock starts an in-process mockai that expects the gateway's upstream key.
func startMock(t testing.TB, cfg mockai.Config) *mockai.Server {
	t.Helper()
	if cfg.Key == "" {
		cfg.Key = testUpstreamKey
	}
	m, err := mockai.Start(cfg, "127.0.0.1:0")
	if err != nil {
		t.Fatalf("starting mockai: %v", err)
	}
	t.Cleanup(func() { _ = m.Close() })
	return m
}

// startGateway starts a gateway in front of mock (which may be nil when the
// test sets APIBase itself).
func startGateway(t testing.TB, mock *mockai.Server, mutate func(*Settings)) *gateway {
	t.Helper()
	return startGatewayLog(t, mock, mutate, nil)
}

// startGatewayLog is startGateway with the gateway's logger; nil discards
// (or, with -v, logs to the test).
func startGatewayLog(t testing.TB, mock *mockai.Server, mutate func(*Settings), log *slog.Logger) *gateway {
	t.Helper()
	srv := newTestServer(t, mock, mutate, log)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := serveChecked(t, srv, ln)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		<-done
	})
	return &gateway{srv: srv, addr: ln.Addr().String(), mock: mock}
}

// newTestServer is the Server startGatewayLog serves, not yet serving: for a
// test that makes its listener itself.
func newTestServer(t testing.TB, mock *mockai.Server, mutate func(*Settings), log *slog.Logger) *Server {
	t.Helper()
	cfg := Defaults()
	cfg.MasterKey = testMasterKey
	cfg.UpstreamKey = testUpstreamKey
	cfg.DialTimeout = 5 * time.Second
	cfg.CloseTimeout = 2 * time.Second
	cfg.Pool.Size = 0 // relay tests take the fresh-dial path; pool tests turn it on
	cfg.AdminAddr = ""
	if mock != nil {
		u, err := ParseAPIBase(mock.BaseURL())
		if err != nil {
			t.Fatal(err)
		}
		cfg.APIBase = u
	}
	if mutate != nil {
		mutate(&cfg)
	}
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
		if testing.Verbose() {
			log = slog.New(slog.NewTextHandler(&testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
		}
	}
	srv, err := newServer(testContext(), cfg, log)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return srv
}

// serveChecked runs srv.Serve(ln) in a goroutine and fails the test if it returns
// an error: the listener was lost while the gateway ran (serveListener), and
// the test's connects would go unanswered. Serve returns nil when the
// gateway stops accepting (Drain, Shutdown). done closes when Serve has
// returned; the caller waits for it before the test ends.
func serveChecked(t testing.TB, srv *Server, ln net.Listener) (done <-chan struct{}) {
	served := make(chan struct{})
	go func() {
		defer close(served)
		if err := srv.Serve(ln); err != nil {
			t.Errorf("the gateway stopped serving its listener: %v", err)
		}
	}()
	return served
}

type testWriter struct{ t testing.TB }

func (w *testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func (g *gateway) url(query string) string {
	u := "ws://" + g.addr + "/v1/realtime"
	if query != "" {
		u += "?" + query
	}
	return u
}

func bearer(key string) http.Header {
	return http.Header{"Authorization": {"Bearer " + key}}
}

// dial connects a gorilla client (an independent WebSocket implementation)
// to the gateway.
func (g *gateway) dial(t testing.TB, query string, h http.Header) *websocket.Conn {
	t.Helper()
	return dialWith(t, dialer(), g.url(query), h)
}

// dialWith connects d to url, failing the test (with the HTTP status of a
// refusal) unless it is admitted; the connection closes with the test.
func dialWith(t testing.TB, d *websocket.Dialer, url string, h http.Header) *websocket.Conn {
	t.Helper()
	c, resp, err := d.Dial(url, h)
	if err != nil {
		t.Fatalf("dial gateway at %s: %v (HTTP %d)", url, err, httpStatus(resp))
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// rawDial opens a plain TCP connection to the gateway, for tests that write
// bytes by hand; it closes when the test ends.
func (g *gateway) rawDial(t testing.TB) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", g.addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// httpStatus is the status of a failed dial's response, 0 when there was none.
func httpStatus(resp *http.Response) int {
	if resp == nil {
		return 0
	}
	return resp.StatusCode
}

func dialer() *websocket.Dialer {
	return &websocket.Dialer{HandshakeTimeout: 5 * time.Second}
}

// event is a decoded server event.
type event map[string]any

func (e event) typ() string { s, _ := e["type"].(string); return s }

func (e event) str(path ...string) string {
	var v any = map[string]any(e)
	for _, p := range path {
		m, ok := v.(map[string]any)
		if !ok {
			return ""
		}
		v = m[p]
	}
	switch x := v.(type) {
	case string:
		return x
	case float64:
		return strconv.FormatFloat(x, 'f', -1, 64)
	}
	return ""
}

// read reads one text event, failing the test on anything else.
func read(t testing.TB, c *websocket.Conn) event {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	mt, p, err := c.ReadMessage()
	if err != nil {
		t.Fatalf("reading event: %v", err)
	}
	if mt != websocket.TextMessage {
		t.Fatalf("got message type %d, want text", mt)
	}
	var e event
	if err := json.Unmarshal(p, &e); err != nil {
		t.Fatalf("event is not JSON: %v: %.200s", err, p)
	}
	return e
}

// waitFor is testwait.For under the short name this package's many tests
// call: up to ten seconds for cond, failing the test if it never holds.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	testwait.For(t, what, cond)
}

// readUntil reads events until one of type typ arrives, returning it and
// every type seen on the way.
func readUntil(t testing.TB, c *websocket.Conn, typ string) (event, []string) {
	t.Helper()
	var seen []string
	for range 1000 {
		e := read(t, c)
		seen = append(seen, e.typ())
		if e.typ() == typ {
			return e, seen
		}
	}
	t.Fatalf("no %s in 1000 events: %v", typ, seen)
	return nil, nil
}

func send(t testing.TB, c *websocket.Conn, v any) {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.WriteMessage(websocket.TextMessage, b); err != nil {
		t.Fatalf("send: %v", err)
	}
}

// closeOf reads until the connection ends and returns the close error.
func closeOf(t testing.TB, c *websocket.Conn) *websocket.CloseError {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	for {
		_, _, err := c.ReadMessage()
		if err == nil {
			continue
		}
		ce, ok := err.(*websocket.CloseError)
		if !ok {
			t.Fatalf("connection ended without a close frame: %v", err)
		}
		return ce
	}
}

// httpDo sends req to the gateway's listener and returns the status and
// JSON body.
func httpDo(t testing.TB, g *gateway, req *http.Request) (int, map[string]any) {
	t.Helper()
	req.URL.Scheme, req.URL.Host = "http", g.addr
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", req.Method, req.URL.Path, err)
	}
	defer resp.Body.Close()
	var body map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		t.Fatalf("%s %s: body is not JSON: %v", req.Method, req.URL.Path, err)
	}
	return resp.StatusCode, body
}

func mustURL(s string) *url.URL {
	u, err := url.Parse(s)
	if err != nil {
		panic(err)
	}
	return u
}
