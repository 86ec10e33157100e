package session

// Guardrails on a GPT-Live session (server/guarded's Live holds and checks
// its events; docs/guardrails.md says how Live differs from Realtime).
// They are decided at connect like a Realtime conversation's (the default
// ones, the key's, ?guardrails=; decideGuardrails), and both translators
// are set when the session opens, before its relay: the Live session has
// no upstream until its session.start, which the client translator passes
// on as it came, so that the hold on the first message (newLiveState)
// takes it as before. A guarded Live session is not resumed by continuity:
// a fresh upstream session starts its timeline again, and the guard places
// output audio on it.

import (
	"rtgate/server/guarded"
	"rtgate/server/guardrail"
)

// guardLive starts a Live session's guards (nil set: none), after
// newLiveState and before the relay.
func (m *Manager) guardLive(c *clientConn, set guardrail.Set) {
	if len(set) == 0 || c.info.live == nil {
		return
	}
	info, sess := &c.info, &c.session
	g := guarded.NewLive(guarded.Config{Guardrails: set, Relay: sess, CallID: info.id, KeyAlias: info.key.Name, Log: m.log,
		Metrics:  m.metrics.guardrails,
		OnAction: func(a guarded.Action) { m.guardAction(info, a) }})
	if !g.Active() {
		return
	}
	info.live.guard = g
	sess.TranslateClient(g.FromClient())
	sess.TranslateUpstream(g.FromUpstream()) // no upstream yet: it is dialed at session.start
}

// closeGuard stops a Live session's checks in flight (the session ended).
func (ls *liveState) closeGuard() {
	if ls.guard != nil {
		ls.guard.Close()
	}
}
