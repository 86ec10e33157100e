package poller

import (
	"errors"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"github.com/cloudwego/netpoll"
	"github.com/valyala/bytebufferpool"
	"golang.org/x/sys/unix"

	"rtgate/frames"
)

// The non-blocking output path (see the package documentation).
//
// A read handler forwards frames into the destination endpoint's batch
// (WriteBinary), then flushes the batch once: a single writev for a plain
// socket, a single tls.Write for TLS. Pieces of 256 bytes and more are
// referenced, not copied (they stay valid in the source's buffer until the
// read releases it, after the flush); smaller ones are copied into a pooled
// staging buffer, among them every piece that comes from the scanner's stash
// (a partial header or control frame, at most 14+125 bytes), which the
// scanner may reuse before the flush. Over TLS every piece is staged, so that
// a read's frames become as few records as possible.
//
// Written by hand because it is the hot path: it allocates nothing per frame
// (the iovec list and the staging buffer come from pools and go back at each
// flush, so an idle endpoint holds neither), and no library offers a
// non-blocking writev onto a netpoll connection's descriptor.

// inplaceMin is the smallest piece written from the caller's memory rather
// than copied: above the scanner's largest stashed piece (14+125 bytes).
const inplaceMin = 256

// maxIovecs bounds one writev (the kernel's IOV_MAX is 1024).
const maxIovecs = 64

// iovList is the pieces of one writev.
type iovList struct{ v [maxIovecs][]byte }

// iovLists recycles iovec lists across endpoints: a cache (nothing reads
// what was put in it), like bytebufferpool's own default pool.
var iovLists = sync.Pool{New: func() any { return new(iovList) }}

// batch is the frames forwarded to an endpoint by one read, not yet written.
// Only the session side that writes to the endpoint touches it.
type batch struct {
	list     *iovList // plain sockets only
	cnt      int      // pieces in list
	n        int      // bytes in the batch
	stage    *bytebufferpool.ByteBuffer
	runStart int  // where the last staged run begins in stage.B
	inRun    bool // list's last piece is that run
	err      error
}

// batchSink is the frames.Sink that fills an endpoint's batch.
type batchSink struct{ e *Endpoint }

// WriteBinary implements frames.Sink.
func (s batchSink) WriteBinary(p []byte) (int, error) {
	s.e.add(p)
	return len(p), nil
}

// sink returns where forwarded frames for this endpoint go until flushBatch.
func (e *Endpoint) sink() frames.Sink { return batchSink{e} }

func (e *Endpoint) add(p []byte) {
	b := &e.batch
	if len(p) == 0 {
		return
	}
	if b.stage == nil && (e.tls != nil || len(p) < inplaceMin) {
		b.stage = bytebufferpool.Get()
		b.stage.B = b.stage.B[:0]
	}
	if e.tls != nil {
		b.stage.B = append(b.stage.B, p...)
		b.n += len(p)
		return
	}
	if b.list == nil {
		b.list = iovLists.Get().(*iovList)
	}
	if len(p) >= inplaceMin {
		if b.cnt == maxIovecs {
			b.keep(e.flushBatch())
			b.list = iovLists.Get().(*iovList)
		}
		b.list.v[b.cnt] = p
		b.cnt++
		b.n += len(p)
		b.inRun = false
		return
	}
	if !b.inRun {
		if b.cnt == maxIovecs {
			b.keep(e.flushBatch())
			b.list = iovLists.Get().(*iovList)
			b.stage = bytebufferpool.Get()
			b.stage.B = b.stage.B[:0]
		}
		b.runStart = len(b.stage.B)
		b.cnt++
		b.inRun = true
	}
	// Earlier pieces keep pointing at the old array if this grows it; its
	// bytes stay as they were, so they are still right.
	b.stage.B = append(b.stage.B, p...)
	b.list.v[b.cnt-1] = b.stage.B[b.runStart:]
	b.n += len(p)
}

// flushBatch writes the batch without blocking and empties it. It returns
// the first error since the last flush: the socket is closed, or broken.
func (e *Endpoint) flushBatch() error {
	b := &e.batch
	var err error
	if b.n > 0 {
		if e.tls != nil {
			err = e.writeTLSGathered(b.stage.B)
		} else {
			e.mu.Lock()
			err = e.writevLocked(b.list.v[:b.cnt], b.n)
			e.mu.Unlock()
		}
	}
	if b.list != nil {
		clear(b.list.v[:b.cnt])
		iovLists.Put(b.list)
		b.list = nil
	}
	b.cnt, b.n, b.inRun = 0, 0, false
	if b.stage != nil {
		bytebufferpool.Put(b.stage)
		b.stage = nil
	}
	if b.err != nil {
		err, b.err = b.err, nil
	}
	return err
}

