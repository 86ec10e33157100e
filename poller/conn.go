package poller

import (
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"

	"github.com/cloudwego/netpoll"
	"github.com/valyala/bytebufferpool"
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
// Read waits for bytes (bounded by the connection's read timeout) and Write
// waits until everything is sent, which is how the TLS and WebSocket
// handshakes run in a dialing goroutine. Once an Endpoint takes it over
// (NewTLSEndpoint), Read returns what netpoll has buffered or errWouldBlock,
// so that reads run only from the connection's OnRequest, and Write hands each
// TLS record to the endpoint's non-blocking output, which never fails part-way.
//
// Only NBConn's Read touches the input buffer (never mix it with netpoll's own
// net.Conn Read, which releases buffers underneath other readers).
//
// A blocking Write goes to the descriptor number by hand, outside netpoll's
// lock that holds Close back from its own writers. A Close from another
// goroutine (crypto/tls's HandshakeContext closes the net.Conn from a
// goroutine of its own when its context ends; netpoll closes a socket whose
// peer hung up) could then free the number between the write's look-up and
// its system call, and the bytes land on the socket that took the number
// next: a ClientHello once reached a client accepted in that moment. So
// the write by hand runs under handWrite, and a close callback takes
// handWrite and marks the descriptor gone before netpoll closes it (netpoll
// runs close callbacks latest first, its own, which closes the descriptor,
// last): a Close waits for a write by hand in progress, and no write by hand
// starts after it.
type NBConn struct {
	netpoll.Connection
	nonBlocking atomic.Bool
	out         *Endpoint // set when an endpoint owns the connection's writes

	handWrite sync.Mutex
	fdGone    bool   // under handWrite: the descriptor is closed or about to be
	beforeFD  func() // tests: runs between the descriptor's look-up and the write

	// readAhead is set while the endpoint's read handler runs on the
	// socket's poller and the socket may still hold bytes: then Read
	// reads past netpoll's buffer, straight from the descriptor, when a
	// TLS record is incomplete (see Endpoint.readAhead for why and why it
	// is safe only there).
	readAhead atomic.Bool
	rec       recordCursor

	// spill is a descriptor read's bytes that did not fit the Read that
	// made it (crypto/tls asks for little more than the rest of one
	// record); later Reads hand them out first. spillBuf goes back to the
	// pool once they are all handed out, so an idle connection holds none.
	spillBuf           *[tlsReadChunk]byte
	spillOff, spillEnd int32
	aheadReads         uint8 // descriptor reads in this handler run (readAheadMax)

	// gather, set under out.mu, collects a TLS batch's records for one
	// write (Endpoint.writeTLSGathered).
	gather *bytebufferpool.ByteBuffer
}

// recordCursor follows TLS record boundaries in the bytes Read hands to
// crypto/tls, so that Read knows whether crypto/tls still waits for the rest
// of a record (the rest is then almost always in the kernel already) or for
// a new one (then the next read event says when one comes).
type recordCursor struct {
	left int     // bytes of the current record's body still to come
	hdr  [5]byte // a record header read so far
	n    int     // bytes in hdr
}

func (r *recordCursor) feed(b []byte) {
	for len(b) > 0 {
		if r.left > 0 {
			k := min(r.left, len(b))
			r.left -= k
			b = b[k:]
			continue
		}
		k := copy(r.hdr[r.n:], b)
		r.n += k
		b = b[k:]
		if r.n == len(r.hdr) {
			r.left, r.n = int(r.hdr[3])<<8|int(r.hdr[4]), 0
		}
	}
}

// midRecord reports whether the bytes so far end inside a record.
func (r *recordCursor) midRecord() bool { return r.left > 0 || r.n > 0 }

// Fed tells c about bytes of its stream that reached crypto/tls some other
// way than c.Read (a handshake buffer of the caller's), so that it keeps
// track of TLS record boundaries. Call it from the goroutine reading the
// connection.
func (c *NBConn) Fed(b []byte) { c.rec.feed(b) }

// NewNBConn wraps c; it starts in blocking mode.
func NewNBConn(c netpoll.Connection) *NBConn {
	nb := &NBConn{Connection: c}
	_ = c.AddCloseCallback(nb.descriptorGone)
	if !c.IsActive() {
		_ = nb.descriptorGone(c)
	}
	return nb
}

// descriptorGone is NBConn's close callback: it waits for a write by hand in
// progress and lets none start after it.
func (c *NBConn) descriptorGone(netpoll.Connection) error {
	c.handWrite.Lock()
	c.fdGone = true
	c.handWrite.Unlock()
	return nil
}

// SetBlocking switches between blocking and event-driven reads.
func (c *NBConn) SetBlocking(b bool) { c.nonBlocking.Store(!b) }

// Read implements net.Conn.
func (c *NBConn) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	if c.spillBuf != nil {
		// Bytes read from the descriptor earlier come before anything
		// netpoll reads later: it could not read while they were read.
		return c.readSpill(p), nil
	}
	r := c.Connection.Reader()
	if r.Len() == 0 {
		if c.nonBlocking.Load() && c.readAhead.Load() && c.rec.midRecord() {
			if e := c.out; e != nil && e.fd >= 0 && c.aheadReads < readAheadMax {
				if n := c.readFD(e.fd); n > 0 {
					return c.readSpill(p), nil
				}
				// EAGAIN, EOF or an error: the poller's next wait sees it.
				c.readAhead.Store(false)
			}
		}
		if c.nonBlocking.Load() {
			// Look at the buffer again after seeing the hang-up: netpoll
			// reads what the peer sent before marking the connection
			// closed, so bytes may have landed between the two looks.
			if !c.Connection.IsActive() && r.Len() == 0 {
				return 0, io.EOF
			}
			if r.Len() == 0 {
				return 0, errWouldBlock
			}
		} else if _, err := r.Peek(1); err != nil {
			return 0, mapErr(err)
		}
	}
	n := min(len(p), r.Len())
	b, err := r.Next(n)
	if err != nil {
		return 0, mapErr(err)
	}
	copy(p, b)
	c.rec.feed(p[:n])
	return n, r.Release()
}

