package peers

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"

	"rtgate/bench/harness"
	"rtgate/bench/load"
)

// ioTimeout bounds every single handshake, read or write the load does.
const ioTimeout = 10 * time.Second

// newClient is wsbench's own client (bench/load) for one target URL: it opens
// sessions only once session.created has come through the relay, rotates the
// source address over sources, and names failures in wsbench's classes.
// bufSize sizes gorilla's read and write buffers: small for held sessions, a
// whole audio delta for throughput. tlsConf trusts mockai's certificate when
// the client dials a TLS mockai directly.
func newClient(url, key string, tlsConf *tls.Config, sources []net.IP, bufSize int) (*load.Client, error) {
	return load.NewClient(load.Config{URL: url, Key: key, Timeout: ioTimeout, TLS: tlsConf,
		SourceIPs: sources, BufferSize: bufSize})
}

// openMany opens n sessions with at most par handshakes in flight, within limit.
// It returns the sessions it got and the failures by class; sessions are closed by
// the caller.
func openMany(ctx context.Context, c *load.Client, n, par int, limit time.Duration) ([]*websocket.Conn, map[string]int) {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	var (
		mu       sync.Mutex
		conns    = make([]*websocket.Conn, 0, n)
		failures = map[string]int{}
	)
	load.ForEach(ctx, n, par, func(int) {
		conn, s := c.Open(ctx)
		mu.Lock()
		defer mu.Unlock()
		if conn == nil {
			failures[s.Failure]++
		} else {
			conns = append(conns, conn)
		}
	})
	if missing := n - len(conns) - sum(failures); missing > 0 {
		failures["not attempted (time limit or cancelled)"] += missing
	}
	return conns, failures
}

func sum(m map[string]int) int {
	t := 0
	for _, v := range m {
		t += v
	}
	return t
}

func closeAll(conns []*websocket.Conn) {
	for _, c := range conns {
		c.Close()
	}
}

// pingPong times round trips: on each of conns sessions, send msg every interval
// (the sessions' schedules spread evenly over one interval) and wait for its echo,
// rounds times. It returns every round trip it timed and how many failed.
func pingPong(ctx context.Context, conns []*websocket.Conn, msg []byte, rounds int, interval time.Duration) ([]time.Duration, int) {
	var (
		mu      sync.Mutex
		samples = make([]time.Duration, 0, len(conns)*rounds)
		errs    atomic.Int64
		wg      sync.WaitGroup
	)
	start := time.Now().Add(50 * time.Millisecond)
	for i, conn := range conns {
		offset := interval * time.Duration(i) / time.Duration(len(conns))
		wg.Go(func() {
			mine := make([]time.Duration, 0, rounds)
			defer func() {
				mu.Lock()
				samples = append(samples, mine...)
				mu.Unlock()
			}()
			for k := range rounds {
				if !harness.SleepUntil(ctx, start.Add(offset+time.Duration(k)*interval)) {
					return
				}
				t0 := time.Now()
				conn.SetWriteDeadline(t0.Add(ioTimeout))
				conn.SetReadDeadline(t0.Add(ioTimeout))
				if err := conn.WriteMessage(websocket.TextMessage, msg); err != nil {
					errs.Add(int64(rounds - k))
					return
				}
				_, got, err := conn.ReadMessage()
				rtt := time.Since(t0)
				if err != nil {
					errs.Add(int64(rounds - k))
					return
				}
				if !bytes.Equal(got, msg) {
					errs.Add(1)
					continue
				}
				mine = append(mine, rtt)
			}
		})
	}
	wg.Wait()
	return samples, int(errs.Load())
}

// flood keeps up to window echoes of payload in flight on every session, counting
// messages sent and echoes received, until stop is closed. The caller reads the
// counters to measure a window of time, then calls finish, which waits (bounded)
// for the echoes still in flight; bad counts echoes of the wrong length.
type flood struct {
	sent, recv, bad atomic.Int64
	stop            chan struct{}
	writers         sync.WaitGroup
	readers         sync.WaitGroup
}

func startFlood(conns []*websocket.Conn, payload []byte, window int) *flood {
	f := &flood{stop: make(chan struct{})}
	for _, conn := range conns {
		tokens := make(chan struct{}, window)
		f.writers.Go(func() {
			for {
				select {
				case <-f.stop:
					return
				case tokens <- struct{}{}:
				}
				conn.SetWriteDeadline(time.Now().Add(ioTimeout))
				if err := conn.WriteMessage(websocket.TextMessage, payload); err != nil {
					return
				}
				f.sent.Add(1)
			}
		})
		f.readers.Go(func() {
			for {
				_, r, err := conn.NextReader()
				if err != nil {
					return // closed by finish, or the relay failed
				}
				n, err := io.Copy(io.Discard, r)
				if err != nil {
					return
				}
				if n != int64(len(payload)) {
					f.bad.Add(1)
				}
				f.recv.Add(1)
				<-tokens
			}
		})
	}
	return f
}

// finish stops sending, waits up to drain for the echoes in flight, closes conns and
// returns the number of echoes that never came back.
func (f *flood) finish(conns []*websocket.Conn, drain time.Duration) int64 {
	close(f.stop)
	// A writer blocked on a full window wakes on stop; one blocked in a write is
	// bounded by the write deadline.
	f.writers.Wait()
	deadline := time.Now().Add(drain)
	for f.recv.Load() < f.sent.Load() && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	lost := f.sent.Load() - f.recv.Load()
	closeAll(conns)
	f.readers.Wait()
	return lost
}

// describeFailures prints failure counts for an error message.
func describeFailures(failures map[string]int) string {
	if len(failures) == 0 {
		return "no failures"
	}
	var b bytes.Buffer
	for _, class := range load.FailureClasses(failures) {
		if b.Len() > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%d %s", failures[class], class)
	}
	return b.String()
}
