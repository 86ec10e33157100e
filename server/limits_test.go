package server

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	coder "github.com/coder/websocket"
	"github.com/gorilla/websocket"

	"rtgate/mockai"
	"rtgate/server/frontdoor"
	"rtgate/server/internal/testhooks"
)

// dialStatus tries an upgrade and returns the HTTP status and JSON error
// code of a refusal (0 and "" on success, with the connection closed).
func dialStatus(t *testing.T, g *gateway, h http.Header) (int, string, http.Header) {
	t.Helper()
	c, resp, err := dialer().Dial(g.url("model=gpt-realtime"), h)
	if err == nil {
		_ = c.Close()
		return 0, "", nil
	}
	status, code, _ := refusalOf(t, resp, err)
	return status, code, resp.Header
}

// refusalOf reads a refused upgrade's status and OpenAI-shaped error (code,
// message); err is the dial's error, for a failure without a response.
func refusalOf(t *testing.T, resp *http.Response, err error) (status int, code, message string) {
	t.Helper()
	if resp == nil {
		t.Fatalf("dial failed without a response: %v", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var e event
	_ = jsonUnmarshal(body, &e)
	return resp.StatusCode, e.str("error", "code"), e.str("error", "message")
}

// MaxConnections counts connections from accept: sessions and connections
// still in their handshake share the slots, and a connection that finds
// them full is refused at once, before the gateway reads a byte of it. On a
// plain listener the refusal is the OpenAI-shaped 503 too_many_connections
// with Retry-After, as independent clients (gorilla, coder) see it; on a TLS
// listener the connection is only closed (frontDoor.refuseAtAccept says why).
func TestMaxConnectionsCountsFromAccept(t *testing.T) {
	for _, tc := range []struct {
		name string
		tls  bool
	}{{"plain", false}, {"tls", true}} {
		t.Run(tc.name, func(t *testing.T) { testMaxConnectionsCountsFromAccept(t, tc.tls) })
	}
}

func testMaxConnectionsCountsFromAccept(t *testing.T, overTLS bool) {
	mock := startMock(t, mockai.Config{})
	var cert listenerCert
	if overTLS {
		cert = newListenerCert(t)
	}
	g := startGateway(t, mock, func(c *Settings) {
		c.MaxConnections = 2
		c.HandshakeTimeout = 60 * time.Second // refusals must come at once, not at the timeout
		if overTLS {
			c.TLSCert, c.TLSKey = cert.certFile, cert.keyFile
		}
	})
	dialSession := func() *websocket.Conn {
		if overTLS {
			return g.dialTLS(t, cert.roots)
		}
		return g.dial(t, "model=gpt-realtime", bearer(testMasterKey))
	}
	refusals := 0
	refusedAtOnce := func(what string) {
		t.Helper()
		if overTLS {
			refusals++
			d := dialer()
			d.TLSClientConfig = &tls.Config{RootCAs: cert.roots, MinVersion: tls.VersionTLS12}
			c, resp, err := d.Dial("wss://"+g.addr+"/v1/realtime?model=gpt-realtime", bearer(testMasterKey))
			if err == nil {
				_ = c.Close()
				t.Fatalf("%s: a connect was admitted", what)
			}
			if resp != nil || isTimeout(err) {
				t.Fatalf("%s: connect got %v (response %v), want the connection closed at once", what, err, resp)
			}
			return
		}
		refusals += 2
		status, code, h := dialStatus(t, g, bearer(testMasterKey))
		if status != http.StatusServiceUnavailable || code != "too_many_connections" || h.Get("Retry-After") != "1" ||
			h.Get("Content-Type") != "application/json" {
			t.Fatalf("%s: gorilla connect got %d %q Retry-After %q Content-Type %q, want 503 too_many_connections, Retry-After 1, JSON",
				what, status, code, h.Get("Retry-After"), h.Get("Content-Type"))
		}
		status, code, h = coderDialStatus(t, g, bearer(testMasterKey))
		if status != http.StatusServiceUnavailable || code != "too_many_connections" || h.Get("Retry-After") != "1" {
			t.Fatalf("%s: coder connect got %d %q Retry-After %q, want 503 too_many_connections with Retry-After 1",
				what, status, code, h.Get("Retry-After"))
		}
	}
	a := dialSession()
	read(t, a)
	idle, err := net.Dial("tcp", g.addr) // open, silent: holds a slot from accept
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the silent connection to be accepted", func() bool { return g.srv.Handshaking() == 1 })
	refusedAtOnce("one session and one connection in its handshake")

	_ = idle.Close()
	waitFor(t, "the silent connection to be forgotten", func() bool { return g.srv.Handshaking() == 0 })
	b := dialSession()
	read(t, b)
	refusedAtOnce("two sessions")

	// The existing sessions are untouched.
	send(t, a, map[string]any{"type": "session.update", "session": map[string]any{"type": "realtime"}})
	if e := read(t, a); e.typ() != "session.updated" {
		t.Fatalf("existing session got %v", e.typ())
	}
	_ = b.Close()
	waitFor(t, "a slot to free", func() bool { return g.srv.SessionsOpen() == 1 })
	c := dialSession() // fails the test unless admitted
	_ = c.Close()
	if got := metricValue(t, g, `rtgate_connections_refused_total{reason="connections"}`); got != float64(refusals) {
		t.Errorf("rtgate_connections_refused_total{reason=\"connections\"} = %v, want %d", got, refusals)
	}
}

// A refused plain connection is answered once its request begins to arrive,
// whatever the client; one that sends nothing is closed after refusalWait,
// without a byte, and at most frontdoor.MaxRefusing of them wait at once: a flood of
// silent connections against a full gateway costs a bounded set of
// descriptors for a bounded time.
func TestRefusedAtAcceptWaitsBoundedForRequest(t *testing.T) {
	mock := startMock(t, mockai.Config{})
	g := startGateway(t, mock, func(c *Settings) {
		c.MaxConnections = 1
		c.HandshakeTimeout = 60 * time.Second
	})
	read(t, g.dial(t, "model=gpt-realtime", bearer(testMasterKey)))

	// A raw client that sends only the first bytes of its request.
	raw, err := net.Dial("tcp", g.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	if _, err := raw.Write([]byte("GET /v1/realtime HTTP/1.1\r\n")); err != nil {
		t.Fatal(err)
	}
	_ = raw.SetReadDeadline(time.Now().Add(10 * time.Second))
	got, err := io.ReadAll(raw)
	if err != nil || !strings.HasPrefix(string(got), "HTTP/1.1 503 ") || !strings.Contains(string(got), "\r\nRetry-After: 1\r\n") ||
		!strings.HasSuffix(string(got), `"code":"too_many_connections","message":"this gateway instance is at its connection limit; try again shortly","param":null,"type":"server_error"}}`) {
		t.Fatalf("partial request got %q, %v; want the 503 too_many_connections with Retry-After, then EOF", got, err)
	}

	// A flood of silent connections. The front door reports each refused
	// connection that starts to wait, with the number waiting then, and each
	// that stops.
	var most, taken, givenBack atomic.Int64
	g.srv.setDoorHooks(&testhooks.Door{
		RefusalTaken: func(waiting int64) {
			taken.Add(1)
			for m := most.Load(); waiting > m && !most.CompareAndSwap(m, waiting); m = most.Load() {
			}
		},
		RefusalGivenBack: func() { givenBack.Add(1) },
	})
	const flood = frontdoor.MaxRefusing + 20
	conns := make([]net.Conn, 0, flood)
	defer func() {
		for _, c := range conns {
			_ = c.Close()
		}
	}()
	for range flood {
		c, err := net.Dial("tcp", g.addr)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	for i, c := range conns {
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second)) // refusalWait, not the 60 s handshake timeout
		if n, err := c.Read(make([]byte, 1)); n != 0 || err != io.EOF {
			t.Fatalf("silent connection %d: read %d bytes, %v; want EOF without a byte", i, n, err)
		}
	}
	if n := most.Load(); n > frontdoor.MaxRefusing {
		t.Fatalf("%d refused connections waited at once, want at most %d", n, frontdoor.MaxRefusing)
	}
	waitFor(t, "the refusals to be forgotten", func() bool { return taken.Load() > 0 && givenBack.Load() == taken.Load() })
	if got := metricValue(t, g, `rtgate_connections_refused_total{reason="connections"}`); got != flood+1 {
		t.Errorf("rtgate_connections_refused_total{reason=\"connections\"} = %v, want %d", got, flood+1)
	}
}

// coderDialStatus is dialStatus with coder/websocket as the client, so that
// the refusal's HTTP is not only read by the client that wrote the tests.
func coderDialStatus(t *testing.T, g *gateway, h http.Header) (int, string, http.Header) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, resp, err := coder.Dial(ctx, g.url("model=gpt-realtime"), &coder.DialOptions{HTTPHeader: h})
	if err == nil {
		_ = c.CloseNow()
		return 0, "", nil
	}
	if resp == nil {
		t.Fatalf("coder dial failed without a response: %v", err)
	}
	// coder keeps the first 1 KiB of a refusal's body for its error.
	body, _ := io.ReadAll(resp.Body)
	var e event
	_ = jsonUnmarshal(body, &e)
	return resp.StatusCode, e.str("error", "code"), resp.Header
}

// metricValue reads one sample from the gateway's /metrics.
func metricValue(t testing.TB, g *gateway, series string) float64 {
	t.Helper()
	rec := httptest.NewRecorder()
	req := httptest.NewRequest("GET", "/metrics", nil)
	req.Host = "127.0.0.1" // the admin server answers loopback hosts only
	g.srv.admin.Handler(g.srv.ctx).ServeHTTP(rec, req)
	for _, line := range strings.Split(rec.Body.String(), "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("%s: %v", line, err)
			}
			return f
		}
	}
	t.Fatalf("no %s in /metrics", series)
	return 0
}

