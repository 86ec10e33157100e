package soak

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"rtgate/bench/harness"
)

// Reading is one scrape of the gateway's admin /metrics.
type Reading struct {
	// T is seconds since the soak's load started (negative before it).
	T          float64 `json:"t_s"`
	RSS        int64   `json:"rss_bytes"`
	FDs        int64   `json:"open_fds"`
	Goroutines int64   `json:"goroutines"`
	HeapInuse  int64   `json:"heap_inuse_bytes"`
	// HeapAlloc is the heap's live objects (right after a collection) plus
	// garbage not yet collected.
	HeapAlloc    int64 `json:"heap_alloc_bytes"`
	SessionsOpen int64 `json:"sessions_open"`
	// WarmSockets is every key's warm pool sockets together.
	WarmSockets int64 `json:"warm_sockets"`
	// Outcomes is rtgate_sessions_total by outcome; PoolHits and
	// PoolMisses sum every key's counters.
	Outcomes   map[string]int64 `json:"-"`
	PoolHits   int64            `json:"-"`
	PoolMisses int64            `json:"-"`
	// RedisOutages and RedisAlone are the shared limits' outages and the
	// connects decided alone (with REDIS_URL).
	RedisOutages int64 `json:"-"`
	RedisAlone   int64 `json:"-"`
}

// Metric names read from the gateway.
const (
	mRSS          = "process_resident_memory_bytes"
	mFDs          = "process_open_fds"
	mGoroutines   = "go_goroutines"
	mHeapInuse    = "go_memstats_heap_inuse_bytes"
	mHeapAlloc    = "go_memstats_heap_alloc_bytes"
	mSessionsOpen = "rtgate_sessions_open"
	mSessionsEnd  = "rtgate_sessions_total"
	mWarm         = "rtgate_pool_warm_sockets"
	mHits         = "rtgate_pool_hits_total"
	mMisses       = "rtgate_pool_misses_total"
	mOutages      = "rtgate_cluster_redis_outages_total"
	mAlone        = "rtgate_cluster_fallback_admissions_total"
)

// required are the metrics a reading cannot do without.
var required = []string{mRSS, mFDs, mGoroutines, mSessionsOpen}

// parseMetrics reads the Prometheus text format (with expfmt), keeping what
// the soak watches. Series with labels are summed, except
// rtgate_sessions_total, kept by outcome.
func parseMetrics(r io.Reader) (Reading, error) {
	m, err := harness.ParseMetrics(r)
	if err != nil {
		return Reading{}, err
	}
	var missing []string
	for _, name := range required {
		if _, ok := m[name]; !ok {
			missing = append(missing, name)
		}
	}
	if len(missing) > 0 {
		return Reading{}, fmt.Errorf("metrics: %s missing", strings.Join(missing, ", "))
	}
	sum := func(name string) int64 {
		v, _ := m.Sum(name)
		return int64(v)
	}
	rd := Reading{
		RSS: sum(mRSS), FDs: sum(mFDs), Goroutines: sum(mGoroutines), HeapInuse: sum(mHeapInuse), HeapAlloc: sum(mHeapAlloc),
		SessionsOpen: sum(mSessionsOpen), WarmSockets: sum(mWarm), PoolHits: sum(mHits), PoolMisses: sum(mMisses),
		RedisOutages: sum(mOutages), RedisAlone: sum(mAlone),
		Outcomes: map[string]int64{},
	}
	for outcome, v := range m.SumBy(mSessionsEnd, "outcome") {
		rd.Outcomes[outcome] = int64(v)
	}
	return rd, nil
}

// admin talks to the gateway's admin listener.
type admin struct {
	base   string // http://host:port
	client *http.Client
}

// newAdmin talks to addr over a single connection: the gateway's open file
// descriptors and goroutines are measured, and a second keep-alive
// connection would count as one more of each.
func newAdmin(addr string) *admin {
	return &admin{base: "http://" + addr, client: &http.Client{
		Timeout:   5 * time.Second,
		Transport: &http.Transport{MaxConnsPerHost: 1, MaxIdleConnsPerHost: 1},
	}}
}

// read scrapes /metrics.
func (a *admin) read(ctx context.Context) (Reading, error) {
	body, err := a.get(ctx, "/metrics")
	if err != nil {
		return Reading{}, err
	}
	return parseMetrics(strings.NewReader(body))
}

// collectGarbage asks the gateway for a garbage collection: the heap
// profile handler runs one first when asked with gc=1. The profile itself
// is discarded.
func (a *admin) collectGarbage(ctx context.Context) error {
	_, err := a.get(ctx, "/debug/pprof/heap?gc=1")
	return err
}

// save writes what path answers to file.
func (a *admin) save(ctx context.Context, path, file string) error {
	body, err := a.get(ctx, path)
	if err != nil {
		return err
	}
	return os.WriteFile(file, []byte(body), 0o644)
}

func (a *admin) get(ctx context.Context, path string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, a.base+path, nil)
	if err != nil {
		return "", err
	}
	resp, err := a.client.Do(req)
	if err != nil {
		return "", fmt.Errorf("admin %s: %w", path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return "", fmt.Errorf("admin %s: %w", path, err)
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("admin %s: %w", path, errors.New(resp.Status))
	}
	return string(b), nil
}
