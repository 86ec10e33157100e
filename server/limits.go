package server

// The per-key limits (max_sessions, connect_rate): which Admitter decides
// them (this instance, or Redis with REDIS_URL), and how their refusals read.

import (
	"net/http"
	"strconv"

	"rtgate/server/cluster"
	"rtgate/server/limit"
)

// keyRefused words a refusal of the per-key limits (max_sessions,
// connect_rate), whether this instance or Redis decided it.
func keyRefused(r *limit.Refusal) *httpError {
	if r.Verdict == limit.Full {
		return &httpError{status: http.StatusTooManyRequests, errType: "rate_limit_error", code: "concurrent_sessions_exceeded",
			message: "too many concurrent sessions for this key (limit " + strconv.Itoa(r.Limit) + ")",
			header:  http.Header{"Retry-After": {strconv.Itoa(r.RetryAfter)}}}
	}
	return &httpError{status: http.StatusTooManyRequests, errType: "rate_limit_error", code: "rate_limit_exceeded",
		message: "connect rate limit exceeded for this key",
		header:  http.Header{"Retry-After": {strconv.Itoa(r.RetryAfter)}}}
}

// setupCluster connects the cluster-wide limits when REDIS_URL is set.
func (s *Server) setupCluster() error {
	if s.cfg.RedisURL == "" {
		return nil
	}
	st, err := cluster.NewStore(s.cfg.RedisURL, s.cfg.RedisTimeout)
	if err != nil {
		return err
	}
	s.store = st
	s.admitter = cluster.NewLimiter(st, s.cfg.ClusterLease, s.cfg.ClusterInstances, s.log, s.metrics.reg)
	s.log.Info("per-key limits are cluster-wide", "redis", cluster.RedactURL(s.cfg.RedisURL),
		"instance", st.Instance, "lease", s.cfg.ClusterLease, "timeout", s.cfg.RedisTimeout)
	return nil
}
