package server

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"rtgate/mockai"
)

// These tests run whole sessions with TLS on one hop or both: the gateway as
// a TLS client of a wss:// upstream (mockai with TLS), the gateway as a TLS
// server to its clients (TLS_CERT/TLS_KEY), and both at once. TLS reads in
// the reactor are event-driven (poller.NBConn returns would-block), so large
// frames arriving over many TLS records are the interesting case.

// tlsAudioDeltaBytes is what mockai puts in each audio delta in these tests:
// 64,000 raw bytes, about 85 KB of base64, so every delta spans several TLS
// records on each hop.
const tlsAudioDeltaBytes = 64000

// startTLSMock starts an in-process mockai serving wss:// with a fresh
// self-signed certificate.
func startTLSMock(t *testing.T) *mockai.Server {
	t.Helper()
	mock := startMock(t, mockai.Config{TLS: true, AudioDeltaBytes: tlsAudioDeltaBytes})
	if !strings.HasPrefix(mock.BaseURL(), "wss://") || len(mock.CertPEM()) == 0 {
		t.Fatalf("mockai with TLS gave base %q and %d bytes of certificate", mock.BaseURL(), len(mock.CertPEM()))
	}
	return mock
}

// trustMock returns a root pool holding mock's certificate, for
// Settings.UpstreamRoots.
func trustMock(t testing.TB, mock *mockai.Server) *x509.CertPool {
	t.Helper()
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(mock.CertPEM()) {
		t.Fatal("mockai's certificate is not valid PEM")
	}
	return pool
}

// listenerCert is a self-signed certificate for the gateway's client
// listener, with its files on disk (as TLS_CERT and TLS_KEY name them) and a
// pool for clients to trust it.
type listenerCert struct {
	certFile, keyFile string
	roots             *x509.CertPool
}

