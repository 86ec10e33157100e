package server

import (
	"net"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"rtgate/frames"
	"rtgate/mockai"
)

// recordingUpstream is a minimal upstream (gorilla's server side) that sends
// session.created and records how each connection ended, so tests can see
// what close the gateway sent upstream.
type recordingUpstream struct {
	srv    *httptest.Server
	closes chan int // close code per connection; 1006 when it dropped without one
}

func startRecordingUpstream(t *testing.T) *recordingUpstream {
	t.Helper()
	u := &recordingUpstream{closes: make(chan int, 16)}
	up := websocket.Upgrader{}
	u.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := up.Upgrade(w, r, nil)
		if err != nil {
			return
		}
		defer c.Close()
		_ = c.WriteMessage(websocket.TextMessage, []byte(`{"type":"session.created","session":{"id":"sess_rec"}}`))
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		for {
			if _, _, err := c.ReadMessage(); err != nil {
				code := 1006
				if ce, ok := err.(*websocket.CloseError); ok {
					code = ce.Code
				}
				u.closes <- code
				return
			}
		}
	}))
	t.Cleanup(u.srv.Close)
	return u
}

func (u *recordingUpstream) base() string {
	return "ws" + strings.TrimPrefix(u.srv.URL, "http") + "/v1"
}

func (u *recordingUpstream) nextClose(t *testing.T) int {
	t.Helper()
	select {
	case c := <-u.closes:
		return c
	case <-time.After(10 * time.Second):
		t.Fatal("the upstream connection did not end")
		return 0
	}
}

func TestCloseCodesPassBothWays(t *testing.T) {
	overBoth(t, mockai.Config{}, func(t *testing.T, mock *mockai.Server, trust func(*Settings)) {
		g := startGateway(t, mock, trust)
		c := g.dial(t, "model=gpt-realtime", bearer(testMasterKey))
		read(t, c)
		// mockai echoes the client's close; the echo crossing the gateway back
		// proves the code and reason went up and came down unchanged.
		if err := c.WriteMessage(websocket.CloseMessage, websocket.FormatCloseMessage(4321, "client says bye")); err != nil {
			t.Fatal(err)
		}
		if ce := closeOf(t, c); ce.Code != 4321 || ce.Text != "client says bye" {
			t.Fatalf("close %d %q, want 4321 %q", ce.Code, ce.Text, "client says bye")
		}
	})
}

func TestUpstreamCloseReachesClient(t *testing.T) {
	overBoth(t, mockai.Config{CloseAfterFrames: 1}, func(t *testing.T, mock *mockai.Server, trust func(*Settings)) {
		g := startGateway(t, mock, trust)
		c := g.dial(t, "model=gpt-realtime", bearer(testMasterKey))
		if e := read(t, c); e.typ() != "session.created" {
			t.Fatalf("got %v", e.typ())
		}
		if ce := closeOf(t, c); ce.Code != 1011 || ce.Text != "mock: closing after 1 frames" {
			t.Fatalf("close %d %q, want the upstream's own 1011 and reason", ce.Code, ce.Text)
		}
	})
}

func TestUpstreamDropBecomes1011(t *testing.T) {
	overBoth(t, mockai.Config{DropAfterFrames: 1}, func(t *testing.T, mock *mockai.Server, trust func(*Settings)) {
		g := startGateway(t, mock, trust)
		c := g.dial(t, "model=gpt-realtime", bearer(testMasterKey))
		read(t, c)
		if ce := closeOf(t, c); ce.Code != 1011 || ce.Text != "upstream connection lost" {
			t.Fatalf("close %d %q, want 1011 upstream connection lost", ce.Code, ce.Text)
		}
		// The gateway keeps serving.
		c2 := g.dial(t, "model=gpt-realtime", bearer(testMasterKey))
		if e := read(t, c2); e.typ() != "session.created" {
			t.Fatalf("next session got %v", e.typ())
		}
	})
}

