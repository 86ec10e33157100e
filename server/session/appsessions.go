package session

// Browser and phone apps: what the sessions hold for client secrets, WebRTC
// calls and sidebands, and how their WebSocket sessions start.

import (
	"crypto/tls"
	"log/slog"
	"net/http"
	"time"

	"rtgate/poller"
	"rtgate/server/apps"
	"rtgate/server/cluster"
	"rtgate/server/routes"
)

// appState is the Manager's state for them.
type appState struct {
	secrets    *apps.Secrets
	calls      *apps.Calls
	httpClient *http.Client // the upstream calls endpoints
	meters     *callMeters  // the gateway's own metering sidebands
}

// newAppState is made in New once the cluster store is known.
func newAppState(cfg Config, store *cluster.Store, upTLS *tls.Config, meters *callMeters, log *slog.Logger) appState {
	return appState{
		secrets: apps.NewSecrets(cfg.ClientSecretKeys, store, log),
		calls:   apps.NewCalls(store),
		httpClient: &http.Client{
			Transport: &http.Transport{TLSClientConfig: upTLS, MaxIdleConnsPerHost: 4, IdleConnTimeout: time.Minute,
				ForceAttemptHTTP2: false},
			// Location and the status are the client's to see: never follow.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
		meters: meters,
	}
}

// startApp starts the sessions that do not take the plain path: a client
// secret's (configured before the client sees anything), a sideband's and a
// transcription session's (never from the warm pool). cands are the
// deployments the connect was routed to, in order, the one whose slot it
// holds (or the probe) first: the first attempt dials them as they are, as
// a plain connect does. It reports false for a plain connect.
func (m *Manager) startApp(sess *poller.Session, info *sessionInfo, u *upgrade, cands []*routes.Deployment) bool {
	group, q, h := info.group, u.q, u.req.Header
	// A redial goes to the deployments in force then: never one a reload
	// removed.
	current := func() []*routes.Deployment { return info.servable(m.balancer.Rank(m.routes().Groups[group])) }
	switch u.kind {
	case kindLiveSideband, kindLiveFork:
		if u.kind == kindLiveSideband { // its frames meter the session only if the gateway's own sideband cannot (appSideband)
			info.sideband = m.meters.sidebandOf(u.callID, u.made)
			sess.InspectUpstream(info.sideband.inspector())
		}
		go startLiveAttach(m, sess, info, u) // a GPT-Live sideband or WebSocket fork
		return true
	case kindTranslation:
		// Never pooled, never redialed: billed by the minute.
		info.redial = nil
		if info.grant != nil {
			go m.primeSession(sess, info, cands, q, h)
		} else {
			go m.connectUpstream(sess, info, cands, q, h, nil)
		}
		return true
	case kindSideband:
		info.redial = nil // a sideband holds no session of its own to redo
		if u.made {
			sess.InspectUpstream(unmetered{}) // its usage is the metering sideband's (callMeters)
		}
		go m.connectUpstream(sess, info, cands, q, h, nil)
		return true
	}
	switch {
	case info.grant != nil && info.gemini != nil:
		info.redial = nil
		go m.startTranslatedSecret(sess, info, cands, q, h)
		return true
	case info.grant != nil:
		if info.grant.Claims.Type == "transcription" {
			q.Set("intent", "transcription")
		} else if u.kind != kindTranscription {
			q.Set("model", group)
		}
		info.redial = func() { m.primeSession(sess, info, current(), q, h) }
		if info.resume != nil {
			info.resume.rawQuery = q.Encode() // the group the secret was minted for
		}
		go m.primeSession(sess, info, cands, q, h)
		return true
	case u.kind == kindTranscription:
		info.redial = func() { m.connectUpstream(sess, info, current(), q, h, nil) }
		go m.connectUpstream(sess, info, cands, q, h, nil)
		return true
	}
	return false
}
