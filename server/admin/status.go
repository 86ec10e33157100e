package admin

// The live status page's data (/status.json). One goroutine takes a sample
// of the gateway's own state every second into a ring of the last five
// minutes: live sessions, sessions started so far, and the pool's counters
// (from the status registry, see adminState.reg). /status.json adds what is
// cheap to read at request time: live sessions by model group and key (a
// walk of the session registry), the pool's keys, deployment health. Rates
// (connects per second, hit rate over the last minute, mean warm age and
// refill time over the last minute) are differences between samples.
// Nothing here runs per session or per frame.

import (
	"cmp"
	"context"
	_ "embed"
	"net/http"
	"runtime"
	"runtime/debug"
	"slices"
	"sync"
	"time"

	dto "github.com/prometheus/client_model/go"

	"rtgate/internal/every"
)

const (
	statusEvery   = time.Second
	statusHistory = 300 // samples kept: five minutes
	statusWindow  = 60  // samples behind "over the last minute"
)

// statusSample is the gateway at one moment. Counters are cumulative.
type statusSample struct {
	at       time.Time
	sessions int
	started  float64                 // sessions admitted so far: ended plus open
	pool     map[string]poolCounters // by pool key, "model/id"
	models   map[string]modelTimings // by model
}

type poolCounters struct{ hits, misses, pings, missedPongs, dialsOK, dialsFailed float64 }

// modelTimings are the sums and counts of the pool's per-model histograms.
type modelTimings struct{ ageSum, ageCount, refillSum, refillCount float64 }

// statusBoard is the ring of samples.
type statusBoard struct {
	mu   sync.Mutex
	ring []statusSample
	n    int // samples taken; the newest is ring[(n-1)%len]
}

func (b *statusBoard) init() { b.ring = make([]statusSample, statusHistory) }

func (b *statusBoard) add(s statusSample) {
	b.mu.Lock()
	b.ring[b.n%len(b.ring)] = s
	b.n++
	b.mu.Unlock()
}

// history returns the samples, oldest first.
func (b *statusBoard) history() []statusSample {
	b.mu.Lock()
	defer b.mu.Unlock()
	k := min(b.n, len(b.ring))
	out := make([]statusSample, 0, k)
	for i := b.n - k; i < b.n; i++ {
		out = append(out, b.ring[i%len(b.ring)])
	}
	return out
}

// sampleStatus takes a sample every statusEvery until ctx ends.
func (s *Server) sampleStatus(ctx context.Context) {
	s.Sample(time.Now())
	every.Tick(ctx, statusEvery, s.Sample)
}

// Sample takes a sample of the gateway now into the status ring (what the
// sampler does each second).
func (s *Server) Sample(now time.Time) { s.board.add(s.takeSample(now)) }

func (s *Server) takeSample(now time.Time) statusSample {
	open := s.gw.Sessions()
	smp := statusSample{at: now, sessions: open, pool: map[string]poolCounters{}, models: map[string]modelTimings{}}
	smp.started = float64(open) + s.gw.SessionsEnded()
	fams, _ := s.reg.Gather() // errors only for inconsistent collectors; use what came
	for _, f := range fams {
		for _, m := range f.GetMetric() {
			l := labelMap(m)
			key := l["model"] + "/" + l["key"]
			pc, mt := smp.pool[key], smp.models[l["model"]]
			switch f.GetName() {
			case "rtgate_pool_hits_total":
				pc.hits += m.GetCounter().GetValue()
			case "rtgate_pool_misses_total":
				pc.misses += m.GetCounter().GetValue()
			case "rtgate_pool_pings_total":
				pc.pings += m.GetCounter().GetValue()
			case "rtgate_pool_missed_pongs_total":
				pc.missedPongs += m.GetCounter().GetValue()
			case "rtgate_pool_dials_total":
				if l["result"] == "ok" {
					pc.dialsOK += m.GetCounter().GetValue()
				} else {
					pc.dialsFailed += m.GetCounter().GetValue()
				}
			case "rtgate_pool_warm_age_seconds":
				mt.ageSum += m.GetHistogram().GetSampleSum()
				mt.ageCount += float64(m.GetHistogram().GetSampleCount())
			case "rtgate_pool_refill_seconds":
				mt.refillSum += m.GetHistogram().GetSampleSum()
				mt.refillCount += float64(m.GetHistogram().GetSampleCount())
			default:
				continue
			}
			if _, perKey := l["key"]; perKey {
				smp.pool[key] = pc
			} else {
				smp.models[l["model"]] = mt
			}
		}
	}
	return smp
}