func TestMalformedUpstreamFrame(t *testing.T) {
	overBoth(t, mockai.Config{MalformedAfterFrames: 1}, func(t *testing.T, mock *mockai.Server, trust func(*Settings)) {
		g := startGateway(t, mock, trust)
		c := g.dial(t, "model=gpt-realtime", bearer(testMasterKey))
		read(t, c)
		e := read(t, c)
		if e.typ() != "error" || e.str("error", "code") != "upstream_protocol_error" {
			t.Fatalf("got %v, want an upstream_protocol_error event", e)
		}
		if ce := closeOf(t, c); ce.Code != 1011 {
			t.Fatalf("close %d, want 1011", ce.Code)
		}
	})
}

// recordedSession starts a gateway in front of a recordingUpstream and opens
// one session on it, past session.created.
func recordedSession(t *testing.T) (*recordingUpstream, *gateway, *websocket.Conn) {
	t.Helper()
	up := startRecordingUpstream(t)
	g := startGateway(t, nil, func(c *Settings) { c.APIBase, _ = ParseAPIBase(up.base()) })
	c := g.dial(t, "model=gpt-realtime", bearer(testMasterKey))
	read(t, c)
	return up, g, c
}

func TestClientDropSends1001Upstream(t *testing.T) {
	up, g, c := recordedSession(t)
	_ = c.UnderlyingConn().Close() // no close frame
	if code := up.nextClose(t); code != 1001 {
		t.Fatalf("upstream got close %d, want 1001", code)
	}
	waitFor(t, "session to end", func() bool { return g.srv.SessionsOpen() == 0 })
}

func TestClientCloseCodeReachesUpstream(t *testing.T) {
	up, g, c := recordedSession(t)
	_ = c.WriteMessage(websocket.CloseMessage, websocket.FormatCloseMessage(4005, "custom"))
	if code := up.nextClose(t); code != 4005 {
		t.Fatalf("upstream got close %d, want 4005", code)
	}
	if ce := closeOf(t, c); ce.Code != 4005 {
		t.Fatalf("client got close %d, want its own 4005 echoed", ce.Code)
	}
	waitFor(t, "session to end", func() bool { return g.srv.SessionsOpen() == 0 })
}

func TestUnmaskedClientFrameCloses1002(t *testing.T) {
	up, g, c := recordedSession(t)
	// gorilla always masks; write an unmasked frame on its socket directly.
	raw := frames.AppendFrame(nil, 1, []byte(`{"type":"session.update"}`), false)
	if _, err := c.UnderlyingConn().Write(raw); err != nil {
		t.Fatal(err)
	}
	if ce := closeOf(t, c); ce.Code != 1002 || !strings.Contains(ce.Text, "masked") {
		t.Fatalf("close %d %q, want 1002 about masking", ce.Code, ce.Text)
	}
	if code := up.nextClose(t); code != 1001 {
		t.Fatalf("upstream got close %d, want 1001", code)
	}
	c2 := g.dial(t, "model=gpt-realtime", bearer(testMasterKey))
	if e := read(t, c2); e.typ() != "session.created" {
		t.Fatalf("next session got %v", e.typ())
	}
}

func TestHandshakeTimeoutDropsSilentClients(t *testing.T) {
	mock := startMock(t, mockai.Config{})
	g := startGateway(t, mock, func(c *Settings) { c.HandshakeTimeout = 200 * time.Millisecond })
	conn := g.rawDial(t)
	_, _ = conn.Write([]byte("GET /v1/realtime HTTP/1.1\r\nHost: x\r\n")) // never finished
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 1)
	if _, err := conn.Read(buf); err == nil {
		t.Fatal("the gateway answered an unfinished request head")
	} else if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatal("the gateway kept a silent client past the handshake timeout")
	}
}

func TestOversizedHeadGets431(t *testing.T) {
	mock := startMock(t, mockai.Config{})
	g := startGateway(t, mock, nil)
	conn := g.rawDial(t)
	_, _ = conn.Write([]byte("GET /v1/realtime HTTP/1.1\r\nHost: x\r\nX-Pad: " + strings.Repeat("a", 16<<10) + "\r\n\r\n"))
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 64)
	n, _ := conn.Read(buf)
	if !strings.HasPrefix(string(buf[:n]), "HTTP/1.1 431") {
		t.Fatalf("got %q, want HTTP 431", buf[:n])
	}
}

