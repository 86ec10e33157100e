package huge

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"rtgate/bench/harness"
	"rtgate/bench/proc"
)

// roles are the processes of a run, by role.
type roles struct {
	gateways []*proc.Gateway
	mocks    []*proc.Mockai
	clients  []*proc.Proc
}

// Reading is the state of every role at one moment. CPU is each role's
// user+system time since its processes started, in core-seconds.
type Reading struct {
	At           time.Time `json:"at"`
	SessionsOpen int64     `json:"sessions_open"`
	PerGateway   []int64   `json:"sessions_per_gateway"`
	GatewayRSS   int64     `json:"gateway_rss_bytes"`
	// GatewayHeap is go_memstats_heap_alloc_bytes summed over the
	// gateways: their live heap when the reading asked for a collection.
	GatewayHeap int64   `json:"gateway_heap_bytes"`
	GatewayCPU  float64 `json:"gateway_cpu_s"`
	MockaiRSS   int64   `json:"mockai_rss_bytes"`
	MockaiCPU   float64 `json:"mockai_cpu_s"`
	ClientRSS   int64   `json:"client_rss_bytes"`
	ClientCPU   float64 `json:"client_cpu_s"`
	// ClientsRunning is how many client processes were alive.
	ClientsRunning int `json:"clients_running"`
}

var adminClient = &http.Client{Timeout: 10 * time.Second}

// get fetches an admin path of one gateway.
func get(ctx context.Context, g *proc.Gateway, path string) (io.ReadCloser, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+g.Admin+path, nil)
	if err != nil {
		return nil, err
	}
	resp, err := adminClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("gateway pid %d %s: %w", g.PID(), path, err)
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		return nil, fmt.Errorf("gateway pid %d %s: %s", g.PID(), path, resp.Status)
	}
	return resp.Body, nil
}

// sessions reads every gateway's rtgate_sessions_open and heap; with gc, it
// first asks each for a collection (the heap profile handler runs one).
//
// A gateway that does not answer is left out of the sums and named in the
// error; the others are still read.
func (r *roles) sessions(ctx context.Context, gc bool, rd *Reading) error {
	rd.PerGateway = make([]int64, len(r.gateways))
	rd.SessionsOpen, rd.GatewayHeap = 0, 0
	var errs []error
	for i, g := range r.gateways {
		if err := r.gatewaySessions(ctx, g, gc, i, rd); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// gatewaySessions adds one gateway's open sessions and live heap to rd.
func (r *roles) gatewaySessions(ctx context.Context, g *proc.Gateway, gc bool, i int, rd *Reading) error {
	if gc {
		body, err := get(ctx, g, "/debug/pprof/heap?gc=1")
		if err != nil {
			return err
		}
		_, _ = io.Copy(io.Discard, body)
		body.Close()
	}
	body, err := get(ctx, g, "/metrics")
	if err != nil {
		return err
	}
	m, err := harness.ParseMetrics(io.LimitReader(body, 16<<20))
	body.Close()
	if err != nil {
		return fmt.Errorf("gateway pid %d: %w", g.PID(), err)
	}
	open, ok := m.Sum("rtgate_sessions_open")
	if !ok {
		return fmt.Errorf("gateway pid %d: no rtgate_sessions_open", g.PID())
	}
	heap, _ := m.Sum("go_memstats_heap_alloc_bytes")
	rd.PerGateway[i] = int64(open)
	rd.SessionsOpen += int64(open)
	rd.GatewayHeap += int64(heap)
	return nil
}

// reading takes the sessions, memory and CPU of every role.
func (r *roles) reading(ctx context.Context, gc bool) (Reading, error) {
	rd := Reading{At: time.Now()}
	// Usage first: the collection the session count may ask for is not
	// the run's CPU.
	// A role that died is reported, and the others are still read: one
	// gateway that exited must not blank the figures of the eleven others.
	var errs []error
	for _, g := range r.gateways {
		u, err := g.Usage()
		if err != nil {
			errs = append(errs, err)
			continue
		}
		rd.GatewayRSS += u.RSS
		rd.GatewayCPU += u.CPUSeconds()
	}
	for _, m := range r.mocks {
		u, err := m.Usage()
		if err != nil {
			errs = append(errs, err)
			continue
		}
		rd.MockaiRSS += u.RSS
		rd.MockaiCPU += u.CPUSeconds()
	}
	for _, c := range r.clients {
		if u, err := c.Usage(); err == nil {
			rd.ClientRSS += u.RSS
			rd.ClientCPU += u.CPUSeconds()
			rd.ClientsRunning++
		}
	}
	errs = append(errs, r.sessions(ctx, gc, &rd))
	return rd, errors.Join(errs...)
}

// Point is the sessions open some time after the clients started.
type Point struct {
	T    float64 `json:"t_s"`
	Open int64   `json:"open"`
}

// staleAfter ends the wait for sessions when their count has not grown for
// this long (clients that failed, a gateway at its limit).
const staleAfter = time.Minute

// waitOpen polls the gateways until every session is open, the count stops
// growing for staleAfter, every client exited, ctx ends or OpenTimeout
// passes. It returns the most sessions seen open and when that count was
// first reached.
func (r *roles) waitOpen(ctx context.Context, cfg Config, begin time.Time, say harness.Say) (int64, time.Duration, []Point) {
	var best int64
	var bestAt time.Duration
	var points []Point
	lastSaid := time.Now()
	deadline := begin.Add(cfg.OpenTimeout)
	for time.Now().Before(deadline) {
		if harness.Sleep(ctx, cfg.SampleEvery) != nil {
			break
		}
		var rd Reading
		t := time.Since(begin)
		if err := r.sessions(ctx, false, &rd); err != nil {
			// A gateway busy accepting can miss a scrape's deadline, and
			// one that died stays out of the count: neither ends the wait
			// (the stale rule and the deadline still do).
			say("huge: %v", err)
			if t-bestAt > staleAfter {
				break
			}
			continue
		}
		points = append(points, Point{T: t.Seconds(), Open: rd.SessionsOpen})
		if rd.SessionsOpen > best {
			best, bestAt = rd.SessionsOpen, t
		}
		if time.Since(lastSaid) >= 5*time.Second {
			say("huge: %5.0fs  %d sessions open", t.Seconds(), rd.SessionsOpen)
			lastSaid = time.Now()
		}
		if best >= int64(cfg.Sessions) || t-bestAt > staleAfter || !r.anyClientRunning() {
			break
		}
	}
	return best, bestAt, points
}

func (r *roles) anyClientRunning() bool {
	for _, c := range r.clients {
		if c.Running() {
			return true
		}
	}
	return false
}
