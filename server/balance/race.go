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

	"github.com/gobwas/ws"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"rtgate/frames"
	"rtgate/server/routes"
	"rtgate/upstream"
)

// MaxAttempts bounds failover: a connect tries at most this many
// deployments of its model group before the client gets the error.
const MaxAttempts = 3

// DialFunc dials deployment d for the session being connected.
type DialFunc func(ctx context.Context, d *routes.Deployment) (*upstream.Upgraded, error)

// dialResult is one dial's outcome.
type dialResult struct {
	i    int // index of the dial in the attempt
	conn *upstream.Upgraded
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
func (b *Balancer) Race(ctx context.Context, group string, cands []*routes.Deployment, dial DialFunc) (*upstream.Upgraded, *routes.Deployment, int) {
	cands = cands[:min(len(cands), MaxAttempts)]
	results := make(chan dialResult, len(cands)) // buffered: no dial waits for a reader that left
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
			conn, err := dial(dctx, d)
			dialing.Add(-1)
			results <- dialResult{i: i, conn: conn, err: err}
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
			go closeLate(results, inflight)
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
			var ue *upstream.Error
			if errors.As(r.err, &ue) && ue.Status != 0 {
				status = ue.Status
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
			return nil, nil, status
		}
	}
	stop()
	return nil, nil, status
}

// closeLate collects the results of n cancelled dials and closes any that
// completed its upgrade anyway, with 1001 and a close frame, as a client
// that changed its mind would.
func closeLate(results <-chan dialResult, n int) {
	for range n {
		r := <-results
		if r.conn != nil {
			ep := r.conn.Endpoint
			_ = ep.Send(frames.AppendClose(nil, ws.StatusGoingAway, "hedged dial not needed", true))
			ep.Close()
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