// readFD reads what the kernel holds for the socket, up to a scratch
// buffer's worth, into the spill, and returns how many bytes it got. One big
// read rather than one per Read: crypto/tls asks for the rest of one record
// at a time, which made saturated bulk TLS cost a read(2) per record (0.38
// per relayed audio frame inline, none with the pool, whose poller had read
// it all into netpoll's buffer).
func (c *NBConn) readFD(fd int) int {
	buf := tlsScratch.Get().(*[tlsReadChunk]byte)
	c.aheadReads++
	n, _ := readFD(fd, buf[:])
	if n <= 0 {
		tlsScratch.Put(buf)
		return 0
	}
	if n < len(buf) {
		c.readAhead.Store(false) // the kernel had no more
	}
	c.spillBuf, c.spillOff, c.spillEnd = buf, 0, int32(n)
	return n
}

// readSpill hands p what it can of the spill, and frees the spill once it
// is empty.
func (c *NBConn) readSpill(p []byte) int {
	n := copy(p, c.spillBuf[c.spillOff:c.spillEnd])
	c.rec.feed(p[:n])
	c.spillOff += int32(n)
	if c.spillOff == c.spillEnd {
		tlsScratch.Put(c.spillBuf)
		c.spillBuf, c.spillOff, c.spillEnd = nil, 0, 0
	}
	return n
}

// Write implements net.Conn. Before an endpoint owns the connection it
// returns once p is sent or the write timeout passes; after, p (one TLS
// record) is written without blocking and whatever the kernel does not take
// is queued, so the write never fails part-way while the socket lives.
func (c *NBConn) Write(p []byte) (int, error) {
	if e := c.out; e != nil {
		e.mu.Lock()
		if g := c.gather; g != nil {
			g.B = append(g.B, p...) // writeTLSGathered sends it
			e.mu.Unlock()
			return len(p), nil
		}
		err := e.sendLocked(p)
		e.mu.Unlock()
		if err != nil {
			return 0, err
		}
		return len(p), nil
	}
	// The handshakes' writes (ClientHello, Finished, the upgrade request)
	// go straight to the socket while the kernel takes them, which on a
	// fresh connection is always: netpoll's Write would copy them into its
	// output buffer, which then keeps a node of that size (~2 KiB for a
	// ClientHello with a post-quantum key share) for the connection's life.
	// Safe because only this goroutine writes before an endpoint owns the
	// connection, netpoll's output buffer is empty whenever its Write has
	// returned, and a close waits for handWrite (NBConn). netpoll's own
	// Write, below, is outside handWrite: it may wait for the poller, which
	// may be the one closing.
	sent, err := c.writeByHand(p)
	if err != nil {
		return sent, err
	}
	if sent == len(p) {
		return sent, nil
	}
	n, err := c.Connection.Write(p[sent:])
	return sent + n, mapErr(err)
}

// writeByHand writes what the kernel takes of p straight to the descriptor,
// unless the descriptor is gone.
func (c *NBConn) writeByHand(p []byte) (int, error) {
	c.handWrite.Lock()
	defer c.handWrite.Unlock()
	if c.fdGone {
		return 0, net.ErrClosed
	}
	fd := fdOf(c.Connection)
	if fd < 0 {
		return 0, nil
	}
	if c.beforeFD != nil {
		c.beforeFD()
	}
	return writeFD(fd, p)
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
