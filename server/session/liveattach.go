package session

import (
	"errors"
	"net/http"
	"net/url"

	"rtgate/poller"
	"rtgate/server/apps"
	"rtgate/server/routes"
	"rtgate/upstream"
)

// A GPT-Live sideband or WebSocket fork as a session: where it goes
// (resolveLiveAttach) and how it is dialed (startLiveAttach). The HTTP
// controls of the same sessions are server/api's.

// liveAttachTarget is the upstream of a sideband (or a WebSocket fork) of
// session id on d: a sideband's graceful_close passed through.
func liveAttachTarget(d *routes.Deployment, id string, fork bool, q url.Values) upstream.Target {
	if fork {
		return liveDialTarget(d, "/"+id+"/fork", nil)
	}
	up := url.Values{}
	if g := q.Get("graceful_close"); g != "" {
		up.Set("graceful_close", g)
	}
	return liveDialTarget(d, "/"+id+"/attach", up)
}

// resolveLiveAttach finds where a GPT-Live sideband goes once its owner
// check passed (u not a Live sideband: nothing to do): the deployment that
// serves the session when the gateway made it, else the first deployment of
// the Live group its ?model= names (a session the gateway never saw), else
// 404.
func resolveLiveAttach(u *upgrade, owner apps.Owner, made bool) *refusal {
	if !u.kind.isLive() {
		return nil
	}
	notFound := func(msg string) *refusal {
		return &refusal{Status: http.StatusNotFound, Type: "invalid_request_error", Code: "session_not_found", Message: msg}
	}
	if made {
		d := u.table.Named(owner.Deployment)
		if d == nil {
			return notFound("The deployment that served this session is no longer configured.")
		}
		u.group, u.attachTo = d.Group, d
		return nil
	}
	g := u.q.Get("model")
	if g == "" || u.table.Protocol(g) != routes.ProtocolLive {
		return notFound("The gateway does not know this Live session; name its model group (?model=) to attach to a session made elsewhere.")
	}
	u.group, u.attachTo = g, u.table.Groups[g][0]
	return nil
}

// startLiveAttach connects a GPT-Live sideband (or WebSocket fork) to the
// deployment that serves its session, never from a pool; it runs in its
// own goroutine. A fork is a Live session of its own, metered from its
// frames (newLiveFork). A sideband's frames meter its session
// only when the gateway's own sideband cannot (liveMetering):
// the upstream allowing one sideband per session, the gateway's own makes
// way for it.
func startLiveAttach(m *Manager, sess *poller.Session, info *sessionInfo, u *upgrade) {
	info.redial = nil
	sb := info.sideband // nil for a fork, or a sideband that meters nothing
	target := liveAttachTarget(u.attachTo, u.callID, u.kind == kindLiveFork, u.q)
	dial := func() (*upstream.Upgraded, error) {
		ctx, cancel := info.attemptContext(m.ctx, m.cfg.DialTimeout)
		defer cancel()
		return m.dialer.Dial(ctx, target)
	}
	conn, err := dial()
	status := 0
	if ue, ok := errors.AsType[*upstream.Error](err); ok {
		status = ue.Status
	}
	if status == http.StatusConflict && !info.left() && sb.takeOver() {
		conn, err = sb.redial(dial)
	}
	if err != nil {
		sb.failed()
		if info.left() {
			sess.Cancel()
			return
		}
		if ue, ok := errors.AsType[*upstream.Error](err); ok {
			status = ue.Status
		}
		dialFailed(info.proto(), sess, status)
		return
	}
	info.attached(m.balancer, sess, u.attachTo)
	sb.attached()
	sess.AttachUpstream(poller.NewHandle(conn.Endpoint), conn.Preface)
}