func TestMessageOverLimitCloses1009(t *testing.T) {
	mock := startMock(t, mockai.Config{})
	g := startGateway(t, mock, func(c *Settings) { c.MaxMessage = 64 << 10 })
	big := g.dial(t, "model=gpt-realtime", bearer(testMasterKey))
	other := g.dial(t, "model=gpt-realtime", bearer(testMasterKey))
	read(t, big)
	read(t, other)
	send(t, big, map[string]any{"type": "input_audio_buffer.append", "audio": base64.StdEncoding.EncodeToString(make([]byte, 96<<10))})
	if ce := closeOf(t, big); ce.Code != 1009 {
		t.Fatalf("close %d %q, want 1009", ce.Code, ce.Text)
	}
	send(t, other, map[string]any{"type": "session.update", "session": map[string]any{"type": "realtime"}})
	if e := read(t, other); e.typ() != "session.updated" {
		t.Fatalf("the other session got %v", e.typ())
	}
}

func TestIdleTimeout(t *testing.T) {
	mock := startMock(t, mockai.Config{})
	g := startGateway(t, mock, func(c *Settings) { c.IdleTimeout = 500 * time.Millisecond })
	c := g.dial(t, "model=gpt-realtime", bearer(testMasterKey))
	read(t, c)
	start := time.Now()
	e := read(t, c)
	if e.typ() != "error" || e.str("error", "code") != "session_idle_timeout" {
		t.Fatalf("got %v, want a session_idle_timeout error event", e)
	}
	if ce := closeOf(t, c); ce.Code != 1000 || ce.Text != "idle timeout" {
		t.Fatalf("close %d %q, want 1000 idle timeout", ce.Code, ce.Text)
	}
	if waited := time.Since(start); waited < 300*time.Millisecond {
		t.Fatalf("closed after %v of idleness, before the timeout", waited)
	}
	waitFor(t, "the session to end", func() bool { return g.srv.SessionsOpen() == 0 })
}

