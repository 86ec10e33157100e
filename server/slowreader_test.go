package server

import (
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"strconv"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"rtgate/mockai"
)

// A phone on a slow link in front of a long answer: the upstream sends the
// answer in well under a second, the client reads it at its link's pace.
// The answer here is 400 audio deltas of 36,000 PCM bytes (48,000 bytes of
// base64 each, 19.5 MB of frames), about 2.5 times a two-minute answer.
const (
	burstDeltas     = 400
	burstDeltaBytes = 36000
	slowReadRate    = 2e6 // bytes a second the slow client reads
)

// burstMockai starts mockai as a process, over ws:// or wss://, answering
// each response.create with the burst; roots is nil for ws://.
func burstMockai(t *testing.T, tlsUpstream bool) (*mockaiProcess, *x509.CertPool) {
	t.Helper()
	args := []string{"-deltas", strconv.Itoa(burstDeltas), "-delta-bytes", strconv.Itoa(burstDeltaBytes), "-delta-interval", "1ms"}
	if !tlsUpstream {
		return startMockaiProcess(t, args...), nil
	}
	return tlsMockaiProcess(t, args...)
}

// burstSession starts mockai (ws:// or wss://) and a gateway in front of it
// (mutate changes its settings), opens a session from a client with a small
// receive window, as on a slow link (what it has not read waits in the
// gateway, not in the kernel), and asks for the burst.
func burstSession(t *testing.T, tlsUpstream bool, mutate func(*Settings)) (*gateway, *websocket.Conn) {
	t.Helper()
	mock, roots := burstMockai(t, tlsUpstream)
	g := startGateway(t, nil, func(c *Settings) {
		c.APIBase, _ = ParseAPIBase(mock.baseURL)
		c.UpstreamRoots = roots
		if mutate != nil {
			mutate(c)
		}
	})
	c, _, err := stallingDialer().Dial(g.url("model=gpt-realtime"), bearer(testMasterKey))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	if e := read(t, c); e.typ() != "session.created" {
		t.Fatalf("first event %v", e.typ())
	}
	send(t, c, map[string]any{"type": "response.create"})
	return g, c
}

// upstreamKinds names the two upstream kinds every slow-reader test runs over.
var upstreamKinds = []struct {
	name string
	tls  bool
}{{"ws", false}, {"wss", true}}

// A client that keeps reading, only slower than the upstream sends, is never
// dropped: it receives every delta of the burst, byte for byte, and the
// response.done after them, although the gateway held far more than the
// old 4 MiB per-session limit for it. MAX_STALLED_BYTES and
// WRITE_TIMEOUT_SECS are the defaults.
func TestSlowReaderGetsWholeBurst(t *testing.T) {
	want := base64.StdEncoding.EncodeToString(mockai.PCMPattern(burstDeltaBytes))
	for _, up := range upstreamKinds {
		t.Run(up.name, func(t *testing.T) {
			t.Parallel()
			g, c := burstSession(t, up.tls, nil)

			// Read at slowReadRate: after each frame, sleep until the bytes
			// read so far would have taken that long. Bounded in frames and,
			// through each read's deadline, in time.
			start := time.Now()
			var total, deltas, wrong, peak int
			done := false
			for range burstDeltas + 64 {
				_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
				_, p, err := c.ReadMessage()
				if err != nil {
					t.Fatalf("after %d deltas (%.1f MB read, up to %.1f MB waiting in the gateway): %v",
						deltas, float64(total)/1e6, float64(peak)/1e6, err)
				}
				total += len(p)
				var e struct{ Type, Delta string }
				if err := json.Unmarshal(p, &e); err != nil {
					t.Fatalf("event is not JSON: %v", err)
				}
				switch e.Type {
				case "response.output_audio.delta":
					deltas++
					if e.Delta != want {
						wrong++
					}
				case "response.done":
					done = true
				}
				if done {
					break
				}
				for _, l := range g.srv.sessions.Live() {
					peak = max(peak, l.Session.Buffered())
				}
				if ahead := time.Duration(float64(total)/slowReadRate*float64(time.Second)) - time.Since(start); ahead > 0 {
					time.Sleep(ahead)
				}
			}
			t.Logf("read %.1f MB at about %.1f MB/s; up to %.1f MB waited in the gateway",
				float64(total)/1e6, slowReadRate/1e6, float64(peak)/1e6)
			if !done || deltas != burstDeltas || wrong != 0 {
				t.Fatalf("got %d of %d audio deltas (%d not byte for byte), response.done %v", deltas, burstDeltas, wrong, done)
			}
			// The test only means something if the gateway held more than
			// the old per-session limit for this client.
			if peak <= 4<<20 {
				t.Fatalf("at most %d bytes waited in the gateway: the client was not slow enough to test anything", peak)
			}
			if n := metricValue(t, g, `rtgate_sessions_ended_total{reason="stalled"}`); n != 0 {
				t.Fatalf("the watchdog ended %v sessions as stalled", n)
			}
			send(t, c, map[string]any{"type": "session.update", "session": map[string]any{"type": "realtime"}})
			if e := read(t, c); e.typ() != "session.updated" {
				t.Fatalf("after the burst the session answered %v", e.typ())
			}
		})
	}
}

// A client that stops reading is still dropped, by the no-progress rule: its
// socket took nothing for WRITE_TIMEOUT_SECS. The backlog stays far below
// MAX_STALLED_BYTES (the default) and no budget applies, so no other rule
// can act.
func TestStoppedReaderIsDroppedAfterWriteTimeout(t *testing.T) {
	for _, up := range upstreamKinds {
		t.Run(up.name, func(t *testing.T) {
			t.Parallel()
			g, c := burstSession(t, up.tls, func(c *Settings) {
				c.WriteTimeout = time.Second
				c.MaxBufferedBytes = 0
			})
			// From here the client reads nothing.
			waitFor(t, "the gateway to hold a backlog for the client", func() bool {
				for _, l := range g.srv.sessions.Live() {
					if l.Session.Buffered() > 1<<20 {
						return true
					}
				}
				return false
			})
			waitFor(t, "the stopped reader to be dropped", func() bool { return g.srv.SessionsOpen() == 0 })
			if n := metricValue(t, g, "rtgate_write_timeouts_total"); n < 1 {
				t.Fatalf("rtgate_write_timeouts_total = %v, want the dropped reader counted", n)
			}
			for _, reason := range []string{"stalled", "memory_budget"} {
				if n := metricValue(t, g, `rtgate_sessions_ended_total{reason="`+reason+`"}`); n != 0 {
					t.Fatalf("the watchdog ended %v sessions (%s): the write timeout should have", n, reason)
				}
			}
			// Its socket is closed: what the kernel held, then the end.
			_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
			for range burstDeltas + 64 {
				if _, _, err := c.ReadMessage(); err != nil {
					if isTimeout(err) {
						t.Fatal("the stopped reader's socket was not closed")
					}
					if ce, ok := err.(*websocket.CloseError); ok && ce.Code != websocket.CloseAbnormalClosure {
						t.Fatalf("the stopped reader got a close frame (%v); its socket should just close", err)
					}
					return
				}
			}
			t.Fatal("the stopped reader read the whole burst: it was not dropped")
		})
	}
}