// writeTLSGathered is tls.Write of a batch with its records gathered into
// one write(2): crypto/tls hands each record (at most 16 KiB of plaintext) to
// NBConn.Write on its own, and a batch of audio frames is several. While
// e.nb.gather is set NBConn.Write appends records to it instead of writing;
// another goroutine's record (Send) landing meanwhile goes behind ours under
// mu, so the stream keeps crypto/tls's order.
func (e *Endpoint) writeTLSGathered(p []byte) error {
	if len(p) <= tlsRecordMax {
		_, err := e.tls.Write(p) // one record: nothing to gather
		return err
	}
	g := bytebufferpool.Get()
	g.B = g.B[:0]
	e.mu.Lock()
	e.nb.gather = g
	e.mu.Unlock()
	_, err := e.tls.Write(p)
	e.mu.Lock()
	e.nb.gather = nil
	if werr := e.sendLocked(g.B); err == nil {
		err = werr
	}
	e.mu.Unlock()
	bytebufferpool.Put(g)
	return err
}

// keep remembers the first error of an early flush for the final one.
func (b *batch) keep(err error) {
	if b.err == nil {
		b.err = err
	}
}

// sendLocked writes p without blocking. Callers hold mu.
func (e *Endpoint) sendLocked(p []byte) error {
	if e.inLast {
		if !e.writing && e.fd >= 0 {
			_, _ = writeFD(e.fd, p)
		}
		return nil
	}
	if e.closed {
		return errClosed
	}
	if len(p) == 0 {
		return nil
	}
	if e.writing || e.fd < 0 {
		e.queueLocked(p)
		e.commitLocked()
		return nil
	}
	n, err := writeFD(e.fd, p)
	if err != nil {
		return err
	}
	if n < len(p) {
		e.queueLocked(p[n:])
		e.commitLocked()
	}
	return nil
}

// writevLocked is sendLocked for a gathered batch of total bytes.
func (e *Endpoint) writevLocked(iov [][]byte, total int) error {
	if e.closed {
		return errClosed
	}
	if e.writing || e.fd < 0 {
		for _, p := range iov {
			e.queueLocked(p)
		}
		e.commitLocked()
		return nil
	}
	var n int
	for {
		var err error
		n, err = writev(e.fd, iov)
		if err == unix.EINTR {
			continue
		}
		if err == unix.EAGAIN {
			n, err = 0, nil
		}
		if err != nil {
			return err
		}
		break
	}
	if n == total {
		return nil
	}
	for _, p := range iov {
		if n >= len(p) {
			n -= len(p)
			continue
		}
		e.queueLocked(p[n:])
		n = 0
	}
	e.commitLocked()
	return nil
}

// writeFD is one non-blocking write; a full kernel buffer is 0 bytes
// written, not an error.
func writeFD(fd int, p []byte) (int, error) {
	for {
		n, err := syscall.Write(fd, p)
		switch err {
		case nil:
			return n, nil
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			return 0, nil
		}
		return 0, err
	}
}

// backlogChunk is the size of the backlog's pieces.
const backlogChunk = 64 << 10

// chunk is one piece of a backlog; B never grows past backlogChunk.
type chunk struct{ B []byte }

// chunks recycles backlog pieces across endpoints. A pool of one fixed size
// (bytebufferpool's buffers come in every size its other users leave, and a
// wrong-sized one would be reallocated) and of pointers (a Put allocates
// nothing). Like bytebufferpool's own default pool it is package state, but
// only a cache: nothing reads what was put in it.
var chunks = sync.Pool{New: func() any { return &chunk{B: make([]byte, 0, backlogChunk)} }}

// queueLocked copies p behind the backlog; commitLocked then makes sure the
// writer goroutine runs. The backlog is a list of fixed-size pooled chunks:
// it grows without copying what it holds, and a chunk is never grown in
// place, so the writer goroutine can write from the front chunk without the
// lock while handlers append behind it. Callers hold mu.
func (e *Endpoint) queueLocked(p []byte) {
	e.backlogLen.Add(int64(len(p)))
	for len(p) > 0 {
		var c *chunk
		if n := len(e.back); n > 0 && len(e.back[n-1].B) < cap(e.back[n-1].B) {
			c = e.back[n-1]
		} else {
			c = chunks.Get().(*chunk)
			c.B = c.B[:0]
			e.back = append(e.back, c)
		}
		m := min(len(p), cap(c.B)-len(c.B))
		c.B = append(c.B, p[:m]...)
		p = p[m:]
	}
}

// commitLocked starts the writer goroutine unless it runs. Callers hold mu.
func (e *Endpoint) commitLocked() {
	if !e.writing && len(e.back) > 0 {
		e.writing = true
		e.stalledSince.Store(time.Now().UnixNano())
		backlogged.Add(1)
		go e.writeBacklog()
	}
}

