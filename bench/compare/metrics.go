package compare

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Gateway pool counters, when its admin /metrics exposes them.
const (
	metricPoolHits   = "rtgate_pool_hits_total"
	metricPoolMisses = "rtgate_pool_misses_total"
)

// poolCounters is one reading of the gateway's pool counters.
type poolCounters struct {
	Hits, Misses float64
	OK           bool // both metrics were present
}

// readPoolCounters scrapes url (Prometheus text format). A missing
// endpoint or missing metrics is not an error: the row shows "n/a".
func readPoolCounters(ctx context.Context, url string) poolCounters {
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
	var c poolCounters
	hits, misses, err := parsePoolCounters(bufio.NewScanner(resp.Body))
	if err != nil || hits < 0 || misses < 0 {
		return c
	}
	return poolCounters{Hits: hits, Misses: misses, OK: true}
}

// parsePoolCounters sums every series of the hit and miss counters
// (labels, if any, are added up). It returns -1 for a metric that is absent.
func parsePoolCounters(sc *bufio.Scanner) (hits, misses float64, err error) {
	hits, misses = -1, -1
	add := func(cur *float64, v float64) {
		if *cur < 0 {
			*cur = 0
		}
		*cur += v
	}
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name, rest := line, ""
		if i := strings.IndexAny(line, "{ "); i >= 0 {
			name, rest = line[:i], line[i:]
		}
		if name != metricPoolHits && name != metricPoolMisses {
			continue
		}
		if strings.HasPrefix(rest, "{") {
			end := strings.LastIndexByte(rest, '}')
			if end < 0 {
				return 0, 0, fmt.Errorf("metrics: bad line %q", line)
			}
			rest = rest[end+1:]
		}
		fields := strings.Fields(rest)
		if len(fields) == 0 {
			return 0, 0, fmt.Errorf("metrics: no value in %q", line)
		}
		v, err := strconv.ParseFloat(fields[0], 64)
		if err != nil {
			return 0, 0, fmt.Errorf("metrics: bad value in %q: %w", line, err)
		}
		if name == metricPoolHits {
			add(&hits, v)
		} else {
			add(&misses, v)
		}
	}
	return hits, misses, sc.Err()
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