func TestMaxSessionDuration(t *testing.T) {
	mock := startMock(t, mockai.Config{})
	g := startGateway(t, mock, func(c *Settings) { c.MaxSessionDuration = 700 * time.Millisecond })
	c := g.dial(t, "model=gpt-realtime", bearer(testMasterKey))
	read(t, c)
	// Stay busy: the idle timer must not be what ends it.
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
				_ = c.WriteMessage(websocket.TextMessage, []byte(`{"type":"input_audio_buffer.append","audio":"AAAA"}`))
			}
		}
	}()
	e := read(t, c)
	if e.typ() != "error" || e.str("error", "code") != "session_max_duration" {
		t.Fatalf("got %v, want session_max_duration", e)
	}
	if ce := closeOf(t, c); ce.Code != 1001 {
		t.Fatalf("close %d %q, want 1001", ce.Code, ce.Text)
	}
}

func rssKiB(t testing.TB) int {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Skip("no /proc on this system")
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			n, _ := strconv.Atoi(f[1])
			return n
		}
	}
	t.Fatal("no VmRSS")
	return 0
}

// A client that stops reading while the upstream streams audio must not
// make the gateway buffer without bound; the other sessions carry on.
func TestStalledClientIsDroppedAndMemoryStaysBounded(t *testing.T) {
	// 2,000 deltas of 48 kB (64 kB of base64 each) every 2 ms: 128 MB of
	// output over 4 s, far faster than real time, which the client will
	// never read. mockai runs as its own process so that its memory is not
	// counted here.
	mock := startMockaiProcess(t, "-deltas", "2000", "-delta-bytes", "48000", "-delta-interval", "2ms")
	g := startGateway(t, nil, func(c *Settings) {
		c.APIBase, _ = ParseAPIBase(mock.baseURL)
		c.MaxStalledBytes = 2 << 20
		c.WriteTimeout = 60 * time.Second // the backlog cap, not the write timeout, must act
	})
	before := rssKiB(t)

	d := dialer()
	d.ReadBufferSize = 1024
	stalled := dialWith(t, d, g.url("model=gpt-realtime"), bearer(testMasterKey))
	read(t, stalled)
	send(t, stalled, map[string]any{"type": "response.create"})
	// From here the client reads nothing.

	healthy := g.dial(t, "model=gpt-realtime", bearer(testMasterKey))
	read(t, healthy)
	send(t, healthy, map[string]any{"type": "session.update", "session": map[string]any{"type": "realtime"}})
	if e := read(t, healthy); e.typ() != "session.updated" {
		t.Fatalf("healthy session got %v", e.typ())
	}

	waitFor(t, "the stalled session to be dropped", func() bool { return g.srv.SessionsOpen() == 1 })
	if grew := rssKiB(t) - before; grew > 48<<10 {
		t.Fatalf("gateway RSS grew by %d KiB for one stalled client", grew)
	} else {
		t.Logf("RSS grew by %d KiB while a client stalled in front of 128 MB of output", grew)
	}
	send(t, healthy, map[string]any{"type": "session.update", "session": map[string]any{"type": "realtime"}})
	if e := read(t, healthy); e.typ() != "session.updated" {
		t.Fatalf("healthy session got %v after the other was dropped", e.typ())
	}
}

