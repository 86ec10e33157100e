package peers

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"
)

// ioTimeout bounds every single handshake, read or write the load client does.
const ioTimeout = 10 * time.Second

// wsClient opens realtime sessions on one target (mockai, a peer or the gateway) and
// waits for session.created on each, so a session counts only once it is relayed end
// to end. Source addresses rotate over SourceIPs so that many sessions do not exhaust
// one address's ephemeral ports.
type wsClient struct {
	url     string
	header  http.Header
	dialers []*websocket.Dialer
	next    atomic.Uint64
}

// newClient makes a client for ws://target/v1/realtime. bufSize sizes gorilla's read
// and write buffers: small for held sessions, a whole audio delta for throughput.
func newClient(target, key string, sources []net.IP, bufSize int) *wsClient {
	c := &wsClient{
		url:    "ws://" + target + "/v1/realtime?model=gpt-realtime",
		header: http.Header{"Authorization": {"Bearer " + key}},
	}
	if len(sources) == 0 {
		sources = []net.IP{nil}
	}
	pool := &sync.Pool{} // write buffers only while writing: held sessions keep none
	for _, ip := range sources {
		nd := &net.Dialer{Timeout: ioTimeout}
		if ip != nil {
			nd.LocalAddr = &net.TCPAddr{IP: ip}
			nd.Control = bindNoPort
		}
		c.dialers = append(c.dialers, &websocket.Dialer{
			NetDialContext:   nd.DialContext,
			HandshakeTimeout: ioTimeout,
			ReadBufferSize:   bufSize,
			WriteBufferSize:  bufSize,
			WriteBufferPool:  pool,
		})
	}
	return c
}

// open dials one session and reads its first event, which must be session.created.
func (c *wsClient) open(ctx context.Context) (*websocket.Conn, error) {
	d := c.dialers[c.next.Add(1)%uint64(len(c.dialers))]
	conn, resp, err := d.DialContext(ctx, c.url, c.header)
	if err != nil {
		if resp != nil {
			return nil, fmt.Errorf("handshake: HTTP %d", resp.StatusCode)
		}
		return nil, fmt.Errorf("dial: %w", err)
	}
	conn.SetReadDeadline(time.Now().Add(ioTimeout))
	_, first, err := conn.ReadMessage()
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("waiting for session.created: %w", err)
	}
	if !bytes.Contains(first, []byte(`"session.created"`)) {
		conn.Close()
		return nil, fmt.Errorf("first event is not session.created: %.80s", first)
	}
	conn.SetReadDeadline(time.Time{})
	return conn, nil
}

// openMany opens n sessions with at most par handshakes in flight, within limit.
// It returns the sessions it got and the failures by class; sessions are closed by
// the caller.
func (c *wsClient) openMany(ctx context.Context, n, par int, limit time.Duration) ([]*websocket.Conn, map[string]int) {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	var (
		mu       sync.Mutex
		conns    = make([]*websocket.Conn, 0, n)
		failures = map[string]int{}
		next     atomic.Int64
		wg       sync.WaitGroup
	)
	for range min(par, n) {
		wg.Go(func() {
			for next.Add(1) <= int64(n) && ctx.Err() == nil {
				conn, err := c.open(ctx)
				mu.Lock()
				if err != nil {
					failures[failureClass(err)]++
				} else {
					conns = append(conns, conn)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if missing := n - len(conns) - sum(failures); missing > 0 {
		failures["not attempted (time limit or cancelled)"] += missing
	}
	return conns, failures
}

// failureClass turns an error into a short class for counting: the error text
// without the addresses and numbers that make every instance unique.
func failureClass(err error) string {
	var ne *net.OpError
	switch {
	case errors.As(err, &ne) && ne.Err != nil:
		return ne.Op + ": " + ne.Err.Error()
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return "cancelled"
	}
	s := err.Error()
	if i := strings.Index(s, ": "); i > 0 && strings.HasPrefix(s, "waiting") {
		return s[:i]
	}
	return s
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
				if !sleepUntil(ctx, start.Add(offset+time.Duration(k)*interval)) {
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

func sleepUntil(ctx context.Context, t time.Time) bool {
	d := time.Until(t)
	if d <= 0 {
		return ctx.Err() == nil
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// flood keeps up to window echoes of payload in flight on every session, counting
// messages sent and echoes received, until stop is closed. The caller reads the
// counters to measure a window of time, then calls the returned finish, which waits
// (bounded) for the echoes still in flight and reports how many echoes had the wrong
// length.
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

// percentile is the nearest-rank percentile of sorted samples (the sample at rank
// ceil(p/100 x n)), as bench/stats defines it; 0 for no samples.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(float64(len(sorted))*p/100 + 0.999999999)
	rank = max(1, min(rank, len(sorted)))
	return sorted[rank-1]
}

func sortDurations(d []time.Duration) {
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
}
