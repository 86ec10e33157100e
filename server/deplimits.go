package server

// Per-deployment limits from a LiteLLM config: litellm_params.rpm bounds the
// connects a minute sent to a deployment (a token bucket holding up to a
// second's worth, at least one) and max_parallel_requests its live sessions.
// A connect goes to the first deployment, in the router's order, with room;
// when none of the group's has room it is refused before the upgrade with
// 429 and Retry-After. The session holds its slot on that deployment until
// it ends (a failover to another deployment keeps it where it was first
// reserved).

import (
	"net/http"
	"strconv"
	"sync"
	"time"

	"rtgate/server/routes"
)

type deploymentLimiter struct {
	mu   sync.Mutex
	uses map[string]*deploymentUse // by Deployment.Name, stable across reloads
}

type deploymentUse struct {
	sessions int
	tokens   float64
	at       time.Time
}

func limited(d *routes.Deployment) bool { return d.RPM > 0 || d.MaxSessions > 0 }

// reserve takes a connect and a session slot on d, or says how long until
// a connect would be allowed (0 when it is the session cap that is full).
func (l *deploymentLimiter) reserve(d *routes.Deployment, now time.Time) (ok bool, wait time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.uses == nil {
		l.uses = map[string]*deploymentUse{}
	}
	perSec := d.RPM / 60
	u := l.uses[d.Name]
	if u == nil {
		u = &deploymentUse{tokens: max(perSec, 1), at: now}
		l.uses[d.Name] = u
	}
	if d.MaxSessions > 0 && u.sessions >= d.MaxSessions {
		return false, 0
	}
	if perSec > 0 {
		u.tokens = min(u.tokens+now.Sub(u.at).Seconds()*perSec, max(perSec, 1))
		u.at = now
		if u.tokens < 1 {
			return false, time.Duration((1 - u.tokens) / perSec * float64(time.Second))
		}
		u.tokens--
	}
	u.sessions++
	return true, 0
}

func (l *deploymentLimiter) release(d *routes.Deployment) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if u := l.uses[d.Name]; u != nil && u.sessions > 0 {
		u.sessions--
	}
}

// reserveDeployment orders a group's deployments for a connect and reserves
// the first with room, which it puts first; reserved is nil when that one
// has no limits. The rest stay, in order, for failover.
func (s *Server) reserveDeployment(ds []*routes.Deployment) (cands []*routes.Deployment, reserved *routes.Deployment, herr *httpError) {
	ordered := s.live.order(ds)
	now := time.Now()
	wait, capped := time.Duration(-1), false
	for i, d := range ordered {
		if !limited(d) {
			return ordered, nil, nil
		}
		ok, w := s.depLimits.reserve(d, now)
		if ok {
			cands = append(append([]*routes.Deployment{d}, ordered[:i]...), ordered[i+1:]...)
			return cands, d, nil
		}
		if w == 0 {
			capped = true
		} else if wait < 0 || w < wait {
			wait = w
		}
	}
	retry := 1
	if wait > 0 && !capped {
		retry = int(wait/time.Second) + 1
	}
	code, msg := "deployment_rate_limited", "every deployment of this model is at its connect rate (rpm); try again shortly"
	if capped && wait < 0 {
		code, msg = "deployment_at_capacity", "every deployment of this model is at its session limit (max_parallel_requests); try again shortly"
	}
	return nil, nil, &httpError{status: http.StatusTooManyRequests, errType: "rate_limit_error", code: code, message: msg,
		header: http.Header{"Retry-After": {strconv.Itoa(retry)}}}
}

// unadmit gives back what admit reserved, for a connect refused after it.
func (s *Server) unadmit(key *routes.ClientKey) {
	if s.cluster != nil {
		s.cluster.release(key.Name)
	} else {
		s.limiter.release(key.Name)
	}
	s.sessionsOpen.Add(-1)
}

// releaseDeployment gives back an ended session's deployment slot.
func (s *Server) releaseDeployment(info *sessionInfo) {
	if info.reserved != nil {
		s.depLimits.release(info.reserved)
	}
}
