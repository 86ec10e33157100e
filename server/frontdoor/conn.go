package frontdoor

// A client connection at the front door, from accept until it relays or is
// answered: its phase, its request head, its deadline, and the hand-offs
// between netpoll's handler and the goroutines that may hold the request
// (the TLS handshake, the off-loop step, an API answer).

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cloudwego/netpoll"
	"github.com/valyala/bytebufferpool"
	"golang.org/x/sys/unix"

	"rtgate/frames"
	"rtgate/poller"
)

// ctxKey is where a connection's netpoll context keeps its *Conn:
// poller's InlineKey, so that the inline runner asks the Conn.
type ctxKey = poller.InlineKey

// connPhase is where a client connection is; OnRequest reads it to know
// what the bytes that arrived are, and only setPhase moves it:
//
//	phase  what arrives                        next
//	tls    the ClientHello, then the handshake http (handshake done), done (refused)
//	http   the request head                    body (API request), relay (101), done (answered or refused)
//	body   an API request's body               done (answered)
//	relay  WebSocket frames for the session    (until the socket closes)
//	done   anything: dropped                   (until the socket closes)
type connPhase uint8

const (
	phaseTLS   connPhase = iota // collectTLS, tlsHandshake
	phaseHTTP                   // readHead, then handle
	phaseBody                   // readBody, then serveAPI
	phaseRelay                  // poller.Session
	phaseDone
)

// setPhase moves the connection to phase p. Callers are the connection's
// handler or a goroutine that holds the request (the TLS handshake, the
// off-loop step, an API request's answer) while the handler may still read
// the phase: hence an atomic.
func (c *Conn) setPhase(p connPhase) { c.phase.Store(uint32(p)) }

// Conn is the front door's state for one accepted connection. It is
// allocated by the Handler (NewConn), inside the handler's own state for
// the connection, which owner points to.
type Conn struct {
	door     *Door
	owner    any // what NewConn allocated this Conn in
	conn     netpoll.Connection
	ep       *poller.Endpoint
	phase    atomic.Uint32              // a connPhase: setPhase
	head     *bytebufferpool.ByteBuffer // request bytes so far, during phaseHTTP
	sess     *poller.Session            // set under mu: onClose reads it from another goroutine
	accepted time.Time

	// TLS listeners only (collectTLS): the handshake's connection, whether
	// its goroutine started, and the lock that keeps OnRequest and the
	// goroutine's hand-off from reading at the same time.
	hs        *handshakeConn
	hsStarted bool
	readMu    sync.Mutex

	mu    sync.Mutex
	timer *time.Timer // handshake deadline; nil once upgraded
	left  bool        // the handshake count was given back (Door.leave)

	wait pendingStep // the off-loop step of the decision in flight (OffLoopStep)
	api  *apiRequest // an API request's body being collected (readBody)

	relaying atomic.Bool // phase is phaseRelay, for netpoll's runner (poller.Inliner)
	offLoop  atomic.Bool // a goroutine other than netpoll's handler is handling the request (StartRelay)

	// The plain listener's endpoint lives here, in the connection's one
	// allocation (NewConn's), rather than in one of its own; only a
	// pointer to it is handed out (ep), and a Conn is never copied.
	plainEP poller.Endpoint // ep on a plain listener
}

// A Conn is its own netpoll context, which holds nothing but the
// Conn under ctxKey: context.WithValue would be one more allocation
// per connection (48 B). It is never cancelled and has no deadline.

func (c *Conn) Deadline() (time.Time, bool) { return time.Time{}, false }
func (c *Conn) Done() <-chan struct{}       { return nil }
func (c *Conn) Err() error                  { return nil }

var _ context.Context = (*Conn)(nil)

// Value answers ctxKey with the Conn.
func (c *Conn) Value(key any) any {
	if key == (ctxKey{}) {
		return c
	}
	return nil
}