// writeBacklog is the writer goroutine of a stalled endpoint. It sends the
// backlog from the front: with a raw non-blocking write while the kernel
// takes bytes, and when it takes none, through netpoll's blocking Write,
// which waits for writability on the poller, bounded by the connection's
// write timeout (a socket that takes nothing for that long is dropped, see
// waitPiece). Raw writes are safe here because netpoll's own output buffer
// is empty whenever its Write has returned. When the backlog is empty the
// goroutine exits. It is the only goroutine a slow peer costs, and it never
// runs a handler of the other side.
func (e *Endpoint) writeBacklog() {
	for {
		e.wmu.Lock()
		e.mu.Lock()
		if e.closed || len(e.back) == 0 || (len(e.back) == 1 && e.sent == len(e.back[0].B)) {
			closeNow := !e.closed && e.closeAfter
			if closeNow {
				e.closed, e.closedByUs = true, true
			}
			e.writing = false
			for i, c := range e.back {
				chunks.Put(c)
				e.back[i] = nil
			}
			e.back, e.sent = e.back[:0], 0
			if cap(e.back) > 64 {
				e.back = nil // do not keep a burst's bookkeeping for the session's life
			}
			e.backlogLen.Store(0)
			e.stalledSince.Store(0)
			backlogged.Add(-1)
			e.mu.Unlock()
			e.wmu.Unlock()
			if closeNow {
				e.closeConn()
			}
			return
		}
		front := e.back[0]
		b := front.B[e.sent:len(front.B)]
		e.mu.Unlock()
		n, err := e.sendSome(b)
		e.wmu.Unlock()
		if err != nil {
			if errors.Is(err, netpoll.ErrWriteTimeout) {
				writeTimeouts.Add(1)
			}
			// A write that timed out leaves the rest stranded inside
			// netpoll: the socket is unusable. Marked closed first, since
			// Drop only records the close while a read by hand runs, and
			// the next round must not send the same bytes again.
			e.mu.Lock()
			e.closed = true
			e.mu.Unlock()
			e.Drop()
			continue // the next round sees closed and exits
		}
		e.mu.Lock()
		e.sent += n
		e.backlogLen.Add(-int64(n))
		if e.sent == len(front.B) && len(front.B) == cap(front.B) {
			// A full chunk nobody appends to any more.
			chunks.Put(front)
			copy(e.back, e.back[1:])
			e.back[len(e.back)-1] = nil
			e.back, e.sent = e.back[:len(e.back)-1], 0
		}
		e.mu.Unlock()
	}
}

// waitPiece is the most of a backlog handed to netpoll's blocking Write
// when the kernel takes nothing. netpoll's write timeout (WRITE_TIMEOUT_SECS)
// bounds the whole of what that Write holds, so the piece is what the
// socket must take within the timeout to be kept: small, so that the rule
// is "the kernel took nothing for that long" (a peer that stopped reading)
// and not "less than a piece" (a slow link: a whole 64 KiB chunk in 10 s
// would drop every reader slower than 6.5 KB/s). The kernel reports a
// socket writable only once a third of its send buffer is free, more than
// this, so a socket that takes anything takes the piece at its first
// wake-up; the raw writes that follow send the rest.
const waitPiece = 1 << 10

// sendSome writes b, raw while the kernel takes bytes, else waiting inside
// netpoll for the kernel to take a first piece; it returns how much went.
// Callers hold wmu.
func (e *Endpoint) sendSome(b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	if e.fd >= 0 {
		n, err := writeFD(e.fd, b)
		if err != nil || n > 0 {
			return n, err
		}
	}
	b = b[:min(len(b), waitPiece)]
	_, err := e.conn.Write(b)
	return len(b), err
}

// writev is one writev(2) of up to maxIovecs pieces. Written here rather
// than taken from x/sys/unix because unix.Writev allocates its iovec array
// above 8 pieces, once per call; this one lives on the stack. unsafe is used
// for the system call's argument only.
func writev(fd int, bufs [][]byte) (int, error) {
	var iov [maxIovecs]unix.Iovec
	n := 0
	for _, b := range bufs[:min(len(bufs), maxIovecs)] {
		if len(b) == 0 {
			continue
		}
		iov[n].Base = &b[0]
		iov[n].SetLen(len(b))
		n++
	}
	if n == 0 {
		return 0, nil
	}
	r, _, errno := unix.Syscall(unix.SYS_WRITEV, uintptr(fd), uintptr(unsafe.Pointer(&iov[0])), uintptr(n))
	if errno != 0 {
		return 0, errno
	}
	return int(r), nil
}

// errClosed is returned for writes to a closed socket.
var errClosed = errors.New("poller: write to a closed socket")
