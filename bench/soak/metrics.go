package soak

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"
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
)

// watched are the metrics parseMetrics keeps.
var watched = map[string]bool{mRSS: true, mFDs: true, mGoroutines: true, mHeapInuse: true, mHeapAlloc: true, mSessionsOpen: true,
	mSessionsEnd: true, mWarm: true, mHits: true, mMisses: true}

// required are the metrics a reading cannot do without.
var required = []string{mRSS, mFDs, mGoroutines, mSessionsOpen}

// parseMetrics reads the Prometheus text format, keeping what the soak
// watches. Series with labels are summed, except rtgate_sessions_total,
// kept by outcome.
func parseMetrics(r io.Reader) (Reading, error) {
	rd := Reading{Outcomes: map[string]int64{}}
	seen := map[string]bool{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		name, labels, rest := line, "", ""
		if i := strings.IndexAny(line, "{ "); i >= 0 {
			name, rest = line[:i], line[i:]
		}
		if strings.HasPrefix(rest, "{") {
			end := strings.LastIndexByte(rest, '}')
			if end < 0 {
				return rd, fmt.Errorf("metrics: bad line %q", line)
			}
			labels, rest = rest[1:end], rest[end+1:]
		}
		if !watched[name] {
			continue
		}
		fields := strings.Fields(rest)
		if len(fields) == 0 {
			return rd, fmt.Errorf("metrics: no value in %q", line)
		}
		f, err := strconv.ParseFloat(fields[0], 64)
		if err != nil {
			return rd, fmt.Errorf("metrics: bad value in %q: %w", line, err)
		}
		v := int64(f)
		switch name {
		case mRSS:
			rd.RSS += v
		case mFDs:
			rd.FDs += v
		case mGoroutines:
			rd.Goroutines += v
		case mHeapInuse:
			rd.HeapInuse += v
		case mHeapAlloc:
			rd.HeapAlloc += v
		case mSessionsOpen:
			rd.SessionsOpen += v
		case mWarm:
			rd.WarmSockets += v
		case mHits:
			rd.PoolHits += v
		case mMisses:
			rd.PoolMisses += v
		case mSessionsEnd:
			rd.Outcomes[labelValue(labels, "outcome")] += v
		}
		seen[name] = true
	}
	if err := sc.Err(); err != nil {
		return rd, fmt.Errorf("metrics: %w", err)
	}
	var missing []string
	for _, name := range required {
		if !seen[name] {
			missing = append(missing, name)
		}
	}
	if len(missing) > 0 {
		return rd, fmt.Errorf("metrics: %s missing", strings.Join(missing, ", "))
	}
	return rd, nil
}

// labelValue finds name="value" in a label set (values the gateway uses
// hold no quotes or commas).
func labelValue(labels, name string) string {
	for _, kv := range strings.Split(labels, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
		if ok && k == name {
			return strings.Trim(v, `"`)
		}
	}
	return ""
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
