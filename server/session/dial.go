package session

// A session's upstream: a warm socket from the pool when one is ready for
// its deployment (tryWarm), else a dial raced across the deployments the
// admission planned (connectUpstream, balance.Race), and a fresh dial in
// place of a warm socket that proved dead (redial). What is dialed is a
// target: the deployment's address, its credentials and the client headers
// that pass through (target, warmTarget for what the pools hold).

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"time"

	"github.com/gobwas/ws"

	"rtgate/frames"
	"rtgate/poller"
	"rtgate/server/balance"
	"rtgate/server/protocol"
	"rtgate/server/routes"
	"rtgate/upstream"
)

// tryWarm hands the session a warm socket of its first-choice deployment.
//
// On a miss it returns the pool's Miss (nil without a pool), which the
// client's own dial hands to connectUpstream: until it is Done the pool's
// refill yields to it (upstream.Pool.ClientDialing), and a warm socket that lands
// first serves it (upstream.Miss).
func (m *Manager) tryWarm(sess *poller.Session, info *sessionInfo, d *routes.Deployment, t upstream.Target) (hit bool, miss *upstream.Miss) {
	if m.pool == nil {
		return false, nil
	}
	return adoptWarm(m.balancer, sess, info, d, func(o poller.Owner) (*poller.Handle, []byte) {
		h, held, took := m.pool.TakeOrDial(t, info.group, o)
		miss = took
		return h, held
	}), miss
}

// adoptWarm gives the session a warm socket of deployment d if take has
// one: the session counts as a pool hit on d.
func adoptWarm(b *balance.Balancer, sess *poller.Session, info *sessionInfo, d *routes.Deployment,
	take func(poller.Owner) (*poller.Handle, []byte)) bool {
	hit := sess.AdoptWarm(func(o poller.Owner) (*poller.Handle, []byte) {
		h, held := take(o)
		if h != nil {
			// before the held frame is forwarded
			info.poolHit = true
			info.attached(b, sess, d)
		}
		return h, held
	})
	if hit {
		// A socket past session.created is as good a sign of health as
		// a dial (and answers a probe routed here).
		b.Succeeded(d)
	}
	return hit
}

// hedgedDial is the outcome of a hedged connect's own dial.
type hedgedDial struct {
	conn   *upstream.Upgraded
	d      *routes.Deployment
	status int
}

// maxHedgedDial bounds a hedged connect's own dial when DIAL_TIMEOUT sets
// none: it may outlive its client, for the pool.
const maxHedgedDial = 30 * time.Second

// dialContext is parent, cancelled as soon as the client leaves (at once if
// it already has). Its cancel also forgets the attempt: a session that kept
// cancelDial after its dial held the context, its Done channel and the
// closure for its whole life (~210 B of a plain session's ~2 KB of state,
// MemProfileRate=1 heap profile, 2,000 idle sessions).
func (i *sessionInfo) dialContext(parent context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(parent)
	i.dialMu.Lock()
	i.dialGen++
	gen := i.dialGen
	i.cancelDial = cancel
	if i.clientLeft {
		cancel()
	}
	i.dialMu.Unlock()
	return ctx, func() {
		cancel()
		i.dialMu.Lock()
		if i.dialGen == gen { // not a later attempt's (a redial)
			i.cancelDial = nil
		}
		i.dialMu.Unlock()
	}
}

// attemptContext bounds one upstream attempt for the session: it ends with
// parent (the gateway's), when the client leaves, and after timeout (the
// dial timeout) when one is set.
func (i *sessionInfo) attemptContext(parent context.Context, timeout time.Duration) (context.Context, context.CancelFunc) {
	clientCtx, cancelClient := i.dialContext(parent)
	if timeout <= 0 {
		return clientCtx, cancelClient
	}
	ctx, cancel := context.WithTimeout(clientCtx, timeout)
	return ctx, func() { cancel(); cancelClient() }
}

// dialTo is a hedged race's I/O for a session that asked with query q and
// pass-through headers h: it dials a deployment with dialer, reads the HTTP
// status a refusal carried (*upstream.Error), and closes a dial that
// completed after the race was decided with 1001 and a close frame.
func dialTo(dialer *upstream.Dialer, q url.Values, h http.Header) balance.Dial[*upstream.Upgraded] {
	return balance.Dial[*upstream.Upgraded]{
		Dial: func(ctx context.Context, d *routes.Deployment) (*upstream.Upgraded, error) {
			return dialer.Dial(ctx, target(d, q, h))
		},
		Status: func(err error) int {
			var ue *upstream.Error
			if errors.As(err, &ue) {
				return ue.Status
			}
			return 0
		},
		Abandon: func(c *upstream.Upgraded) {
			if c == nil {
				return
			}
			_ = c.Endpoint.Send(frames.AppendClose(nil, ws.StatusGoingAway, "hedged dial not needed", true))
			c.Endpoint.Close()
		},
	}
}

