package poller

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync"
	"sync/atomic"

	"github.com/cloudwego/netpoll"
	"golang.org/x/sys/unix"

	"rtgate/frames"
)

// tlsReadChunk is the scratch space one TLS read gets: several TLS records'
// plaintext (a record carries at most 16 KiB), so that the records of one
// read event become one batch and one write to the other socket, as a plain
// socket's read does. A per-record hand-off made one writev per record: with
// an upstream that writes each frame as its own record, one per frame.
const tlsReadChunk = 64 << 10

// tlsRecordMax is the largest plaintext one TLS record carries.
const tlsRecordMax = 16 << 10

// tlsScratch recycles TLS read buffers across endpoints: a pool of one fixed
// size (bytebufferpool drops buffers above the sizes its other users leave,
// which made a large one an allocation per read), and only a cache, like
// the backlog's chunks. An idle endpoint holds none.
var tlsScratch = sync.Pool{New: func() any { return new([tlsReadChunk]byte) }}

// Endpoint is one socket, plain or TLS. There is exactly one Endpoint per
// socket for the socket's whole life: the dialer makes it, the warm pool holds
// it, a session takes it over; nothing copies its fields.
//
// It owns the socket's write side (sendLocked, flushBatch): every write goes through mu,
// never blocks, and nothing is written once the socket is closed, because
// netpoll allows one writer at a time, may panic in its writer after Close,
// and reuses descriptor numbers.
type Endpoint struct {
	conn netpoll.Connection
	fd   int       // the socket's descriptor, for raw writes; -1 if netpoll hides it
	tls  *tls.Conn // nil for a plain socket
	nb   *NBConn   // under tls

	mu         sync.Mutex
	closed     bool     // the socket is closed or closing: nothing more is written
	closeAfter bool     // close once the backlog is sent
	back       []*chunk // bytes the kernel did not take yet, in order
	sent       int      // bytes of back[0] already sent
	writing    bool     // the writer goroutine owns the socket's writes
	inLast     bool     // a raw write from inside the socket's own close callback
	byHand     bool     // a read outside netpoll's OnRequest is running
	pending    uint8    // a Close (1) or Drop (2) asked for during that read
	closedByUs bool     // the gateway closed it (a hung-up peer leaves it readable)
	fdGone     bool     // netpoll's close callbacks started: the descriptor may be closed soon
	// inputGone is set by the close guard once no read by hand holds rmu
	// any more: from then on netpoll's own close callback may free the
	// input buffer, and no read outside OnRequest may start (byHandBegin).
	inputGone bool
	// dialed is set for a dialed socket until Handle.Start installs its
	// read handler: netpoll closes a hung-up connection itself only when
	// it has a handler, so until then closeConn must close, not shut down.
	// Under mu, with closedByUs: closeConn's choice of netpoll's Close and
	// Start's clearing of dialed exclude each other, so a Close chosen
	// while dialed never lands after the handler is installed (Start
	// installs none once the gateway closed the socket).
	dialed bool

	// ahead is set while the socket's read handler surely runs on its own
	// poller, the one place where it may read past netpoll's buffer (see
	// readAhead). onPoller is how the inline runner says so for a client
	// socket, around the whole task; an upstream socket's Handle knows by
	// itself.
	ahead    atomic.Bool
	onPoller atomic.Bool

	// wmu is held by the writer goroutine across netpoll's blocking Write,
	// so that the close guard can wait for that write to return before
	// netpoll frees the connection's buffers.
	wmu sync.Mutex
	// rmu is held across a read outside OnRequest (byHandBegin), for the
	// same reason: netpoll frees the input buffer in a close callback, and
	// only OnRequest is protected from that by netpoll's own lock.
	rmu sync.Mutex

	// For the watchdog, read without locks: since when a backlog has been
	// waiting (0 when none), and how many bytes it holds.
	stalledSince atomic.Int64
	backlogLen   atomic.Int64

	// batch gathers one read's worth of forwarded frames; see flushBatch.
	// Only the session side that writes to this endpoint touches it.
	batch batch

	plain frames.ByteSource // decrypted bytes of the current TLS read
}

// NewPlainEndpoint wraps a plain TCP netpoll connection.
func NewPlainEndpoint(c netpoll.Connection) *Endpoint {
	e := new(Endpoint)
	InitPlainEndpoint(e, c)
	return e
}

// InitPlainEndpoint does NewPlainEndpoint's work on an Endpoint the caller
// allocated inside its own per-connection state (one allocation per session
// rather than several). e must be zero and must not be copied afterwards:
// its close callback and locks live at that address.
func InitPlainEndpoint(e *Endpoint, c netpoll.Connection) {
	e.conn, e.fd = c, fdOf(c)
	e.guard()
}

