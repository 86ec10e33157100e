// Package balance keeps one state per upstream deployment and decides, for
// each connect, which deployments it tries and in what order.
//
// A deployment's state is one Host: its passive health, its live sessions
// and dials in flight, its rpm and max_parallel_requests slots, and the
// latency of the dials made to it. Hosts are kept by Deployment.Name, so a
// reload (SIGHUP) that keeps a deployment's name keeps its state, as
// Caddy's reverse proxy keeps an upstream's Host across a config reload.
//
// A connect asks Reserve for a plan (the deployments to try, in order, the
// first holding the connect's slot) or a refusal; the session dials with
// Race, which reports each dial's outcome to Succeeded or Failed. The
// balancer does no I/O: Race runs the dials, the refusals' classification
// and the losers' close the session gives it (Dial);
// the session's upstream is counted with Attach and Detach, and its slot
// given back with Release when it ends. Snapshot is what the status page
// shows.
//
// Health (Healthy, Succeeded, Failed) is passive: nothing is sent to a deployment to learn
// it; the dials made for clients are watched.
package balance

import (
	"cmp"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"rtgate/server/limit"
	"rtgate/server/routes"
)

// Host is what the balancer knows of one deployment.
type Host struct {
	live    atomic.Int64 // sessions it serves now
	dialing atomic.Int64 // dials to it in flight

	// Guarded by Balancer.mu.
	health health
	slots  *limit.Use // rpm and max_parallel_requests; nil until first limited
	dial   dialStat
	// Turns' time to first audio (with penalty samples for failed
	// turns): the recent samples latency-based routing ranks by, and a
	// sketch per minute for the status page; text-only sessions' first
	// output apart.
	latency, textLatency latencies
	firstAudio           firstAudioWindow
}

// dialStat is the latency of client dials that completed: the last and a
// moving average, since a deployment's health is mostly how fast it
// answers.
type dialStat struct {
	lastMS, avgMS float64
	n             int
}

// Config is what a Balancer is made with.
type Config struct {
	Registerer   prometheus.Registerer
	Log          *slog.Logger
	ProbeTimeout time.Duration // how long a probe may stay unanswered (the dial timeout)
	HedgeDelay   time.Duration // UPSTREAM_HEDGE_MS; 0: one dial at a time
	// DialFailures counts failed and timed-out dials by model group
	// (rtgate_upstream_dial_failures_total, registered by its owner).
	DialFailures *prometheus.CounterVec
	Now          func() time.Time // time.Now when nil
	// Router is the routing strategy in force (router_settings of the
	// current routes table); nil is least-busy.
	Router func() routes.Router
}

// Balancer holds every deployment's Host.
type Balancer struct {
	cfg Config
	now func() time.Time
	log *slog.Logger
	m   metrics

	mu    sync.Mutex
	hosts map[string]*Host
}

// New makes a Balancer and registers its metrics.
func New(cfg Config) *Balancer {
	b := &Balancer{cfg: cfg, now: cfg.Now, log: cfg.Log, m: newMetrics(cfg.Registerer), hosts: map[string]*Host{}}
	if b.now == nil {
		b.now = time.Now
	}
	return b
}

// host returns d's Host, creating it (healthy) on first use; callers hold
// mu.
func (b *Balancer) host(d *routes.Deployment) *Host {
	h := b.hosts[d.Name]
	if h == nil {
		h = &Host{}
		b.hosts[d.Name] = h
		b.m.ejected.WithLabelValues(d.Name).Set(0)
	}
	return h
}

func (b *Balancer) hostOf(d *routes.Deployment) *Host {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.host(d)
}

// rank orders ds for a connect: first an ejected deployment whose backoff
// is over (the probe, returned as due, not yet claimed), then the healthy
// ones in the routing strategy's order (Balancer.order; least-busy by
// default), then the other ejected ones as a last resort, fewest live
// sessions and dials in flight first (counting dials spreads a burst of
// connects that arrive together, and keeps a deployment that is slow to
// answer from collecting them), ties in random order. Callers hold mu.
func (b *Balancer) rank(ds []*routes.Deployment, now time.Time) (out []*routes.Deployment, due *routes.Deployment) {
	out = slices.Clone(ds)
	rand.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	tier := make(map[*routes.Deployment]int, len(out))
	healthyN := 0
	for _, d := range out {
		h := b.host(d)
		switch {
		case h.health.state == healthy:
			tier[d] = 1
			healthyN++
		case due == nil && h.health.due(now):
			due, tier[d] = d, 0
		default:
			tier[d] = 2
		}
	}
	slices.SortStableFunc(out, func(x, y *routes.Deployment) int {
		if c := cmp.Compare(tier[x], tier[y]); c != 0 || tier[x] != 2 {
			return c
		}
		return cmp.Compare(b.load(x), b.load(y)) // the last resorts
	})
	first := 0
	if due != nil {
		first = 1
	}
	b.order(out[first:first+healthyN], b.router(), now)
	return out, due
}

// router is the routing strategy in force (least-busy when none is set).
func (b *Balancer) router() routes.Router {
	if b.cfg.Router == nil {
		return routes.DefaultRouter()
	}
	return b.cfg.Router()
}