// connectUpstream dials the session's upstream and hands it to the session.
// It runs in its own goroutine, which ends as soon as the socket is handed
// to the reactor, the attempt fails, or the client leaves.
//
// The whole attempt, every dial of it, is bounded by the dial timeout. When
// a dial has not completed its upgrade within the hedge delay, a second
// dial to the next deployment starts beside it, and the first upgrade to
// complete wins; a dial that fails is followed at once by the next
// deployment's (nothing has reached the client from the upstream yet).
// At most balance.MaxAttempts deployments are tried.
//
// miss, when the connect missed the warm pool of cands[0], hedges the dial
// (upstream.Miss): a warm socket of that deployment landing before the
// dial completes serves the session at once, and the dial, left running,
// goes into the pool when it completes. The client leaving cancels the
// dial only while no warm socket was taken. A miss that claimed a pool dial
// already in flight (a claim) starts its own dial only when
// the claim lapses, and not at all when that dial serves it.
func (m *Manager) connectUpstream(sess *poller.Session, info *sessionInfo, cands []*routes.Deployment, q url.Values, h http.Header, miss *upstream.Miss) {
	defer miss.Done()
	ctx, cancel := info.attemptContext(m.ctx, m.cfg.DialTimeout)
	defer cancel()
	if miss == nil {
		if conn, d := m.dialFor(ctx, sess, info, cands, q, h); conn != nil {
			info.attached(m.balancer, sess, d)
			sess.AttachUpstream(poller.NewHandle(conn.Endpoint), conn.Preface)
		}
		return
	}
	raceCtx, cancelRace := context.WithTimeout(m.ctx, cmp.Or(m.cfg.DialTimeout, maxHedgedDial))
	unhook := context.AfterFunc(ctx, cancelRace) // until a warm socket is taken: the client, the timeout
	var own hedgedDial
	done := make(chan struct{})
	taken := make(chan struct{}) // a warm socket was taken: a dial not yet started is not needed
	go func() {
		defer close(done)
		select { // a miss that claimed a pool dial in flight waits for it first (upstream.Miss.DialNow)
		case <-miss.DialNow():
		case <-taken:
			return
		case <-raceCtx.Done():
			return
		}
		own.conn, own.d, own.status = balance.Race(info.trace.Context(raceCtx), m.balancer, info.group, cands, dialTo(m.dialer, q, h))
	}()
	for {
		select {
		case <-done:
			unhook()
			cancelRace()
			info.redial = nil // a fresh dial is never redialed
			if conn, d := raced(info.proto(), sess, info, own); conn != nil {
				info.attached(m.balancer, sess, d)
				sess.AttachUpstream(poller.NewHandle(conn.Endpoint), conn.Preface)
			}
			return
		case <-miss.Landed():
			if ctx.Err() != nil {
				miss.Done() // the client left (its dial is cancelled): the socket is the next miss's
				continue
			}
			if !adoptWarm(m.balancer, sess, info, cands[0], miss.Take) {
				continue // another took it; Take keeps the miss waiting
			}
			miss.Done()
			unhook() // the dial now runs for the pool, whoever leaves
			close(taken)
			go func() {
				<-done
				cancelRace()
				if own.conn != nil {
					miss.Give(target(own.d, q, h), own.conn)
				}
			}()
			return
		}
	}
}

// dialFor is the dial tail every upstream attempt of a session shares (a
// fresh connect, a redial, a primed session's): the hedged race over cands
// and, when it gives nothing, the session's end: cancelled when its client
// left (nobody to tell), else told that no upstream could be reached.
func (m *Manager) dialFor(ctx context.Context, sess *poller.Session, info *sessionInfo, cands []*routes.Deployment,
	q url.Values, h http.Header) (*upstream.Upgraded, *routes.Deployment) {
	conn, d, status := balance.Race(info.trace.Context(ctx), m.balancer, info.group, cands, dialTo(m.dialer, q, h))
	return raced(info.proto(), sess, info, hedgedDial{conn, d, status})
}

// raced is the end of a session's dial race: the winner, or, when it gave
// nothing, the session's end (see dialFor).
func raced(p protocol.Protocol, sess *poller.Session, info *sessionInfo, r hedgedDial) (*upstream.Upgraded, *routes.Deployment) {
	conn, d, status := r.conn, r.d, r.status
	switch {
	case conn != nil:
		return conn, d
	case info.left():
		info.trace.Failed("the client left during the dial")
		sess.Cancel()
	default:
		info.trace.Failed("no upstream could be reached")
		dialFailed(p, sess, status)
	}
	return nil, nil
}

