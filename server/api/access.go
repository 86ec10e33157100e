package api

// Refusals the API shares with the server's WebSocket connects: a sideband
// (?call_id=, /attach) and a WebSocket fork pass the same owner check as a
// call control, and a GPT-Live WebSocket refuses client secrets and
// backends as a WebRTC create does. They are here, exported, because the
// server may import this package and never the other way.

import (
	"net/http"
	"strings"

	"rtgate/server/apps"
	"rtgate/server/frontdoor"
	"rtgate/server/routes"
)

// SidebandAccess is the owner check of a sideband, a call control or a
// fork: the key that made the call (and, when a client secret made it,
// only that secret); a call the gateway did not make, the master key or a
// key with `sideband: any` (never a client secret, whatever its minting
// key may do).
func SidebandAccess(key *routes.ClientKey, grant *apps.Grant, owner apps.Owner, made bool) *frontdoor.Refusal {
	forbidden := func(msg string) *frontdoor.Refusal {
		return &frontdoor.Refusal{Status: http.StatusForbidden, Type: "invalid_request_error", Code: "call_not_allowed", Message: msg}
	}
	switch {
	case made && owner.Key != key.Name:
		return forbidden("This call was made with another key.")
	case grant != nil && (!made || owner.Secret != grant.Claims.ID):
		return forbidden("A client secret may attach only to the calls made with it.")
	case made:
		return nil
	case key.Name == routes.MasterKeyName || key.Sideband == routes.SidebandAny:
		return nil
	}
	return forbidden("This key may attach only to calls it made through the gateway (give it `sideband: any` for others).")
}

// OwnerUnavailable refuses an attach, fork or control whose call's owner
// could not be looked up (Redis down or slow): the gateway does not know
// whether the caller may, so it does not guess.
func OwnerUnavailable() *frontdoor.Refusal {
	return &frontdoor.Refusal{Status: http.StatusServiceUnavailable, Type: "server_error", Code: "owner_unavailable",
		Message: "The gateway could not look up who owns this call just now; try again shortly.",
		Header:  http.Header{"Retry-After": {"1"}}}
}

// RefuseLiveSecret refuses one of rtgate's client secrets on a Live route:
// GPT-Live has none (browsers reach it by WebRTC through the app's server).
func RefuseLiveSecret() *frontdoor.Refusal {
	return &frontdoor.Refusal{Status: http.StatusForbidden, Type: "invalid_request_error", Code: "client_secret_not_supported",
		Message: "GPT-Live has no ephemeral client secrets: connect with an API key from a server, " +
			"or have the app's server create a WebRTC session (POST /v1/live/sessions) for the browser."}
}

// IsLiveSecret reports whether presented is a client secret (and not a key).
func IsLiveSecret(table *routes.Table, presented string) bool {
	_, isKey := table.Authenticate(presented)
	return !isKey && strings.HasPrefix(presented, apps.SecretPrefix)
}
