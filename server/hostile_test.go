package server

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gobwas/ws"
	"github.com/gorilla/websocket"

	"rtgate/mockai"
)

// Hostile and broken clients, on real loopback sockets: malformed HTTP,
// abuse of the handshake's timing, and WebSocket protocol violations after
// the upgrade. Every case checks what the client sees, then that the
// gateway still serves a normal session, and at the end of each test that
// no session and no file descriptor was left behind.

// hostileKey is a valid Sec-WebSocket-Key (the RFC 6455 example nonce).
const hostileKey = "dGhlIHNhbXBsZSBub25jZQ=="

// upgradeHeaders are the header lines of a valid, authenticated upgrade.
var upgradeHeaders = []string{
	"Host: gateway",
	"Connection: Upgrade",
	"Upgrade: websocket",
	"Sec-WebSocket-Version: 13",
	"Sec-WebSocket-Key: " + hostileKey,
	"Authorization: Bearer " + testMasterKey,
}

// requestHead builds a request head from its request line and header lines.
func requestHead(requestLine string, headers ...string) []byte {
	var b strings.Builder
	b.WriteString(requestLine + "\r\n")
	for _, h := range headers {
		b.WriteString(h + "\r\n")
	}
	b.WriteString("\r\n")
	return []byte(b.String())
}

// replaceHeader returns headers without the line for name, plus line if it
// is not empty.
func replaceHeader(headers []string, name, line string) []string {
	var out []string
	for _, h := range headers {
		if !strings.HasPrefix(strings.ToLower(h), strings.ToLower(name)+":") {
			out = append(out, h)
		}
	}
	if line != "" {
		out = append(out, line)
	}
	return out
}

// rawExchange sends req on a fresh TCP connection and returns the gateway's
// answer and its body. A refusal ends the connection: it fails the test if
// the gateway keeps it open.
func rawExchange(t *testing.T, g *gateway, req []byte) (*http.Response, []byte) {
	t.Helper()
	conn := g.rawDial(t)
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := conn.Write(req); err != nil {
		t.Fatalf("writing the request: %v", err)
	}
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("reading the answer: %v", err)
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading the answer's body: %v", err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		if n, err := br.Read(make([]byte, 1)); n > 0 || !connEnded(err) {
			t.Fatalf("after a %d the connection is still open (read %d bytes, %v)", resp.StatusCode, n, err)
		}
	}
	return resp, body
}

// connEnded says a read error means the peer closed the connection, as
// opposed to a read deadline passing.
func connEnded(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET)
}

// normalSessionWorks runs a short, complete session: the gateway is still
// serving after whatever came before. It returns once the session ended, so
// it must not run beside other sessions.
func normalSessionWorks(t *testing.T, g *gateway) {
	t.Helper()
	c := g.dial(t, "model=gpt-realtime", bearer(testMasterKey))
	defer c.Close()
	if e := read(t, c); e.typ() != "session.created" {
		t.Fatalf("normal session: first event %v, want session.created", e.typ())
	}
	if err := c.WriteMessage(websocket.CloseMessage, websocket.FormatCloseMessage(1000, "done")); err != nil {
		t.Fatal(err)
	}
	if ce := closeOf(t, c); ce.Code != 1000 {
		t.Fatalf("normal session: close %d %q, want 1000 echoed", ce.Code, ce.Text)
	}
	_ = c.Close()
	waitFor(t, "the normal session to end", func() bool { return g.srv.SessionsOpen() == 0 })
}

// expectCreatedThenUpdated reads session.created, sends a session.update
// with instructions, and reads its session.updated.
func expectCreatedThenUpdated(t *testing.T, c *websocket.Conn, instructions string) {
	t.Helper()
	if e := read(t, c); e.typ() != "session.created" {
		t.Fatalf("first event %v, want session.created", e.typ())
	}
	send(t, c, map[string]any{"type": "session.update", "session": map[string]any{"type": "realtime", "instructions": instructions}})
	if e := read(t, c); e.typ() != "session.updated" {
		t.Fatalf("got %v, want session.updated", e.typ())
	}
}

