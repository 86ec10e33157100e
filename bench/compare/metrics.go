package compare

import (
	"context"
	"io"
	"net/http"
	"time"

	"rtgate/bench/harness"
)

// Gateway pool counters, when its admin /metrics exposes them: the
// Realtime pool's, and (-protocol live) the Live pool's.
const (
	poolPrefix     = "rtgate_pool"
	livePoolPrefix = "rtgate_live_pool"
)

// poolCounters is one reading of the gateway's pool counters.
type poolCounters struct {
	Hits, Misses float64
	OK           bool // both metrics were present
}

// readPoolCounters scrapes url (Prometheus text format). A missing
// endpoint or missing metrics is not an error: the row shows "n/a".
func readPoolCounters(ctx context.Context, url, prefix string) poolCounters {
	if url == "" {
		return poolCounters{}
	}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return poolCounters{}
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return poolCounters{}
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return poolCounters{}
	}
	hits, misses, err := parsePoolCountersOf(resp.Body, prefix)
	if err != nil || hits < 0 || misses < 0 {
		return poolCounters{}
	}
	return poolCounters{Hits: hits, Misses: misses, OK: true}
}

// parsePoolCounters sums every series of the hit and miss counters
// (labels, if any, are added up). It returns -1 for a metric that is absent.
func parsePoolCounters(r io.Reader) (hits, misses float64, err error) {
	return parsePoolCountersOf(r, poolPrefix)
}

// parsePoolCountersOf is parsePoolCounters for the pool whose metrics are
// named prefix_hits_total and prefix_misses_total.
func parsePoolCountersOf(r io.Reader, prefix string) (hits, misses float64, err error) {
	m, err := harness.ParseMetrics(r)
	if err != nil {
		return 0, 0, err
	}
	hits, misses = -1, -1
	if v, ok := m.Sum(prefix + "_hits_total"); ok {
		hits = v
	}
	if v, ok := m.Sum(prefix + "_misses_total"); ok {
		misses = v
	}
	return hits, misses, nil
}

// hitRate is the hit fraction between two readings, nil when unknown or
// when the pool saw no traffic.
func hitRate(before, after poolCounters) *float64 {
	if !before.OK || !after.OK {
		return nil
	}
	h, m := after.Hits-before.Hits, after.Misses-before.Misses
	if h < 0 || m < 0 || h+m == 0 {
		return nil
	}
	r := h / (h + m)
	return &r
}
