package balance

// Routing strategies: how the healthy deployments of a group are ordered
// for a connect (router_settings.routing_strategy, routes.Router). Health
// comes first whatever the strategy: a due probe, then the healthy
// deployments in the strategy's order, then the ejected ones by load.
//
//	strategy                 healthy deployments, first to last
//	least-busy (default)     fewest live sessions and dials in flight, ties at random
//	simple-shuffle           random, weighted by weight, else rpm, else tpm, else evenly
//	latency-based-routing    lowest mean recent first-audio time (ttl,
//	                         max_latency_list_size), those within
//	                         lowest_latency_buffer of the lowest at random;
//	                         unmeasured ones first; 1 connect in 10 in random order.
//	                         A turn the upstream failed is a sample of
//	                         Penalty (10 s); a group with no voice
//	                         samples (text-only sessions) ranks by first text
//	usage-based-routing(-v2) as least-busy
//	cost-based-routing       as least-busy

import (
	"cmp"
	"math"
	"math/rand/v2"
	"slices"
	"time"

	"rtgate/server/routes"
)

// explore is the share of latency-routed connects that go to a random
// healthy deployment instead of the fastest, so that one that got faster
// (or whose samples are old) is measured again.
const explore = 10 // percent

// order sorts the healthy deployments hs (already shuffled) by r's
// strategy; callers hold mu.
func (b *Balancer) order(hs []*routes.Deployment, r routes.Router, now time.Time) {
	switch r.Strategy {
	case routes.SimpleShuffle:
		weightedShuffle(hs)
	case routes.LatencyBased:
		b.byLatency(hs, r, now)
	default: // least-busy, and the strategies that fall back to it
		slices.SortStableFunc(hs, func(x, y *routes.Deployment) int { return cmp.Compare(b.load(x), b.load(y)) })
	}
}

func (b *Balancer) load(d *routes.Deployment) int64 {
	h := b.host(d)
	return h.live.Load() + h.dialing.Load()
}

// weightedShuffle orders ds at random, each deployment's chance of coming
// first proportional to its weight (Efraimidis-Spirakis: sort by
// u^(1/w)): weight if any deployment has one, else rpm, else tpm, else
// evenly, as LiteLLM's simple-shuffle picks.
func weightedShuffle(ds []*routes.Deployment) {
	weight := func(d *routes.Deployment) float64 { return 1 }
	for _, f := range []func(d *routes.Deployment) float64{
		func(d *routes.Deployment) float64 { return d.Weight },
		func(d *routes.Deployment) float64 { return d.RPM },
		func(d *routes.Deployment) float64 { return d.TPM },
	} {
		if slices.ContainsFunc(ds, func(d *routes.Deployment) bool { return f(d) > 0 }) {
			weight = f
			break
		}
	}
	key := make(map[*routes.Deployment]float64, len(ds))
	for _, d := range ds {
		w := weight(d)
		if w <= 0 {
			key[d] = -1 // after every weighted one
			continue
		}
		key[d] = math.Pow(rand.Float64(), 1/w)
	}
	slices.SortStableFunc(ds, func(x, y *routes.Deployment) int { return cmp.Compare(key[y], key[x]) })
}

// byLatency orders hs by their recent first-audio latency; callers hold mu.
func (b *Balancer) byLatency(hs []*routes.Deployment, r routes.Router, now time.Time) {
	if len(hs) < 2 {
		return
	}
	if rand.IntN(100) < explore {
		i := rand.IntN(len(hs))
		hs[0], hs[i] = hs[i], hs[0]
		return
	}
	// Voice samples when any deployment has some, else text-only
	// sessions' first output.
	list := func(h *Host) *latencies { return &h.latency }
	if !slices.ContainsFunc(hs, func(d *routes.Deployment) bool { _, ok := b.host(d).latency.mean(r, now); return ok }) {
		list = func(h *Host) *latencies { return &h.textLatency }
	}
	mean := make(map[*routes.Deployment]float64, len(hs))
	lowest := math.Inf(1)
	for _, d := range hs {
		m, ok := list(b.host(d)).mean(r, now)
		if !ok {
			m = 0 // unmeasured: tried first, as LiteLLM does
		}
		mean[d], lowest = m, min(lowest, m)
	}
	// Within the buffer of the lowest counts as the lowest (hs came
	// shuffled, so the stable sort picks among them at random).
	bound := lowest * (1 + r.LowestLatencyBuffer)
	slices.SortStableFunc(hs, func(x, y *routes.Deployment) int {
		mx, my := mean[x], mean[y]
		if mx <= bound {
			mx = lowest
		}
		if my <= bound {
			my = lowest
		}
		return cmp.Compare(mx, my)
	})
}

// latencies are a deployment's recent first-audio times, newest last, at
// most maxLatencies (the list size a Router may ask for is capped there).
type latencies struct {
	at   []time.Time
	secs []float64
}

// maxLatencies bounds max_latency_list_size's memory per deployment.
const maxLatencies = 1024

func (l *latencies) add(now time.Time, secs float64) {
	if len(l.at) == maxLatencies {
		l.at, l.secs = l.at[1:], l.secs[1:]
	}
	l.at, l.secs = append(l.at, now), append(l.secs, secs)
}

// mean is the mean of the newest r.MaxLatencyListSize samples younger than
// r.TTL; ok is false when there are none.
func (l *latencies) mean(r routes.Router, now time.Time) (float64, bool) {
	sum, n := 0.0, 0
	for i := len(l.secs) - 1; i >= 0 && n < max(r.MaxLatencyListSize, 1); i-- {
		if now.Sub(l.at[i]) > r.TTL {
			break
		}
		sum, n = sum+l.secs[i], n+1
	}
	if n == 0 {
		return 0, false
	}
	return sum / float64(n), true
}