// dialThenWriteRaw opens a session, reads its session.created, and writes b
// (hand-built frame bytes) on the socket beneath the client.
func dialThenWriteRaw(t *testing.T, g *gateway, b []byte) *websocket.Conn {
	t.Helper()
	c := g.dial(t, "model=gpt-realtime", bearer(testMasterKey))
	if e := read(t, c); e.typ() != "session.created" {
		t.Fatalf("first event %v", e.typ())
	}
	if _, err := c.UnderlyingConn().Write(b); err != nil {
		t.Fatal(err)
	}
	return c
}

// countFDs counts this process's open file descriptors; ok is false where
// /proc/self/fd does not exist.
func countFDs() (n int, ok bool) {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return 0, false
	}
	return len(ents), true
}

// leakCheck records the state of the process after a test's setup; its done
// method waits for every session to end and the descriptor count to come
// back to that baseline.
type leakCheck struct {
	g      *gateway
	fds    int
	hasFDs bool
}

func startLeakCheck(t *testing.T, g *gateway) *leakCheck {
	t.Helper()
	// One session first, so that whatever the reactor and the clients set
	// up once (pollers, idle connections) is in the baseline.
	normalSessionWorks(t, g)
	fds, ok := countFDs()
	if !ok {
		t.Log("no /proc/self/fd here: descriptor leaks are not checked")
	}
	return &leakCheck{g: g, fds: fds, hasFDs: ok}
}

// leakSlack allows for descriptors the runtime or the test harness may
// open meanwhile; a leak per case would exceed it many times over.
const leakSlack = 3

