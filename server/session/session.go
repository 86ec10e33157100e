package session

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gobwas/ws"

	"rtgate/frames"
	"rtgate/poller"
	"rtgate/server/apps"
	"rtgate/server/balance"
	"rtgate/server/continuity"
	"rtgate/server/protocol"
	"rtgate/server/routes"
	"rtgate/server/tracing"
	"rtgate/server/turns"
	"rtgate/server/usage"
	"rtgate/upstream"
)

// passThroughHeaders are the client headers that go upstream; every other
// client header (credentials, OpenAI-Organization, OpenAI-Project) stays.
// OpenAI-Beta is part of a pool key's shape; OpenAI-Safety-Identifier, one
// end user's, makes the connect dial direct (upstream.Poolable).
var passThroughHeaders = []string{"OpenAI-Beta", "OpenAI-Safety-Identifier"}

// sessionInfo is what the gateway knows of a session beyond the relay: who,
// which model group, which deployment served it, and the tokens it used.
// The meter is the session's inspector on the upstream's frames.
type sessionInfo struct {
	id    string // the gateway's session id (usage.NewSessionID)
	key   *routes.ClientKey
	group string
	// depMu guards deployment and counted: a redial (its own goroutine)
	// and the session's end may race over them. Lock order: taken under
	// the relay's client lock by the watch's observers (observer); it may
	// be held over the balancer's mutex (uncount's Detach), never over a
	// relay lock.
	depMu      sync.Mutex
	deployment *routes.Deployment // nil until an upstream is attached
	counted    bool               // deployment's live count includes this session
	ended      bool               // the session ended: a late attach (a redial's) is not counted
	poolHit    bool               // the upstream came from the warm pool
	keyCounted bool               // it counts against its key's max_sessions (admission.Gate.Admit): sessionEnded gives it back
	overBudget atomic.Bool        // ended by its key's spend budget (budgets.meter); beside the flags: one word
	meter      usage.Meter
	turns      turns.Watch        // the session's turns (setupWatch.seeTurn)
	trace      *tracing.Session   // its spans; nil with tracing off
	start      time.Time          // when the client's upgrade completed
	redial     func()             // dials a fresh upstream after a dead warm one
	reserved   *routes.Deployment // holds a slot of its rpm/max_parallel_requests (balance.Reserve)
	grant      *apps.Grant        // the client secret it connected with; nil for a key
	live       *liveState         // a GPT-Live session's own; nil for Realtime
	kind       sessionKind        // its upgrade's; a WebRTC session's meter (liveMetering, callMeters) says its own
	sideband   *appSideband       // a Live sideband's metering side; nil: it meters nothing
	// Session continuity (keepContinuity): nil when off for the session; the
	// kept conversation (a nil State until something is kept); the
	// resumes so far (under depMu).
	resume  *resumeArgs
	keep    continuity.Keeper
	resumes []usage.Resume

	// A Realtime conversation session's responses in flight (keepFlights;
	// nil for other sessions), how long its end waits for them, and what
	// was billed of them by estimate (under estMu).
	flights    *usage.Flights
	cancelWait time.Duration
	estMu      sync.Mutex
	estimated  usage.Usage
	// unpriced names the models of usage no price was found for
	// (transcriptionCost), booked on the read path, read at the end.
	unpriced []string

	// The client leaving cancels the upstream attempt made for it.
	dialMu     sync.Mutex
	clientLeft bool
	dialGen    uint32 // which attempt cancelDial belongs to
	cancelDial context.CancelFunc
}

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

// left reports whether the client left (it is only asked once
// the upstream attempt is over).
func (i *sessionInfo) left() bool {
	i.dialMu.Lock()
	defer i.dialMu.Unlock()
	return i.clientLeft
}

// clientLeft is what the client socket closing means to the gateway: an
// upstream still being dialed for it is no longer wanted (cancelled first),
// then the session hears that its client is gone.
func (m *Manager) clientLeft(sess *poller.Session) {
	m.sessMu.Lock()
	info := m.sessions[sess]
	m.sessMu.Unlock()
	if info != nil {
		info.dialMu.Lock()
		info.clientLeft = true
		if info.cancelDial != nil {
			info.cancelDial()
		}
		info.dialMu.Unlock()
		if info.live != nil {
			info.live.clientLeft()
		}
	}
	sess.ClientGone()
}

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