// poolGauges reads the pool's per-key gauges that Pool.Status does not carry
// (the dial limit, when the pool has one), by "model/id".
func (s *Server) poolGauges() map[string]float64 {
	out := map[string]float64{}
	fams, _ := s.reg.Gather()
	for _, f := range fams {
		if f.GetName() != "rtgate_pool_inflight_limit" {
			continue
		}
		for _, m := range f.GetMetric() {
			l := labelMap(m)
			out[l["model"]+"/"+l["key"]] = m.GetGauge().GetValue()
		}
	}
	return out
}

func labelMap(m *dto.Metric) map[string]string {
	out := make(map[string]string, len(m.GetLabel()))
	for _, lp := range m.GetLabel() {
		out[lp.GetName()] = lp.GetValue()
	}
	return out
}

// Report is /status.json.
type Report struct {
	Version     string             `json:"version"`
	GoVersion   string             `json:"go_version"`
	StartedAt   time.Time          `json:"started_at"`
	UptimeS     float64            `json:"uptime_s"`
	Now         time.Time          `json:"now"`
	Draining    bool               `json:"draining"`
	Sessions    int                `json:"sessions"`
	ByGroup     []NamedCount       `json:"sessions_by_model_group"`
	ByKey       []NamedCount       `json:"sessions_by_key"`
	ByProtocol  []NamedCount       `json:"sessions_by_protocol"` // realtime, live
	ConnectsPS  float64            `json:"connects_per_s"`       // over the last sample interval
	Connects1m  float64            `json:"connects_last_minute"`
	PoolEnabled bool               `json:"pool_enabled"`
	Pool        []PoolKeyReport    `json:"pool"`
	Deployments []DeploymentReport `json:"deployments"`
	History     HistoryReport      `json:"history"`
}

type NamedCount struct {
	Name  string `json:"name"`
	Count int    `json:"count"`
}

type PoolKeyReport struct {
	Model    string   `json:"model"`
	Key      string   `json:"key"` // short hash, as in the metrics
	Upstream string   `json:"upstream"`
	Warm     int      `json:"warm"`
	Target   int      `json:"target"`
	Dialing  int      `json:"in_flight"`
	Limit    *float64 `json:"in_flight_limit,omitempty"`
	BackoffS float64  `json:"backoff_s"`
	// Over the last minute; nil when nothing happened in it.
	HitRate   *float64 `json:"hit_rate_1m"`
	Hits      float64  `json:"hits_1m"`
	Misses    float64  `json:"misses_1m"`
	WarmAgeS  *float64 `json:"warm_age_s_1m"`
	RefillS   *float64 `json:"refill_s_1m"`
	Pings     float64  `json:"pings_1m"`
	MissedPng float64  `json:"missed_pongs_1m"`
	DialFails float64  `json:"dial_failures_1m"`
}

