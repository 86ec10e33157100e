package balance

// Passive health of upstream deployments. Nothing is sent to a deployment to
// learn its health: the gateway watches the dials it makes for clients. A
// deployment whose dial fails, times out, or is overtaken by a hedged dial
// is ejected for a backoff period, and ranking puts it behind every healthy
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
//	ejected  backoff over, a connect goes to it first probing (that connect dials it first)
//	probing  dial ok                                  healthy
//	probing  dial failed / timed out / overtaken      ejected (backoff n+1)
//	probing  no outcome within the dial timeout       ejected, backoff over (the next connect probes)
//
// A dial abandoned because its client left says nothing about the
// deployment and is no event. Backoff n is ejectBase·2^(n-1), at most
// ejectMax.

import (
	"time"

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

func (s healthState) String() string { return [...]string{"healthy", "ejected", "probing"}[s] }

// health is a Host's place in the table above.
type health struct {
	state     healthState
	until     time.Time // ejected: end of the backoff; probing: when an unanswered probe is given up
	ejections int       // consecutive ejections, for the backoff
}

// due reports whether a connect may probe the deployment now: its backoff
// is over, or a probe went unanswered.
func (h *health) due(now time.Time) bool { return h.state != healthy && !now.Before(h.until) }

// claimProbe makes the connect being planned d's probe; callers hold mu.
func (b *Balancer) claimProbe(d *routes.Deployment, now time.Time) {
	h := &b.host(d).health
	h.state, h.until = probing, now.Add(b.cfg.ProbeTimeout)
	b.m.probes.WithLabelValues(d.Name).Inc()
}

// Healthy reports whether d is healthy now (neither ejected nor being
// probed).
func (b *Balancer) Healthy(d *routes.Deployment) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.host(d).health.state == healthy
}

// Succeeded records a dial (or a warm socket, or an HTTP call) that reached
// d.
func (b *Balancer) Succeeded(d *routes.Deployment) {
	b.mu.Lock()
	h := &b.host(d).health
	was := h.state
	h.state, h.ejections = healthy, 0
	b.mu.Unlock()
	if was != healthy {
		b.m.ejected.WithLabelValues(d.Name).Set(0)
		b.log.Info("deployment back", "deployment", d.Name)
	}
}

// Failed records a dial to d that failed, timed out or was overtaken by a
// hedged dial (why says which, for the log).
func (b *Balancer) Failed(d *routes.Deployment, why string) {
	now := b.now()
	b.mu.Lock()
	h := &b.host(d).health
	if h.state == ejected && now.Before(h.until) {
		// Already ejected: dials that were in flight when it happened
		// fail too, and say nothing new.
		b.mu.Unlock()
		return
	}
	h.ejections++
	backoff := min(ejectBase<<min(h.ejections-1, 16), ejectMax)
	h.state, h.until = ejected, now.Add(backoff)
	b.mu.Unlock()
	b.m.ejections.WithLabelValues(d.Name).Inc()
	b.m.ejected.WithLabelValues(d.Name).Set(1)
	b.log.Warn("deployment ejected", "deployment", d.Name, "why", why, "for_ms", backoff.Milliseconds())
}
