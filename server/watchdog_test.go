package server

import (
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"rtgate/poller"
	"rtgate/server/session"
)

// TestWatchdogWalksIdleSessionsOncePerLimitsInterval: with no socket
// backlogged anywhere, the watchdog walks the sessions only for their
// duration and idle limits, once every limitsEvery, not at every tick (a
// walk of every session every 100 ms cost 0.53 cores for 100,000 idle
// sessions).
func TestWatchdogWalksIdleSessionsOncePerLimitsInterval(t *testing.T) {
	// Sockets of earlier tests' gateways may still be draining a backlog.
	waitFor(t, "no socket of this test process backlogged", func() bool { return poller.Backlogged() == 0 })
	walks := 0
	var b memoryBudget
	b.init(Settings{}, prometheus.NewRegistry())
	w := &watchdog{live: func() []session.Live { walks++; return nil }, budget: &b,
		log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	start := time.Unix(1_000_000, 0)
	for i := range 50 { // five seconds of 100 ms ticks
		w.tick(start.Add(time.Duration(i) * watchdogTick))
	}
	if walks != 5 {
		t.Fatalf("%d walks in 5 s of ticks with nothing backlogged, want 5 (one a second)", walks)
	}
}