func (l *leakCheck) done(t *testing.T) {
	t.Helper()
	waitFor(t, "all sessions to end", func() bool { return l.g.srv.SessionsOpen() == 0 })
	if !l.hasFDs {
		return
	}
	var n int
	deadline := time.Now().Add(10 * time.Second)
	for {
		n, _ = countFDs()
		if n <= l.fds+leakSlack {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d file descriptors open, %d before the cases ran", n, l.fds)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestHostileHTTPRequests(t *testing.T) {
	mock := startMock(t, mockai.Config{})
	g := startGateway(t, mock, nil)
	leaks := startLeakCheck(t, g)

	get := "GET /v1/realtime?model=gpt-realtime HTTP/1.1"
	pad := "X-Pad: " + strings.Repeat("a", 9<<10) // over the 8 KiB default
	cases := []struct {
		name   string
		req    []byte
		status int
		code   string            // error.code in the JSON body
		header map[string]string // header lines the answer must carry
	}{
		{"malformed request line", []byte("GARBAGE\r\n\r\n"), 400, "bad_request", nil},
		{"request line without HTTP version", requestHead("GET /v1/realtime", upgradeHeaders...), 400, "bad_request", nil},
		{"TLS ClientHello bytes with a blank line", []byte("\x16\x03\x01\x00\xa5\x01\x00\x00\xa1\x03\x03\x00\xff\r\n\r\n"), 400, "tls_not_served", nil},
		{"binary junk with a blank line", []byte("\x00\xff\x13\x37\r\n\r\n"), 400, "bad_request", nil},
		{"header line without a colon", requestHead(get, append([]string{"this is not a header"}, upgradeHeaders...)...), 400, "bad_request", nil},
		{"missing Sec-WebSocket-Key", requestHead(get, replaceHeader(upgradeHeaders, "Sec-WebSocket-Key", "")...), 400, "bad_request", nil},
		{"Sec-WebSocket-Key not 16 bytes", requestHead(get, replaceHeader(upgradeHeaders, "Sec-WebSocket-Key", "Sec-WebSocket-Key: c2hvcnQ=")...), 400, "bad_request", nil},
		{"missing Sec-WebSocket-Version", requestHead(get, replaceHeader(upgradeHeaders, "Sec-WebSocket-Version", "")...),
			426, "unsupported_websocket_version", map[string]string{"Sec-WebSocket-Version": "13"}},
		{"Sec-WebSocket-Version 8", requestHead(get, replaceHeader(upgradeHeaders, "Sec-WebSocket-Version", "Sec-WebSocket-Version: 8")...),
			426, "unsupported_websocket_version", map[string]string{"Sec-WebSocket-Version": "13"}},
		{"oversized head", requestHead(get, append(upgradeHeaders, pad)...), 431, "headers_too_large", nil},
		{"oversized head that never ends", []byte(get + "\r\n" + pad), 431, "headers_too_large", nil},
		{"POST", requestHead("POST /v1/realtime HTTP/1.1", upgradeHeaders...), 405, "method_not_allowed", map[string]string{"Allow": "GET"}},
		{"DELETE", requestHead("DELETE /v1/realtime HTTP/1.1", upgradeHeaders...), 405, "method_not_allowed", map[string]string{"Allow": "GET"}},
		{"unknown path", requestHead("GET /v1/chat/completions HTTP/1.1", upgradeHeaders...), 404, "not_found", nil},
		{"dot segments", requestHead("GET /v1/realtime/../../admin HTTP/1.1", upgradeHeaders...), 404, "not_found", nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			resp, body := rawExchange(t, g, tc.req)
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d, want %d (body %.200s)", resp.StatusCode, tc.status, body)
			}
			if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
				t.Fatalf("Content-Type %q, want application/json", ct)
			}
			var e struct {
				Error struct{ Type, Code, Message string }
			}
			if err := json.Unmarshal(body, &e); err != nil {
				t.Fatalf("body is not JSON: %v: %.200s", err, body)
			}
			if e.Error.Code != tc.code || e.Error.Type != "invalid_request_error" || e.Error.Message == "" {
				t.Fatalf("body %s, want an invalid_request_error with code %s and a message", body, tc.code)
			}
			for name, want := range tc.header {
				if got := resp.Header.Get(name); got != want {
					t.Fatalf("header %s: %q, want %q", name, got, want)
				}
			}
			if n := g.srv.SessionsOpen(); n != 0 {
				t.Fatalf("a refused request left %d sessions open", n)
			}
			normalSessionWorks(t, g)
		})
	}
	leaks.done(t)
	// Only the normal sessions reached the upstream.
	if got, want := len(mock.Records()), len(cases)+1; got != want {
		t.Fatalf("upstream saw %d connects, want %d (one per normal session)", got, want)
	}
}

// scriptedConn wraps a client's TCP connection to misbehave while gorilla
// writes its upgrade request: it can send the request a byte at a time, and
// send extra bytes in the same write as the end of the request.
type scriptedConn struct {
	net.Conn
	pause     time.Duration // between bytes of the request; 0 sends it whole
	afterHead []byte        // sent right behind the request head
	headSent  bool
}

func (c *scriptedConn) Write(p []byte) (int, error) {
	if c.headSent {
		return c.Conn.Write(p)
	}
	c.headSent = bytes.HasSuffix(p, []byte("\r\n\r\n"))
	out := p
	if c.headSent && len(c.afterHead) > 0 {
		out = append(append([]byte(nil), p...), c.afterHead...)
	}
	if c.pause == 0 {
		if _, err := c.Conn.Write(out); err != nil {
			return 0, err
		}
		return len(p), nil
	}
	for i := range out {
		if _, err := c.Conn.Write(out[i : i+1]); err != nil {
			return 0, err
		}
		time.Sleep(c.pause)
	}
	return len(p), nil
}

// scriptedDial connects a gorilla client through a scriptedConn.
func scriptedDial(t *testing.T, g *gateway, script scriptedConn) *websocket.Conn {
	t.Helper()
	d := dialer()
	d.NetDialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := (&net.Dialer{}).DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		s := script
		s.Conn = conn
		return &s, nil
	}
	return dialWith(t, d, g.url("model=gpt-realtime"), bearer(testMasterKey))
}