// dialFailed tells the client that no upstream could be reached (status is
// the HTTP status of the last refusal, 0 when none answered).
func dialFailed(p protocol.Protocol, sess *poller.Session, status int) {
	msg := "the upstream could not be reached"
	if status != 0 {
		msg = fmt.Sprintf("the upstream refused the connection with HTTP %d", status)
	}
	notice := p.Refusal("upstream_unavailable", msg, status)
	if sess.Resumes() > 0 {
		sess.ResumeFailed(notice) // a resume's dial: the session had an upstream
		return
	}
	sess.DialFailed(notice)
}

// redial is SessionConfig.Redial: a warm socket died before the client sent
// it anything, so the session gets a fresh upstream through the ordinary
// connect path (failover included).
func (m *Manager) redial(sess *poller.Session) bool {
	m.sessMu.Lock()
	info := m.sessions[sess]
	m.sessMu.Unlock()
	if info == nil || info.redial == nil {
		return false
	}
	info.uncount(m.balancer, true)
	m.metrics.warmRedials.Inc()
	go info.redial()
	return true
}

// passThroughHeaders are the client headers that go upstream; every other
// client header (credentials, OpenAI-Organization, OpenAI-Project) stays.
// OpenAI-Beta is part of a pool key's shape; OpenAI-Safety-Identifier, one
// end user's, makes the connect dial direct (upstream.Poolable).
var passThroughHeaders = []string{"OpenAI-Beta", "OpenAI-Safety-Identifier"}

// target is the upstream request for deployment d: the client's query, the
// deployment's credentials, and the client headers that pass through.
func target(d *routes.Deployment, q url.Values, h http.Header) upstream.Target {
	t := dialTarget(d, q)
	for _, name := range passThroughHeaders {
		if v := h.Values(name); len(v) > 0 {
			t.Header[name] = slices.Clone(v)
		}
	}
	return t
}

// warmTarget is the upstream request a warm pool holds for deployment d
// (PrimePools): a Realtime deployment's for its model group, a GPT-Live
// deployment's as it is. A plain connect to d maps to the same target.
func warmTarget(d *routes.Deployment, group string) upstream.Target {
	if d.Protocol == routes.ProtocolLive {
		return target(d, nil, nil)
	}
	return target(d, url.Values{"model": {group}}, nil)
}

// passThrough returns the client headers that go upstream, copied, or nil
// when there are none: what target reads of h.
func passThrough(h http.Header) http.Header {
	var out http.Header
	for _, name := range passThroughHeaders {
		if v := h.Values(name); len(v) > 0 {
			if out == nil {
				out = make(http.Header, len(passThroughHeaders))
			}
			out[http.CanonicalHeaderKey(name)] = slices.Clone(v)
		}
	}
	return out
}

// primePool warms, in pool, every deployment of table r that speaks
// protocol, and only those (pool nil: off): a pool exists per configured
// deployment, never per client (upstream.Poolable), and a reload's removed
// deployments lose theirs; deployments billed by connection time are never
// warmed. The Realtime pool holds Realtime deployments'
// sockets, the Live pool GPT-Live's (warm before session.start).
func primePool(pool *upstream.Pool, r *routes.Table, protocol string) {
	if pool == nil {
		return
	}
	var keep []upstream.Target
	for g, ds := range r.Groups {
		for _, d := range ds {
			if d.Protocol != protocol || d.BilledByTime() || d.Translated() {
				// A provider that bills connection time (xAI) would
				// bill every warm socket while it waits: $3 an hour
				// each at xAI's price. A translated one (Gemini) says
				// nothing until the client's setup, so no socket of
				// it is ever "warm". Their sessions dial.
				continue
			}
			t := warmTarget(d, g)
			pool.Prime(t, g)
			keep = append(keep, t)
		}
	}
	pool.Retain(keep)
}

// dialTarget is what a session dials for a client's query at deployment d:
// the deployment's address (routes.Deployment.Address, which keeps the
// client's other parameters and sets the model) as an upstream.Target. The
// session builds it, so the configuration stays free of the dialer's types.
// A credential that expires (Vertex AI's access token) is not fetched here,
// on the connect path, but by the dial itself (Authorize), in the dialing
// goroutine and within the dial's deadline.
func dialTarget(d *routes.Deployment, clientQuery url.Values) upstream.Target {
	u, h := d.Address(clientQuery)
	return upstream.Target{URL: u, Header: h, Authorize: d.Authorizer()}
}

// liveDialTarget is a GPT-Live deployment's target for a request under its
// sessions path (routes.Deployment.LiveAddress: suffix "/{id}/attach" for a
// sideband, "/{id}/fork" for a fork, ...), q the query to send.
func liveDialTarget(d *routes.Deployment, suffix string, q url.Values) upstream.Target {
	u, h := d.LiveAddress(suffix, q)
	return upstream.Target{URL: u, Header: h}
}
