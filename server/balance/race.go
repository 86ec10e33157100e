package balance

// Hedged dials. A connect's upstream attempt may run more than one dial at a
// time: when a dial has not completed its upgrade within the hedge delay
// (UPSTREAM_HEDGE_MS), the next deployment is dialed beside it and the first
// upgrade to complete wins. The dial that lost is cancelled, and closed with
// a close frame if it completed anyway. A deployment that went dark (accepts
// TCP, never answers) thus costs a connect about the hedge delay, not the
// dial timeout, and the dial it overtook ejects it (Balancer.Failed).

import (
	"context"
	"errors"
	"slices"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"rtgate/server/routes"
)

// MaxAttempts bounds failover: a connect tries at most this many
// deployments of its model group before the client gets the error.
const MaxAttempts = 3

// Dial is what a race needs from its caller, which does the I/O: the
// balancer ranks and reserves, the caller dials. C is what a completed dial
// yields (the session's upgraded upstream connection).
type Dial[C any] struct {
	// Dial dials deployment d for the session being connected.
	Dial func(ctx context.Context, d *routes.Deployment) (C, error)
	// Status is the HTTP status with which the deployment refused a
	// failed dial, 0 if it did not answer with one.
	Status func(err error) int
	// Abandon closes a dial that completed after the race was decided
	// (with 1001, as a client that changed its mind would).
	Abandon func(conn C)
}

// dialResult is one dial's outcome.
type dialResult[C any] struct {
	i    int // index of the dial in the attempt
	conn C
	err  error
}

// attempt is one dial of a race.
type attempt struct {
	d       *routes.Deployment
	cancel  context.CancelFunc
	started time.Time
	hedge   bool // started by the hedge delay rather than as the first or a failover
	done    bool
}