// clientFrame builds a frame by hand: b0 is the first byte as sent (FIN,
// RSV bits, opcode), the length takes the shortest form, and masked frames
// use gobwas's masking.
func clientFrame(b0 byte, payload []byte, masked bool) []byte {
	var b bytes.Buffer
	b.WriteByte(b0)
	var mbit byte
	if masked {
		mbit = 0x80
	}
	switch n := len(payload); {
	case n < 126:
		b.WriteByte(mbit | byte(n))
	case n <= 0xffff:
		b.WriteByte(mbit | 126)
		_ = binary.Write(&b, binary.BigEndian, uint16(n))
	default:
		b.WriteByte(mbit | 127)
		_ = binary.Write(&b, binary.BigEndian, uint64(n))
	}
	p := append([]byte(nil), payload...)
	if masked {
		mask := [4]byte{0x37, 0xfa, 0x21, 0x3d}
		b.Write(mask[:])
		ws.Cipher(p, mask, 0)
	}
	b.Write(p)
	return b.Bytes()
}

func closePayload(code uint16, reason string) []byte {
	return append(binary.BigEndian.AppendUint16(nil, code), reason...)
}

func sessionUpdate(n int) []byte {
	b, _ := json.Marshal(map[string]any{"type": "session.update", "session": map[string]any{"type": "realtime", "instructions": "pipelined " + string(rune('0'+n))}})
	return b
}

// expectPipelined reads session.created and then the session.updated
// answers to sessionUpdate(0) ... sessionUpdate(n-1), in order.
func expectPipelined(t *testing.T, c *websocket.Conn, n int) {
	t.Helper()
	if e := read(t, c); e.typ() != "session.created" {
		t.Fatalf("first event %v", e.typ())
	}
	for i := range n {
		e := read(t, c)
		if want := "pipelined " + string(rune('0'+i)); e.typ() != "session.updated" || e.str("session", "instructions") != want {
			t.Fatalf("event %d: %v %q, want session.updated %q", i, e.typ(), e.str("session", "instructions"), want)
		}
	}
}

func TestHostilePipelinedBytesAfterUpgradeRequest(t *testing.T) {
	mock := startMock(t, mockai.Config{})
	g := startGateway(t, mock, nil)
	leaks := startLeakCheck(t, g)

	t.Run("valid frames arrive in order", func(t *testing.T) {
		var after []byte
		for i := range 3 {
			after = append(after, clientFrame(0x81, sessionUpdate(i), true)...)
		}
		c := scriptedDial(t, g, scriptedConn{afterHead: after})
		defer c.Close()
		expectPipelined(t, c, 3)
	})
	normalSessionWorks(t, g)

	t.Run("frame split across the end of the head", func(t *testing.T) {
		f := clientFrame(0x81, sessionUpdate(7), true)
		c := scriptedDial(t, g, scriptedConn{afterHead: f[:5]})
		defer c.Close()
		if _, err := c.UnderlyingConn().Write(f[5:]); err != nil {
			t.Fatal(err)
		}
		if e := read(t, c); e.typ() != "session.created" {
			t.Fatalf("first event %v", e.typ())
		}
		if e := read(t, c); e.typ() != "session.updated" || e.str("session", "instructions") != "pipelined 7" {
			t.Fatalf("got %v %q, want the split session.update answered", e.typ(), e.str("session", "instructions"))
		}
	})
	normalSessionWorks(t, g)

	garbage := []struct {
		name  string
		bytes []byte
	}{
		{"a second HTTP request", []byte("GET /v1/realtime HTTP/1.1\r\nHost: gateway\r\n\r\n")},
		{"zero bytes", make([]byte, 16)},
		{"an unmasked frame", clientFrame(0x81, []byte(`{"type":"session.update"}`), false)},
		{"a valid frame, then junk", append(clientFrame(0x81, sessionUpdate(1), true), 0xff, 0xff, 0xff)},
	}
	for _, tc := range garbage {
		t.Run("garbage: "+tc.name, func(t *testing.T) {
			c := scriptedDial(t, g, scriptedConn{afterHead: tc.bytes})
			defer c.Close()
			ce := closeOf(t, c)
			if ce.Code != 1002 || ce.Text == "" {
				t.Fatalf("close %d %q, want 1002 with a reason", ce.Code, ce.Text)
			}
			_ = c.Close()
			waitFor(t, "the session to end", func() bool { return g.srv.SessionsOpen() == 0 })
			normalSessionWorks(t, g)
		})
	}
	leaks.done(t)
}

