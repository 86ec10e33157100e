package server

// Passive health of upstream deployments. Nothing is sent to a deployment to
// learn its health: the gateway watches the dials it makes for clients. A
// deployment whose dial fails, times out, or is overtaken by a hedged dial
// is ejected for a backoff period, and routing puts it behind every healthy
// deployment of its group; once the backoff is over, one connect (the probe)
// tries it first, and its outcome brings the deployment back or ejects it
// again for twice as long.
//
// Health is kept per deployment, by Deployment.Name, whatever the pool does
// (with the pool off too), and survives a reload that keeps the name.
//
// The states, and the events that move a deployment between them:
//
//	state    event                                    next state
//	healthy  dial ok                                  healthy
//	healthy  dial failed / timed out / overtaken      ejected (backoff 1)
//	ejected  dial ok (a last-resort dial)             healthy
//	ejected  dial failed, backoff not over            ejected (unchanged)
//	ejected  dial failed, backoff over                ejected (backoff n+1)
//	ejected  backoff over, a connect is routed        probing (that connect dials it first)
//	probing  dial ok                                  healthy
//	probing  dial failed / timed out / overtaken      ejected (backoff n+1)
//	probing  no outcome within the dial timeout       ejected, backoff over (the next connect probes)
//
// A dial abandoned because its client left says nothing about the
// deployment and is no event. Backoff n is ejectBase·2^(n-1), at most
// ejectMax.

import (
	"cmp"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"rtgate/server/routes"
)

const (
	// ejectBase is the first ejection's backoff: short, so that a
	// deployment that failed once by chance is back within a second.
	ejectBase = time.Second
	// ejectMax caps the backoff of a deployment that stays down: each
	// probe of a dark deployment costs one client about the hedge delay.
	ejectMax = 30 * time.Second
)

type healthState int

const (
	healthy healthState = iota
	ejected
	probing
)

// deploymentState is what the router knows of one deployment.
type deploymentState struct {
	live    atomic.Int64 // sessions it serves now
	dialing atomic.Int64 // dials to it in flight

	// Guarded by router.mu.
	state     healthState
	until     time.Time // ejected: end of the backoff; probing: when an unanswered probe is given up
	ejections int       // consecutive ejections, for the backoff
}

// router orders a group's deployments for a connect: by health, then by
// fewest live sessions and dials in flight.
type router struct {
	now          func() time.Time
	probeTimeout time.Duration // how long a probe may stay unanswered
	log          *slog.Logger
	m            routingMetrics

	mu sync.Mutex
	ds map[string]*deploymentState
}

// routingMetrics count hedged dials and deployment health.
type routingMetrics struct {
	ejections     *prometheus.CounterVec
	ejected       *prometheus.GaugeVec
	probes        *prometheus.CounterVec
	hedgesStarted *prometheus.CounterVec
	hedgesWon     *prometheus.CounterVec
}

func newRoutingMetrics(reg prometheus.Registerer) routingMetrics {
	auto := promauto.With(reg)
	counter := func(name, help, label string) *prometheus.CounterVec {
		return auto.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, []string{label})
	}
	return routingMetrics{
		ejections: counter("rtgate_upstream_ejections_total",
			"Deployments ejected after a failed, timed-out or overtaken dial (a failed probe counts again).", "deployment"),
		ejected: auto.NewGaugeVec(prometheus.GaugeOpts{Name: "rtgate_upstream_ejected",
			Help: "1 while a deployment is ejected (routed behind the healthy ones), 0 when healthy."}, []string{"deployment"}),
		probes: counter("rtgate_upstream_probes_total",
			"Connects let through to an ejected deployment whose backoff was over, to learn whether it is back.", "deployment"),
		hedgesStarted: counter("rtgate_upstream_hedges_started_total",
			"Second dials started because a dial had not completed its upgrade within UPSTREAM_HEDGE_MS.", "model_group"),
		hedgesWon: counter("rtgate_upstream_hedges_won_total",
			"Hedged dials whose upgrade completed first and served the session.", "model_group"),
	}
}

