package server

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"rtgate/poller"
	"rtgate/server/routes"
	"rtgate/server/usage"
	"rtgate/upstream"
)

// maxDialAttempts bounds failover: a connect tries at most this many
// deployments of its model group before the client gets the error.
const maxDialAttempts = 3

// passThroughHeaders are the client headers that go upstream; every other
// client header (credentials, OpenAI-Organization, OpenAI-Project) stays.
var passThroughHeaders = []string{"OpenAI-Beta", "OpenAI-Safety-Identifier"}

// sessionInfo is what the server knows of a session beyond the relay: who,
// which model group, which deployment served it, and the tokens it used.
// The meter is the session's inspector on the upstream's frames.
type sessionInfo struct {
	id    string // the gateway's session id (usage.NewSessionID)
	key   *routes.ClientKey
	group string
	// depMu guards deployment and counted: a redial (its own goroutine)
	// and the session's end may race over them.
	depMu      sync.Mutex
	deployment *routes.Deployment // nil until an upstream is attached
	counted    bool               // deployment's live count includes this session
	ended      bool               // the session ended: a late attach (a redial's) is not counted
	poolHit    bool               // the upstream came from the warm pool
	overBudget atomic.Bool        // ended by its key's budget (budget.go); beside the flags: one word
	meter      usage.Meter
	start      time.Time          // when the client's upgrade completed
	redial     func()             // dials a fresh upstream after a dead warm one
	reserved   *routes.Deployment // holds a slot of its rpm/max_parallel_requests (deplimits.go)
	grant      *secretGrant       // the client secret it connected with; nil for a key

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

// attemptContext bounds one upstream attempt for a session: it ends when
// the client leaves, and after the dial timeout when one is set.
func (s *Server) attemptContext(info *sessionInfo) (context.Context, context.CancelFunc) {
	clientCtx, cancelClient := info.dialContext(s.ctx)
	if s.cfg.DialTimeout <= 0 {
		return clientCtx, cancelClient
	}
	ctx, cancel := context.WithTimeout(clientCtx, s.cfg.DialTimeout)
	return ctx, func() { cancel(); cancelClient() }
}

// left reports whether the client left (it is only asked once
// the upstream attempt is over).
func (i *sessionInfo) left() bool {
	i.dialMu.Lock()
	defer i.dialMu.Unlock()
	return i.clientLeft
}

// clientLeft is what the client socket closing means to the server: an
// upstream still being dialed for it is no longer wanted (cancelled first),
// then the session hears that its client is gone.
func (s *Server) clientLeft(sess *poller.Session) {
	s.sessMu.Lock()
	info := s.sessions[sess]
	s.sessMu.Unlock()
	if info != nil {
		info.dialMu.Lock()
		info.clientLeft = true
		if info.cancelDial != nil {
			info.cancelDial()
		}
		info.dialMu.Unlock()
	}
	sess.ClientGone()
}

// group picks the model group a request asks for.
func (s *Server) group(r *routes.Table, q url.Values) (string, *httpError) {
	g := q.Get("model")
	if g == "" {
		g = r.Default
	}
	if _, ok := r.Groups[g]; !ok {
		return "", &httpError{status: http.StatusNotFound, errType: "invalid_request_error", code: "model_not_found",
			message: fmt.Sprintf("The model '%s' does not exist or you do not have access to it.", g)}
	}
	return g, nil
}

// target is the upstream request for deployment d: the client's query, the
// deployment's credentials, and the client headers that pass through.
func target(d *routes.Deployment, q url.Values, h http.Header) upstream.Target {
	t := d.Target(q)
	for _, name := range passThroughHeaders {
		if v := h.Values(name); len(v) > 0 {
			t.Header[name] = slices.Clone(v)
		}
	}
	return t
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

// defaultTarget is the upstream a plain connect to the default group's
// first deployment maps to (what the pool warms before any client comes).
func (s *Server) defaultTarget() upstream.Target {
	r := s.routes.Load()
	return target(r.Groups[r.Default][0], url.Values{}, nil)
}

// primePool warms every deployment's plain target.
func (s *Server) primePool(r *routes.Table) {
	if s.pool == nil {
		return
	}
	for g, ds := range r.Groups {
		for _, d := range ds {
			s.pool.Prime(target(d, url.Values{"model": {g}}, nil), g)
		}
	}
}

// tryWarm hands the session a warm socket of its first-choice deployment.
//
// On a miss, dialDone must be called once the client's own dial has ended:
// until then the pool's refill yields to it (upstream/yield.go).
func (s *Server) tryWarm(sess *poller.Session, info *sessionInfo, d *routes.Deployment, t upstream.Target) (hit bool, dialDone func()) {
	dialDone = func() {}
	if s.pool == nil {
		return false, dialDone
	}
	hit = sess.AdoptWarm(func(o poller.Owner) (*poller.Handle, []byte) {
		h, held, done := s.pool.TakeOrDial(t, info.group, o)
		dialDone = done
		if h != nil {
			// before the held frame is forwarded
			info.poolHit = true
			s.attached(info, d)
		}
		return h, held
	})
	if hit {
		// A socket past session.created is as good a sign of health as
		// a dial (and answers a probe routed here).
		s.live.succeeded(d)
	}
	return hit, dialDone
}

// attached records that deployment d serves the session.
func (s *Server) attached(info *sessionInfo, d *routes.Deployment) {
	info.depMu.Lock()
	count := !info.ended
	info.deployment, info.counted = d, count
	info.depMu.Unlock()
	if count {
		s.live.counter(d).Add(1)
	}
}

// uncount takes the session out of its deployment's live count, once, and
// returns the deployment it had (nil if none); forget drops it, for a redial
// that will attach another, and otherwise the session has ended.
func (s *Server) uncount(info *sessionInfo, forget bool) *routes.Deployment {
	info.depMu.Lock()
	d, counted := info.deployment, info.counted
	info.counted = false
	if forget {
		info.deployment = nil
	} else {
		info.ended = true
	}
	info.depMu.Unlock()
	if counted {
		s.live.counter(d).Add(-1)
	}
	return d
}

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
// At most maxDialAttempts deployments are tried.
func (s *Server) connectUpstream(sess *poller.Session, info *sessionInfo, cands []*routes.Deployment, q url.Values, h http.Header) {
	ctx, cancel := s.attemptContext(info)
	defer cancel()
	conn, d, status := s.dialRace(ctx, info.group, cands[:min(len(cands), maxDialAttempts)], q, h)
	switch {
	case conn != nil:
		s.attached(info, d)
		sess.AttachUpstream(poller.NewHandle(conn.Endpoint), conn.Preface)
	case info.left():
		// Nobody to tell: end the session without an upstream.
		sess.Cancel()
	default:
		s.dialFailed(sess, status)
	}
}