func TestHostileHandshakeTiming(t *testing.T) {
	mock := startMock(t, mockai.Config{})

	t.Run("head sent a byte at a time within the timeout", func(t *testing.T) {
		g := startGateway(t, mock, nil) // 10 s to send a head of about 250 bytes
		leaks := startLeakCheck(t, g)
		c := scriptedDial(t, g, scriptedConn{pause: time.Millisecond})
		expectCreatedThenUpdated(t, c, "slow")
		_ = c.Close()
		leaks.done(t)
	})

	g := startGateway(t, mock, func(c *Settings) { c.HandshakeTimeout = 300 * time.Millisecond })
	leaks := startLeakCheck(t, g)
	stalls := []struct {
		name string
		// talk writes to the connection; it returns when the gateway has
		// closed it (a write fails) or when it is done writing.
		talk func(conn net.Conn)
	}{
		{"connects and sends nothing", func(net.Conn) {}},
		{"stops in the middle of the head", func(conn net.Conn) {
			_, _ = conn.Write([]byte("GET /v1/realtime HTTP/1.1\r\nHost: gateway\r\nAuthorization: Bea"))
		}},
		{"keeps sending header lines and never ends the head", func(conn net.Conn) {
			// A byte every 20 ms keeps the socket busy, but the deadline
			// counts from the accept, so it still passes. 8 KiB would take
			// minutes; the gateway must not wait for the size limit.
			_, _ = conn.Write([]byte("GET /v1/realtime HTTP/1.1\r\n"))
			for range 500 {
				if _, err := conn.Write([]byte("X")); err != nil {
					return
				}
				time.Sleep(20 * time.Millisecond)
			}
		}},
	}
	for _, tc := range stalls {
		t.Run(tc.name, func(t *testing.T) {
			conn := g.rawDial(t)
			type result struct {
				answer []byte
				err    error
			}
			got := make(chan result, 1)
			go func() {
				_ = conn.SetReadDeadline(time.Now().Add(15 * time.Second))
				b, err := io.ReadAll(conn)
				got <- result{b, err}
			}()
			tc.talk(conn)
			r := <-got
			if r.err != nil && !connEnded(r.err) {
				t.Fatalf("the gateway kept the stalled client (%v)", r.err)
			}
			if len(r.answer) != 0 {
				t.Fatalf("the gateway answered an unfinished head: %q", r.answer)
			}
			normalSessionWorks(t, g)
		})
	}
	leaks.done(t)
}

func TestHostileClientHangsUpDuringUpgrade(t *testing.T) {
	mock := startMock(t, mockai.Config{})
	g := startGateway(t, mock, nil)
	leaks := startLeakCheck(t, g)
	req := requestHead("GET /v1/realtime?model=gpt-realtime HTTP/1.1", upgradeHeaders...)
	// The client sends a valid upgrade request and is gone before the 101:
	// half of them close normally, half reset the connection.
	for i := range 40 {
		conn, err := net.Dial("tcp", g.addr)
		if err != nil {
			t.Fatal(err)
		}
		if i%2 == 1 {
			_ = conn.(*net.TCPConn).SetLinger(0)
		}
		if _, err := conn.Write(req); err != nil {
			t.Fatal(err)
		}
		_ = conn.Close()
	}
	normalSessionWorks(t, g)
	leaks.done(t)
}

