package session

import (
	"net/http"

	"rtgate/server/api"
	"rtgate/server/apps"
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
	if herr := api.SidebandAccess(u.key, u.grant, owner, made); herr != nil {
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