type DeploymentReport struct {
	Name     string   `json:"name"`
	Group    string   `json:"model_group"`
	Protocol string   `json:"protocol"` // realtime or live
	State    string   `json:"state"`    // healthy, ejected or probing
	Ejected  bool     `json:"ejected"`
	BackoffS float64  `json:"backoff_left_s"`
	Live     int64    `json:"live"`
	Dialing  int64    `json:"dialing"`
	DialMS   *float64 `json:"dial_ms_last"`
	DialAvg  *float64 `json:"dial_ms_avg"`
	Dials    int      `json:"dials"`
	// Time to first audio of the voice turns on it over the last 5
	// minutes (null before any): the samples latency-based routing ranks
	// by, and rtgate_turn_first_audio_seconds's; the turns it failed
	// (each a penalty sample for routing).
	FirstAudioP50 *float64 `json:"first_audio_ms_p50_5m"`
	FirstAudioP95 *float64 `json:"first_audio_ms_p95_5m"`
	Turns         int      `json:"turns_5m"`
	TurnFailures  int      `json:"turn_failures_5m"`
}

// HistoryReport are the sparklines' series, one point per sample, oldest
// first. HitRate is null for a second without connects.
type HistoryReport struct {
	IntervalS float64    `json:"interval_s"`
	Sessions  []int      `json:"sessions"`
	Connects  []float64  `json:"connects"`
	HitRate   []*float64 `json:"hit_rate"`
}

func (s *Server) serveStatusJSON(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, s.Report(time.Now()))
}

// Report is the status page's data now.
func (s *Server) Report(now time.Time) Report {
	hist := s.board.history()
	pool := s.gw.Pool()
	r := Report{Version: buildVersion(), GoVersion: runtime.Version(), StartedAt: s.started.UTC(),
		UptimeS: now.Sub(s.started).Seconds(), Now: now.UTC(), Draining: s.gw.Draining(),
		PoolEnabled: pool != nil, Pool: []PoolKeyReport{}, Deployments: s.deploymentReports()}
	r.Sessions, r.ByGroup, r.ByKey, r.ByProtocol = s.sessionCounts()
	r.History = historyOf(hist)
	if n := len(hist); n >= 2 {
		last, prev := hist[n-1], hist[n-2]
		r.ConnectsPS = rate(last.started-prev.started, last.at.Sub(prev.at))
		r.Connects1m = last.started - hist[max(0, n-1-statusWindow)].started
	}
	if pool != nil {
		limits := s.poolGauges()
		for _, k := range pool.Status() {
			pk := PoolKeyReport{Model: k.Model, Key: k.ID, Upstream: k.Upstream, Warm: k.Warm, Target: k.Target,
				Dialing: k.Dialing, BackoffS: k.Backoff.Seconds()}
			if v, ok := limits[k.Model+"/"+k.ID]; ok {
				pk.Limit = &v
			}
			fillMinute(&pk, hist)
			r.Pool = append(r.Pool, pk)
		}
	}
	return r
}

// fillMinute adds the last minute's counters to a pool key's row.
func fillMinute(pk *PoolKeyReport, hist []statusSample) {
	n := len(hist)
	if n < 2 {
		return
	}
	last, first := hist[n-1], hist[max(0, n-1-statusWindow)]
	id := pk.Model + "/" + pk.Key
	a, b := last.pool[id], first.pool[id]
	pk.Hits, pk.Misses = a.hits-b.hits, a.misses-b.misses
	pk.Pings, pk.MissedPng, pk.DialFails = a.pings-b.pings, a.missedPongs-b.missedPongs, a.dialsFailed-b.dialsFailed
	if t := pk.Hits + pk.Misses; t > 0 {
		v := pk.Hits / t
		pk.HitRate = &v
	}
	ma, mb := last.models[pk.Model], first.models[pk.Model]
	if c := ma.ageCount - mb.ageCount; c > 0 {
		v := (ma.ageSum - mb.ageSum) / c
		pk.WarmAgeS = &v
	}
	if c := ma.refillCount - mb.refillCount; c > 0 {
		v := (ma.refillSum - mb.refillSum) / c
		pk.RefillS = &v
	}
}

