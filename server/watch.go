package server

// What the gateway reads of a session's upstream events: setupWatch, the
// upstream side's frames.Inspector, reads each event's type once and hands
// the event to the usage meter, the turns and spans, and, with continuity,
// the kept conversation.

import (
	"time"

	"rtgate/poller"
	"rtgate/server/continuity"
	"rtgate/server/protocol"
	"rtgate/server/routes"
	"rtgate/server/tracing"
	"rtgate/server/turns"
	"rtgate/server/usage"
)

// setupWatch is the session's frames.Inspector: it records the session setup
// time at the first upstream text frame (session.created) and passes every
// frame on to the session's usage accounting, turn measurement and kept
// conversation, reading each event's type once for all.
type setupWatch struct {
	*sessionInfo
	srv       *Server
	sess      *poller.Session
	seen      bool // only the upstream read path touches it
	capSeen   bool // the first upstream's session.created was read (rollover.go)
	wantUsage bool // the frame Inspect gets carries usage
	wantKeep  bool // the frame Inspect gets changes the kept conversation (continuity)
}

// Wants implements frames.Inspector: the usage events, the turns' marks,
// and with continuity the events that change the kept conversation. The
// event type is read once for all three.
func (w *setupWatch) Wants(prefix []byte) bool {
	if !w.seen && w.live != nil {
		// A Live session's first event answers the client's own
		// session.start: timed from it, in its own histogram.
		w.seen = true
		w.srv.metrics.liveStart.Observe(time.Since(w.live.startAt).Seconds())
	}
	if !w.seen {
		w.seen = true
		label := "off"
		if w.srv.pool != nil {
			label = "miss"
			if w.poolHit {
				label = "hit"
			}
		}
		w.srv.metrics.sessionSetup.WithLabelValues(label).Observe(time.Since(w.start).Seconds())
	}
	if w.live != nil {
		// GPT-Live's turn marks never need the whole event: the type is
		// enough (seeTurn), and only the meter reads events whole.
		if typ, ok := usage.EventType(prefix); ok {
			w.seeTurn(typ)
		}
		return w.live.meter.Wants(prefix)
	}
	typ, ok := usage.EventType(prefix)
	if !ok {
		return false
	}
	w.wantUsage = w.meter.WantsType(typ)
	w.wantKeep = w.resume != nil && (continuity.UpstreamWants(typ) || (!w.capSeen && string(typ) == "session.created"))
	return w.seeTurn(typ) || w.wantUsage || w.wantKeep
}

// Inspect implements frames.Inspector: the usage meter, the turns and, with
// continuity, the kept conversation read the event.
func (w *setupWatch) Inspect(p []byte) {
	if w.live != nil {
		w.live.meter.Inspect(p)
		return
	}
	if w.wantUsage {
		w.meter.Inspect(p)
	}
	w.inspectTurn(p)
	if !w.wantKeep {
		return
	}
	if !w.capSeen {
		created := upstreamCreated(w.srv.cfg, w.poolHit)
		if capAt, ok := upstreamCap(p, created, w.currentDeployment()); ok {
			w.capSeen = true // later upstreams' caps come from their replay (resume.go)
			armRollover(w.sess, w.sessionInfo, created, capAt)
			return
		}
	}
	w.keep.Upstream(p, w.resume.lim)
}

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
	if w.live != nil {
		m = protocol.Live{}.Turn(typ)
	}
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