// Race runs the dials of one connect of group until one completes its
// upgrade, all have failed, or ctx ends; at most MaxAttempts of cands are
// tried. It returns the winner and its deployment, or the HTTP status of
// the last refusal (0 if none). Dials still in flight when it returns are
// cancelled; one that completes anyway is closed with 1001. Each dial's
// outcome goes to Succeeded or Failed, except one abandoned because ctx
// was cancelled (the client left, the gateway is stopping).
//
// Candidates come in plan order (the probe, healthy, then ejected ones). A
// failover takes the next candidate whatever its health (the ones before
// it just failed). A hedge takes the next healthy one; it takes an ejected
// one only when no deployment of the attempt is healthy, so that ejected
// deployments stay skipped while a healthy one exists.
//
// Race is a function, not a method, because it is generic over C.
func Race[C any](ctx context.Context, b *Balancer, group string, cands []*routes.Deployment, dial Dial[C]) (C, *routes.Deployment, int) {
	var none C
	cands = cands[:min(len(cands), MaxAttempts)]
	results := make(chan dialResult[C], len(cands)) // buffered: no dial waits for a reader that left
	dials := make([]attempt, 0, len(cands))
	pending := slices.Clone(cands) // not dialed yet, in order
	inflight, status := 0, 0
	start := func(k int, hedge bool) {
		d := pending[k]
		pending = slices.Delete(pending, k, k+1)
		i := len(dials)
		dctx, cancel := context.WithCancel(ctx)
		dials = append(dials, attempt{d: d, cancel: cancel, started: time.Now(), hedge: hedge})
		inflight++
		dialing := &b.hostOf(d).dialing
		dialing.Add(1)
		go func() {
			conn, err := dial.Dial(dctx, d)
			dialing.Add(-1)
			results <- dialResult[C]{i: i, conn: conn, err: err}
		}()
	}
	// hedgeTo is the pending candidate a hedge dials now, -1 for none.
	hedgeTo := func() int {
		if k := slices.IndexFunc(pending, b.Healthy); k >= 0 {
			return k
		}
		for i := range dials {
			if !dials[i].done && b.Healthy(dials[i].d) {
				return -1 // slow but healthy: no reason to try an ejected one
			}
		}
		if len(pending) > 0 {
			return 0
		}
		return -1
	}
	var hedgeTimer *time.Timer
	var hedgeC <-chan time.Time
	armHedge := func() {
		if hedgeTimer != nil {
			hedgeTimer.Stop()
		}
		hedgeTimer, hedgeC = nil, nil
		if b.cfg.HedgeDelay > 0 && len(pending) > 0 {
			hedgeTimer = time.NewTimer(b.cfg.HedgeDelay)
			hedgeC = hedgeTimer.C
		}
	}
	// stop cancels what is still in flight and closes whatever completes
	// late.
	stop := func() {
		if hedgeTimer != nil {
			hedgeTimer.Stop()
		}
		for i := range dials {
			if !dials[i].done {
				dials[i].cancel()
			}
		}
		if inflight > 0 {
			go closeLate(results, inflight, dial.Abandon)
		}
	}

	start(0, false)
	armHedge()
	for inflight > 0 {
		select {
		case <-hedgeC:
			k := hedgeTo()
			if k < 0 {
				armHedge() // look again after another hedge delay
				continue
			}
			b.m.hedgesStarted.WithLabelValues(group).Inc()
			traceDial(ctx, "dial.hedge", pending[k].Name, nil)
			b.log.Debug("upstream dial slow; hedging", "deployment", dials[len(dials)-1].d.Name,
				"next", pending[k].Name, "after_ms", b.cfg.HedgeDelay.Milliseconds())
			start(k, true)
			armHedge()

		case r := <-results:
			inflight--
			dl := &dials[r.i]
			dl.done = true
			dl.cancel()
			if r.err == nil {
				// The first upgrade to complete wins. Dials started
				// before it and still going were overtaken: that is
				// what a deployment that went dark looks like.
				for j := range dials {
					if o := &dials[j]; !o.done && o.started.Before(dl.started) {
						b.Failed(o.d, "overtaken by a hedged dial")
					}
				}
				if dl.hedge {
					b.m.hedgesWon.WithLabelValues(group).Inc()
				}
				b.Succeeded(dl.d)
				b.observeDial(dl.d, time.Since(dl.started))
				traceDial(ctx, "dial.done", dl.d.Name, nil)
				stop()
				return r.conn, dl.d, 0
			}
			if ctx.Err() != nil && errors.Is(context.Cause(ctx), context.Canceled) {
				continue // the client left or the gateway is stopping: no verdict on the deployment
			}
			if st := dial.Status(r.err); st != 0 {
				status = st
			}
			b.cfg.DialFailures.WithLabelValues(group).Inc()
			b.log.Warn("upstream dial failed", "deployment", dl.d.Name, "attempt", r.i+1, "status", status,
				"after_ms", time.Since(dl.started).Milliseconds(), "err", r.err)
			b.Failed(dl.d, "dial failed")
			traceDial(ctx, "dial.failed", dl.d.Name, r.err)
			if inflight == 0 && len(pending) > 0 && ctx.Err() == nil {
				start(0, false) // fail over at once
				armHedge()
			}

		case <-ctx.Done():
			// The attempt's time is up (or the client left): what is
			// still dialing timed out, unless the client left.
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				for i := range dials {
					if !dials[i].done {
						b.cfg.DialFailures.WithLabelValues(group).Inc()
						b.log.Warn("upstream dial timed out", "deployment", dials[i].d.Name, "attempt", i+1,
							"after_ms", time.Since(dials[i].started).Milliseconds())
						b.Failed(dials[i].d, "dial timed out")
					}
				}
			}
			stop()
			return none, nil, status
		}
	}
	stop()
	return none, nil, status
}

// closeLate collects the results of n cancelled dials and hands any that
// completed its upgrade anyway to abandon.
func closeLate[C any](results <-chan dialResult[C], n int, abandon func(C)) {
	for range n {
		if r := <-results; r.err == nil {
			abandon(r.conn)
		}
	}
}

// traceDial adds an event to the connect span ctx carries (none: tracing is
// off, and this costs an interface call).
func traceDial(ctx context.Context, what, deployment string, err error) {
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	attrs := []attribute.KeyValue{attribute.String("rtgate.deployment", deployment)}
	if err != nil {
		attrs = append(attrs, attribute.String("error.message", err.Error()))
	}
	span.AddEvent(what, trace.WithAttributes(attrs...))
}
