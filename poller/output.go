package poller

import (
	"errors"
	"syscall"
	"time"
	"unsafe"

	"github.com/valyala/bytebufferpool"
	"golang.org/x/sys/unix"

	"rtgate/frames"
)

// The non-blocking output path (see the package documentation).
//
// A read handler forwards frames into the destination endpoint's batch
// (WriteBinary), then flushes the batch once: a single writev for a plain
// socket, a single tls.Write for TLS. Large pieces are referenced, not
// copied (they stay valid in the source's buffer until the read releases it,
// after the flush); small ones, such as a header the scanner stashed, are
// copied into a pooled staging buffer, as netpoll's own WriteBinary does
// below 4 KiB. Over TLS every piece is staged, so that a read's frames become
// as few records as possible.
//
// Written by hand because it is the hot path: it allocates nothing per frame
// (the iovec list and the staging buffer are reused), and no library offers a
// non-blocking writev onto a netpoll connection's descriptor.

// inplaceMin is the smallest piece written from the caller's memory rather
// than copied: above the scanner's largest stashed piece (14+125 bytes).
const inplaceMin = 256

// maxIovecs bounds one writev (the kernel's IOV_MAX is 1024).
const maxIovecs = 64

// batch is the frames forwarded to an endpoint by one read, not yet written.
type batch struct {
	iov      [][]byte
	n        int
	stage    *bytebufferpool.ByteBuffer
	runStart int  // where the last staged run begins in stage.B
	inRun    bool // iov's last entry is that run
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
	if e.tls == nil && len(p) >= inplaceMin {
		if len(b.iov) >= maxIovecs {
			b.keep(e.flushBatch())
		}
		b.iov = append(b.iov, p)
		b.n += len(p)
		b.inRun = false
		return
	}
	if b.stage == nil {
		b.stage = bytebufferpool.Get()
		b.stage.B = b.stage.B[:0]
	}
	if !b.inRun {
		if len(b.iov) >= maxIovecs {
			b.keep(e.flushBatch())
			if b.stage == nil {
				b.stage = bytebufferpool.Get()
				b.stage.B = b.stage.B[:0]
			}
		}
		b.runStart = len(b.stage.B)
		b.iov = append(b.iov, nil)
		b.inRun = true
	}
	// Earlier entries keep pointing at the old array if this grows it; its
	// bytes stay as they were, so they are still right.
	b.stage.B = append(b.stage.B, p...)
	b.iov[len(b.iov)-1] = b.stage.B[b.runStart:]
	b.n += len(p)
}

// flushBatch writes the batch without blocking and empties it. It returns
// the first error since the last flush: the socket is closed, or broken.
func (e *Endpoint) flushBatch() error {
	b := &e.batch
	var err error
	if b.n > 0 {
		if e.tls != nil {
			_, err = e.tls.Write(b.stage.B)
		} else {
			e.mu.Lock()
			err = e.writevLocked(b.iov, b.n)
			e.mu.Unlock()
		}
	}
	clear(b.iov)
	b.iov, b.n, b.inRun = b.iov[:0], 0, false
	if b.stage != nil {
		bytebufferpool.Put(b.stage)
		b.stage = nil
	}
	if b.err != nil {
		err, b.err = b.err, nil
	}
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

// queueLocked copies p behind the backlog; commitLocked then makes sure the
// writer goroutine runs. The backlog is a list of fixed-size pooled chunks:
// it grows without copying what it holds, and a chunk is never grown in
// place, so the writer goroutine can write from the front chunk without the
// lock while handlers append behind it. Callers hold mu.
func (e *Endpoint) queueLocked(p []byte) {
	e.backlogLen.Add(int64(len(p)))
	for len(p) > 0 {
		var c *bytebufferpool.ByteBuffer
		if n := len(e.back); n > 0 && len(e.back[n-1].B) < cap(e.back[n-1].B) {
			c = e.back[n-1]
		} else {
			c = bytebufferpool.Get()
			if cap(c.B) != backlogChunk {
				c.B = make([]byte, 0, backlogChunk)
			}
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
		go e.writeBacklog()
	}
}

// writeBacklog is the writer goroutine of a stalled endpoint. It sends the
// backlog from the front: with a raw non-blocking write while the kernel
// takes bytes, and when it takes none, through netpoll's blocking Write,
// which waits for writability on the poller, bounded by the connection's
// write timeout. Raw writes are safe here because netpoll's own output buffer
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
				e.closed = true
			}
			e.writing = false
			for i, c := range e.back {
				bytebufferpool.Put(c)
				e.back[i] = nil
			}
			e.back, e.sent = e.back[:0], 0
			if cap(e.back) > 64 {
				e.back = nil // do not keep a burst's bookkeeping for the session's life
			}
			e.backlogLen.Store(0)
			e.stalledSince.Store(0)
			e.mu.Unlock()
			e.wmu.Unlock()
			if closeNow {
				_ = e.conn.Close()
			}
			return
		}
		front := e.back[0]
		b := front.B[e.sent:len(front.B)]
		e.mu.Unlock()
		n, err := e.sendSome(b)
		e.wmu.Unlock()
		if err != nil {
			// A write that timed out leaves the rest stranded inside
			// netpoll: the socket is unusable.
			e.Drop()
			continue // the next round sees closed and exits
		}
		e.mu.Lock()
		e.sent += n
		e.backlogLen.Add(-int64(n))
		if e.sent == len(front.B) && len(front.B) == cap(front.B) {
			// A full chunk nobody appends to any more.
			bytebufferpool.Put(front)
			copy(e.back, e.back[1:])
			e.back[len(e.back)-1] = nil
			e.back, e.sent = e.back[:len(e.back)-1], 0
		}
		e.mu.Unlock()
	}
}

// sendSome writes b, raw while the kernel takes bytes, else waiting inside
// netpoll; it returns how much went. Callers hold wmu.
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