func newRouter(reg prometheus.Registerer, log *slog.Logger, probeTimeout time.Duration) *router {
	return &router{now: time.Now, probeTimeout: probeTimeout, log: log, m: newRoutingMetrics(reg),
		ds: map[string]*deploymentState{}}
}

// stateOf returns d's state, creating it (healthy) on first use.
func (r *router) stateOf(d *routes.Deployment) *deploymentState {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.stateLocked(d)
}

func (r *router) stateLocked(d *routes.Deployment) *deploymentState {
	st := r.ds[d.Name]
	if st == nil {
		st = &deploymentState{}
		r.ds[d.Name] = st
		r.m.ejected.WithLabelValues(d.Name).Set(0)
	}
	return st
}

// counter is d's count of live sessions.
func (r *router) counter(d *routes.Deployment) *atomic.Int64 { return &r.stateOf(d).live }

// order returns the deployments of a group in the order a connect should try
// them: first an ejected deployment whose backoff is over (the probe: at
// most one connect at a time gets it), then the healthy ones, then the other
// ejected ones as a last resort; within each, fewest live sessions and dials
// in flight first (counting dials spreads a burst of connects that arrive
// together, and keeps a deployment that is slow to answer from collecting
// them), ties in random order.
func (r *router) order(ds []*routes.Deployment) []*routes.Deployment {
	out := slices.Clone(ds)
	rand.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	now := r.now()
	rank := make(map[*routes.Deployment]int, len(out))
	r.mu.Lock()
	probe := false
	for _, d := range out {
		st := r.stateLocked(d)
		switch {
		case st.state == healthy:
			rank[d] = 1
		case !probe && !now.Before(st.until):
			// An ejected deployment's backoff is over, or a probe went
			// unanswered: this connect is its probe.
			probe = true
			st.state, st.until = probing, now.Add(r.probeTimeout)
			r.m.probes.WithLabelValues(d.Name).Inc()
			rank[d] = 0
		default:
			rank[d] = 2
		}
	}
	live := make(map[*routes.Deployment]int64, len(out))
	for _, d := range out {
		st := r.ds[d.Name]
		live[d] = st.live.Load() + st.dialing.Load()
	}
	r.mu.Unlock()
	slices.SortStableFunc(out, func(a, b *routes.Deployment) int {
		return cmp.Or(cmp.Compare(rank[a], rank[b]), cmp.Compare(live[a], live[b]))
	})
	return out
}

// healthy reports whether d is healthy now (neither ejected nor being
// probed).
func (r *router) healthy(d *routes.Deployment) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.stateLocked(d).state == healthy
}

// succeeded records a dial (or a warm socket) that reached d.
func (r *router) succeeded(d *routes.Deployment) {
	r.mu.Lock()
	st := r.stateLocked(d)
	was := st.state
	st.state, st.ejections = healthy, 0
	r.mu.Unlock()
	if was != healthy {
		r.m.ejected.WithLabelValues(d.Name).Set(0)
		r.log.Info("deployment back", "deployment", d.Name)
	}
}

// failed records a dial to d that failed, timed out or was overtaken by a
// hedged dial (why says which, for the log).
func (r *router) failed(d *routes.Deployment, why string) {
	now := r.now()
	r.mu.Lock()
	st := r.stateLocked(d)
	if st.state == ejected && now.Before(st.until) {
		// Already ejected: dials that were in flight when it happened
		// fail too, and say nothing new.
		r.mu.Unlock()
		return
	}
	st.ejections++
	backoff := min(ejectBase<<min(st.ejections-1, 16), ejectMax)
	st.state, st.until = ejected, now.Add(backoff)
	r.mu.Unlock()
	r.m.ejections.WithLabelValues(d.Name).Inc()
	r.m.ejected.WithLabelValues(d.Name).Set(1)
	r.log.Warn("deployment ejected", "deployment", d.Name, "why", why, "for_ms", backoff.Milliseconds())
}
