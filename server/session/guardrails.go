package session

// Guardrails on a Realtime conversation (server/guarded holds and checks its
// events; server/guardrail runs the checks). Which guardrails a session
// runs is decided at its connect: the default ones, its key's, and those
// its connection adds with ?guardrails=a,b (routes.Table.GuardrailsFor); an
// unknown name is refused before the upgrade (HTTP 400). The parameter is
// the gateway's: it never reaches the upstream, and a guarded connect still
// takes a warm socket.
//
// What a guarded session is not, for now, each said where it is decided:
//
//   - served by Gemini or xAI: their events are translated, and the guards
//     read OpenAI's; a guarded session goes to the group's OpenAI and
//     Azure deployments only, and is refused (an error event, then the
//     close) when the group has none (guardable);
//   - resumed by continuity: a replay onto a fresh upstream would bring
//     back the upstream's own create_response, which the guards keep off;
//   - a transcription, translation, sideband or call session: the modes
//     read a Realtime conversation's events (a GPT-Live session's are
//     liveguard.go's).

import (
	"net/http"
	"strings"

	"rtgate/server/guarded"
	"rtgate/server/guardrail"
	"rtgate/server/routes"
	"rtgate/server/transcript"
)

// decideGuardrails picks the guardrails of a Realtime conversation's
// connect u.
func decideGuardrails(u *upgrade) *refusal {
	var asked []string
	if v := u.q.Get("guardrails"); v != "" {
		for name := range strings.SplitSeq(v, ",") {
			asked = append(asked, strings.TrimSpace(name))
		}
	}
	set, err := u.table.GuardrailsFor(u.key, asked)
	if err != nil {
		return &refusal{Status: http.StatusBadRequest, Type: "invalid_request_error", Code: "invalid_guardrail",
			Message: "Invalid value for 'guardrails': " + err.Error() + ".", Param: "guardrails"}
	}
	u.guards = set
	return nil
}

// guardable is the deployments of ds a guarded session may use: those
// whose events the guards read as they come (OpenAI's and Azure's).
func guardable(ds []*routes.Deployment) []*routes.Deployment {
	out := make([]*routes.Deployment, 0, len(ds))
	for _, d := range ds {
		if d.Kind == routes.KindOpenAI || d.Kind == routes.KindAzure {
			out = append(out, d)
		}
	}
	return out
}

// guard starts the session's guards, before its relay: the client's events
// pass through them from the first; the upstream's from its attach
// (attachTranslated).
func (m *Manager) guard(c *clientConn, set guardrail.Set) {
	info, sess := &c.info, &c.session
	g := guarded.New(guarded.Config{Guardrails: set, Relay: sess, CallID: info.id, KeyAlias: info.key.Name, Log: m.log,
		Metrics:  m.metrics.guardrails,
		OnAction: func(a guarded.Action) { m.guardAction(info, a) }})
	if !g.Active() {
		return // the guardrails it names run in modes a Realtime session has not (GPT-Live's)
	}
	info.guard = g
	sess.TranslateClient(g.FromClient())
}

// guardAction records what a session's guard did: a block or an error in
// the log, the conversation record and the trace; every check in the
// trace.
func (m *Manager) guardAction(info *sessionInfo, a guarded.Action) {
	v := a.Verdict
	outcome := "passed"
	switch {
	case v.Errored && v.Blocked:
		outcome = "error_closed"
	case v.Errored:
		outcome = "error_open"
	case v.Blocked:
		outcome = "blocked"
	}
	info.trace.Guardrail(v.Guardrail, string(a.Mode), outcome, a.At.Add(-a.Latency), a.At)
	if outcome == "passed" {
		return
	}
	m.log.Info("guardrail acted", "session", info.id, "key", info.key.Name, "guardrail", v.Guardrail, "mode", a.Mode,
		"outcome", outcome, "reason", v.Reason, "session_ended", a.Ended)
	if info.conv != nil {
		e := transcript.Entry{Name: v.Guardrail, Mode: string(a.Mode), Status: outcome, Reason: v.Reason, ItemID: a.ItemID,
			Text: a.Checked, Arguments: a.Arguments}
		if a.Tool != "" {
			e.Text = a.Tool
		}
		info.conv.Guardrail(a.At, e)
	}
}

// PrepareGuardrails exports the series of t's guardrails at 0 (each mode,
// every outcome), so that an alert on blocks or errors has a series before
// the first: at start and at each reload.
func (m *Manager) PrepareGuardrails(t *routes.Table) {
	for _, g := range t.Guardrails {
		m.metrics.guardrails.Prepare(g)
	}
}
