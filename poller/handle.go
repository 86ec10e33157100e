package poller

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/cloudwego/netpoll"
)

// Owner receives a dialed upstream socket's events: bytes to read, and the
// socket going away. UpstreamReadable always runs under the Handle's read
// lock; UpstreamGone runs without it (netpoll may run close callbacks inside
// a Close called from a read).
type Owner interface {
	UpstreamReadable()
	UpstreamGone()
}

// Handle is a dialed upstream socket with exactly one owner at every moment:
// the warm pool while the socket waits for a client, then the session it is
// handed to. Its netpoll callbacks are installed once and forward to the
// current owner.
//
// One read lock serves every owner: the OnRequest callback, the first reads of
// a new owner (the bytes that came with the 101, then whatever crypto/tls
// already decrypted) and the hand-over itself all hold it, so no read of the
// old owner can interleave with the new owner's first frames, and no byte is
// read by an owner that has already handed the socket on.
//
// Swapping the owner rather than the callbacks matters: netpoll's processing
// task keeps calling the OnRequest it started with while input remains, so a
// callback replaced mid-task would still run, and one that returned without
// consuming would spin.
type Handle struct {
	ep *Endpoint

	readMu sync.Mutex
	owner  atomic.Pointer[ownerBox]

	watchOnce sync.Once
}

// ownerBox lets an interface value live in an atomic.Pointer.
type ownerBox struct{ o Owner }

// NewHandle wraps an upgraded upstream endpoint. Nothing is installed until
// Start.
func NewHandle(ep *Endpoint) *Handle { return &Handle{ep: ep} }

// Endpoint returns the socket.
func (h *Handle) Endpoint() *Endpoint { return h.ep }

// Owner returns the current owner.
func (h *Handle) Owner() Owner {
	if b := h.owner.Load(); b != nil {
		return b.o
	}
	return nil
}

func (h *Handle) setOwner(o Owner) { h.owner.Store(&ownerBox{o}) }

// watchClose installs the close callback that tells the owner the socket is
// gone. It is in place before anything that could close the socket: netpoll
// runs a connection's close callbacks once, so one added after the close
// never runs.
func (h *Handle) watchClose() {
	h.watchOnce.Do(func() {
		_ = h.ep.conn.AddCloseCallback(func(netpoll.Connection) error {
			if o := h.Owner(); o != nil {
				o.UpstreamGone()
			}
			return nil
		})
	})
}

// Start makes o the first owner and hands the socket to the reactor. first,
// if not nil, runs before any read handler can: it feeds o the bytes that
// came with the 101 response. Then the socket is read once by hand (netpoll
// announces only bytes in its own buffer, not records crypto/tls already
// holds), all under the read lock, and only then, with the lock released, is
// the read handler installed.
//
// Installing it last is what makes netpoll's inline runner (HandlersInline)
// safe: SetOnRequest runs the handler at once when bytes are buffered, in
// this very goroutine with that runner, and the handler takes the read lock.
// Nothing is missed in between: netpoll announces a read only when its
// buffer goes from empty to non-empty, and SetOnRequest stores the handler
// before it looks at the buffer, so bytes that arrive after the read by hand
// are seen either by SetOnRequest's look or by the event that stored them.
// If the socket closed before, o hears of it.
func (h *Handle) Start(o Owner, first func()) {
	h.readMu.Lock()
	h.setOwner(o)
	h.watchClose()
	if first != nil {
		first()
	}
	conn := h.ep.conn
	// first may have closed it, and its buffers with it; a hang-up may
	// have freed them (byHandBegin says so).
	if !h.ep.closedByGateway() && h.ep.byHandBegin() {
		o.UpstreamReadable()
		h.ep.byHandEnd()
	}
	h.readMu.Unlock()
	readEnded(o)
	// A close of the gateway's own before this point chose netpoll's Close
	// (closeConn, under the endpoint's lock): no handler may be installed
	// for that Close to land in. One after it is a shutdown.
	h.ep.mu.Lock()
	if h.ep.closedByUs {
		h.ep.mu.Unlock()
		return
	}
	h.ep.dialed = false
	h.ep.mu.Unlock()
	// Under HandlersInline the handler runs on the poller, except when
	// SetOnRequest itself runs it here, in this goroutine, for bytes
	// already buffered: then the poller may be reading the socket at the
	// same time (see Endpoint.Read).
	var installing atomic.Bool
	installing.Store(true)
	// From here a close is a shutdown under HandlersInline (closeConn): one
	// that lands before the handler is installed makes netpoll mark the
	// connection inactive, which the IsActive check below answers with a
	// Close; one after reaches the handler.
	_ = conn.SetOnRequest(func(context.Context, netpoll.Connection) error {
		h.readMu.Lock()
		o := h.Owner()
		h.ep.handlerBegin(inlineHandlers.Load() && !installing.Load())
		func() {
			defer h.ep.recoverHandler("upstream")
			o.UpstreamReadable()
		}()
		h.ep.handlerEnd()
		h.readMu.Unlock()
		readEnded(o)
		return nil
	})
	installing.Store(false)
	if !conn.IsActive() {
		// The peer hung up before the callbacks were in place. netpoll
		// runs close callbacks for such a connection only once the user
		// closes it, and then only after OnRequest has consumed what the
		// peer sent before hanging up, so closing here keeps that order
		// (a session.created sent just before a close still arrives
		// first). Owners treat a repeated UpstreamGone as a no-op.
		//
		// This Close keeps the inline invariant (the package doc): the poller saw
		// the hang-up while no handler was installed, so it detached the
		// socket and runs no handler task for it, and this goroutine is
		// not a poller.
		_ = conn.Close()
	}
}

// TryHandOver makes o the owner, unless a read is in progress or the socket
// is closing (a waiting socket that is being read is receiving what it should
// not, or its close: it is not worth handing out). On success it returns with
// the read lock held: the new owner forwards what the old one held, then
// calls FinishHandOver, which reads the socket once for it and releases the
// lock. It never blocks, so it may run under the pool's lock.
func (h *Handle) TryHandOver(o Owner) bool {
	if !h.readMu.TryLock() {
		return false
	}
	if !h.ep.conn.IsActive() {
		h.readMu.Unlock()
		return false
	}
	h.setOwner(o)
	return true
}

// FinishHandOver completes TryHandOver: the new owner reads whatever arrived
// or crypto/tls decrypted while the socket waited, then events flow to it.
//
// The read lock TryHandOver took does not keep the socket open: between the
// two, a new owner may drop the socket itself (a session attaching it finds
// a close held in the frames handed over, and resumes), its peer may hang
// up, and netpoll may run the close callbacks to their end, its own freeing
// the input buffer included. Then there is nothing to read, and the read by
// hand must not start (byHandBegin); the owner hears of the close from the
// close callback, or from its own check of the socket (Session.adopt).
func (h *Handle) FinishHandOver() {
	o := h.Owner()
	if h.ep.byHandBegin() {
		o.UpstreamReadable()
		h.ep.byHandEnd()
	}
	h.readMu.Unlock()
	readEnded(o)
}

// readEnder is an Owner that wants to hear when a read of its socket released
// the read lock: a close callback that ran during the read acts then (see
// upLink.UpstreamGone).
type readEnder interface{ readEnded() }

func readEnded(o Owner) {
	if re, ok := o.(readEnder); ok {
		re.readEnded()
	}
}