// Rank returns the deployments of a group in the order a connect should try
// them (see rank); when the first is a probe, this connect claims it.
func (b *Balancer) Rank(ds []*routes.Deployment) []*routes.Deployment {
	now := b.now()
	b.mu.Lock()
	defer b.mu.Unlock()
	out, due := b.rank(ds, now)
	if due != nil {
		b.claimProbe(due, now)
	}
	return out
}

// Plan is where a connect goes: the deployments it tries, in order, and
// the one whose slot it holds (nil when the first has no limits).
type Plan struct {
	Cands    []*routes.Deployment
	Reserved *routes.Deployment
}

// Busy says why no deployment of a group could take a connect.
type Busy struct {
	// Capped: some deployment is at max_parallel_requests; RetryAfter is
	// then 1. Otherwise every one is at its rpm, and RetryAfter is when the
	// first will have a connect to give (seconds).
	Capped     bool
	RetryAfter int
}

// Reserve plans a connect to one of ds: it ranks them and takes a slot on
// the first with room, which it puts first; the rest stay, in order, for
// failover. A probe is claimed only when it is the deployment the connect
// goes to first, so that a probe whose slots are full stays due for the
// next connect.
func (b *Balancer) Reserve(ds []*routes.Deployment) (Plan, *Busy) {
	now := b.now()
	b.mu.Lock()
	defer b.mu.Unlock()
	ordered, due := b.rank(ds, now)
	wait, capped := time.Duration(-1), false
	for i, d := range ordered {
		if !limited(d) {
			return b.planned(ordered, i, nil, due, now), nil
		}
		h := b.host(d)
		if h.slots == nil {
			h.slots = limit.NewUse(d.RPM/60, now)
		}
		v, w := h.slots.Reserve(d.MaxSessions, d.RPM/60, now)
		switch v {
		case limit.Admitted:
			return b.planned(ordered, i, d, due, now), nil
		case limit.Full:
			capped = true
		case limit.Throttled:
			if wait < 0 || w < wait {
				wait = w
			}
		}
	}
	busy := &Busy{Capped: capped, RetryAfter: 1}
	if wait > 0 && !capped {
		busy.RetryAfter = limit.RetryAfter(wait)
	}
	return Plan{}, busy
}

// planned puts ordered[i] first, claiming it as the probe when it is the
// due one; callers hold mu.
func (b *Balancer) planned(ordered []*routes.Deployment, i int, reserved, due *routes.Deployment, now time.Time) Plan {
	first := ordered[i]
	if first == due {
		b.claimProbe(due, now)
	}
	if i > 0 {
		ordered = append(append([]*routes.Deployment{first}, ordered[:i]...), ordered[i+1:]...)
	}
	return Plan{Cands: ordered, Reserved: reserved}
}

func limited(d *routes.Deployment) bool { return d.RPM > 0 || d.MaxSessions > 0 }

// Release gives back the slot a plan reserved on d, when its session ends.
func (b *Balancer) Release(d *routes.Deployment) {
	if d == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if h := b.hosts[d.Name]; h != nil && h.slots != nil {
		h.slots.Release()
	}
}

// Attach counts a session now served by d; Detach takes it out.
func (b *Balancer) Attach(d *routes.Deployment) { b.hostOf(d).live.Add(1) }

// Detach takes a session out of d's live count.
func (b *Balancer) Detach(d *routes.Deployment) { b.hostOf(d).live.Add(-1) }

// HostStatus is one deployment as the status page shows it.
type HostStatus struct {
	State    string // healthy, ejected or probing
	BackoffS float64
	Live     int64
	Dialing  int64
	// The latency of completed client dials, nil before the first.
	DialMS, DialAvg *float64
	Dials           int
	// Voice turns' time to first audio over the last 5 minutes (Turns of
	// them; the percentiles nil when none), the samples latency routing
	// ranks by, and the turns the upstream failed (TurnFailures, each a
	// penalty sample).
	FirstAudioP50MS, FirstAudioP95MS *float64
	Turns, TurnFailures              int
}

// Snapshot is d's state now.
func (b *Balancer) Snapshot(d *routes.Deployment) HostStatus {
	now := b.now()
	b.mu.Lock()
	defer b.mu.Unlock()
	h := b.host(d)
	st := HostStatus{State: h.health.state.String(), Live: h.live.Load(), Dialing: h.dialing.Load(), Dials: h.dial.n}
	if h.health.state == ejected && h.health.until.After(now) {
		st.BackoffS = h.health.until.Sub(now).Seconds()
	}
	if h.dial.n > 0 {
		last, avg := h.dial.lastMS, h.dial.avgMS
		st.DialMS, st.DialAvg = &last, &avg
	}
	fa, failures := h.firstAudio.recent(now)
	if fa.Count() > 0 {
		p50, p95 := ms(fa.Quantile(0.5)), ms(fa.Quantile(0.95))
		st.FirstAudioP50MS, st.FirstAudioP95MS, st.Turns = &p50, &p95, fa.Count()
	}
	st.TurnFailures = failures
	return st
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// observeDial records one completed dial (upgrade done) to d.
func (b *Balancer) observeDial(d *routes.Deployment, took time.Duration) {
	ms := float64(took.Microseconds()) / 1000
	b.mu.Lock()
	defer b.mu.Unlock()
	st := &b.host(d).dial
	if st.n == 0 {
		st.avgMS = ms
	}
	st.lastMS, st.n = ms, st.n+1
	st.avgMS += (ms - st.avgMS) * 0.2 // about the last ten dials
}
