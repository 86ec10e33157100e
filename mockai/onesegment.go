package mockai

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"sync"
)

// One segment (Config.OneSegment, cmd/mockai -one-segment) makes the server send its
// 101 response and session.created with a single write on the TCP socket, so a
// client receives both in one TCP segment and, usually, one read. Over TLS they are
// still two TLS records (crypto/tls makes one record per Write); only the socket
// write is shared. That is what a busy upstream, or Go's own TLS server under load,
// does, and it is the case a reactor gets wrong when it drains only the socket and
// not what crypto/tls already decrypted (issue 10, item 1): after the first record
// (the 101) is read, the second sits inside tls.Conn and no read event will come.
//
// How: every accepted TCP connection is wrapped in a heldConn, below crypto/tls when
// serving wss. Just before the upgrade the handler starts holding writes; the 101's
// record and then session.created's record collect in heldConn's buffer; after the
// first data frame (session.created, or the error event that refuses a bad key) the
// buffer goes out in one Write. The TLS handshake itself is never held.

// heldConn passes writes through to the socket, except between hold and release,
// when it collects them and release writes them all at once.
type heldConn struct {
	net.Conn
	mu      sync.Mutex // serialises writes, so release's batch and later writes keep their order
	holding bool
	buf     []byte
}

func (c *heldConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.holding {
		c.buf = append(c.buf, p...)
		return len(p), nil
	}
	return c.Conn.Write(p)
}

// hold starts collecting writes.
func (c *heldConn) hold() {
	c.mu.Lock()
	c.holding = true
	c.mu.Unlock()
}

// release writes what was collected in one Write and passes later writes through.
// Safe to call more than once and without hold.
func (c *heldConn) release() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.holding {
		return nil
	}
	c.holding = false
	buf := c.buf
	c.buf = nil
	if len(buf) == 0 {
		return nil
	}
	if _, err := c.Conn.Write(buf); err != nil {
		return fmt.Errorf("mockai: writing the held 101 and session.created: %w", err)
	}
	return nil
}

// heldListener wraps every accepted connection in a heldConn.
type heldListener struct{ net.Listener }

func (l heldListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &heldConn{Conn: c}, nil
}

// connKey is the context key under which ConnContext stores the accepted connection.
type connKey struct{}

// withConn is the HTTP server's ConnContext: it lets a handler find its connection
// before the upgrade hijacks it.
func withConn(ctx context.Context, c net.Conn) context.Context {
	return context.WithValue(ctx, connKey{}, c)
}

// heldConnOf finds the heldConn under a request's connection (through crypto/tls
// when serving wss); nil when the server does not hold writes.
func heldConnOf(ctx context.Context) *heldConn {
	c, _ := ctx.Value(connKey{}).(net.Conn)
	if tc, ok := c.(*tls.Conn); ok {
		c = tc.NetConn()
	}
	hc, _ := c.(*heldConn)
	return hc
}
