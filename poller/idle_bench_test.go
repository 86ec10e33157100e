package poller_test

import (
	"runtime"
	"testing"
)

// BenchmarkIdleSessionHeap reports the Go heap one idle relayed session
// holds: its Session, two Endpoints, the upstream Handle and netpoll's two
// connections (the raw TCP peers are the benchmark's, and are counted too,
// as a constant both sides of a comparison share). Frames have passed both
// ways once, so that every lazily made buffer exists.
//
//	go test -run XXX -bench IdleSessionHeap -benchtime 1x ./poller
func BenchmarkIdleSessionHeap(b *testing.B) {
	const sessions = 500
	for range b.N {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		relays := make([]*relay, sessions)
		for i := range relays {
			relays[i] = newRelay(b)
			frame := []byte{0x82, 0x80, 1, 2, 3, 4} // an empty masked binary frame
			relays[i].checkVerbatim(b, relays[i].clientPeer, relays[i].upPeer, frame)
			relays[i].checkVerbatim(b, relays[i].upPeer, relays[i].clientPeer, []byte{0x82, 0x00})
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/sessions, "heap-B/session")
		for _, r := range relays {
			r.close(b)
		}
	}
}