// TestHostileClientFrames sends frames RFC 6455 forbids after a successful
// upgrade. The client must get a close with the right code and a reason,
// and the upstream a close 1001 of the gateway's own.
func TestHostileClientFrames(t *testing.T) {
	up := startRecordingUpstream(t)
	g := startGateway(t, nil, func(c *Settings) {
		c.APIBase, _ = ParseAPIBase(up.base())
		c.MaxMessage = 64 << 10
	})
	// A normal session here also shows the upstream a clean close.
	normalSession := func(t *testing.T) {
		t.Helper()
		normalSessionWorks(t, g)
		if code := up.nextClose(t); code != 1000 {
			t.Fatalf("normal session: upstream got close %d, want 1000", code)
		}
	}
	leaks := startLeakCheck(t, g)
	if code := up.nextClose(t); code != 1000 {
		t.Fatalf("warm-up session: upstream got close %d, want 1000", code)
	}

	const (
		fin  = 0x80
		text = 0x1
	)
	x := []byte("x")
	cases := []struct {
		name  string
		frame []byte
		code  int
	}{
		{"unmasked frame", clientFrame(fin|text, x, false), 1002},
		{"RSV1 set", clientFrame(fin|0x40|text, x, true), 1002},
		{"RSV2 and RSV3 set", clientFrame(fin|0x30|text, x, true), 1002},
		{"data opcode 3", clientFrame(fin|0x3, x, true), 1002},
		{"control opcode 0xB", clientFrame(fin|0xb, nil, true), 1002},
		{"ping over 125 bytes", clientFrame(fin|0x9, make([]byte, 126), true), 1002},
		{"close over 125 bytes", clientFrame(fin|0x8, closePayload(1000, strings.Repeat("r", 124)), true), 1002},
		{"fragmented ping", clientFrame(0x9, x, true), 1002},
		{"continuation without a start", clientFrame(fin|0x0, x, true), 1002},
		{"text frame inside a fragmented message", append(clientFrame(text, x, true), clientFrame(fin|text, x, true)...), 1002},
		{"64-bit length with the top bit set", []byte{fin | 0x2, 0x80 | 127, 0x80, 0, 0, 0, 0, 0, 0, 1, 1, 2, 3, 4}, 1002},
		{"close with a 1-byte payload", clientFrame(fin|0x8, []byte{0x03}, true), 1002},
		{"close with reserved code 1005", clientFrame(fin|0x8, closePayload(1005, ""), true), 1002},
		{"close with reserved code 1006", clientFrame(fin|0x8, closePayload(1006, "lost"), true), 1002},
		{"close with code 999", clientFrame(fin|0x8, closePayload(999, ""), true), 1002},
		{"close with reserved code 1004", clientFrame(fin|0x8, closePayload(1004, ""), true), 1002},
		{"close with reserved code 1015", clientFrame(fin|0x8, closePayload(1015, ""), true), 1002},
		{"close with code 5000", clientFrame(fin|0x8, closePayload(5000, ""), true), 1002},
		{"close reason not UTF-8", clientFrame(fin|0x8, append(closePayload(1000, ""), 0xff, 0xfe), true), 1007},
		{"message over the size limit", clientFrame(fin|text, make([]byte, 64<<10+1), true), 1009},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := dialThenWriteRaw(t, g, tc.frame)
			defer c.Close()
			if ce := closeOf(t, c); ce.Code != tc.code || ce.Text == "" {
				t.Fatalf("close %d %q, want %d with a reason", ce.Code, ce.Text, tc.code)
			}
			if code := up.nextClose(t); code != 1001 {
				t.Fatalf("upstream got close %d, want 1001", code)
			}
			_ = c.Close()
			waitFor(t, "the session to end", func() bool { return g.srv.SessionsOpen() == 0 })
			normalSession(t)
		})
	}

	// A client that dies in the middle of a frame. When none of the frame
	// has gone upstream yet (a partial header or control frame, which the
	// gateway holds back), the upstream gets a close 1001. When part of a
	// data frame went up already, a close frame would be read as the rest
	// of its payload, so the gateway drops the upstream connection instead
	// (1006 on the upstream's side).
	truncated := []struct {
		name     string
		bytes    []byte
		upstream int
	}{
		{"partial header", clientFrame(fin|text, make([]byte, 300), true)[:3], 1001},
		{"partial ping", clientFrame(fin|0x9, []byte("hello"), true)[:8], 1001},
		{"partial payload", clientFrame(fin|text, make([]byte, 100), true)[:16], 1006},
	}
	for _, tc := range truncated {
		t.Run("truncated then EOF: "+tc.name, func(t *testing.T) {
			c := dialThenWriteRaw(t, g, tc.bytes)
			defer c.Close()
			// Let the gateway take the bytes in before the connection
			// ends; the close then finds them there.
			time.Sleep(100 * time.Millisecond)
			_ = c.UnderlyingConn().Close()
			if code := up.nextClose(t); code != tc.upstream {
				t.Fatalf("upstream got close %d, want %d", code, tc.upstream)
			}
			waitFor(t, "the session to end", func() bool { return g.srv.SessionsOpen() == 0 })
			normalSession(t)
		})
	}
	leaks.done(t)
}