func TestPerKeyLimits(t *testing.T) {
	mock := startMock(t, mockai.Config{})
	t.Run("concurrent sessions", func(t *testing.T) {
		g := startGateway(t, mock, func(c *Settings) { c.MaxSessionsPerKey = 1 })
		a := g.dial(t, "model=gpt-realtime", bearer(testMasterKey))
		read(t, a)
		status, code, _ := dialStatus(t, g, bearer(testMasterKey))
		if status != 429 || code != "concurrent_sessions_exceeded" {
			t.Fatalf("second session: %d %q, want 429 concurrent_sessions_exceeded", status, code)
		}
		_ = a.Close()
		waitFor(t, "the first session to end", func() bool { return g.srv.SessionsOpen() == 0 })
		if status, _, _ := dialStatus(t, g, bearer(testMasterKey)); status != 0 {
			t.Fatalf("after the first session ended a connect got %d", status)
		}
	})
	t.Run("connect rate", func(t *testing.T) {
		g := startGateway(t, mock, func(c *Settings) { c.ConnectRatePerKey = 2 })
		var statuses []int
		var retry string
		for range 3 {
			status, code, h := dialStatus(t, g, bearer(testMasterKey))
			statuses = append(statuses, status)
			if status == 429 {
				if code != "rate_limit_exceeded" {
					t.Fatalf("429 with code %q", code)
				}
				retry = h.Get("Retry-After")
			}
		}
		if statuses[0] != 0 || statuses[1] != 0 || statuses[2] != 429 || retry == "" {
			t.Fatalf("three quick connects at 2/s got %v (Retry-After %q), want the third refused", statuses, retry)
		}
	})
}

func TestOriginAllowlist(t *testing.T) {
	mock := startMock(t, mockai.Config{})
	g := startGateway(t, mock, func(c *Settings) { c.AllowedOrigins = []string{"https://app.example"} })
	with := func(origin string) http.Header {
		h := bearer(testMasterKey)
		if origin != "" {
			h.Set("Origin", origin)
		}
		return h
	}
	if status, code, _ := dialStatus(t, g, with("https://evil.example")); status != 403 || code != "origin_not_allowed" {
		t.Fatalf("foreign origin: %d %q, want 403", status, code)
	}
	if status, _, _ := dialStatus(t, g, with("https://app.example")); status != 0 {
		t.Fatalf("allowed origin got %d", status)
	}
	if status, _, _ := dialStatus(t, g, with("")); status != 0 {
		t.Fatalf("a client without Origin got %d", status)
	}
}