// gatewayTimeWait lists TIME_WAIT sockets whose remote end is port, one
// "local peer timer" line each: on loopback, sockets the gateway opened to the
// upstream listening there and closed first. Loopback's tcp_tw_reuse hides
// the cost; production pays a local port per socket for a minute.
func gatewayTimeWait(t *testing.T, port string) map[string]string {
	t.Helper()
	out, err := exec.Command("ss", "-Htano", "state", "time-wait", "dport", "= :"+port).Output()
	if err != nil {
		t.Fatalf("ss: %v", err)
	}
	sockets := map[string]string{}
	for line := range strings.Lines(string(out)) {
		f := strings.Fields(line) // Recv-Q Send-Q Local Peer timer
		if len(f) >= 4 {
			sockets[f[2]+" "+f[3]] = strings.TrimSpace(line)
		}
	}
	return sockets
}

// TestNoTimeWaitOnGatewayPorts: after a close handshake the upstream, as the
// WebSocket server, closes TCP first (RFC 6455 7.1.1), so no TIME_WAIT lands
// on the gateway's ephemeral ports: neither for relayed sessions nor for
// warm sockets the pool retires. Before this change the gateway closed first
// and left one TIME_WAIT socket per session and per retired warm socket.
func TestNoTimeWaitOnGatewayPorts(t *testing.T) {
	if _, err := exec.LookPath("ss"); err != nil {
		t.Fatal("ss (iproute2) is needed to count TIME_WAIT sockets")
	}
	for _, secure := range []bool{false, true} {
		name := "ws"
		if secure {
			name = "wss"
		}
		t.Run(name, func(t *testing.T) {
			var mock *mockai.Server
			var roots func(*Settings)
			if secure {
				mock = startTLSMock(t)
				pool := trustMock(t, mock)
				roots = func(c *Settings) { c.UpstreamRoots = pool }
			} else {
				mock = startMock(t, mockai.Config{})
			}
			u, _ := ParseAPIBase(mock.BaseURL())
			port := u.Port()
			// The port may have been an earlier test's upstream less
			// than a minute ago (the kernel hands a free listening port
			// out again while sockets that dialled it are still in
			// TIME_WAIT): those are not this gateway's.
			before := gatewayTimeWait(t, port)
			g := startGateway(t, mock, withPool(3, roots))
			waitWarm(t, g, 3)
			const sessions = 10
			for i := range sessions {
				c := g.dial(t, "model=gpt-realtime", bearer(testMasterKey))
				read(t, c)
				code := 1000
				if i%2 == 1 {
					code = 4000 + i
				}
				_ = c.WriteMessage(websocket.CloseMessage, websocket.FormatCloseMessage(code, "bye"))
				if ce := closeOf(t, c); ce.Code != code {
					t.Fatalf("close %d, want %d", ce.Code, code)
				}
			}
			waitFor(t, "the sessions to end", func() bool { return g.srv.SessionsOpen() == 0 })
			// The pool retires its warm sockets at shutdown. (Once it is
			// full again: a dial cancelled half-way is closed by the
			// gateway, as it must be.)
			waitWarm(t, g, 3)
			g.srv.Pool().Close()
			waitFor(t, "the upstream to see every socket close", func() bool {
				out, _ := exec.Command("ss", "-Htan", "state", "established", "dport", "= :"+port).Output()
				return len(strings.TrimSpace(string(out))) == 0
			})
			var ours []string
			for key, line := range gatewayTimeWait(t, port) {
				if _, earlier := before[key]; !earlier {
					ours = append(ours, line)
				}
			}
			if len(ours) != 0 {
				t.Fatalf("%d TIME_WAIT sockets on the gateway's side after %d sessions and 3+ retired warm sockets, want 0:\n%s",
					len(ours), sessions, strings.Join(ours, "\n"))
			}
		})
	}
}
