// Package poller is the gateway's reactor: client and upstream sockets are
// netpoll connections on the same epoll pollers, and a Session splices two of
// them together. No goroutine is parked per connection or per session: a
// session costs CPU only when bytes arrive, and memory only for its state and
// whatever netpoll is buffering.
//
// The pieces, bottom up:
//   - NBConn adapts a netpoll connection to the blocking net.Conn that
//     crypto/tls and the WebSocket handshake expect, and then to a
//     non-blocking one, so that TLS reads stay event-driven after the
//     handshake.
//   - Endpoint is one socket of a session, plain or TLS: how to write to it,
//     read from it and close it, and where its close handshake stands.
//   - Session forwards frames between a client Endpoint and an upstream
//     Endpoint, verbatim, and runs the close handshake on each side.
package poller

import (
	"errors"
	"io"
	"os"
	"sync/atomic"

	"github.com/cloudwego/netpoll"
)

// errWouldBlock is what a non-blocking NBConn returns when no bytes are
// buffered. crypto/tls does not make a net.Error whose Temporary() is true
// sticky on reads (readRecordOrCCS keeps the partial record and returns), so a
// tls.Conn over an NBConn can be read until it would block, and read again when
// netpoll says more bytes arrived.
var errWouldBlock error = wouldBlock{}

type wouldBlock struct{}

func (wouldBlock) Error() string   { return "no data buffered yet" }
func (wouldBlock) Timeout() bool   { return true }
func (wouldBlock) Temporary() bool { return true }

// IsWouldBlock reports whether err says only that nothing is buffered yet.
func IsWouldBlock(err error) bool {
	var wb wouldBlock
	return errors.As(err, &wb)
}

// NBConn is a net.Conn over a netpoll connection's buffers. While blocking,
// Read waits for bytes (bounded by the connection's read timeout), which is how
// the TLS and WebSocket handshakes run in a dialing goroutine. After
// SetBlocking(false), Read returns what netpoll has buffered or errWouldBlock,
// so that reads run only from the connection's OnRequest.
//
// Only NBConn's Read touches the input buffer (never mix it with netpoll's own
// net.Conn Read, which releases buffers underneath other readers). Write
// blocks until everything is sent, as crypto/tls needs: a TLS write that fails
// part-way breaks the connection for good.
type NBConn struct {
	netpoll.Connection
	nonBlocking atomic.Bool
}

// NewNBConn wraps c; it starts in blocking mode.
func NewNBConn(c netpoll.Connection) *NBConn { return &NBConn{Connection: c} }

// SetBlocking switches between blocking and event-driven reads.
func (c *NBConn) SetBlocking(b bool) { c.nonBlocking.Store(!b) }

// Read implements net.Conn.
func (c *NBConn) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	r := c.Connection.Reader()
	if r.Len() == 0 {
		if c.nonBlocking.Load() {
			if !c.Connection.IsActive() {
				return 0, io.EOF
			}
			return 0, errWouldBlock
		}
		if _, err := r.Peek(1); err != nil {
			return 0, mapErr(err)
		}
	}
	n := min(len(p), r.Len())
	b, err := r.Next(n)
	if err != nil {
		return 0, mapErr(err)
	}
	copy(p, b)
	return n, r.Release()
}

// Write implements net.Conn; it returns once p is sent or the write timeout
// passes.
func (c *NBConn) Write(p []byte) (int, error) {
	n, err := c.Connection.Write(p)
	return n, mapErr(err)
}

func mapErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, netpoll.ErrEOF), errors.Is(err, netpoll.ErrConnClosed):
		return io.EOF
	case errors.Is(err, netpoll.ErrReadTimeout), errors.Is(err, netpoll.ErrWriteTimeout):
		return os.ErrDeadlineExceeded
	}
	return err
}
