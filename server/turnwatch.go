package server

import "rtgate/server/turns"

// Per-turn latency: the session's inspector (setupWatch) gives each upstream
// event's type to the session's turns.Watch, which says what the protocol
// makes of it; what a mark measures goes to the turn metrics (and, with
// latency-based routing, to the balancer). The rules are in server/turns.

// seeTurn moves the session's turns on an event of type typ, and reports
// whether the whole event is wanted (inspectTurn).
func (w *setupWatch) seeTurn(typ []byte) bool {
	ev, whole := w.turns.See(w.srv.proto, typ)
	if ev != (turns.Event{}) {
		w.observeTurn(ev)
	}
	return whole
}

// inspectTurn reads a whole event seeTurn asked for.
func (w *setupWatch) inspectTurn(p []byte) {
	if ev := w.turns.Inspect(p); ev != (turns.Event{}) {
		w.observeTurn(ev)
	}
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
