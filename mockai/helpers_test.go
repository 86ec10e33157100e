package mockai_test

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"rtgate/mockai"
)

// ioTimeout bounds every single read or write a test does, so a broken server fails
// the test instead of hanging it.
const ioTimeout = 5 * time.Second

// event is a decoded server event.
type event map[string]any

// get follows a dotted path ("session.audio.output.voice") through nested objects.
func (e event) get(path string) any {
	var cur any = map[string]any(e)
	for _, k := range strings.Split(path, ".") {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil
		}
		cur = m[k]
	}
	return cur
}

func (e event) str(path string) string {
	s, _ := e.get(path).(string)
	return s
}

// num reads a JSON number as an int (-1 if absent).
func (e event) num(path string) int {
	f, ok := e.get(path).(float64)
	if !ok {
		return -1
	}
	return int(f)
}

func start(t *testing.T, cfg mockai.Config) *mockai.Server {
	t.Helper()
	srv, err := mockai.Start(cfg, "127.0.0.1:0")
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() {
		if err := srv.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return srv
}

// realtimeURL is the URL a client uses for model on srv.
func realtimeURL(srv *mockai.Server, model string) string {
	return srv.BaseURL() + "/realtime?model=" + model
}

// dial opens a WebSocket with gorilla as the client.
func dial(t *testing.T, url string, hdr http.Header, protos []string) (*websocket.Conn, *http.Response, error) {
	t.Helper()
	d := websocket.Dialer{HandshakeTimeout: ioTimeout, Subprotocols: protos}
	c, resp, err := d.Dial(url, hdr)
	if c != nil {
		t.Cleanup(func() { c.Close() })
	}
	return c, resp, err
}

// connect dials srv and returns the connection with its session.created event.
func connect(t *testing.T, srv *mockai.Server, hdr http.Header) (*websocket.Conn, event) {
	t.Helper()
	c, _, err := dial(t, realtimeURL(srv, "gpt-realtime"), hdr, nil)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	return c, expect(t, c, "session.created")
}

func readEvent(t *testing.T, c *websocket.Conn) event {
	t.Helper()
	ev, err := tryRead(c)
	if err != nil {
		t.Fatalf("read event: %v", err)
	}
	return ev
}

func tryRead(c *websocket.Conn) (event, error) {
	return tryReadWithin(c, ioTimeout)
}

// tryReadWithin is tryRead with its own bound, for a read that waits on work the
// test knowingly made long.
func tryReadWithin(c *websocket.Conn, d time.Duration) (event, error) {
	c.SetReadDeadline(time.Now().Add(d))
	mt, data, err := c.ReadMessage()
	if err != nil {
		return nil, err
	}
	if mt != websocket.TextMessage {
		return nil, errors.New("server sent a binary frame")
	}
	var ev event
	if err := json.Unmarshal(data, &ev); err != nil {
		return nil, err
	}
	return ev, nil
}

// expect reads one event and fails unless it has type typ.
func expect(t *testing.T, c *websocket.Conn, typ string) event {
	t.Helper()
	return expectWithin(t, c, typ, ioTimeout)
}

// expectWithin is expect with its own bound on the read.
func expectWithin(t *testing.T, c *websocket.Conn, typ string, d time.Duration) event {
	t.Helper()
	ev, err := tryReadWithin(c, d)
	if err != nil {
		t.Fatalf("read event: %v", err)
	}
	if got := ev.str("type"); got != typ {
		t.Fatalf("got event %q (%v), want %q", got, ev, typ)
	}
	return ev
}

func send(t *testing.T, c *websocket.Conn, v any) {
	t.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	sendRaw(t, c, websocket.TextMessage, data)
}

func sendRaw(t *testing.T, c *websocket.Conn, mt int, data []byte) {
	t.Helper()
	sendRawWithin(t, c, mt, data, ioTimeout)
}

// sendRawWithin is sendRaw with its own bound on the write.
func sendRawWithin(t *testing.T, c *websocket.Conn, mt int, data []byte, d time.Duration) {
	t.Helper()
	c.SetWriteDeadline(time.Now().Add(d))
	if err := c.WriteMessage(mt, data); err != nil {
		t.Fatalf("write: %v", err)
	}
}

// runScript plays script on c: a "response.create" step is sent, any other
// is the type of the next event expected. It returns the error of the read
// after the last step: how the connection went on.
func runScript(t *testing.T, c *websocket.Conn, script []string) error {
	t.Helper()
	for _, step := range script {
		if step == "response.create" {
			send(t, c, map[string]any{"type": step})
			continue
		}
		expect(t, c, step)
	}
	_, err := tryRead(c)
	return err
}

// expectClose reads until the connection ends and fails unless the server closed it
// with code and reason.
func expectClose(t *testing.T, c *websocket.Conn, code int, reason string) {
	t.Helper()
	for {
		_, err := tryRead(c)
		if err == nil {
			continue
		}
		var ce *websocket.CloseError
		if !errors.As(err, &ce) || ce.Code != code || ce.Text != reason {
			t.Fatalf("connection ended with %v, want close %d %q", err, code, reason)
		}
		return
	}
}

// httpErrorBody decodes an OpenAI-shaped JSON error from a refused upgrade.
func httpErrorBody(t *testing.T, resp *http.Response) (typ, code, raw string) {
	t.Helper()
	if resp == nil {
		t.Fatal("no HTTP response")
	}
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("read body: %v", err)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type %q, want application/json", ct)
	}
	var body struct {
		Error struct {
			Type    string `json:"type"`
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if err := json.Unmarshal(data, &body); err != nil {
		t.Fatalf("body %q is not JSON: %v", data, err)
	}
	if body.Error.Message == "" {
		t.Errorf("error body %s has no message", data)
	}
	return body.Error.Type, body.Error.Code, string(data)
}

// untilTestDeadline bounds a wait on work whose duration is proportional to the
// CPU the test gets, not a hang guard: the time left before go test's -timeout
// (less a margin to report the failure), or ten minutes where there is none.
func untilTestDeadline(t *testing.T) time.Duration {
	t.Helper()
	dl, ok := t.Deadline()
	if !ok {
		return 10 * time.Minute
	}
	return time.Until(dl) - 5*time.Second
}

func bearer(key string) http.Header {
	return http.Header{"Authorization": {"Bearer " + key}}
}

// trust is a client TLS config that trusts srv's certificate (nil without TLS).
func trust(t *testing.T, srv *mockai.Server) *tls.Config {
	t.Helper()
	if srv.CertPEM() == nil {
		return nil
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(srv.CertPEM()) {
		t.Fatal("CertPEM holds no certificate")
	}
	return &tls.Config{RootCAs: roots}
}