// readOutcome is what a client of the flood sees within the wait: data, the
// connection closed with nothing sent, or nothing at all.
type readOutcome int

const (
	readNothing readOutcome = iota // the deadline passed: still held
	readData
	readClosed
)

// outcomes reads every connection in parallel until the same deadline.
func outcomes(conns []net.Conn, wait time.Duration) (held, data, closed int) {
	res := make(chan readOutcome, len(conns))
	deadline := time.Now().Add(wait)
	for _, c := range conns {
		go func() {
			_ = c.SetReadDeadline(deadline)
			n, err := c.Read(make([]byte, 1))
			switch {
			case n > 0:
				res <- readData
			case connEnded(err):
				res <- readClosed
			default:
				res <- readNothing
			}
		}()
	}
	for range conns {
		switch <-res {
		case readNothing:
			held++
		case readData:
			data++
		case readClosed:
			closed++
		}
	}
	return held, data, closed
}

// A flood of clients that open TCP and send half a ClientHello costs no
// goroutine each; they hold MaxConnections slots from accept. Clients that
// send a whole ClientHello and stall start at most MaxHandshakes handshakes;
// the rest are closed at once. Sessions already open keep relaying, new
// clients are served while slots remain, and everything comes back once the
// flood goes.
func TestHostileHalfOpenTLSFlood(t *testing.T) {
	const (
		maxHandshakes = 8
		flood         = 300
		stallers      = 20
	)
	cert := newListenerCert(t)
	mock := startMock(t, mockai.Config{AudioDeltaBytes: tlsAudioDeltaBytes})
	g := startGateway(t, mock, func(c *Settings) {
		c.TLSCert, c.TLSKey = cert.certFile, cert.keyFile
		c.MaxHandshakes = maxHandshakes
		c.HandshakeTimeout = 60 * time.Second // every refusal below must come at once, not at the timeout
	})
	runTLSSession(t, g.dialTLS(t, cert.roots)) // one-time set-up lands in the baseline
	waitFor(t, "the first session to end", func() bool { return g.srv.SessionsOpen() == 0 })
	fds, hasFDs := countFDs()
	goroutines := runtime.NumGoroutine()

	live := g.dialTLS(t, cert.roots)
	if e := read(t, live); e.typ() != "session.created" {
		t.Fatalf("live session: %v", e.typ())
	}
	hello := clientHelloBytes(t)
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			_ = c.Close()
		}
	}()
	dialRaw := func(payload []byte) net.Conn {
		c, err := net.Dial("tcp", g.addr)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
		if _, err := c.Write(payload); err != nil {
			t.Fatal(err)
		}
		return c
	}
	for range flood {
		dialRaw(hello[:len(hello)/2])
	}
	waitFor(t, "the half-open flood to be accepted", func() bool { return g.srv.Handshaking() == flood })
	// Handshaking counts a connection at accept, before netpoll has run
	// OnRequest for its bytes on a task goroutine of its own; those end once
	// the bytes are handled, a goroutine kept per connection never does.
	n := 0
	waitFor(t, "goroutines to settle (a goroutine per half-open connection never does)", func() bool {
		n = runtime.NumGoroutine()
		return n <= goroutines+20
	})
	t.Logf("%d goroutines with %d half-open handshakes, %d before", n, flood, goroutines)
	if n := g.srv.TLSHandshakesRunning(); n != 0 {
		t.Errorf("%d TLS handshakes running for half ClientHellos", n)
	}
	send(t, live, map[string]any{"type": "session.update", "session": map[string]any{"type": "realtime"}})
	if e := read(t, live); e.typ() != "session.updated" {
		t.Fatalf("live session during the flood: %v", e.typ())
	}
	runTLSSession(t, g.dialTLS(t, cert.roots)) // a new client is served during the flood

	// Whole ClientHellos that stall: MaxHandshakes run, the rest closed at once.
	var stalled []net.Conn
	for range stallers {
		stalled = append(stalled, dialRaw(hello))
	}
	held, data, closed := outcomes(stalled, 3*time.Second)
	if data != maxHandshakes || closed != stallers-maxHandshakes || held != 0 {
		t.Fatalf("of %d stalled ClientHellos: %d answered, %d closed at once, %d neither; want %d answered and the rest closed",
			stallers, data, closed, held, maxHandshakes)
	}
	if n := g.srv.TLSHandshakesRunning(); n != maxHandshakes {
		t.Errorf("%d TLS handshakes running, want %d", n, maxHandshakes)
	}
	// The half-open ones are still held (not closed): they only wait.
	if held, _, closed := outcomes(conns[:10], 200*time.Millisecond); held != 10 {
		t.Errorf("of 10 half-open clients %d still held, %d closed", held, closed)
	}

	for _, c := range conns {
		_ = c.Close()
	}
	conns = nil
	waitFor(t, "the flood to be forgotten", func() bool {
		return g.srv.Handshaking() == 0 && g.srv.TLSHandshakesRunning() == 0
	})
	send(t, live, map[string]any{"type": "session.update", "session": map[string]any{"type": "realtime"}})
	if e := read(t, live); e.typ() != "session.updated" {
		t.Fatalf("live session after the flood: %v", e.typ())
	}
	_ = live.Close()
	waitFor(t, "the live session to end", func() bool { return g.srv.SessionsOpen() == 0 })
	waitFor(t, "goroutines to come back", func() bool { return runtime.NumGoroutine() <= goroutines+2 })
	if hasFDs {
		waitFor(t, "descriptors to come back", func() bool { n, _ := countFDs(); return n <= fds+leakSlack })
	}
}

// A running handshake that stalls is ended by the handshake deadline, and
// its goroutine with it.
func TestHostileStalledTLSHandshakeTimesOut(t *testing.T) {
	cert := newListenerCert(t)
	mock := startMock(t, mockai.Config{})
	g := startGateway(t, mock, func(c *Settings) {
		c.TLSCert, c.TLSKey = cert.certFile, cert.keyFile
		c.HandshakeTimeout = 500 * time.Millisecond
	})
	c := g.rawDial(t)
	if _, err := c.Write(clientHelloBytes(t)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the handshake to start", func() bool { return g.srv.TLSHandshakesRunning() == 1 })
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.Copy(io.Discard, c); err != nil && !connEnded(err) {
		t.Fatalf("a stalled handshake was not closed: %v", err)
	}
	waitFor(t, "the handshake to end", func() bool {
		return g.srv.TLSHandshakesRunning() == 0 && g.srv.Handshaking() == 0
	})
}
