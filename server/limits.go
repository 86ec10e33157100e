package server

import (
	"net/http"
	"strconv"
	"sync"
	"time"
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
