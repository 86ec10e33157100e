package server

import (
	"context"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/gobwas/ws"

	"rtgate/poller"
)

// keyLimiter enforces the per-key limits: concurrent sessions and a connect
// rate (a token bucket holding up to one second's worth of connects, at
// least one). Limits come with each call, since keys carry their own.
type keyLimiter struct {
	mu   sync.Mutex
	keys map[string]*keyUse
}

type keyUse struct {
	sessions int
	tokens   float64
	at       time.Time
}

func newKeyLimiter() *keyLimiter {
	return &keyLimiter{keys: map[string]*keyUse{}}
}

// admit reserves a session for the key named name, or returns the refusal;
// maxSessions or rate 0 means no such limit. A reservation is given back
// with release.
func (l *keyLimiter) admit(name string, maxSessions int, rate float64, now time.Time) *httpError {
	l.mu.Lock()
	defer l.mu.Unlock()
	u := l.keys[name]
	if u == nil {
		u = &keyUse{tokens: max(rate, 1), at: now}
		l.keys[name] = u
	}
	if maxSessions > 0 && u.sessions >= maxSessions {
		return &httpError{status: http.StatusTooManyRequests, errType: "rate_limit_error", code: "concurrent_sessions_exceeded",
			message: "too many concurrent sessions for this key (limit " + strconv.Itoa(maxSessions) + ")",
			header:  http.Header{"Retry-After": {"1"}}}
	}
	if rate > 0 {
		u.tokens = min(u.tokens+now.Sub(u.at).Seconds()*rate, max(rate, 1))
		u.at = now
		if u.tokens < 1 {
			wait := int((1-u.tokens)/rate) + 1
			return &httpError{status: http.StatusTooManyRequests, errType: "rate_limit_error", code: "rate_limit_exceeded",
				message: "connect rate limit exceeded for this key",
				header:  http.Header{"Retry-After": {strconv.Itoa(wait)}}}
		}
		u.tokens--
	}
	u.sessions++
	return nil
}

// release gives back a session reservation. Entries stay: there is one per
// configured key name, and dropping one would refill its bucket early.
func (l *keyLimiter) release(name string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if u := l.keys[name]; u != nil {
		u.sessions--
	}
}

// The watchdog is one goroutine for the whole gateway, not a timer per
// session: every tick it walks the live sessions and ends those that have
// been idle too long, have lived too long, or have a side that stopped
// reading while bytes pile up behind it (netpoll keeps reading the other
// side, so that pile is the memory a stalled client costs). A stalled
// session is caught within watchdogTick+stallGrace of passing the limit, so
// its backlog stays under MaxStalledBytes plus 0.2 s of the other side's
// sending rate. A walk costs about 50 ns a session: 10k sessions, 5 ms of
// CPU a second.
const (
	watchdogTick = 100 * time.Millisecond
	stallGrace   = 100 * time.Millisecond
)

func (s *Server) watchdog(ctx context.Context) {
	t := time.NewTicker(watchdogTick)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			s.sweep(now)
		}
	}
}

func (s *Server) sweep(now time.Time) {
	for _, sess := range s.liveSessions() {
		if side, waiting, stalled := sess.Stalled(now, stallGrace); stalled && waiting > s.cfg.MaxStalledBytes {
			s.log.Warn("dropping a session whose "+side.String()+" stopped reading",
				"waiting_bytes", waiting, "limit", s.cfg.MaxStalledBytes)
			go sess.Abort(side, side.String()+" too slow: output backlog over limit")
			continue
		}
		if d := s.cfg.MaxSessionDuration; d > 0 && now.Sub(s.sessionStart(sess)) > d {
			go s.terminate(sess, ws.StatusGoingAway, "maximum session duration reached", "session_max_duration",
				"The session reached the gateway's maximum duration of "+d.String()+".")
			continue
		}
		if d := s.cfg.IdleTimeout; d > 0 && sess.Idle(now) > d {
			go s.terminate(sess, ws.StatusNormalClosure, "idle timeout", "session_idle_timeout",
				"No frames in either direction for "+d.String()+"; the gateway closed the session.")
		}
	}
}

// liveSessions copies the registry so that the sweep runs without the lock.
func (s *Server) liveSessions() []*poller.Session {
	s.sessMu.Lock()
	defer s.sessMu.Unlock()
	out := make([]*poller.Session, 0, len(s.sessions))
	for sess := range s.sessions {
		if !sess.Terminating() {
			out = append(out, sess)
		}
	}
	return out
}
