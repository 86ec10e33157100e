package server

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"rtgate/poller"
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
	id         string // the gateway's session id (usage.NewSessionID)
	key        *ClientKey
	group      string
	deployment *Deployment // nil until an upstream is attached
	meter      usage.Meter
}

// liveCounts counts live sessions per deployment, for routing by fewest.
type liveCounts struct {
	mu sync.Mutex
	n  map[string]*atomic.Int64
}

func (l *liveCounts) counter(d *Deployment) *atomic.Int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.n == nil {
		l.n = map[string]*atomic.Int64{}
	}
	c := l.n[d.Name]
	if c == nil {
		c = new(atomic.Int64)
		l.n[d.Name] = c
	}
	return c
}

// order returns a group's deployments, fewest live sessions first, ties in
// random order.
func (l *liveCounts) order(ds []*Deployment) []*Deployment {
	out := slices.Clone(ds)
	rand.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	counts := make(map[*Deployment]int64, len(out))
	for _, d := range out {
		counts[d] = l.counter(d).Load()
	}
	slices.SortStableFunc(out, func(a, b *Deployment) int { return int(counts[a] - counts[b]) })
	return out
}

// group picks the model group a request asks for.
func (s *Server) group(r *Routes, q url.Values) (string, *httpError) {
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
func target(d *Deployment, q url.Values, h http.Header) upstream.Target {
	t := d.Target(q)
	for _, name := range passThroughHeaders {
		if v := h.Values(name); len(v) > 0 {
			t.Header[name] = slices.Clone(v)
		}
	}
	return t
}

// defaultTarget is the upstream a plain connect to the default group's
// first deployment maps to (what the pool warms before any client comes).
func (s *Server) defaultTarget() upstream.Target {
	r := s.routes.Load()
	return target(r.Groups[r.Default][0], url.Values{}, nil)
}

// primePool warms every deployment's plain target.
func (s *Server) primePool(r *Routes) {
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
func (s *Server) tryWarm(sess *poller.Session, info *sessionInfo, d *Deployment, t upstream.Target) bool {
	if s.pool == nil {
		return false
	}
	hit := sess.AdoptWarm(func(o poller.Owner) (*poller.Handle, []byte) {
		h, held := s.pool.Take(t, info.group, o)
		if h != nil {
			// before the held frame is forwarded
			sess.PoolHit = true
			s.attached(info, d)
		}
		return h, held
	})
	return hit
}

// attached records that deployment d serves the session.
func (s *Server) attached(info *sessionInfo, d *Deployment) {
	info.deployment = d
	s.live.counter(d).Add(1)
}

// connectUpstream dials the session's upstream, failing over to the next
// deployment of the group when a dial fails (nothing has reached the client
// from the upstream then). This goroutine ends as soon as the socket is
// handed to the reactor.
func (s *Server) connectUpstream(sess *poller.Session, info *sessionInfo, cands []*Deployment, q url.Values, h http.Header) {
	status := 0
	for i, d := range cands[:min(len(cands), maxDialAttempts)] {
		t := target(d, q, h)
		start := time.Now()
		conn, err := s.dialer.Dial(s.ctx, t)
		if err == nil {
			s.attached(info, d)
			sess.AttachUpstream(poller.NewHandle(conn.Endpoint), conn.Preface)
			return
		}
		var ue *upstream.Error
		if errors.As(err, &ue) {
			status = ue.Status
		}
		s.metrics.dialFailures.WithLabelValues(info.group).Inc()
		s.log.Warn("upstream dial failed", "deployment", d.Name, "attempt", i+1, "status", status,
			"after_ms", time.Since(start).Milliseconds(), "err", err)
	}
	sess.DialFailed(status)
}
