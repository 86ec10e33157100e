package poller

import (
	"context"
	"sync"

	"github.com/cloudwego/netpoll"
)

// Owner receives a dialed upstream socket's events: bytes to read, and the
// socket going away.
type Owner interface {
	UpstreamReadable()
	UpstreamGone()
}

// Handle is a dialed upstream socket whose netpoll callbacks are installed
// once and forward to whoever owns the socket now: the warm pool while the
// socket waits for a client, then the session it is handed to.
//
// Swapping the owner rather than the callbacks matters: netpoll's processing
// task keeps calling the OnRequest it started with while input remains, so a
// callback replaced mid-task would still run, and one that returned without
// consuming would spin.
type Handle struct {
	ep *Endpoint

	mu    sync.Mutex
	owner Owner

	watchOnce sync.Once
}

// NewHandle wraps an upgraded upstream endpoint. Nothing is installed until
// Start.
func NewHandle(ep *Endpoint) *Handle { return &Handle{ep: ep} }

// Endpoint returns the socket.
func (h *Handle) Endpoint() *Endpoint { return h.ep }

// WatchClose installs the close callback that tells the owner the socket is
// gone. It must be in place before anything that could close the socket:
// netpoll runs a connection's close callbacks once, so one added after the
// close never runs.
func (h *Handle) WatchClose() {
	h.watchOnce.Do(func() {
		_ = h.ep.conn.AddCloseCallback(func(netpoll.Connection) error {
			h.Owner().UpstreamGone()
			return nil
		})
	})
}

// Start makes o the owner and hands the socket to the reactor. If the socket
// closed before, o hears of it at once.
func (h *Handle) Start(o Owner) {
	h.SetOwner(o)
	h.WatchClose()
	conn := h.ep.conn
	_ = conn.SetOnRequest(func(context.Context, netpoll.Connection) error {
		h.Owner().UpstreamReadable()
		return nil
	})
	if !conn.IsActive() {
		// The peer hung up before the callbacks were in place. netpoll
		// runs close callbacks for such a connection only once the user
		// closes it, and then only after OnRequest has consumed what the
		// peer sent before hanging up, so closing here keeps that order
		// (a session.created sent just before a close still arrives
		// first). Owners treat a repeated UpstreamGone as a no-op.
		_ = conn.Close()
	}
}

// SetOwner hands the socket's events to o from now on.
func (h *Handle) SetOwner(o Owner) {
	h.mu.Lock()
	h.owner = o
	h.mu.Unlock()
}

// Owner returns the current owner.
func (h *Handle) Owner() Owner {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.owner
}
