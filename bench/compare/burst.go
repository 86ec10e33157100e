package compare

import (
	"bufio"
	"cmp"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"rtgate/bench/load"
	"rtgate/bench/report"
)

// The first burst apart from the steady state. A run starts with
// Concurrency clients arriving at once; against a gateway that has just
// started, that burst meets a cold pool, and its misses are what a combined
// p99 would either hide (many calls) or blame on the steady state (few).
// So each run is also reported in two parts: its first FirstBurst calls (by
// intended start, which for the first wave is the run's start) and the
// rest, with the pool hit rate of each part where the gateway's usage log
// says which sessions were served from the pool.

// Split is one run in two parts.
type Split struct {
	FirstN       int          `json:"first_n"`
	First        load.Summary `json:"first_burst"`
	Rest         load.Summary `json:"steady_state"`
	FirstHitRate *float64     `json:"first_burst_pool_hit_rate"`
	RestHitRate  *float64     `json:"steady_state_pool_hit_rate"`
}

// splitRun splits a run's samples into its first n calls (by intended
// start) and the rest; hits, if known, are the gateway's sessions of the
// run in start order (true for a pool hit).
func splitRun(res *load.Result, n int, hits []bool) Split {
	samples := slices.Clone(res.Samples)
	slices.SortStableFunc(samples, func(a, b load.Sample) int { return cmp.Compare(a.Offset, b.Offset) })
	n = min(n, len(samples))
	sp := Split{FirstN: n,
		First: load.Summarize(samples[:n], 0, 0),
		Rest:  load.Summarize(samples[n:], 0, 0)}
	if len(hits) > 0 {
		k := min(n, len(hits))
		sp.FirstHitRate, sp.RestHitRate = fraction(hits[:k]), fraction(hits[k:])
	}
	return sp
}

func fraction(hits []bool) *float64 {
	if len(hits) == 0 {
		return nil
	}
	n := 0
	for _, h := range hits {
		if h {
			n++
		}
	}
	f := float64(n) / float64(len(hits))
	return &f
}

// usageRecord is the part of the gateway's usage log line read here.
type usageRecord struct {
	StartedAt time.Time `json:"started_at"`
	PoolHit   bool      `json:"pool_hit"`
}

// sessionHits reads the gateway's usage log (USAGE_LOG) and returns, in
// start order, whether each session that started in [from, to) was a pool
// hit. A missing or unreadable log gives nil: the hit rates show "n/a".
// Records are written as sessions end, so it waits (up to wait) until it
// has want of them.
func sessionHits(path string, from, to time.Time, want int, wait time.Duration) []bool {
	deadline := time.Now().Add(wait)
	for {
		recs := readUsage(path, from, to)
		if len(recs) >= want || time.Now().After(deadline) {
			if len(recs) == 0 {
				return nil
			}
			slices.SortStableFunc(recs, func(a, b usageRecord) int { return a.StartedAt.Compare(b.StartedAt) })
			hits := make([]bool, len(recs))
			for i, r := range recs {
				hits[i] = r.PoolHit
			}
			return hits
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func readUsage(path string, from, to time.Time) []usageRecord {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []usageRecord
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		var r usageRecord
		if json.Unmarshal(sc.Bytes(), &r) != nil || r.StartedAt.Before(from) || !r.StartedAt.Before(to) {
			continue
		}
		out = append(out, r)
	}
	return out
}

// BurstMarkdown is the first-burst table: per leg and run, the first N calls
// against the rest, with the pool-on leg's first burst set against direct's
// (same run, same N) in the last column.
func (o *Outcome) BurstMarkdown() string {
	var direct *LegResult
	for _, leg := range o.Legs {
		if leg.ID == LegDirect {
			direct = leg
		}
	}
	var b strings.Builder
	b.WriteString("| leg | run | calls | total p50 | total p95 | total p99 | pool hits | p99 vs direct |\n|---|---|---|---|---|---|---|---|\n")
	pct := func(r *float64) string {
		if r == nil {
			return "n/a"
		}
		return fmt.Sprintf("%.1f%%", *r*100)
	}
	for _, leg := range o.Legs {
		for i, run := range leg.Runs {
			sp := run.Split
			for part, s := range []load.Summary{sp.First, sp.Rest} {
				what, hit := fmt.Sprintf("first %d", sp.FirstN), sp.FirstHitRate
				if part == 1 {
					what, hit = fmt.Sprintf("other %d", s.Calls), sp.RestHitRate
				}
				vs := ""
				if direct != nil && leg != direct && i < len(direct.Runs) {
					d := direct.Runs[i].Split.First.Total
					if part == 1 {
						d = direct.Runs[i].Split.Rest.Total
					}
					if d.N > 0 && s.Total.N > 0 {
						vs = fmt.Sprintf("%+.1f%%", 100*(float64(s.Total.P99)/float64(d.P99)-1))
					}
				}
				fmt.Fprintf(&b, "| %s | %d: %s | %d/%d | %s | %s | %s | %s | %s |\n", leg.Name, i+1, what, s.OK, s.Calls,
					report.FormatMS(s.Total.P50), report.FormatMS(s.Total.P95), report.FormatMS(s.Total.P99), pct(hit), vs)
			}
		}
	}
	return b.String()
}
