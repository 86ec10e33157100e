package server

import (
	"net/http"
	"strconv"

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
