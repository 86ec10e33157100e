package poller

import (
	"context"
	"fmt"

	"github.com/cloudwego/netpoll"
)

// Tuning is netpoll's process-wide configuration.
type Tuning struct {
	// Pollers is the number of epoll loops; 0 keeps netpoll's default
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
	// InlineHandlers runs read handlers on the poller goroutine itself
	// instead of handing each read event to a goroutine pool (netpoll's
	// default; measured at 8.5 % of CPU on the TLS relay path, plus a task
	// per wake-up). Safe only while no handler can block: the relay's
	// writes never do, but the client listener's TLS handshake still runs
	// blocking in OnRequest, so this is for measurement (BenchmarkForward
	// with POLLER_INLINE_HANDLERS=1), not yet for the gateway.
	InlineHandlers bool
}

// Tune applies t. Call it once at start-up, before any connection exists.
func Tune(t Tuning) error {
	if t.NodeSize > 0 {
		netpoll.LinkBufferCap = t.NodeSize
	}
	cfg := netpoll.Config{PollerNum: t.Pollers, BufferSize: t.BufferSize}
	if t.InlineHandlers {
		cfg.Runner = func(_ context.Context, f func()) { f() }
	}
	if err := netpoll.Configure(cfg); err != nil {
		return fmt.Errorf("configuring netpoll: %w", err)
	}
	return nil
}
