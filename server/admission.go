package server

// Admission: the one way into the gateway. Every entry point that starts or
// joins a session — a WebSocket connect (Realtime, GPT-Live, translation,
// transcription), a WebRTC call or GPT-Live WebRTC session created (create,
// an HTTP fork, the accept of an inbound SIP call), a sideband, a WebSocket
// fork — holds an admission before it opens anything upstream, and only
// admitEntry makes one: the key's models, its budget, its max_sessions and
// connect_rate, and the deployment's slots (max_parallel_requests, rpm) are
// decided here, the same way for all of them, from the routes table in
// force. What each entry point counts:
//
//	entry point                      models, budget  key session (max_sessions, connect_rate)  deployment slot
//	WebSocket connect (Realtime,     checked         counts until the session ends              held until it ends (GPT-Live:
//	  translation, transcription,                                                               from its session.start, which
//	  GPT-Live)                                                                                 names the model: admitLiveStart)
//	WebRTC call, GPT-Live WebRTC     checked         counts while the call is live              held while the call is live
//	  create, HTTP fork, SIP accept                  (released when its metering sideband       (on the deployment that took it)
//	  of a call made elsewhere                       closes, or the gateway hangs it up)
//	WebSocket fork (GPT-Live)        checked         counts: a session of its own               held, on the forked session's
//	                                                                                            deployment
//	sideband (?call_id=, /attach)    checked         no: its call already counts                none: it goes to its call's
//	                                                                                            deployment
//	resume, rollover                 (not admitted again: the session's admission holds; its slot moves to the new
//	                                 upstream's deployment, of the group as the routes table has it now)
//
// A WebSocket connect also passes the instance's front door first
// (draining, MAX_CONNECTIONS: Server.admit), which counts every client
// socket, sidebands included.

import (
	"sync/atomic"

	"github.com/gobwas/ws"

	"rtgate/server/api"
	"rtgate/server/balance"
	"rtgate/server/limit"
	"rtgate/server/routes"
)

// entry is a way in: what it counts is entryRules'.
type entry uint8

const (
	entryConnect  entry = iota // a WebSocket session
	entryCall                  // a WebRTC call or GPT-Live WebRTC session made through the gateway
	entryFork                  // a GPT-Live WebSocket fork
	entrySideband              // a sideband to a call or a GPT-Live session
)

// entryRule is what an admission of an entry counts.
type entryRule struct {
	session bool // against the key's max_sessions and connect_rate, until released
	slot    bool // a deployment's slot, until released
}

// entryRules is the table above.
var entryRules = [...]entryRule{
	entryConnect:  {session: true, slot: true},
	entryCall:     {session: true, slot: true},
	entryFork:     {session: true, slot: true},
	entrySideband: {},
}

// admission is what an entry point holds once admitted: where it may go,
// and what it counts until released. Only admitEntry makes one; an entry
// point opens nothing upstream without it (open takes it, and server/api's
// calls and GPT-Live creates, through callAdmission).
type admission struct {
	// admitter and balancer are what it gives back to.
	admitter limit.Admitter
	balancer *balance.Balancer
	entry    entry
	// key is the name of the key whose session it counts ("" when it
	// counts none).
	key string
	// plan is where it goes: the deployments to try in order; Reserved
	// holds a slot (nil when it holds none).
	plan     balance.Plan
	released atomic.Bool
}

// admitEntry admits key through entry e to model group group ("" for a
// GPT-Live connect, whose group its session.start names), on deployments ds
// (nil: the group's, in the balancer's order), or refuses it. With a Redis
// admitter and a counted entry it may wait on Redis: never call it on
// netpoll's handler then (Waits).
func (s *Server) admitEntry(e entry, key *routes.ClientKey, table *routes.Table, group string, ds []*routes.Deployment) (*admission, *refusal) {
	rule := entryRules[e]
	if group != "" && !key.Allows(group) {
		return nil, modelNotAllowed(group)
	}
	if herr := s.budgets.check(key); herr != nil {
		return nil, herr
	}
	a := &admission{admitter: s.admitter, balancer: s.balancer, entry: e}
	if rule.session {
		maxSessions, rate := s.keyLimits(key)
		if r := s.admitter.Admit(key.Name, maxSessions, rate); r != nil {
			return nil, keyRefused(r)
		}
		a.key = key.Name
	}
	if group == "" {
		return a, nil
	}
	if ds == nil {
		ds = table.Groups[group]
	}
	if !rule.slot {
		a.plan.Cands = s.balancer.Rank(ds)
		return a, nil
	}
	plan, busy := s.balancer.Reserve(ds)
	if busy != nil {
		a.release()
		return nil, deploymentsBusy(busy)
	}
	a.plan = plan
	return a, nil
}

// admitLiveStart is the rest of a GPT-Live WebSocket connect's admission,
// made once its session.start names the model (admitEntry admitted the
// connect with no group, pickGroup has checked the key's models for the
// group): the key's models for the backend it delegates to, and a slot of
// the group's deployments, taken as admitEntry takes one for the entry
// points whose group the connect names.
func (s *Server) admitLiveStart(key *routes.ClientKey, table *routes.Table, group, backend string) (balance.Plan, *refusal) {
	if herr := api.BackendNotAllowed(key, backend); herr != nil {
		return balance.Plan{}, herr
	}
	plan, busy := s.balancer.Reserve(table.Groups[group])
	if busy != nil {
		return balance.Plan{}, deploymentsBusy(busy)
	}
	return plan, nil
}

// keyLimits are the key's max_sessions and connect_rate in force: its own,
// else the gateway-wide defaults.
func (s *Server) keyLimits(key *routes.ClientKey) (maxSessions int, rate float64) {
	maxSessions, rate = s.cfg.MaxSessionsPerKey, s.cfg.ConnectRatePerKey
	if key.MaxSessions > 0 {
		maxSessions = key.MaxSessions
	}
	if key.ConnectRate > 0 {
		rate = key.ConnectRate
	}
	return maxSessions, rate
}

// admitWaits reports whether admitting key through e may wait on I/O (the
// Redis admitter).
func (s *Server) admitWaits(e entry, key *routes.ClientKey) bool {
	if !entryRules[e].session {
		return false
	}
	return s.admitter.Waits(s.keyLimits(key))
}

// release gives back what the admission counts (the key's session, the
// deployment's slot), once; later calls do nothing.
func (a *admission) release() {
	if a == nil || a.released.Swap(true) {
		return
	}
	if a.key != "" {
		a.admitter.Release(a.key)
	}
	a.balancer.Release(a.plan.Reserved)
}

// handOver is the admission given to a WebSocket session, which gives back
// its counts itself when it ends (sessionEnded): the key's session (keyed),
// and the slot (info.reserved, which a resume moves).
func (a *admission) handOver() (keyed bool, reserved *routes.Deployment) {
	a.released.Store(true)
	return a.key != "", a.plan.Reserved
}

// reachLive applies a reloaded routes table t to what is live: a session
// whose key t no longer holds (removed, or its secret changed) ends with an
// error event key_revoked and close 1008, and a WebRTC call or GPT-Live
// WebRTC session of such a key is hung up. The rest needs nothing here: a
// resume or rollover reserves among t's deployments (resumer.resume), budgets
// and limits are read from t (budgets.budgetOf, admitEntry).
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