// Keys never appear in logs, events or close reasons, even at debug level.
func TestSecretsStayOutOfLogs(t *testing.T) {
	const clientKey = "sk-client-SECRET-7f3a9c"
	const upstreamKey = "sk-upstream-SECRET-b41e2d"
	const wrongKey = "sk-wrong-SECRET-0c77aa"
	mock := startMock(t, mockai.Config{Key: upstreamKey})
	logs := &syncBuffer{}
	log := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	g := startGatewayLog(t, mock, func(c *Settings) {
		c.MasterKey, c.UpstreamKey = clientKey, upstreamKey
	}, log)

	var seen []string
	c := g.dial(t, "model=gpt-realtime", bearer(clientKey))
	e := read(t, c)
	seen = append(seen, e.str("type"))
	send(t, c, map[string]any{"type": "response.create"})
	readUntil(t, c, "response.done")
	_ = c.WriteMessage(websocket.CloseMessage, websocket.FormatCloseMessage(1000, ""))
	ce := closeOf(t, c)
	seen = append(seen, ce.Text)
	_, _, _ = dialStatus(t, g, bearer(wrongKey))
	_, _, _ = dialStatus(t, g, http.Header{"Sec-WebSocket-Protocol": {"realtime, openai-insecure-api-key." + wrongKey}})
	// An upstream that refuses the gateway's key.
	bad := startMock(t, mockai.Config{Key: "sk-other", RejectStatus: 401})
	g2 := startGatewayLog(t, bad, func(c *Settings) { c.MasterKey, c.UpstreamKey = clientKey, upstreamKey }, log)
	c2 := g2.dial(t, "model=gpt-realtime", bearer(clientKey))
	e2 := read(t, c2)
	seen = append(seen, e2.str("error", "message"))
	waitFor(t, "sessions to end", func() bool { return g.srv.SessionsOpen() == 0 })

	all := logs.String() + strings.Join(seen, "\n")
	if !strings.Contains(all, "session ended") || !strings.Contains(all, "upstream dial failed") {
		t.Fatal("the debug log is empty: the test would prove nothing")
	}
	for _, k := range []string{clientKey, upstreamKey, wrongKey, "SECRET"} {
		if strings.Contains(all, k) {
			t.Fatalf("a key fragment %q appeared in logs or events", k)
		}
	}
}

func TestTLSListenerRefusesOldVersions(t *testing.T) {
	mock := startMock(t, mockai.Config{})
	cert := newListenerCert(t)
	g := startGateway(t, mock, func(c *Settings) { c.TLSCert, c.TLSKey = cert.certFile, cert.keyFile })
	for _, v := range []uint16{tls.VersionTLS10, tls.VersionTLS11} {
		conn, err := tls.Dial("tcp", g.addr, &tls.Config{RootCAs: cert.roots, MaxVersion: v, MinVersion: v})
		if err == nil {
			_ = conn.Close()
			t.Fatalf("a TLS %x handshake succeeded", v)
		}
	}
	conn, err := tls.Dial("tcp", g.addr, &tls.Config{RootCAs: cert.roots})
	if err != nil {
		t.Fatalf("a modern handshake failed: %v", err)
	}
	_ = conn.Close()
}

