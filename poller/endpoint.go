package poller

import (
	"crypto/tls"
	"sync"
	"time"

	"github.com/cloudwego/netpoll"
	"github.com/valyala/bytebufferpool"

	"rtgate/frames"
)

// tlsReadChunk is the scratch space one TLS read gets: a whole TLS record's
// plaintext.
const tlsReadChunk = 16 << 10

// Endpoint is one socket of a session. It owns the socket's write side: every
// write, flush and close of the socket happens under mu, because netpoll allows
// one writer at a time and its writer may panic after Close.
type Endpoint struct {
	conn netpoll.Connection
	tls  *tls.Conn // nil for a plain socket
	nb   *NBConn   // under tls

	mu        sync.Mutex
	closeSent bool        // a close frame was sent to this socket
	closeRecv bool        // a close frame arrived from this socket
	closed    bool        // Close was called, or the socket is gone
	gone      bool        // the close callback ran: nothing more will arrive
	timer     *time.Timer // closes the socket if its close handshake stalls

	plain frames.ByteSource // decrypted bytes of the current TLS read
}

// NewPlainEndpoint wraps a plain TCP netpoll connection.
func NewPlainEndpoint(c netpoll.Connection) *Endpoint {
	e := &Endpoint{conn: c}
	e.guard(c)
	return e
}

// NewTLSEndpoint wraps a TLS connection running over nb. The TLS handshake
// must be complete; the endpoint switches nb to non-blocking reads.
func NewTLSEndpoint(nb *NBConn, t *tls.Conn) *Endpoint {
	nb.SetBlocking(false)
	e := &Endpoint{conn: nb.Connection, tls: t, nb: nb}
	e.guard(nb.Connection)
	return e
}

// guard marks the endpoint closed when its socket closes, for whatever
// reason. netpoll frees a connection's buffers after running its close
// callbacks, and its writer may panic once they are freed; since this
// callback takes mu, a write in progress finishes before the buffers go, and
// every later write sees closed.
func (e *Endpoint) guard(c netpoll.Connection) {
	_ = c.AddCloseCallback(func(netpoll.Connection) error {
		e.mu.Lock()
		e.closed = true
		e.mu.Unlock()
		return nil
	})
	if !c.IsActive() {
		e.mu.Lock()
		e.closed = true
		e.mu.Unlock()
	}
}

// Conn returns the underlying netpoll connection.
func (e *Endpoint) Conn() netpoll.Connection { return e.conn }

// sink returns where frames for this socket are written. Callers hold mu.
func (e *Endpoint) sink() frames.Sink {
	if e.tls != nil {
		return tlsSink{e.tls}
	}
	return e.conn.Writer()
}

// flush sends what was written through sink. Callers hold mu.
func (e *Endpoint) flush() error {
	if e.tls != nil {
		return nil // every TLS write is sent as it is made
	}
	return e.conn.Writer().Flush()
}

// writeFrame sends bytes the gateway built itself (a close frame, an error
// event). Callers hold mu.
func (e *Endpoint) writeFrame(b []byte) error {
	if e.closed {
		return netpoll.ErrConnClosed
	}
	if e.tls != nil {
		_, err := e.tls.Write(b)
		return err
	}
	w := e.conn.Writer()
	buf, err := w.Malloc(len(b))
	if err != nil {
		return err
	}
	copy(buf, b)
	return w.Flush()
}

// Send writes bytes the gateway built itself, such as an HTTP response
// during the handshake.
func (e *Endpoint) Send(b []byte) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.writeFrame(b)
}

// Read hands everything readable on the socket to fn; see read.
func (e *Endpoint) Read(fn func(src frames.Source) error) error { return e.read(fn) }

// Close closes the socket at once.
func (e *Endpoint) Close() { e.closeNow() }

// read hands everything readable on the socket to fn as a frames.Source, then
// releases it. fn must have flushed whatever it wrote from the source before
// it returns: plain sockets are forwarded without copying, so the bytes stay
// in the input buffer until then. For TLS, fn sees decrypted plaintext in a
// pooled scratch buffer, one record at a time.
func (e *Endpoint) read(fn func(src frames.Source) error) error {
	if e.tls == nil {
		r := e.conn.Reader()
		err := fn(r)
		if rerr := r.Release(); err == nil {
			err = rerr
		}
		return err
	}
	buf := bytebufferpool.Get()
	defer bytebufferpool.Put(buf)
	if cap(buf.B) < tlsReadChunk {
		buf.B = make([]byte, tlsReadChunk)
	}
	b := buf.B[:tlsReadChunk]
	src := &e.plain // reads of one socket never overlap, and a field does not escape per call
	for {
		n, err := e.tls.Read(b)
		if n > 0 {
			src.Reset(b[:n])
			if ferr := fn(src); ferr != nil {
				return ferr
			}
		}
		if err != nil {
			if IsWouldBlock(err) {
				return nil
			}
			return err
		}
	}
}

// closeNow closes the socket unless it is closed already. netpoll runs close
// callbacks synchronously when it can, so this must not be called with mu
// held.
func (e *Endpoint) closeNow() {
	e.mu.Lock()
	already := e.closed
	e.closed = true
	if e.timer != nil {
		e.timer.Stop()
	}
	conn := e.conn
	e.mu.Unlock()
	if !already && conn != nil {
		_ = conn.Close()
	}
}

// tlsSink writes frames through a TLS connection. Each write is encrypted and
// sent before it returns, so the source bytes may be released right after.
type tlsSink struct{ c *tls.Conn }

func (s tlsSink) WriteBinary(p []byte) (int, error) { return s.c.Write(p) }