// readHead collects the request head and acts on it once complete.
func (c *Conn) readHead() error {
	if c.head == nil {
		c.head = bytebufferpool.Get()
	}
	var err error
	read := func() {
		if h := c.door.testHooks(); h != nil && h.HeadRead != nil {
			h.HeadRead(c.offLoop.Load())
		}
		err = c.ep.Read(func(src frames.Source) error {
			p, err := src.Next(src.Len())
			c.head.B = append(c.head.B, p...)
			return err
		})
	}
	if c.offLoop.Load() {
		// The TLS goroutine, outside netpoll's handler: a hang-up now
		// would free the buffer under the read.
		c.ep.ByHand(read)
	} else {
		read()
	}
	if err != nil && !errors.Is(err, net.ErrClosed) {
		return c.conn.Close()
	}
	if c.hs == nil && tlsRecordStart(c.head.B) {
		c.refuseTLS() // a wss:// client on the plain listener: answer now, not at the timeout
		return nil
	}
	end := headEnd(c.head.B)
	if end < 0 {
		if len(c.head.B) > c.door.cfg.MaxHeaderBytes {
			c.Refuse(headersTooLarge())
		}
		return nil
	}
	if end > c.door.cfg.MaxHeaderBytes {
		c.Refuse(headersTooLarge())
		return nil
	}
	head, rest := c.head.B[:end], c.head.B[end:]
	c.route(head, rest)
	return nil
}

// headersTooLarge refuses a head over MAX_HEADER_BYTES.
func headersTooLarge() *Refusal {
	return &Refusal{Status: http.StatusRequestHeaderFieldsTooLarge, Type: "invalid_request_error",
		Code: "headers_too_large", Message: "request head too large"}
}

// route is the front door's mux: a whole request head is parsed and handed
// on, an API request once its body is collected (startBody), any other to
// the Handler at once.
func (c *Conn) route(head, rest []byte) {
	req, herr := parseRequest(head)
	if herr != nil {
		c.Refuse(herr)
		return
	}
	if endpoint, limit := c.door.h.Route(req); endpoint != "" {
		c.startBody(req, endpoint, limit, rest)
		return
	}
	c.door.h.HandleRequest(c, req, rest)
}

// refuse answers the request with an HTTP error and closes the connection.
func (c *Conn) Refuse(e *Refusal) {
	c.setPhase(phaseDone)
	_ = c.ep.Send(e.response())
	c.ep.Close()
}

// answered marks the connection's request as answered (a session opened,
// an API request's body complete, or the socket closed): the deadline
// timer (HANDSHAKE_TIMEOUT_SECS) stops and lets go, since a long-lived session
// should not carry it, and the front door's count of connections awaiting
// their answer (Door.refuseAtAccept) is given back, once.
func (c *Conn) Answered() {
	c.mu.Lock()
	if c.timer != nil {
		c.timer.Stop()
		c.timer = nil
	}
	left := c.left
	c.left = true
	c.mu.Unlock()
	if !left {
		c.door.leave()
	}
}

// StartRelay makes the connection a session's client side. Under mu, so
// that onClose, which may run on another goroutine (the TLS handshake's
// hand-off runs outside netpoll's handler), sees either no session or this
// one; a client gone before this sees its 101 fail.
//
// A request handled off netpoll's handlers (the TLS goroutine's first
// request, a Redis admission's verdict) leaves the connection on the pool
// until that goroutine lets it go (goInline): an inline handler would wait
// on the poller for the locks that goroutine holds, stalling every socket of
// that poller meanwhile.
func (c *Conn) StartRelay(sess *poller.Session) {
	c.mu.Lock()
	c.sess = sess
	c.setPhase(phaseRelay)
	c.mu.Unlock()
	if !c.offLoop.Load() {
		c.relaying.Store(true)
	}
}

// goInline ends a goroutine's handling of the connection outside netpoll's
// handlers (see StartRelay), once it holds none of the connection's locks:
// a session it opened may now run its handlers on the poller.
func (c *Conn) goInline() {
	c.offLoop.Store(false)
	c.mu.Lock()
	relay := c.sess != nil
	c.mu.Unlock()
	if relay {
		c.relaying.Store(true)
	}
}

