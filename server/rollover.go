package server

// Rollover: a session nearing its upstream session's cap (OpenAI ends a
// session after 60 minutes, Azure after 30) moves to a fresh upstream
// session before the cap, at a quiet moment, through the same resume as a
// loss (resume.go), so that a two-hour call runs through.
//
// The cap is the upstream session.created's expires_at when it has one,
// else the upstream session's creation plus 60 minutes (30 on Azure); a
// warm pool socket's session may be older than its hand-over, by at most
// the pool's POOL_MAX_IDLE, so that much is taken off. From rolloverLead
// before the cap the session rolls over at the first quiet moment (no
// response in progress, no speech started and not stopped: the kept
// conversation's events say); from rolloverDeadline before it, it rolls
// over whatever is in progress (an in-flight response is lost as in a
// failure). One timer per continuity session, armed when the upstream's
// session.created is seen.

import (
	"encoding/json"
	"time"

	"rtgate/poller"
	"rtgate/server/routes"
	"rtgate/server/usage"
)

// Upstream session lifetimes when session.created names no expires_at.
const (
	openAISessionLife = 60 * time.Minute
	azureSessionLife  = 30 * time.Minute
)

// rolloverLead and rolloverDeadline, as parts of the upstream session's
// life (at most 5 minutes and 30 seconds before the cap): 6 s and 1.5 s
// for a one-minute cap.
func rolloverLead(life time.Duration) time.Duration { return min(life/10, 5*time.Minute) }
func rolloverDeadline(life time.Duration) time.Duration {
	return min(life/40, 30*time.Second)
}

// rolloverPoll is how often a session past its lead looks for a quiet
// moment.
const rolloverPoll = 50 * time.Millisecond

// upstreamCap reads an upstream's session.created (its payload) for the
// session's cap: expires_at, else created plus the deployment's lifetime.
// ok is false when p is not a session.created.
func upstreamCap(p []byte, created time.Time, d *routes.Deployment) (capAt time.Time, ok bool) {
	if t, okType := usage.EventType(p); !okType || string(t) != "session.created" {
		return time.Time{}, false
	}
	var ev struct {
		Session struct {
			ExpiresAt int64 `json:"expires_at"`
		} `json:"session"`
	}
	_ = json.Unmarshal(p, &ev)
	if ev.Session.ExpiresAt > 0 {
		return time.Unix(ev.Session.ExpiresAt, 0), true
	}
	life := openAISessionLife
	if d != nil && d.Kind == routes.KindAzure {
		life = azureSessionLife
	}
	return created.Add(life), true
}

// armRollover schedules the session's rollover before capAt; the upstream
// session was created at created (when the gateway saw it, less the pool's
// idle bound for a warm socket).
func (s *Server) armRollover(sess *poller.Session, info *sessionInfo, created, capAt time.Time) {
	args := info.resume
	life := capAt.Sub(created)
	if life <= 0 {
		life = time.Second
	}
	lead, deadline := rolloverLead(life), capAt.Add(-rolloverDeadline(life))
	args.rollMu.Lock()
	defer args.rollMu.Unlock()
	if args.rollTimer != nil {
		args.rollTimer.Stop()
	}
	args.rollGen++
	gen := args.rollGen
	var check func()
	check = func() {
		args.rollMu.Lock()
		if args.rollGen != gen || args.stopped {
			args.rollMu.Unlock()
			return // a later upstream's, or the session ended
		}
		args.rollMu.Unlock()
		now := time.Now()
		if (info.keep.Quiet() || !now.Before(deadline)) && sess.Rollover() {
			return
		}
		args.rollMu.Lock()
		if args.rollGen == gen && !args.stopped {
			args.rollTimer = time.AfterFunc(rolloverPoll, check)
		}
		args.rollMu.Unlock()
	}
	args.rollTimer = time.AfterFunc(time.Until(capAt.Add(-lead)), check)
}

// stopRollover disarms the session's rollover; it ended.
func (i *sessionInfo) stopRollover() {
	if i.resume == nil {
		return
	}
	a := i.resume
	a.rollMu.Lock()
	a.stopped = true
	if a.rollTimer != nil {
		a.rollTimer.Stop()
	}
	a.rollMu.Unlock()
}

// upstreamCreated is when the session's current upstream session was
// created, as far as the gateway knows: now, less the pool's idle bound
// for a warm socket (its session.created may be that old).
func (s *Server) upstreamCreated(info *sessionInfo) time.Time {
	now := time.Now()
	if info.poolHit && s.cfg.Pool.MaxIdle > 0 {
		return now.Add(-s.cfg.Pool.MaxIdle)
	}
	return now
}