func TestTLSCertificateReloads(t *testing.T) {
	mock := startMock(t, mockai.Config{})
	first := newListenerCert(t)
	g := startGateway(t, mock, func(c *Settings) { c.TLSCert, c.TLSKey = first.certFile, first.keyFile })
	serial := func(roots any) string {
		conn, err := tls.Dial("tcp", g.addr, &tls.Config{InsecureSkipVerify: true})
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		return conn.ConnectionState().PeerCertificates[0].SerialNumber.String()
	}
	s1 := serial(nil)
	second := newListenerCert(t)
	// The files' mtime must move (set ahead, not waited for: a coarse
	// filesystem clock may not tick between the two writes); the gateway
	// looks at most once a second, which waitFor covers.
	later := time.Now().Add(time.Minute)
	for _, f := range [][2]string{{second.certFile, first.certFile}, {second.keyFile, first.keyFile}} {
		b, err := os.ReadFile(f[0])
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(f[1], b, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(f[1], later, later); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "the new certificate", func() bool { return serial(nil) != s1 })
}

func jsonUnmarshal(b []byte, v any) error { return json.Unmarshal(b, v) }

// streamingUpstream sends session.created and then, once start is closed,
// on its i-th connection sizes(i) bytes of output as 64 KiB text frames as
// fast as the gateway takes them (which is at once: netpoll reads eagerly);
// a connection given 0 echoes what it reads. It records how each connection
// ended. Streaming waits for start so that every session is open before any
// backlog grows (else the budget may end the first before the next opens).
// With tlsUpstream it serves wss://, trusted through roots.
type streamingUpstream struct {
	srv    *httptest.Server
	roots  *x509.CertPool // nil over ws://
	start  chan struct{}
	closes chan [2]int // connection index, close code (1006: dropped without one)
}

// apiBase is the upstream as the gateway's APIBase.
func (u *streamingUpstream) apiBase() *url.URL {
	b, _ := ParseAPIBase("ws" + strings.TrimPrefix(u.srv.URL, "http") + "/v1")
	return b
}

func startStreamingUpstream(t *testing.T, tlsUpstream bool, sizes func(i int) int) *streamingUpstream {
	t.Helper()
	u := &streamingUpstream{start: make(chan struct{}), closes: make(chan [2]int, 16)}
	var next atomic.Int64
	up := websocket.Upgrader{}
	chunk := []byte(`{"type":"response.output_audio.delta","delta":"` + strings.Repeat("A", 64<<10) + `"}`)
	u.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := up.Upgrade(w, r, nil)
		if err != nil {
			return
		}
		defer c.Close()
		i := int(next.Add(1) - 1)
		_ = c.WriteMessage(websocket.TextMessage, []byte(`{"type":"session.created","session":{"id":"sess_stream"}}`))
		go func() {
			select {
			case <-u.start:
			case <-r.Context().Done():
				return
			}
			for sent := 0; sent < sizes(i); sent += len(chunk) {
				if c.WriteMessage(websocket.TextMessage, chunk) != nil {
					return
				}
			}
		}()
		_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
		for {
			_, msg, err := c.ReadMessage()
			if err != nil {
				code := 1006
				if ce, ok := err.(*websocket.CloseError); ok {
					code = ce.Code
				}
				u.closes <- [2]int{i, code}
				return
			}
			if sizes(i) == 0 { // a quiet connection echoes, so its client can tell it works
				_ = c.WriteMessage(websocket.TextMessage, msg)
			}
		}
	}))
	if tlsUpstream {
		u.srv.StartTLS()
		u.roots = x509.NewCertPool()
		u.roots.AddCert(u.srv.Certificate())
	} else {
		u.srv.Start()
	}
	t.Cleanup(u.srv.Close)
	return u
}

// stallingDialer is a client with a small receive buffer, so that what it
// does not read piles up in the gateway rather than in the kernel.
func stallingDialer() *websocket.Dialer {
	d := dialer()
	d.ReadBufferSize = 1024
	d.NetDialContext = (&net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
		return rc.Control(func(fd uintptr) { _ = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 16<<10) })
	}}).DialContext
	return d
}

// Over MaxBufferedBytes the gateway ends the sessions holding the most
// unsent bytes, and only as many as it takes: the stalled client's socket is
// closed, its upstream gets 1001, and a metric counts it. Sessions with
// small backlogs and healthy ones carry on. Over ws:// and wss://.
func TestMemoryBudgetEndsLargestBacklogs(t *testing.T) {
	for _, up := range upstreamKinds {
		t.Run(up.name, func(t *testing.T) { testMemoryBudgetEndsLargestBacklogs(t, up.tls) })
	}
}

