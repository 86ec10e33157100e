package poller_test

import (
	"bytes"
	"net"
	"runtime"
	"testing"
	"time"

	"github.com/gobwas/ws"

	"rtgate/frames"
)

// BenchmarkStalledClients measures what clients that stop reading cost now
// that writes never block: each stalled client socket gets one writer
// goroutine (netpoll v0.7.2 has no writability callback, so waiting for the
// kernel to take bytes needs a goroutine parked in netpoll's Flush), and the
// bytes it does not take move from the upstream's netpoll input buffer to
// the endpoint's backlog (netpoll has no read pause, so they would sit in
// memory either way). Reported per stalled session: goroutines, and the bytes
// held in the backlog beyond what the kernel's buffers took.
//
//	go test -run XXX -bench StalledClients -benchtime 1x ./poller
func BenchmarkStalledClients(b *testing.B) {
	const sessions = 50
	const perSession = 4 << 20
	frame := frames.AppendFrame(nil, ws.OpBinary, bytes.Repeat([]byte{7}, 64<<10), false)
	for range b.N {
		before := runtime.NumGoroutine()
		relays := make([]*relay, sessions)
		for i := range relays {
			relays[i] = newRelay(b)
			// A small receive window, as a slow mobile client has, so
			// that the kernel's buffers do not absorb the test.
			_ = relays[i].clientPeer.(*net.TCPConn).SetReadBuffer(64 << 10)
		}
		for _, r := range relays {
			go func() {
				for range perSession / len(frame) {
					if _, err := r.upPeer.Write(frame); err != nil {
						return
					}
				}
			}()
		}
		deadline := time.Now().Add(20 * time.Second)
		var held, stalled int
		for {
			held, stalled = 0, 0
			for _, r := range relays {
				held += r.sess.Buffered()
				if _, _, ok := r.sess.Stalled(time.Now(), 0); ok {
					stalled++
				}
			}
			if (stalled == sessions && relays[0].upSide.Reader().Len() == 0) || time.Now().After(deadline) {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		time.Sleep(200 * time.Millisecond) // let the writers park
		if stalled < sessions {
			b.Fatalf("only %d of %d sessions stalled", stalled, sessions)
		}
		b.ReportMetric(float64(runtime.NumGoroutine()-before)/sessions, "goroutines/stalled")
		b.ReportMetric(float64(held)/sessions/1024, "backlog-KiB/stalled")
		for _, r := range relays {
			r.close(b)
		}
	}
}
