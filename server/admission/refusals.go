package admission

// The refusals of an admission, in OpenAI's words (HTTP status, error type
// and code), the same for every way in.

import (
	"fmt"
	"net/http"
	"strconv"

	"rtgate/server/balance"
	"rtgate/server/frontdoor"
	"rtgate/server/limit"
	"rtgate/server/routes"
)

// ModelNotAllowed refuses a key a group it may not use.
func ModelNotAllowed(group string) *frontdoor.Refusal {
	return &frontdoor.Refusal{Status: http.StatusForbidden, Type: "invalid_request_error", Code: "model_not_allowed",
		Message: fmt.Sprintf("This key may not use the model '%s'.", group)}
}

// BackendNotAllowed refuses a delegation to a Responses model the key's
// models list does not name (nil: allowed, or no delegation).
func BackendNotAllowed(key *routes.ClientKey, model string) *frontdoor.Refusal {
	if model == "" || key == nil || key.Allows(model) {
		return nil
	}
	return &frontdoor.Refusal{Status: http.StatusForbidden, Type: "invalid_request_error", Code: "model_not_allowed",
		Message: "This key may not delegate to the model '" + model + "'."}
}

// keyRefused words a refusal of the per-key limits (max_sessions,
// connect_rate), whether this instance or Redis decided it.
func keyRefused(r *limit.Refusal) *frontdoor.Refusal {
	note := ""
	if r.Note != "" {
		note = ": " + r.Note
	}
	if r.Verdict == limit.Full {
		return &frontdoor.Refusal{Status: http.StatusTooManyRequests, Type: "rate_limit_error", Code: "concurrent_sessions_exceeded",
			Message: "too many concurrent sessions for this key (limit " + strconv.Itoa(r.Limit) + ")" + note,
			Header:  http.Header{"Retry-After": {strconv.Itoa(r.RetryAfter)}}}
	}
	return &frontdoor.Refusal{Status: http.StatusTooManyRequests, Type: "rate_limit_error", Code: "rate_limit_exceeded",
		Message: "connect rate limit exceeded for this key" + note,
		Header:  http.Header{"Retry-After": {strconv.Itoa(r.RetryAfter)}}}
}

// deploymentsBusy is the refusal of a connect no deployment of its group
// has room for: 429 with Retry-After.
func deploymentsBusy(b *balance.Busy) *frontdoor.Refusal {
	code, msg := "deployment_rate_limited", "every deployment of this model is at its connect rate (rpm); try again shortly"
	if b.Capped {
		code, msg = "deployment_at_capacity", "every deployment of this model is at its session limit (max_parallel_requests); try again shortly"
	}
	return &frontdoor.Refusal{Status: http.StatusTooManyRequests, Type: "rate_limit_error", Code: code, Message: msg,
		Header: http.Header{"Retry-After": {strconv.Itoa(b.RetryAfter)}}}
}
