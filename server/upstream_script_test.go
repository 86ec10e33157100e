package server

import (
	"bufio"
	"crypto/sha1"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"fmt"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gobwas/ws"

	"rtgate/mockai"
)

// scriptedUpstream is a minimal Realtime-shaped upstream for the reactor's
// regression tests, written on raw sockets so that a test controls what the
// network sees: each connection gets session.created (id sess_<n>) right
// behind the 101, in the same TCP segment and, over TLS, as a separate TLS
// record (as Go's own TLS server and busy upstreams send it); text frames get
// {"type":"echo","conn":n}; a close frame is echoed and the upstream then
// closes TCP first, as a WebSocket server does. Tests can cut any connection
// without a close frame.
type scriptedUpstream struct {
	ln    net.Listener
	tls   *tls.Config // nil for ws://
	roots *x509.CertPool

	mu    sync.Mutex
	conns []net.Conn // raw TCP, by connection number - 1
	n     atomic.Int64

	// closeDelay holds back the echo of a client's close frame.
	closeDelay time.Duration
}

func startScriptedUpstream(t *testing.T, secure bool) *scriptedUpstream {
	t.Helper()
	return startScriptedUpstreamDelay(t, secure, 0)
}

// startScriptedUpstreamDelay is startScriptedUpstream with a delay before
// each close echo.
func startScriptedUpstreamDelay(t *testing.T, secure bool, closeDelay time.Duration) *scriptedUpstream {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u := &scriptedUpstream{ln: ln, closeDelay: closeDelay}
	if secure {
		u.tls, u.roots = selfSignedTLS(t)
	}
	go u.serve()
	t.Cleanup(func() {
		_ = ln.Close()
		u.mu.Lock()
		for _, c := range u.conns {
			_ = c.Close()
		}
		u.mu.Unlock()
	})
	return u
}

func (u *scriptedUpstream) base() string {
	if u.tls != nil {
		return "wss://" + u.ln.Addr().String() + "/v1"
	}
	return "ws://" + u.ln.Addr().String() + "/v1"
}

// config points a gateway at the upstream.
func (u *scriptedUpstream) config(c *Settings) {
	c.APIBase, _ = ParseAPIBase(u.base())
	if u.roots != nil {
		c.UpstreamRoots = u.roots
	}
}

// connections is how many connections the upstream accepted.
func (u *scriptedUpstream) connections() int { return int(u.n.Load()) }

// cut drops connection n (1-based) without a close frame.
func (u *scriptedUpstream) cut(n int) {
	u.mu.Lock()
	c := u.conns[n-1]
	u.mu.Unlock()
	_ = c.Close()
}

func (u *scriptedUpstream) serve() {
	for {
		raw, err := u.ln.Accept()
		if err != nil {
			return
		}
		n := int(u.n.Add(1))
		u.mu.Lock()
		u.conns = append(u.conns, raw)
		u.mu.Unlock()
		go u.session(raw, n)
	}
}

// segmentConn holds writes while hold is set, so that several TLS records
// leave in one TCP write.
type segmentConn struct {
	net.Conn
	hold bool
	buf  []byte
}

func (c *segmentConn) Write(p []byte) (int, error) {
	if c.hold {
		c.buf = append(c.buf, p...)
		return len(p), nil
	}
	return c.Conn.Write(p)
}

func (c *segmentConn) release() error {
	c.hold = false
	_, err := c.Conn.Write(c.buf)
	c.buf = nil
	return err
}

func (u *scriptedUpstream) session(raw net.Conn, n int) {
	defer raw.Close()
	seg := &segmentConn{Conn: raw}
	var conn net.Conn = seg
	if u.tls != nil {
		tc := tls.Server(seg, u.tls)
		if err := tc.Handshake(); err != nil {
			return
		}
		conn = tc
	}
	br := bufio.NewReader(conn)
	req, err := http.ReadRequest(br)
	if err != nil {
		return
	}
	sum := sha1.Sum([]byte(req.Header.Get("Sec-WebSocket-Key") + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"))
	seg.hold = true
	_, _ = fmt.Fprintf(conn, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: %s\r\n\r\n",
		base64.StdEncoding.EncodeToString(sum[:]))
	created := fmt.Sprintf(`{"type":"session.created","event_id":"ev_%d","session":{"id":"sess_%d","object":"realtime.session"}}`, n, n)
	_ = ws.WriteFrame(conn, ws.NewTextFrame([]byte(created)))
	if err := seg.release(); err != nil {
		return
	}
	for {
		f, err := ws.ReadFrame(br)
		if err != nil {
			return
		}
		f = ws.UnmaskFrameInPlace(f)
		switch f.Header.OpCode {
		case ws.OpText:
			_ = ws.WriteFrame(conn, ws.NewTextFrame([]byte(fmt.Sprintf(`{"type":"echo","conn":%d}`, n))))
		case ws.OpClose:
			time.Sleep(u.closeDelay)
			_ = ws.WriteFrame(conn, ws.NewCloseFrame(f.Payload))
			return // the server closes TCP first
		}
	}
}

// selfSignedTLS is a server config with a fresh certificate for 127.0.0.1
// and a pool that trusts it.
func selfSignedTLS(t *testing.T) (*tls.Config, *x509.CertPool) {
	t.Helper()
	cert, certPEM, err := mockai.SelfSignedCert()
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(certPEM)
	return &tls.Config{Certificates: []tls.Certificate{cert}}, pool
}

// upstreamVariants runs f over a plain and a TLS scripted upstream.
func upstreamVariants(t *testing.T, f func(t *testing.T, up *scriptedUpstream)) {
	for _, secure := range []bool{false, true} {
		name := "ws"
		if secure {
			name = "wss"
		}
		t.Run(name, func(t *testing.T) { f(t, startScriptedUpstream(t, secure)) })
	}
}