func historyOf(hist []statusSample) HistoryReport {
	h := HistoryReport{IntervalS: statusEvery.Seconds(), Sessions: make([]int, 0, len(hist)),
		Connects: make([]float64, 0, len(hist)), HitRate: make([]*float64, 0, len(hist))}
	for i, smp := range hist {
		h.Sessions = append(h.Sessions, smp.sessions)
		if i == 0 {
			h.Connects, h.HitRate = append(h.Connects, 0), append(h.HitRate, nil)
			continue
		}
		prev := hist[i-1]
		h.Connects = append(h.Connects, rate(smp.started-prev.started, smp.at.Sub(prev.at)))
		var hits, all float64
		for id, pc := range smp.pool {
			pp := prev.pool[id]
			hits += pc.hits - pp.hits
			all += pc.hits - pp.hits + pc.misses - pp.misses
		}
		if all > 0 {
			v := hits / all
			h.HitRate = append(h.HitRate, &v)
		} else {
			h.HitRate = append(h.HitRate, nil)
		}
	}
	return h
}

func rate(delta float64, d time.Duration) float64 {
	if d <= 0 || delta < 0 {
		return 0
	}
	return delta / d.Seconds()
}

// sessionCounts walks the session registry once: the total and the counts
// by model group, by key name (names only: no key is held in clear) and by
// protocol.
func (s *Server) sessionCounts() (int, []NamedCount, []NamedCount, []NamedCount) {
	groups, keys, protocols := s.gw.SessionCounts()
	total := 0
	for _, n := range groups {
		total += n
	}
	return total, sortedCounts(groups), sortedCounts(keys), sortedCounts(protocols)
}

func sortedCounts(m map[string]int) []NamedCount {
	out := make([]NamedCount, 0, len(m))
	for name, n := range m {
		out = append(out, NamedCount{name, n})
	}
	slices.SortFunc(out, func(a, b NamedCount) int { return cmp.Or(cmp.Compare(b.Count, a.Count), cmp.Compare(a.Name, b.Name)) })
	return out
}

// deploymentReports lists every deployment of the routes table with the
// balancer's state: passive health and the dial latency seen by client
// connects.
func (s *Server) deploymentReports() []DeploymentReport {
	table := s.gw.Routes()
	var out []DeploymentReport
	groups := make([]string, 0, len(table.Groups))
	for g := range table.Groups {
		groups = append(groups, g)
	}
	slices.Sort(groups)
	for _, g := range groups {
		for _, d := range table.Groups[g] {
			st := s.gw.Deployment(d)
			out = append(out, DeploymentReport{Name: d.Name, Group: g, Protocol: d.Protocol, State: st.State, Ejected: st.State != "healthy",
				BackoffS: st.BackoffS, Live: st.Live, Dialing: st.Dialing, DialMS: st.DialMS, DialAvg: st.DialAvg, Dials: st.Dials,
				FirstAudioP50: st.FirstAudioP50MS, FirstAudioP95: st.FirstAudioP95MS, Turns: st.Turns, TurnFailures: st.TurnFailures})
		}
	}
	return out
}

// buildVersion is the module version and VCS revision the binary was built
// from, as far as the build recorded them.
func buildVersion() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	v := bi.Main.Version
	rev, dirty := "", false
	for _, st := range bi.Settings {
		switch st.Key {
		case "vcs.revision":
			rev = st.Value
		case "vcs.modified":
			dirty = st.Value == "true"
		}
	}
	if rev != "" {
		v += " " + rev[:min(12, len(rev))]
		if dirty {
			v += "+dirty"
		}
	}
	return v
}

//go:embed status.html
var statusPage []byte

func (s *Server) serveStatusPage(w http.ResponseWriter, _ *http.Request) {
	pageHeaders(w)
	w.Header().Set("Content-Security-Policy", "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "+
		"connect-src 'self'; img-src data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
	_, _ = w.Write(statusPage)
}

// pageHeaders: the pages are self-contained and must stay so (no external
// loads, no framing by other sites).
func pageHeaders(w http.ResponseWriter) {
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "no-referrer")
}