// MarkDialed says e is a dialed socket whose read handler is not installed
// yet (Handle.Start installs it). Until then a close of e is netpoll's Close:
// no handler task can be running on the poller, and a shutdown would reach
// nobody who closes the socket (netpoll leaves a hung-up connection without
// a handler to its user), leaking the descriptor.
func (e *Endpoint) MarkDialed() {
	e.mu.Lock()
	e.dialed = true
	e.mu.Unlock()
}

// NewTLSEndpoint wraps a TLS connection running over nb. The TLS handshake
// must be complete; the endpoint switches nb to non-blocking reads and takes
// over its writes.
func NewTLSEndpoint(nb *NBConn, t *tls.Conn) *Endpoint {
	e := &Endpoint{conn: nb.Connection, fd: fdOf(nb.Connection), tls: t, nb: nb}
	nb.out = e
	nb.SetBlocking(false)
	e.guard()
	return e
}

// fdOf returns c's descriptor through netpoll's exported Conn interface
// (every netpoll connection implements it), or -1.
func fdOf(c netpoll.Connection) int {
	if fc, ok := c.(netpoll.Conn); ok {
		return fc.Fd()
	}
	return -1
}

// guard marks the endpoint closed when its socket closes, for whatever
// reason. netpoll runs close callbacks latest first, and its own (which
// closes the descriptor and frees the buffers) was added first, so this runs
// while the descriptor is still this socket's: raw writes, which check closed
// under mu, never reach a reused descriptor number. Waiting for wmu lets a
// blocking Write of the writer goroutine (woken by the close) return before
// netpoll frees the buffers it writes from, and waiting for rmu does the same
// for a read by hand, after which none may start (inputGone).
func (e *Endpoint) guard() {
	_ = e.conn.AddCloseCallback(func(netpoll.Connection) error {
		e.mu.Lock()
		e.closed, e.fdGone = true, true
		e.mu.Unlock()
		e.wmu.Lock()
		e.wmu.Unlock() //nolint:staticcheck // an empty critical section: wait for the writer
		// And for a read by hand; none starts once inputGone is set
		// (byHandBegin), before rmu is let go of.
		e.rmu.Lock()
		e.mu.Lock()
		e.inputGone = true
		e.mu.Unlock()
		e.rmu.Unlock()
		return nil
	})
	if !e.conn.IsActive() {
		e.mu.Lock()
		e.closed = true
		e.mu.Unlock()
	}
}

// closedByGateway reports whether the gateway closed the socket, which may
// have freed its buffers. (A socket whose peer hung up stays readable until
// the gateway closes it.)
func (e *Endpoint) closedByGateway() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.closedByUs
}

// Conn returns the underlying netpoll connection.
func (e *Endpoint) Conn() netpoll.Connection { return e.conn }

// IsTLS reports whether the socket speaks TLS.
func (e *Endpoint) IsTLS() bool { return e.tls != nil }

