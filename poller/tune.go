package poller

import (
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
}

// Tune applies t. Call it once at start-up, before any connection exists.
func Tune(t Tuning) error {
	if t.NodeSize > 0 {
		netpoll.LinkBufferCap = t.NodeSize
	}
	if err := netpoll.Configure(netpoll.Config{PollerNum: t.Pollers, BufferSize: t.BufferSize}); err != nil {
		return fmt.Errorf("configuring netpoll: %w", err)
	}
	return nil
}