// InlineEndpoint implements poller.Inliner: once relaying, the connection's
// handler (Session.ClientReadable) never blocks and may run on the poller;
// before, the HTTP phase may wait (auth, admission, API bodies).
// A refused connection (nil) closes itself in its handler, which netpoll
// cannot do on the poller. c.ep is set before relaying is.
func (c *Conn) InlineEndpoint() *poller.Endpoint {
	if c == nil || !c.relaying.Load() {
		return nil
	}
	return c.ep
}

func (c *Conn) onClose(netpoll.Connection) error {
	c.door.connsMu.Lock()
	delete(c.door.conns, c)
	c.door.connsMu.Unlock()
	c.Answered()
	if c.hs != nil {
		c.hs.shut()
	}
	c.door.open.Add(-1)
	if c.wait.clientGone() {
		return nil // a cluster admission is out; its goroutine tells the session
	}
	c.mu.Lock()
	sess := c.sess
	c.mu.Unlock()
	if sess != nil {
		c.door.h.ClientLeft(sess)
	}
	return nil
}

// handshakeExpired is the handshake timer: the connection did not finish
// its handshake in HandshakeTimeout. A timer that fired just as the request
// was answered (Stop cannot stop a running timer function) finds the timer
// gone and leaves the new session alone; otherwise the connection is hung
// up, under c.mu so that it is still open (onClose waits for c.mu).
func (c *Conn) handshakeExpired() {
	if h := c.door.testHooks(); h != nil && h.HandshakeTimer != nil {
		h.HandshakeTimer()
		if h.HandshakeTimerDone != nil {
			defer h.HandshakeTimerDone()
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.timer == nil {
		return // answered or closed meanwhile
	}
	hangUp(c.conn)
}

// Ending client connections without netpoll's Close.
//
// Under inline handlers a netpoll Close that lands while the connection's
// handler task runs on its poller spins that poller forever (package poller's doc,
// the inline invariant). A connection that may be relaying is therefore
// ended by a hang-up: shutdown(2) on its descriptor, which the poller
// reports at its next wait and answers by closing the connection itself,
// outside any task. Every accepted connection has its read handler from
// accept, so the hang-up always reaches someone who closes it.
//
// A descriptor number is reused once netpoll closes it, which it does after
// the connection's close callbacks; onClose takes c.mu (through answered)
// and the front door's connsMu, so a hang-up made under either while the
// connection is known open reaches this connection and no other.

// hangUp shuts conn down both ways: the poller closes it. Both ways, not
// only the reading side as the relay's closes do (poller's closeConn):
// netpoll closes a hung-up socket only on an event that reads nothing, and
// a client that keeps sending would keep it open; the FIN makes the client
// stop. Nothing more is written to a connection ended this way.
func hangUp(conn netpoll.Connection) {
	if fc, ok := conn.(netpoll.Conn); ok {
		_ = unix.Shutdown(fc.Fd(), unix.SHUT_RDWR)
	}
}

// recoverRequest ends a read handler of an accepted connection that
// panicked; onRequest defers it. The panic is logged with its stack, the
// connection's buffered input discarded (netpoll calls the handler again at
// once while input remains) and the connection hung up: a panic that left
// the handler would make netpoll Close the socket from the poller (a spin
// under inline handlers) or, on the poller goroutine, end the process.
func recoverRequest(log *slog.Logger, conn netpoll.Connection) {
	r := recover()
	if r == nil {
		return
	}
	log.Error("request handler panicked; dropping the connection", "remote", conn.RemoteAddr().String(),
		"panic", fmt.Sprint(r), "stack", string(debug.Stack()))
	rd := conn.Reader()
	_ = rd.Skip(rd.Len())
	_ = rd.Release()
	hangUp(conn) // inside the handler: netpoll closes only after it returns
}

// OffLoopStep finishes the request in a goroutine of its own, for a
// Handler whose decision needs I/O (a call owner or the key's limits in
// Redis): decide runs there and returns finish, which then runs with the
// connection's handler held off, given what the client sent behind its
// head meanwhile; it refuses or opens, exactly as the handler would have.
// Until then the connection's handler only collects what the client sends
// (pendingStep).
func (c *Conn) OffLoopStep(decide func() (finish func(rest []byte))) {
	w := &c.wait
	w.pending.Store(true)
	go func() {
		finish := decide()
		c.offLoop.Store(true)
		defer c.goInline() // after the unlock below (StartRelay)
		w.mu.Lock()
		defer w.mu.Unlock()
		finish(c.head.B[headEnd(c.head.B):])
		w.pending.Store(false)
		if w.gone.Load() && w.told.CompareAndSwap(false, true) && c.sess != nil {
			c.door.h.ClientLeft(c.sess) // the socket closed while the step was out
		}
	}()
}

// pendingStep is the connection's side of an off-loop step:
//
//	state       event                          next
//	http        decision needs I/O             pending (goroutine started)
//	pending     client bytes                   pending (appended behind head)
//	pending     verdict                        done (refused) or relay (opened)
//
// netpoll's close callback does not wait for that goroutine, so while a step
// is out it leaves telling the Handler to the goroutine (clientGone).
type pendingStep struct {
	pending atomic.Bool // set by the handler, cleared by the goroutine
	mu      sync.Mutex  // held by the goroutine while it finishes the request
	gone    atomic.Bool // the client's socket closed
	told    atomic.Bool // the Handler was told so
}

// clientGone is the close callback's side: it reports whether the step's
// goroutine tells the Handler instead (or already did).
func (w *pendingStep) clientGone() bool {
	w.gone.Store(true)
	if w.pending.Load() {
		return true
	}
	return !w.told.CompareAndSwap(false, true)
}

// bufferWhilePending collects what the client sends while its step is out,
// and reports whether it did (false: the verdict is in, carry on).
func (c *Conn) bufferWhilePending() bool {
	c.wait.mu.Lock()
	defer c.wait.mu.Unlock()
	if !c.wait.pending.Load() {
		return false
	}
	err := c.ep.Read(func(src frames.Source) error {
		p, err := src.Next(src.Len())
		c.head.B = append(c.head.B, p...)
		return err
	})
	if (err != nil && !errors.Is(err, net.ErrClosed)) || len(c.head.B) > c.door.cfg.MaxHeaderBytes+c.door.cfg.MaxPending {
		_ = c.conn.Close()
	}
	return true
}

// SetOwner keeps what NewConn allocated c in; Owner gives it back, to the
// Handler that gets c.
func (c *Conn) SetOwner(owner any) { c.owner = owner }

// Owner is what SetOwner kept.
func (c *Conn) Owner() any { return c.owner }

// Endpoint is the connection's side of the socket, once its TLS handshake
// (if any) is done: what the Handler answers on and a session relays on.
func (c *Conn) Endpoint() *poller.Endpoint { return c.ep }

// Switch sends the upgrade's answer (the 101) to a connection that
// StartRelay made a session's client side, hands rest (what the client
// sent behind its head) to the session, and lets the request's bytes go.
// An error means the client is gone before its 101.
func (c *Conn) Switch(response, rest []byte) error {
	if err := c.ep.Send(response); err != nil {
		return err
	}
	if len(rest) > 0 {
		c.sess.ClientBytes(rest)
	}
	bytebufferpool.Put(c.head)
	c.head = nil
	return nil
}

// waitReads returns once no handler is moving the connection's bytes (a TLS
// listener's: the handshake's read lock), for a test's hook.
func (c *Conn) waitReads() {
	c.readMu.Lock()
	c.readMu.Unlock() //nolint:staticcheck // only waits for the holder
}

// hasSession reports whether StartRelay has made the connection a session's
// client side.
func (c *Conn) hasSession() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.sess != nil
}
