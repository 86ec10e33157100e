package server

import (
	"net/http"

	"rtgate/server/apps"
	"rtgate/server/routes"
)

// unmetered is the inspector of a sideband to a call the gateway made: the
// gateway's own metering sideband counts that call's usage, so the client's
// must not count it again.
type unmetered struct{}

func (unmetered) Wants([]byte) bool { return false }
func (unmetered) Inspect([]byte)    {}

// checkSideband refuses a sideband the connect may not open, given its
// call's owner (made: the gateway made the call), and routes the one it may
// open to the deployment that serves its call.
func checkSideband(u *upgrade, owner apps.Owner, made bool) *refusal {
	u.made = made
	if herr := sidebandAccess(u.key, u.grant, owner, made); herr != nil {
		return herr
	}
	if u.kind.isLive() {
		return resolveLiveAttach(u, owner, made)
	}
	if !made || owner.Deployment == "" {
		return nil // a call made elsewhere (or remembered by an older gateway): the query's group
	}
	d := u.table.Named(owner.Deployment)
	if d == nil {
		return &refusal{Status: http.StatusNotFound, Type: "invalid_request_error", Code: "call_not_found",
			Message: "The deployment that serves this call is no longer configured."}
	}
	u.group, u.attachTo = d.Group, d
	return nil
}

// sidebandAccess is the owner check of a sideband, a call control or a
// fork: the key that made the call (and, when a client secret made it,
// only that secret); a call the gateway did not make, the master key or a
// key with `sideband: any` (never a client secret, whatever its minting
// key may do).
func sidebandAccess(key *routes.ClientKey, grant *apps.Grant, owner apps.Owner, made bool) *refusal {
	forbidden := func(msg string) *refusal {
		return &refusal{Status: http.StatusForbidden, Type: "invalid_request_error", Code: "call_not_allowed", Message: msg}
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

// ownerUnavailable refuses an attach, fork or control whose call's owner
// could not be looked up (Redis down or slow): the gateway does not know
// whether the caller may, so it does not guess.
func ownerUnavailable() *refusal {
	return &refusal{Status: http.StatusServiceUnavailable, Type: "server_error", Code: "owner_unavailable",
		Message: "The gateway could not look up who owns this call just now; try again shortly.",
		Header:  http.Header{"Retry-After": {"1"}}}
}