func testMemoryBudgetEndsLargestBacklogs(t *testing.T, tlsUpstream bool) {
	const big, small = 24 << 20, 2 << 20
	up := startStreamingUpstream(t, tlsUpstream, func(i int) int {
		switch i {
		case 0:
			return big
		case 1, 2:
			return small
		}
		return 0
	})
	g := startGateway(t, nil, func(c *Settings) {
		c.APIBase, c.UpstreamRoots = up.apiBase(), up.roots
		c.MaxStalledBytes = 64 << 20 // far above any backlog here: the budget, not the per-session cap, must act
		c.MaxBufferedBytes = 8 << 20
		c.WriteTimeout = 60 * time.Second
	})
	var stalled []*websocket.Conn
	for i := range 3 {
		c, _, err := stallingDialer().Dial(g.url("model=gpt-realtime"), bearer(testMasterKey))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if e := read(t, c); e.typ() != "session.created" {
			t.Fatalf("stalled client %d: %v", i, e.typ())
		}
		stalled = append(stalled, c) // from here it reads nothing
		waitFor(t, "the session's upstream", func() bool { return g.srv.SessionsOpen() == int64(i+1) })
	}
	healthy := g.dial(t, "model=gpt-realtime", bearer(testMasterKey))
	read(t, healthy)
	close(up.start)

	series := `rtgate_sessions_ended_total{reason="memory_budget"}`
	waitFor(t, "the budget to end a session", func() bool { return metricValue(t, g, series) >= 1 })
	select {
	case c := <-up.closes:
		if c != [2]int{0, 1001} {
			t.Fatalf("upstream connection %d ended with %d; want the one with the largest backlog (0) closed with 1001", c[0], c[1])
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no upstream connection ended")
	}
	// The largest backlog's client socket is closed: what the kernel holds,
	// then the end, without a close frame.
	_ = stalled[0].SetReadDeadline(time.Now().Add(10 * time.Second))
	for {
		_, _, err := stalled[0].ReadMessage()
		if err == nil {
			continue
		}
		if isTimeout(err) {
			t.Fatal("the stalled client's socket was not closed")
		}
		break
	}
	time.Sleep(5 * watchdogTick) // a few more walks: the rest fit, nothing else ends
	if n := metricValue(t, g, series); n != 1 {
		t.Fatalf("%s = %v, want 1: only the largest backlog had to go", series, n)
	}
	if n := g.srv.SessionsOpen(); n != 3 {
		t.Fatalf("%d sessions open, want the two small backlogs and the healthy one", n)
	}
	send(t, healthy, map[string]any{"type": "session.update", "session": map[string]any{"type": "realtime"}})
	if e := read(t, healthy); e.typ() != "session.update" {
		t.Fatalf("healthy session got %v, want its message echoed", e.typ())
	}
	for _, c := range append(stalled, healthy) {
		_ = c.Close()
	}
	waitFor(t, "every session to end", func() bool { return g.srv.SessionsOpen() == 0 })
}

func TestFrontDoorSettingsFromEnv(t *testing.T) {
	for _, tt := range []struct {
		env           map[string]string
		handshakes    int
		buffered      int64
		wantErrSubstr string
	}{
		{env: map[string]string{"MAX_HANDSHAKES": "64", "MAX_BUFFERED_BYTES": "1048576"}, handshakes: 64, buffered: 1 << 20},
		{env: map[string]string{"MAX_HANDSHAKES": "0", "MAX_BUFFERED_BYTES": "0"}, handshakes: 0, buffered: 0},
		{env: map[string]string{"MAX_HANDSHAKES": "-1"}, wantErrSubstr: "MAX_HANDSHAKES"},
		{env: map[string]string{"MAX_BUFFERED_BYTES": "lots"}, wantErrSubstr: "MAX_BUFFERED_BYTES"},
	} {
		env := map[string]string{"OPENAI_API_BASE": "ws://127.0.0.1:1/v1"}
		for k, v := range tt.env {
			env[k] = v
		}
		c, err := FromEnv(func(k string) (string, bool) { v, ok := env[k]; return v, ok })
		if tt.wantErrSubstr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErrSubstr) {
				t.Errorf("%v: error %v, want one naming %s", tt.env, err, tt.wantErrSubstr)
			}
			continue
		}
		if err != nil || c.MaxHandshakes != tt.handshakes || c.MaxBufferedBytes != tt.buffered {
			t.Errorf("%v: got %d handshakes, %d bytes, %v", tt.env, c.MaxHandshakes, c.MaxBufferedBytes, err)
		}
	}
	d := Defaults()
	if d.MaxHandshakes != 1024 {
		t.Errorf("default MAX_HANDSHAKES %d, want 1024", d.MaxHandshakes)
	}
	if d.MaxBufferedBytes <= 0 {
		t.Errorf("default MAX_BUFFERED_BYTES %d: want a share of GOMEMLIMIT or of memory", d.MaxBufferedBytes)
	}
}
