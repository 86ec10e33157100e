package server

import (
	"rtgate/server/routes"
	"rtgate/server/tracing"
	"rtgate/server/turns"
)

// Per-turn latency and traces: the session's inspector (setupWatch) reads
// each upstream event's type once, the protocol says what it is to a turn
// (protocol.TurnMark), and the mark moves the session's turns.Watch and, with
// tracing on, its tracing.Session. What a turn measures goes to the turn
// metrics and, for latency-based routing and the status page, to the
// balancer. The rules are in server/turns and server/tracing.

// seeTurn moves the session's turns and spans on an event of type typ, and
// reports whether the whole event is wanted (inspectTurn).
func (w *setupWatch) seeTurn(typ []byte) bool {
	m := w.srv.proto.Turn(typ)
	w.trace.Mark(m)
	ev, whole := w.turns.See(m)
	if ev != (turns.Event{}) {
		w.observeTurn(ev)
	}
	return whole && (!w.turns.Off || w.trace != nil)
}

// inspectTurn reads a whole event seeTurn asked for.
func (w *setupWatch) inspectTurn(p []byte) {
	m := w.turns.Pending()
	if ev := w.turns.Inspect(p); ev != (turns.Event{}) {
		w.observeTurn(ev)
	}
	w.trace.Event(m, p)
}

// observeTurn exports a turn's measure under its session's model group and
// deployment, and gives its first audio to the balancer (latency-based
// routing, the status page).
func (w *setupWatch) observeTurn(ev turns.Event) {
	dep := ""
	d := w.currentDeployment()
	if d != nil {
		dep = d.Name
	}
	w.srv.metrics.turns.Observe(w.group, dep, ev)
	if ev.HasFirstAudio && d != nil {
		w.srv.balancer.ObserveFirstAudio(d, ev.FirstAudio)
	}
}

// endTurns closes the session's turns when it ends (a turn still open is
// unfinished) and returns its summary for the usage record.
func (m *metrics) endTurns(info *sessionInfo, deployment string) (n int, p50MS, p95MS float64) {
	if ev := info.turns.Close(); ev != (turns.Event{}) {
		m.turns.Observe(info.group, deployment, ev)
	}
	n, p50, p95 := info.turns.Summary()
	return n, float64(p50.Microseconds()) / 1000, float64(p95.Microseconds()) / 1000
}

// traceWhere is deployment d as the session's spans name it.
func traceWhere(d *routes.Deployment) tracing.Where {
	provider := "openai"
	if d.Kind == routes.KindAzure {
		provider = "azure.ai.openai"
	}
	return tracing.Where{Group: d.Group, Deployment: d.Name, Provider: provider, Model: d.Model, Host: d.Base.Host}
}
