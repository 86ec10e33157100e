package server

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"slices"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"rtgate/mockai"
	"rtgate/server/session"
)

// BenchmarkResume measures the resume time a client sees over a TLS
// upstream, with the warm pool off and on: from the response.done after
// which mockai drops the upstream to the gateway's rtgate.session.resumed
// (one dial or one warm socket, the replay of two items and its replies).
// Each iteration is one session resumed once; run with -benchtime 200x
// for the percentiles.
func BenchmarkResume(b *testing.B) {
	for _, pool := range []bool{false, true} {
		b.Run(fmt.Sprintf("pool=%v", map[bool]string{false: "off", true: "on"}[pool]), func(b *testing.B) {
			mock := startMock(b, mockai.Config{TLS: true, AudioDeltas: 1,
				Cut: mockai.Cut{Kind: mockai.CutDrop, AfterResponses: 1}})
			roots := trustMock(b, mock)
			g := startGatewayLog(b, mock, func(c *Settings) {
				c.UpstreamRoots = roots
				if pool {
					c.Pool.Size = 8
				}
			}, quietLog)
			if pool {
				time.Sleep(time.Second) // the pool fills
			}
			took := make([]float64, 0, b.N)
			b.ResetTimer()
			for range b.N {
				c := g.dial(b, "model=gpt-realtime", bearer(testMasterKey))
				read(b, c)
				send(b, c, userItem("item_bench", "hello"))
				readUntil(b, c, "conversation.item.done")
				send(b, c, map[string]any{"type": "response.create"})
				readUntil(b, c, "response.done")
				start := time.Now()
				readUntil(b, c, session.EventResumed)
				took = append(took, float64(time.Since(start).Microseconds())/1000)
				_ = c.WriteMessage(websocket.CloseMessage, websocket.FormatCloseMessage(1000, ""))
				c.Close()
			}
			b.StopTimer()
			slices.Sort(took)
			b.ReportMetric(took[len(took)/2], "p50-ms")
			b.ReportMetric(took[len(took)*99/100], "p99-ms")
		})
	}
}

// BenchmarkIdleSessionContinuity measures what continuity costs an idle
// session with an empty conversation: the live heap per session with
// SESSION_CONTINUITY on and off, in the same run (the budget: at most 1 KiB
// more).
func BenchmarkIdleSessionContinuity(b *testing.B) {
	const sessions = 1500
	perSession := map[bool]float64{}
	for range b.N {
		// Off, on, on, off: the first gateway of a process pays for what
		// the later ones find warm, so neither is always first.
		for _, on := range []bool{false, true, true, false} {
			mock := startMockaiProcess(b) // its heap is not the gateway's
			g := startGatewayLog(b, nil, func(c *Settings) {
				c.APIBase, _ = ParseAPIBase(mock.baseURL)
				c.Continuity = on
			}, quietLog)
			debug.FreeOSMemory()
			before := liveHeapBytes()
			conns := make([]*websocket.Conn, sessions)
			for i := range conns {
				conns[i] = g.dial(b, "model=gpt-realtime", bearer(testMasterKey))
				read(b, conns[i])
			}
			debug.FreeOSMemory()
			perSession[on] += (liveHeapBytes() - before) / sessions / float64(2*b.N)
			for _, c := range conns {
				c.Close()
			}
			waitFor(b, "the sessions to end", func() bool { return g.srv.SessionsOpen() == 0 })
		}
	}
	// The heap holds the test's client connections too: only on minus off
	// is continuity's.
	b.Logf("live heap per idle session (gateway and test client): continuity off %.0f B, on %.0f B, %+.0f B",
		perSession[false], perSession[true], perSession[true]-perSession[false])
	b.ReportMetric(perSession[true]-perSession[false], "B/session-more")
}

// liveHeapBytes is the bytes of live heap objects after two collections
// (the second empties what sync.Pools kept over the first). Live objects,
// not in-use spans (heapMiB): spans move by 8 KiB pages and with how full
// each size class happens to be, noise larger than the budget here.
func liveHeapBytes() float64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return float64(ms.HeapAlloc)
}
