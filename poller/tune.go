package poller

import (
	"context"
	"fmt"
	"runtime"
	"sync/atomic"

	"github.com/bytedance/gopkg/util/gopool"
	"github.com/cloudwego/netpoll"
)

// Tuning is netpoll's process-wide configuration.
type Tuning struct {
	// Pollers is the number of epoll loops; 0 means one per core
	// (GOMAXPROCS) with inline handlers, else netpoll's default
	// (GOMAXPROCS/20 + 1).
	Pollers int
	// BufferSize is each connection's initial input buffer. netpoll's
	// default (8 KiB) makes an idle connection no cheaper than a goroutine
	// with a 4 KiB buffer; the buffer grows on demand for large frames.
	BufferSize int
	// NodeSize is the smallest buffer node netpoll allocates (its
	// LinkBufferCap, 4 KiB by default). Every connection keeps one node on
	// its output side after its first write, so this is per-connection
	// memory too; bigger writes get bigger nodes regardless.
	NodeSize int
	// Handlers says where read handlers run; see Handlers.
	Handlers Handlers
}

// Handlers is where netpoll runs a connection's read handler (OnRequest).
type Handlers int

const (
	// HandlersPool hands every read event from the poller to a goroutine
	// of a pool (netpoll's default): a scheduling hand-off and a task
	// closure per wake-up.
	HandlersPool Handlers = iota
	// HandlersInline runs the handler on the poller goroutine itself when
	// the connection says its handler cannot block (see InlineKey), and on
	// the pool otherwise. The relay's handlers never block (writes are
	// non-blocking, see Endpoint.sendLocked; locks are held only for non-blocking
	// work), so relayed sockets, both sides, run inline; an accepted
	// socket still in its HTTP phase (auth, admission checks, API bodies)
	// runs on the pool.
	//
	// It saves the hand-off of every read event to another thread (a
	// futex wake and a context switch per direction), which is most of
	// the latency a relayed message gains. Since a handler on the poller
	// runs after each of netpoll's reads, which are no larger than a
	// buffer node, a frame that does not fit is read to its end from the
	// socket by the handler itself (Endpoint.readAhead), so that one read
	// event stays one write to the other socket. What it gives up: one
	// poller goroutine does all of its sockets' work, so a process with
	// one poller relays on one core (see Tuning.Pollers).
	HandlersInline
)

// DefaultHandlers is what the gateway runs with when nothing is set:
// inline, with one poller per core (Tune). It measured faster on the 2-core
// dev box, same binary, interleaved (docs/benchmarks/peers.md: added rtt
// p50 about 40 µs lower, CPU per round trip 15-30 % lower on the plain rows,
// voice 10-18 % cheaper per core; slower only on saturated TLS echo of
// audio-sized frames). It became the default once the paths that broke the
// inline invariant (the package doc) were closed; POLLER_HANDLERS=pool is the
// goroutine pool.
const DefaultHandlers = HandlersInline

// ParseHandlers reads "pool" or "inline".
func ParseHandlers(s string) (Handlers, error) {
	switch s {
	case "pool":
		return HandlersPool, nil
	case "inline":
		return HandlersInline, nil
	}
	return 0, fmt.Errorf("handlers %q: want pool or inline", s)
}

func (h Handlers) String() string {
	if h == HandlersInline {
		return "inline"
	}
	return "pool"
}

// InlineKey is the key, in a connection's netpoll context (the one its
// OnPrepare returns), of a value that says whether the connection's read
// handler may run on the poller right now: an Inliner. A connection whose
// context has none (upstream sockets, whose handler is always a Handle's)
// runs inline under HandlersInline.
type InlineKey struct{}

// Inliner says whether a connection's read handler cannot block at the
// moment: it returns the connection's Endpoint if so, nil if not. It is asked
// before each handler task, from the poller goroutine, so it must be cheap
// and safe to call concurrently (an atomic load).
type Inliner interface{ InlineEndpoint() *Endpoint }

// inlineRunner is netpoll's Runner for HandlersInline. A task it runs on the
// poller marks its endpoint (onPoller): only there may the handler read the
// socket past netpoll's buffer (see Endpoint.Read), since only there can the
// poller not be reading the same socket at the same time.
func inlineRunner(ctx context.Context, f func()) {
	if ctx != nil {
		if in, ok := ctx.Value(InlineKey{}).(Inliner); ok {
			e := in.InlineEndpoint()
			if e == nil {
				gopool.CtxGo(ctx, f)
				return
			}
			e.onPoller.Store(true)
			defer e.onPoller.Store(false)
		}
	}
	f()
}

// inlineHandlers records Tune's choice for closeConn. Process-wide, as
// netpoll's runner it mirrors is: set once at start-up.
var inlineHandlers atomic.Bool

// Tune applies t. Call it once at start-up, before any connection exists.
func Tune(t Tuning) error {
	if t.NodeSize > 0 {
		netpoll.LinkBufferCap = t.NodeSize
	}
	cfg := netpoll.Config{PollerNum: t.Pollers, BufferSize: t.BufferSize}
	if t.Handlers == HandlersInline && cfg.PollerNum == 0 {
		// Inline, a poller does its sockets' work itself, so netpoll's own
		// default (GOMAXPROCS/20 + 1 pollers, sized for pollers that only
		// dispatch) would relay a 64-core host's sessions on 4 cores. One
		// event loop per core is nginx's worker_processes auto and
		// HAProxy's nbthread default.
		cfg.PollerNum = runtime.GOMAXPROCS(0)
	}
	if t.Handlers == HandlersInline {
		cfg.Runner = inlineRunner
		inlineHandlers.Store(true)
	}
	if err := netpoll.Configure(cfg); err != nil {
		return fmt.Errorf("configuring netpoll: %w", err)
	}
	return nil
}