// Send writes bytes the gateway built itself (an HTTP response, a close
// frame, an error event). It never blocks; see sendLocked.
func (e *Endpoint) Send(b []byte) error {
	if e.tls != nil {
		_, err := e.tls.Write(b) // each record goes through NBConn.Write
		return err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.sendLocked(b)
}

// Read hands everything readable on the socket to fn as a frames.Source,
// then releases it. fn must have flushed whatever it wrote from the source
// before it returns: plain sockets are forwarded without copying, so the bytes
// stay in the input buffer until then. For TLS, fn sees decrypted plaintext
// in a pooled scratch buffer, as many records at a time as fit in it, until
// crypto/tls would block: this also drains records crypto/tls decrypted
// earlier, for which no read event will ever come.
//
// One goroutine at a time may read a socket; for upstream sockets the
// Handle's read lock sees to that.
func (e *Endpoint) Read(fn func(src frames.Source) error) error { return e.ReadFrames(fn, nil) }

// ReadFrames is Read for a relay: sc, if not nil, is the scanner fn feeds.
// When netpoll's bytes end inside one of its frames and the handler runs on
// the socket's poller, the rest is read at once (readAhead). TLS reads do
// the same inside NBConn.Read, whatever sc.
func (e *Endpoint) ReadFrames(fn func(src frames.Source) error, sc *frames.Scanner) error {
	if e.tls == nil {
		r := e.conn.Reader()
		if sc != nil && e.ahead.Load() && !sc.MidFrame() {
			if done, err := e.gatherAhead(r, fn); done {
				return err
			}
		}
		err := fn(r)
		if rerr := r.Release(); err == nil {
			err = rerr
		}
		if err == nil && sc != nil && sc.MidFrame() && e.ahead.Load() {
			err = e.readAhead(fn)
		}
		return err
	}
	buf := tlsScratch.Get().(*[tlsReadChunk]byte)
	src := &e.plain // reads of one socket never overlap, and a field does not escape per call
	defer func() {
		// An idle endpoint must not point into the scratch buffer: once a
		// GC empties the pool, that reference alone would keep 64 KiB alive
		// per buffer for the session's life.
		src.Reset(nil)
		tlsScratch.Put(buf)
	}()
	b := buf[:]
	for {
		// crypto/tls returns at most one record per Read: gather records
		// while a whole one still fits (a shorter buffer would split a
		// record, which is correct but costs an extra round).
		n := 0
		var err error
		for n <= len(b)-tlsRecordMax {
			var m int
			m, err = e.tls.Read(b[n:])
			n += m
			if err != nil || m == 0 {
				break
			}
		}
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

// readAhead reads a plain socket past what netpoll buffered, straight from
// its descriptor, and hands fn what it gets. Read calls it from a handler
// running on the socket's own poller (HandlersInline) when netpoll's bytes
// ended inside a frame: the rest is almost always in the kernel already.
//
// netpoll reads a socket in pieces no larger than its buffer node (512 bytes
// with the gateway's -buffer-size), and on the pool that costs little: the
// poller keeps reading while a pool goroutine wakes up, and the handler finds
// several pieces. A handler that runs on the poller runs after each piece,
// and forwarded each as its own writev: two to thirteen per frame at 1 KiB
// to 6.5 KB, four times the CPU of the pool. Reading the rest here makes one
// read event one batch again.
//
// Only the poller goroutine handling this socket's event may do it: there
// netpoll cannot be reading the socket at the same time, netpoll's buffer is
// empty (fn consumed it), so the bytes come in order, and the descriptor
// stays open until the handler returns (netpoll closes it in a close
// callback, which it runs after the handler). What the kernel reports at the
// end (EAGAIN, EOF, an error) is left to the poller's next wait, which sees
// the same state.
func (e *Endpoint) readAhead(fn func(src frames.Source) error) error {
	if e.fd < 0 || e.closedByGateway() {
		return nil
	}
	buf := tlsScratch.Get().(*[tlsReadChunk]byte)
	src := &e.plain
	defer func() {
		src.Reset(nil) // an idle endpoint must not keep the scratch alive
		tlsScratch.Put(buf)
	}()
	// At most readAheadMax reads: a peer sending faster than they are
	// forwarded must not keep the poller from its other sockets; what is
	// left is reported at the poller's next wait (epoll is level-triggered).
	for range readAheadMax {
		n, err := readFD(e.fd, buf[:])
		if n <= 0 || err != nil {
			return nil
		}
		src.Reset(buf[:n])
		if err := fn(src); err != nil {
			return err
		}
		if n < len(buf) {
			return nil // the kernel had no more: the next event says when it has
		}
	}
	return nil
}

// readAheadMax bounds the reads of one readAhead (4 × 64 KiB).
const readAheadMax = 4

// gatherMax bounds what gatherAhead copies out of netpoll's buffer.
const gatherMax = 16 << 10

// gatherAhead is readAhead for a read that starts at a frame boundary and
// whose bytes end inside a frame: netpoll's bytes are copied into the
// scratch buffer and the rest read behind them, so that fn sees the whole
// batch at once and the other socket gets one writev (one TCP segment, one
// wake-up of its reader) rather than one for netpoll's piece and one for the
// rest. It returns false, having touched nothing, when netpoll's bytes end
// at a frame boundary (a small message, the latency case: nothing more is
// coming), are many, or the socket is closing; Read then forwards them from
// netpoll's buffer as usual.
func (e *Endpoint) gatherAhead(r netpoll.Reader, fn func(src frames.Source) error) (bool, error) {
	n0 := r.Len()
	if n0 == 0 || n0 > gatherMax || e.fd < 0 {
		return false, nil
	}
	b, err := r.Peek(n0)
	if err != nil || !endsMidFrame(b) || e.closedByGateway() {
		return false, nil
	}
	buf := tlsScratch.Get().(*[tlsReadChunk]byte)
	copy(buf[:], b)
	_ = r.Skip(n0)
	rerr := r.Release()
	n, _ := readFD(e.fd, buf[n0:])
	total := n0 + max(n, 0)
	src := &e.plain
	src.Reset(buf[:total])
	err = fn(src)
	src.Reset(nil) // an idle endpoint must not keep the scratch alive
	tlsScratch.Put(buf)
	if err == nil {
		err = rerr
	}
	if err == nil && total == len(buf) {
		err = e.readAhead(fn) // the kernel may hold more
	}
	return true, err
}

// endsMidFrame reports whether b, starting at a frame's first byte, ends
// inside a frame. A header the scanner will refuse counts as complete: the
// usual path reports it.
func endsMidFrame(b []byte) bool {
	for len(b) > 0 {
		h, hlen, ok, err := frames.ParseHeader(b)
		if err != nil {
			return false
		}
		if !ok || int64(len(b)-hlen) < h.Length {
			return true
		}
		b = b[hlen+int(h.Length):]
	}
	return false
}

// readFD is one non-blocking read(2) of fd, retried on EINTR; 0 and EAGAIN
// when nothing is there.
func readFD(fd int, p []byte) (int, error) {
	for {
		n, err := unix.Read(fd, p)
		if err == unix.EINTR {
			continue
		}
		return n, err
	}
}

// byHandBegin and byHandEnd bracket reads outside netpoll's OnRequest: the
// first reads of a new owner, which must drain what crypto/tls already
// decrypted (no read event will come for it). A hang-up meanwhile would make
// netpoll free the input buffer under the read, so the close guard waits for
// it (rmu); and a Close or Drop of this endpoint in between (which could run
// the close callbacks inline, in this goroutine, and wait for rmu) is carried
// out at byHandEnd.
//
// The guard's wait covers only a read that is under way when the close
// comes. A read that would start after the guard got past rmu (a socket
// that closed while a session was taking it: the peer's hang-up seen by its
// poller, a Drop by the session itself while it attached, a pool-runner
// Close that ran the close callbacks in this very goroutine) would find the
// buffer freed, or being freed by netpoll's own close callback, which runs
// right after the guard. So byHandBegin reports false, holding nothing,
// when the guard already passed: the caller must not read. It is race-free
// because both look at the guard's progress in the same order: rmu first,
// then mu. If byHandBegin holds rmu first, the guard waits for byHandEnd
// before it marks inputGone and before netpoll frees anything; if the guard
// got rmu first, it marked inputGone before letting byHandBegin have rmu.
// A socket that is closing but whose guard has not run yet is still read:
// its last bytes are drained (drainLocked runs in the close callbacks,
// before the guard).
func (e *Endpoint) byHandBegin() bool {
	e.rmu.Lock()
	e.mu.Lock()
	if e.inputGone {
		e.mu.Unlock()
		e.rmu.Unlock()
		return false
	}
	e.byHand = true
	e.mu.Unlock()
	return true
}

func (e *Endpoint) byHandEnd() {
	e.rmu.Unlock()
	e.mu.Lock()
	e.byHand = false
	pending := e.pending
	e.pending = 0
	e.mu.Unlock()
	switch pending {
	case closeLater:
		e.Close()
	case dropLater:
		e.Drop()
	}
}

// ByHand runs read, a read of the socket outside netpoll's OnRequest (the
// TLS listener's first request, read by the handshake's goroutine), so that
// a simultaneous hang-up cannot make netpoll free the input buffer under it:
// the close callbacks wait for it, and a Close or Drop meanwhile is carried
// out when it returns. read must only read: it runs with the socket's read
// guard held, which a close callback on the poller waits for. read does not
// run when the socket's close already got past that guard (its input buffer
// may be freed): there is nothing left to read.
func (e *Endpoint) ByHand(read func()) {
	if !e.byHandBegin() {
		return
	}
	defer e.byHandEnd()
	read()
}

// what a Close or Drop between byHandBegin and byHandEnd left to do
const (
	closeLater = 1
	dropLater  = 2
)

// lastWords writes b from inside the socket's own close callback, where
// netpoll has marked the socket closed but not yet closed its descriptor (its
// own callback, which does, runs last). Only a raw write that the kernel
// takes at once can go out now; the rest is dropped with the socket.
func (e *Endpoint) lastWords(b []byte) {
	e.mu.Lock()
	e.inLast = true
	if e.tls == nil {
		_ = e.sendLocked(b)
		e.inLast = false
		e.mu.Unlock()
		return
	}
	e.mu.Unlock()
	_, _ = e.tls.Write(b)
	e.mu.Lock()
	e.inLast = false
	e.mu.Unlock()
}

// Close closes the socket once what was written to it is sent (at once when
// nothing waits), unless it is closed already. netpoll runs close callbacks
// synchronously when it can, so this must not be called with mu held.
func (e *Endpoint) Close() {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return
	}
	if e.byHand {
		e.pending = max(e.pending, closeLater)
		e.mu.Unlock()
		return
	}
	if e.writing {
		e.closeAfter = true // the writer goroutine closes when done
		e.mu.Unlock()
		return
	}
	e.closed, e.closedByUs = true, true
	e.mu.Unlock()
	e.closeConn()
}

// closeConn closes the socket through netpoll, except under HandlersInline.
// There netpoll's Close can deadlock the poller: when the connection's read
// handler task is running on the poller (this very call may come from it, or
// from any other goroutine at that moment: a timer, the writer goroutine,
// the other side's handler on another poller), netpoll runs the close
// callbacks at the end of that task, still on the poller and still inside
// the poller's handling of this very descriptor, and freeing the
// descriptor's operator waits for that handling to finish
// (FDOperator.unused spins until the poller's done). Measured: the server
// suite under POLLER_HANDLERS=inline hung there. So the socket's reading
// side is shut down instead, which the kernel reports to the poller as a
// hang-up at its next wait: there netpoll closes the connection and runs its
// close callbacks as for a peer's hang-up, outside any handling of it. Only
// the reading side: the close callbacks may still have last words to write
// (answerHalfClose), and the FIN goes when netpoll closes the descriptor,
// as with its Close. Under mu, before netpoll's close callbacks start
// (fdGone), the descriptor is still this socket's.
func (e *Endpoint) closeConn() {
	if inlineHandlers.Load() && e.fd >= 0 {
		e.mu.Lock()
		dialed, gone := e.dialed, e.fdGone
		var err error
		if !dialed && !gone {
			err = unix.Shutdown(e.fd, unix.SHUT_RD)
		}
		e.mu.Unlock()
		// ENOTCONN: the peer reset it; the poller sees that hang-up too.
		if !dialed && (gone || err == nil || err == unix.ENOTCONN) {
			return
		}
	}
	// Here either handlers run on the pool (a Close that lands during a
	// handler task is carried out by that task's goroutine, not the
	// poller's), or the socket is dialed and its handler will never be
	// installed (Handle.Start checks closedByUs, set by our caller under mu
	// before this choice), or shutdown failed on a socket netpoll is about
	// to close anyway.
	_ = e.conn.Close()
}

// handlerBegin and handlerEnd bracket the socket's read handler; onPoller
// says whether this run surely is on the socket's own poller (see
// readAhead).
func (e *Endpoint) handlerBegin(onPoller bool) {
	if onPoller {
		e.ahead.Store(true)
		if e.nb != nil {
			e.nb.aheadReads = 0
			e.nb.readAhead.Store(true)
		}
	}
}

func (e *Endpoint) handlerEnd() {
	if e.ahead.Load() {
		e.ahead.Store(false)
		if e.nb != nil {
			e.nb.readAhead.Store(false)
		}
	}
}

// Drop closes the socket at once, discarding whatever still waits to be
// sent, and fails a blocked write of the writer goroutine.
func (e *Endpoint) Drop() {
	e.mu.Lock()
	if e.byHand {
		e.pending = dropLater
		e.mu.Unlock()
		return
	}
	already := e.closedByUs
	e.closed, e.closedByUs = true, true
	e.mu.Unlock()
	if !already {
		e.closeConn()
	}
}

// Backlog returns the bytes written to the socket that the kernel has not
// taken yet, and since when (unix nanoseconds) they have been waiting; 0 and
// 0 when nothing waits. It takes no locks.
func (e *Endpoint) Backlog() (bytes int, since int64) {
	return int(e.backlogLen.Load()), e.stalledSince.Load()
}

// recoverHandler ends a read handler that panicked; it must be deferred by
// the handler itself. A panic must not leave a handler under HandlersInline:
// netpoll's task would Close the socket from the poller, inside the poller's
// own handling of it, and spin there (the package doc), and a panic on the poller
// goroutine ends the process. So it is logged with its stack, the socket's
// buffered input is discarded (netpoll calls a handler again at once while
// input remains, and the same bytes would panic again) and the socket is
// dropped through closeConn's hang-up.
func (e *Endpoint) recoverHandler(which string) {
	r := recover()
	if r == nil {
		return
	}
	slog.Error("read handler panicked; dropping the connection", "side", which,
		"panic", fmt.Sprint(r), "stack", string(debug.Stack()))
	e.DiscardInput()
	e.Drop()
}

// DiscardInput drops what netpoll has buffered from the socket. Only a read
// handler, or a reader that holds the socket's read lock, may call it.
func (e *Endpoint) DiscardInput() {
	r := e.conn.Reader()
	_ = r.Skip(r.Len())
	_ = r.Release()
}