// WarmTarget is the upstream request a warm pool holds for deployment d
// (PrimePools): a Realtime deployment's for its model group, a GPT-Live
// deployment's as it is. A plain connect to d maps to the same target.
func WarmTarget(d *routes.Deployment, group string) upstream.Target {
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

// primePool warms every Realtime deployment's target, and only those
// (pool nil: off): a pool exists per configured deployment, never per
// client (upstream.Poolable).
func primePool(pool *upstream.Pool, r *routes.Table) {
	if pool == nil {
		return
	}
	var keep []upstream.Target
	for g, ds := range r.Groups {
		for _, d := range ds {
			if d.Protocol != routes.ProtocolRealtime {
				continue // a Live socket is warm before session.start: not this pool's kind
			}
			t := WarmTarget(d, g)
			pool.Prime(t, g)
			keep = append(keep, t)
		}
	}
	pool.Retain(keep) // a reload's removed deployments lose their pools
}

// attached records that deployment d serves the session.
func (i *sessionInfo) attached(b *balance.Balancer, d *routes.Deployment) {
	i.depMu.Lock()
	count := !i.ended
	i.deployment, i.counted = d, count
	i.depMu.Unlock()
	if count {
		b.Attach(d)
	}
	i.turns.Attached() // the client's events queued for it go now
	i.trace.Attached(traceWhere(d), i.poolHit)
}

// uncount takes the session out of its deployment's live count, once, and
// returns the deployment it had (nil if none); forget drops it, for a redial
// that will attach another, and otherwise the session has ended.
func (i *sessionInfo) uncount(b *balance.Balancer, forget bool) *routes.Deployment {
	i.depMu.Lock()
	d, counted := i.deployment, i.counted
	i.counted = false
	if forget {
		i.deployment = nil
	} else {
		i.ended = true
	}
	i.depMu.Unlock()
	if counted {
		b.Detach(d)
	}
	return d
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

// protocol names the protocol the session speaks, for metrics and its
// record.
func (i *sessionInfo) protocol() string { return i.kind.traits().label }

// currentDeployment is the deployment serving the session (nil if none yet).
func (i *sessionInfo) currentDeployment() *routes.Deployment {
	i.depMu.Lock()
	defer i.depMu.Unlock()
	return i.deployment
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
			info.attached(m.balancer, d)
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
				info.attached(m.balancer, d)
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

// sessionConfig is what every session of m shares: the limits, and the
// Manager's answers to the relay's events.
func sessionConfig(m *Manager) poller.SessionConfig {
	return poller.SessionConfig{
		MaxMessage:   m.cfg.MaxMessage,
		MaxPending:   m.cfg.MaxPending,
		CloseTimeout: m.cfg.CloseTimeout,
		OnEnd:        m.sessionEnded,
		UpstreamInvalid: func(reason string) []byte {
			return protocol.Realtime{}.Refusal("upstream_protocol_error", "the upstream sent an invalid frame: "+reason, 0)
		},
		Redial:         m.redial,
		Resume:         m.resume,
		MidFrameLost:   m.midFrameLost,
		SameFirstFrame: protocol.Realtime{}.Warm, // a redialed upstream's session.created is consumed: the client has the warm socket's
	}
}

// sessionEnded is SessionConfig.OnEnd: the session leaves the registry,
// gives back its slots and counts, and its record is written.
func (m *Manager) sessionEnded(sess *poller.Session) {
	m.sessMu.Lock()
	info := m.sessions[sess]
	delete(m.sessions, sess)
	m.sessMu.Unlock()
	if info == nil {
		m.sessionsOpen.Add(-1)
		return
	}
	if info.keyCounted {
		m.admitter.Release(info.key.Name)
	}
	deployment := ""
	dep := info.uncount(m.balancer, false)
	info.depMu.Lock() // a resume may have swapped it
	reserved := info.reserved
	info.reserved = nil
	info.depMu.Unlock()
	m.balancer.Release(reserved)
	if dep != nil {
		deployment = dep.Name
	}
	mt := m.metrics
	mt.sessionsOpen.Dec()
	mt.protocolOpen.WithLabelValues(info.protocol()).Dec()
	fin, bin, fout, bout := sess.Counters()
	mt.frames.WithLabelValues("client_to_upstream").Add(float64(fin))
	mt.bytes.WithLabelValues("client_to_upstream").Add(float64(bin))
	mt.frames.WithLabelValues("upstream_to_client").Add(float64(fout))
	mt.bytes.WithLabelValues("upstream_to_client").Add(float64(bout))

	cl, from, ok := sess.FirstClose()
	outcome := sessionOutcome(sess, cl, from, ok)
	if dep == nil && info.left() {
		outcome = "client_lost" // it left while its upstream was being dialed
	}
	mt.sessionsTotal.WithLabelValues(outcome, info.key.Name).Inc()
	m.estimateFlights(info) // responses still in flight: billed an estimate
	u := info.meter.Usage
	est := info.estimatedUsage()
	if est != nil {
		u.Add(*est)
	}
	if info.live != nil {
		u = info.live.meter.Usage // the backend tokens
	}
	m.metrics.countTokens(info.group, info.key.Name, u)

	rec := usage.Record{
		SessionID: info.id, KeyName: info.key.Name, ModelGroup: info.group, Deployment: deployment,
		StartedAt: info.start.UTC(), EndedAt: time.Now().UTC(), DurationMS: time.Since(info.start).Milliseconds(),
		PoolHit: info.poolHit, Outcome: outcome, Protocol: "realtime",
		FramesIn: fin, BytesIn: bin, FramesOut: fout, BytesOut: bout,
		Usage: u, Estimated: est, Unconfirmed: est != nil, Transcription: info.meter.Transcription,
	}
	info.resumeRecord(&rec)
	info.stopRollover()
	info.keep.Release()
	if ok {
		rec.CloseCode, rec.CloseReason, rec.CloseSide = int(cl.Code), cl.Reason, from.String()
	}
	if info.live != nil {
		info.live.fill(&rec)
		mt.liveSeconds.WithLabelValues(rec.ModelGroup, rec.KeyName).Add(rec.Seconds)
		if rec.Unconfirmed {
			mt.liveUnconfirmed.WithLabelValues(rec.ModelGroup).Inc()
		}
	}
	rec.Turns, rec.FirstAudioP50MS, rec.FirstAudioP95MS = mt.endTurns(info)
	info.trace.End()
	if info.kind == kindLiveSideband {
		rec.Protocol = routes.ProtocolLive // its session's usage is the session's own record (liveMetering), not this one's
		info.sideband.ended()
	}
	if info.kind == kindTranslation && dep != nil {
		rec.Protocol, rec.Seconds = routes.ProtocolTranslation, float64(rec.DurationMS)/1000 // wall clock: billed by the minute of session
	}
	m.records.record(info, &rec)
	mt.protocolTotal.WithLabelValues(info.protocol(), rec.Outcome).Inc()
	explainBeta(m.log, rec)
	m.sessionsOpen.Add(-1) // last: tests and Drain take 0 to mean all is done
}

// sessionOutcome classifies how a session ended, for metrics.
func sessionOutcome(sess *poller.Session, cl frames.Close, from frames.Side, ok bool) string {
	switch {
	case sess.UpstreamUnavailable():
		return "upstream_unavailable"
	case !ok:
		return "unknown"
	case cl.Code == ws.StatusAbnormalClosure: // the socket dropped without a close frame
		return from.String() + "_lost"
	case cl.Code == ws.StatusProtocolError || cl.Code == ws.StatusInvalidFramePayloadData || cl.Code == ws.StatusMessageTooBig:
		return from.String() + "_protocol_error"
	}
	return from.String() + "_closed"
}

// What the gateway tells a client, in its protocol's words (info.proto() builds
// the frames: server/protocol). The reactor (poller) relays frames and
// reports events; the gateway decides what an event means to the client, and
// keeps the per-session bookkeeping that feeds metrics (pool hit, setup
// time).

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

// terminate ends a session on the gateway's initiative with an error event
// (errCode, message) and close code and reason.
func terminate(p protocol.Protocol, sess *poller.Session, code ws.StatusCode, reason, errCode, message string) {
	sess.Terminate(code, reason, p.Refusal(errCode, message, 0))
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