// newListenerCert makes a certificate valid for 127.0.0.1 (mockai's kind) and
// writes its PEM files to a temporary directory.
func newListenerCert(t testing.TB) listenerCert {
	t.Helper()
	cert, certPEM, err := mockai.SelfSignedCert()
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(cert.PrivateKey)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	lc := listenerCert{
		certFile: filepath.Join(dir, "gateway.crt"),
		keyFile:  filepath.Join(dir, "gateway.key"),
		roots:    x509.NewCertPool(),
	}
	if err := os.WriteFile(lc.certFile, certPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(lc.keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	lc.roots.AppendCertsFromPEM(certPEM)
	return lc
}

// dialTLS connects a gorilla client to the gateway's TLS listener, trusting
// only roots.
func (g *gateway) dialTLS(t *testing.T, roots *x509.CertPool) *websocket.Conn {
	t.Helper()
	d := dialer()
	d.TLSClientConfig = &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}
	return dialWith(t, d, "wss://"+g.addr+"/v1/realtime?model=gpt-realtime", bearer(testMasterKey))
}

// runTLSSession drives one session to the end and checks everything a user
// would see: session.created, an update answered, a 1 MiB audio append
// counted in full by the upstream, a response whose five 64 KB audio deltas
// arrive intact, and a close handshake echoed with the client's code.
func runTLSSession(t *testing.T, c *websocket.Conn) {
	t.Helper()
	if e := read(t, c); e.typ() != "session.created" || !strings.HasPrefix(e.str("session", "id"), "sess_") {
		t.Fatalf("first event %v, want session.created", e)
	}
	send(t, c, map[string]any{"type": "session.update", "session": map[string]any{"type": "realtime", "instructions": "over TLS"}})
	if e := read(t, c); e.typ() != "session.updated" || e.str("session", "instructions") != "over TLS" {
		t.Fatalf("got %v, want session.updated with the new instructions", e)
	}

	// 1 MiB of raw audio, about 1.4 MB on the wire: one masked frame that
	// crosses dozens of TLS records. mockai decodes it and counts 480 bytes
	// per token, so a byte lost or changed on the way shows in the usage
	// (or as an invalid_value error for broken base64).
	const appendBytes = 1 << 20
	audio := bytes.Repeat([]byte{0x11, 0x22, 0x33, 0x44}, appendBytes/4)
	send(t, c, map[string]any{"type": "input_audio_buffer.append", "audio": base64.StdEncoding.EncodeToString(audio)})
	send(t, c, map[string]any{"type": "response.create"})

	want := mockai.PCMPattern(tlsAudioDeltaBytes)
	deltas := 0
	var done event
	for done == nil {
		e := read(t, c)
		switch e.typ() {
		case "response.output_audio.delta":
			got, err := base64.StdEncoding.DecodeString(e.str("delta"))
			if err != nil {
				t.Fatalf("audio delta %d is not base64: %v", deltas, err)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("audio delta %d: %d bytes that differ from the %d mockai sent", deltas, len(got), len(want))
			}
			deltas++
		case "response.done":
			done = e
		case "error":
			t.Fatalf("the upstream reported an error: %v", e)
		}
	}
	if deltas != 5 {
		t.Fatalf("got %d audio deltas, want mockai's default of 5", deltas)
	}
	if got, want := done.str("response", "usage", "input_token_details", "audio_tokens"), strconv.Itoa(appendBytes/480); got != want {
		t.Fatalf("input audio tokens %s, want %s: the 1 MiB append did not arrive intact", got, want)
	}
	if got, want := done.str("response", "usage", "output_token_details", "audio_tokens"), strconv.Itoa(5*tlsAudioDeltaBytes/480); got != want {
		t.Fatalf("output audio tokens %s, want %s", got, want)
	}

	if err := c.WriteMessage(websocket.CloseMessage, websocket.FormatCloseMessage(1000, "bye")); err != nil {
		t.Fatal(err)
	}
	if ce := closeOf(t, c); ce.Code != 1000 || ce.Text != "bye" {
		t.Fatalf("close %d %q, want 1000 \"bye\" echoed by the upstream", ce.Code, ce.Text)
	}
}

func TestTLSUpstream(t *testing.T) {
	mock := startTLSMock(t)
	roots := trustMock(t, mock)
	g := startGateway(t, mock, func(c *Settings) { c.UpstreamRoots = roots })

	c := g.dial(t, "model=gpt-realtime", bearer(testMasterKey))
	runTLSSession(t, c)

	if n := len(mock.Records()); n != 1 {
		t.Fatalf("the TLS upstream saw %d connects, want 1", n)
	}
	waitFor(t, "the session to end", func() bool { return g.srv.SessionsOpen() == 0 })
}

func TestTLSUpstreamUntrustedCertificateFails(t *testing.T) {
	// Without UpstreamRoots the gateway must refuse mockai's self-signed
	// certificate, and the client hears it as an upstream failure.
	mock := startTLSMock(t)
	g := startGateway(t, mock, nil)
	c := g.dial(t, "model=gpt-realtime", bearer(testMasterKey))
	if e := read(t, c); e.typ() != "error" || e.str("error", "code") != "upstream_unavailable" {
		t.Fatalf("got %v, want an upstream_unavailable error event", e)
	}
	if ce := closeOf(t, c); ce.Code != 1011 {
		t.Fatalf("close %d, want 1011", ce.Code)
	}
	if n := len(mock.Records()); n != 0 {
		t.Fatalf("an untrusted upstream got %d upgrade requests, want none", n)
	}
}

func TestTLSClientListener(t *testing.T) {
	cert := newListenerCert(t)
	mock := startMock(t, mockai.Config{AudioDeltaBytes: tlsAudioDeltaBytes})
	g := startGateway(t, mock, func(c *Settings) { c.TLSCert, c.TLSKey = cert.certFile, cert.keyFile })

	c := g.dialTLS(t, cert.roots)
	runTLSSession(t, c)
	waitFor(t, "the session to end", func() bool { return g.srv.SessionsOpen() == 0 })

	// A plain WebSocket dial to the TLS listener must fail, not be served.
	if pc, _, err := dialer().Dial(g.url("model=gpt-realtime"), bearer(testMasterKey)); err == nil {
		_ = pc.Close()
		t.Fatal("a plain ws:// client was served by the TLS listener")
	}
}

func TestTLSBothSides(t *testing.T) {
	cert := newListenerCert(t)
	mock := startTLSMock(t)
	roots := trustMock(t, mock)
	g := startGateway(t, mock, func(c *Settings) {
		c.TLSCert, c.TLSKey = cert.certFile, cert.keyFile
		c.UpstreamRoots = roots
	})

	// Two sessions at once, so that TLS state on one cannot leak into the
	// other unnoticed.
	c1 := g.dialTLS(t, cert.roots)
	c2 := g.dialTLS(t, cert.roots)
	for i, c := range []*websocket.Conn{c1, c2} {
		t.Run("session"+strconv.Itoa(i+1), func(t *testing.T) { runTLSSession(t, c) })
	}
	waitFor(t, "both sessions to end", func() bool { return g.srv.SessionsOpen() == 0 })
}

// clientHelloBytes is a real ClientHello as crypto/tls sends it (one TLS
// record), captured from a client whose connection fails after its first
// write.
func clientHelloBytes(t testing.TB) []byte {
	t.Helper()
	cc := &captureConn{}
	_ = tls.Client(cc, &tls.Config{ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12}).Handshake()
	if len(cc.written) < 100 || cc.written[0] != 22 {
		t.Fatalf("captured %d bytes, want a ClientHello record", len(cc.written))
	}
	return cc.written
}

// captureConn records what is written to it; reads fail.
type captureConn struct {
	net.Conn // nil: only the methods below are used
	written  []byte
}

func (c *captureConn) Write(p []byte) (int, error) {
	c.written = append(c.written, p...)
	return len(p), nil
}
func (c *captureConn) Read([]byte) (int, error) { return 0, io.EOF }
func (c *captureConn) Close() error             { return nil }

// A client that dials wss:// at the plain listener is answered at once, not
// after the handshake timeout, and in a way its TLS library reports clearly.
func TestPlainListenerAnswersTLSClientAtOnce(t *testing.T) {
	mock := startMock(t, mockai.Config{})
	g := startGateway(t, mock, func(c *Settings) { c.HandshakeTimeout = 60 * time.Second })

	raw := g.rawDial(t)
	_ = raw.SetDeadline(time.Now().Add(5 * time.Second)) // far below the handshake timeout
	tc := tls.Client(raw, &tls.Config{ServerName: "127.0.0.1"})
	err := tc.Handshake()
	if err == nil || isTimeout(err) {
		t.Fatalf("TLS handshake against the plain listener: %v, want an answer at once", err)
	}
	if !strings.Contains(err.Error(), "does not look like a TLS handshake") {
		t.Errorf("Go's TLS client reports %q; want its plain-HTTP-answer message", err)
	}

	// What the gateway sent, as a person with a packet capture would see it.
	raw2 := g.rawDial(t)
	_ = raw2.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := raw2.Write(clientHelloBytes(t)); err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(raw2)
	if err != nil && !connEnded(err) {
		t.Fatalf("reading the answer: %v (got %q)", err, got)
	}
	if !strings.HasPrefix(string(got), "HTTP/1.1 400 ") || !strings.Contains(string(got), "tls_not_served") ||
		!strings.Contains(string(got), "ws://") {
		t.Fatalf("answer %q, want a 400 saying the port serves plain ws://", got)
	}
	waitFor(t, "the refused connections to be forgotten", func() bool { return g.srv.Handshaking() == 0 })
}

// The reverse mistake: ws:// (plain HTTP) at the TLS listener gets a
// readable 400 at once.
func TestTLSListenerAnswersPlainHTTPAtOnce(t *testing.T) {
	cert := newListenerCert(t)
	mock := startMock(t, mockai.Config{AudioDeltaBytes: tlsAudioDeltaBytes})
	g := startGateway(t, mock, func(c *Settings) {
		c.TLSCert, c.TLSKey = cert.certFile, cert.keyFile
		c.HandshakeTimeout = 60 * time.Second
	})
	_, resp, err := dialer().Dial(g.url("model=gpt-realtime"), bearer(testMasterKey))
	if err == nil || resp == nil {
		t.Fatalf("ws:// against the TLS listener: %v, want an HTTP answer", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 400 || !strings.Contains(string(body), "wss://") {
		t.Fatalf("got %d %s, want 400 saying to use wss://", resp.StatusCode, body)
	}
	// And the listener still speaks TLS.
	runTLSSession(t, g.dialTLS(t, cert.roots))
}

// holdingConn passes its first write through and holds later ones until
// release, so that a TLS 1.3 client's Finished and the request behind it
// leave in one TCP segment.
type holdingConn struct {
	net.Conn
	writes int
	held   []byte
}

func (c *holdingConn) Write(p []byte) (int, error) {
	c.writes++
	if c.writes == 1 {
		return c.Conn.Write(p)
	}
	c.held = append(c.held, p...)
	return len(p), nil
}

func (c *holdingConn) release() error {
	_, err := c.Conn.Write(c.held)
	c.held = nil
	return err
}

// The client's Finished and its upgrade request in one segment: the
// handshake goroutine reads the Finished, and the request is already in the
// gateway by the time it hands over; no read event will come for it, so the
// hand-off must read it.
func TestTLSRequestBehindFinishedInOneSegment(t *testing.T) {
	cert := newListenerCert(t)
	mock := startMock(t, mockai.Config{})
	g := startGateway(t, mock, func(c *Settings) { c.TLSCert, c.TLSKey = cert.certFile, cert.keyFile })
	raw := g.rawDial(t)
	_ = raw.SetDeadline(time.Now().Add(5 * time.Second))
	hc := &holdingConn{Conn: raw}
	tc := tls.Client(hc, &tls.Config{RootCAs: cert.roots, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS13})
	if err := tc.Handshake(); err != nil { // TLS 1.3: done once the Finished is written (held)
		t.Fatal(err)
	}
	req := requestHead("GET /v1/realtime?model=gpt-realtime HTTP/1.1", append(upgradeHeaders, "Authorization: Bearer "+testMasterKey)...)
	if _, err := tc.Write(req); err != nil {
		t.Fatal(err)
	}
	if err := hc.release(); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(tc), nil)
	if err != nil {
		t.Fatalf("no answer to a request that came with the Finished: %v", err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("got HTTP %d, want 101", resp.StatusCode)
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
