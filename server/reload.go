package server

// A reload reaches what is live: the keys a new routes table no longer
// holds lose their sessions and calls.

import (
	"github.com/gobwas/ws"

	"rtgate/server/routes"
)

// reachLive applies a reloaded routes table t to what is live: a session
// whose key t no longer holds (removed, or its secret changed) ends with an
// error event key_revoked and close 1008, and a WebRTC call or GPT-Live
// WebRTC session of such a key is hung up. The rest needs nothing here: a
// resume or rollover reserves among t's deployments (resumer.resume), budgets
// and limits are read from t (budgets.budgetOf, admission.Gate.Admit).
func (s *Server) reachLive(t *routes.Table) {
	var revoked []liveSession
	s.sessMu.Lock()
	for sess, info := range s.sessions {
		if t.Current(info.key) == nil {
			revoked = append(revoked, liveSession{sess: sess, proto: info.proto()})
		}
	}
	s.sessMu.Unlock()
	for _, l := range revoked {
		terminate(l.proto, l.sess, ws.StatusPolicyViolation, "key revoked", "key_revoked",
			"The key this session was opened with has been revoked.")
	}
	n := len(revoked)
	cm := s.meters
	cm.live.Range(func(k, _ any) bool {
		if m := k.(*callMeter); m.lm == nil && t.Current(m.info.key) == nil {
			n++
			go cm.hangUpCall(m.info.currentDeployment(), m.callID)
		}
		return true
	})
	cm.sessions.Range(func(_, v any) bool {
		if lm := v.(*liveMetering); t.Current(lm.info.key) == nil {
			n++
			go cm.hangUp(lm.d, lm.id)
		}
		return true
	})
	if n > 0 {
		s.log.Warn("config reload revoked keys of live sessions: they are ended", "sessions_and_calls", n)
	}
}
