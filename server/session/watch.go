package session

// What the gateway reads of a session's upstream events: setupWatch, the
// upstream side's frames.Inspector, reads each event's type once and hands
// the event to the usage meter, the turns and spans, and, with continuity,
// the kept conversation.

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gobwas/ws"

	"rtgate/frames"
	"rtgate/poller"
	"rtgate/server/admission"
	"rtgate/server/eventtype"
	"rtgate/server/protocol"
	"rtgate/server/routes"
	"rtgate/server/tracing"
	"rtgate/server/turns"
	"rtgate/server/usage"
	"rtgate/upstream"
)

// setupWatch is the session's frames.Inspector: it records the session setup
// time at the first upstream text frame (session.created) and passes every
// frame on to the session's observers (usage accounting, responses in
// flight, turn measurement, kept conversation), chosen by the session's kind
// when it opens (chooseObservers), reading each event's type once for all.
// It runs under the relay's client lock: the observer type's doc says what
// may be taken under it.
type setupWatch struct {
	*sessionInfo
	mgr       *Manager
	sess      *poller.Session
	seen      bool              // only the upstream read path touches it
	capSeen   bool              // the first upstream's session.created was read (armCap)
	turnProto protocol.Protocol // whose turn marks the turns read (seeTurn): Realtime's or GPT-Live's

	// The session's observers (chooseObservers), and which of them want
	// the whole of the frame Inspect gets (bit i: obs[i]).
	obs  [maxObservers]observer
	nobs uint8
	want uint8
}

// Wants implements frames.Inspector: it reads the event's type once and
// asks each of the session's observers whether it reads the whole event.
func (w *setupWatch) Wants(prefix []byte) bool {
	if !w.seen && w.live != nil {
		// A Live session's first event answers the client's own
		// session.start: timed from it, in its own histogram.
		w.seen = true
		w.mgr.metrics.liveStart.Observe(time.Since(w.live.startAt).Seconds())
	}
	if !w.seen {
		w.seen = true
		label := "off"
		if w.mgr.pool != nil {
			label = "miss"
			if w.poolHit {
				label = "hit"
			}
		}
		w.mgr.metrics.sessionSetup.WithLabelValues(label).Observe(time.Since(w.start).Seconds())
	}
	w.want = 0
	typ, ok := eventtype.Of(prefix)
	if !ok {
		return false
	}
	for i, o := range w.obs[:w.nobs] {
		if o.wants(typ, prefix) {
			w.want |= 1 << i
		}
	}
	return w.want != 0
}

// Inspect implements frames.Inspector: the observers that wanted the
// event read it, in their order.
func (w *setupWatch) Inspect(p []byte) {
	for i, o := range w.obs[:w.nobs] {
		if w.want&(1<<i) != 0 {
			o.inspect(p)
		}
	}
}

// armCap reads the first upstream session's session.created (GPT-Live:
// session.started) for its cap and arms the rollover before it; later
// upstreams' caps come from their replay (Manager.primed).
func (w *setupWatch) armCap(p []byte) bool {
	if w.capSeen {
		return false
	}
	created := upstreamCreated(w.mgr.cfg, w.poolHit)
	capAt, ok := upstreamCap(p, created, w.currentDeployment())
	if ok {
		w.capSeen = true
		armRollover(w.sess, w.sessionInfo, created, capAt)
	}
	return ok
}

// Per-turn latency and traces: the session's inspector (setupWatch) reads
// each upstream event's type once, the protocol says what it is to a turn
// (protocol.TurnMark), and the mark moves the session's turns.Watch and, with
// tracing on, its tracing.Session. What a turn measures goes to the turn
// metrics and, for latency-based routing and the status page, to the
// balancer. The rules are in server/turns and server/tracing.

// seeTurn moves the session's turns and spans on an event of type typ
// (prefix: its frame's first bytes), and reports whether the whole event is
// wanted (inspectTurn).
func (w *setupWatch) seeTurn(typ, prefix []byte) bool {
	m := w.turnProto.Turn(typ)
	w.trace.Mark(m)
	whole := w.turns.See(m, prefix)
	return whole && (!w.turns.Off || w.trace != nil)
}

// inspectTurn reads a whole event seeTurn asked for.
func (w *setupWatch) inspectTurn(p []byte) {
	m := w.turns.Pending()
	w.turns.Inspect(p)
	w.trace.Event(m, p)
}

// observeTurn exports what the session's turns measured (the tracker's
// Observe) under its model group and deployment, and gives the figures
// that route (a voice turn's first audio, a text-only session's first
// output, a turn the upstream failed) to the balancer: latency-based
// routing, the status page.
func (w *setupWatch) observeTurn(ev turns.Event) {
	dep := ""
	d := w.currentDeployment()
	if d != nil {
		dep = d.Name
	}
	w.mgr.metrics.turns.Observe(w.group, dep, ev)
	if !ev.Routes || d == nil {
		return
	}
	text := ev.Kind == turns.Text
	if ev.HasFirstAudio {
		w.mgr.balancer.ObserveFirstOutput(d, ev.FirstAudio, text)
	}
	if ev.Penalty {
		w.mgr.balancer.ObservePenalty(d, text)
	}
}

// endTurns closes the session's turns when it ends (a turn still open is
// unfinished; what that measures goes to observeTurn) and returns its
// summary for the usage record.
func (m *metrics) endTurns(info *sessionInfo) (n int, p50MS, p95MS float64) {
	info.turns.Close()
	n, p50, p95 := info.turns.Summary()
	return n, float64(p50.Microseconds()) / 1000, float64(p95.Microseconds()) / 1000
}

// traceWhere is deployment d as the session's spans name it.
func traceWhere(d *routes.Deployment) tracing.Where {
	provider := "openai" // OpenTelemetry's gen_ai.provider.name values
	switch d.Kind {
	case routes.KindAzure:
		provider = "azure.ai.openai"
	case routes.KindXAI:
		provider = "x_ai"
	case routes.KindGemini:
		provider = "gcp.gemini"
	case routes.KindVertex:
		provider = "gcp.vertex_ai"
	}
	return tracing.Where{Group: d.Group, Deployment: d.Name, Provider: provider, Model: d.Model, Host: d.Base.Host}
}

// Metering GPT-Live's WebRTC sessions. Their events travel between the
// browser and OpenAI, outside the gateway, so the gateway reads the usage on
// a sideband (…/{id}/attach) of each session it created (or whose SIP call
// it accepted, or forked), as it meters Realtime WebRTC calls (the
// callMeter): cumulative usage.seconds in session.usage.updated and
// session.closed, backend tokens in response.event. A sideband also carries
// the session's reflected audio both ways (about 128 KB/s of base64): the
// scanner only looks at each frame's first bytes for its type, and skips
// the rest.
//
// Which sideband meters: the gateway's own (graceful_close=true), else an
// app's own sideband to the session when it goes through the gateway (the
// same LiveMeter reads its frames). An upstream may allow one sideband per
// session (not documented; mockai's MaxSidebands imitates it): the gateway's
// own then makes way for the app's, which would otherwise be refused
// (409), and attaches again if the app's ends before the session does.
//
//	state  event                                          next
//	none   the gateway's sideband attached                own
//	none   it is refused, an app's sideband is open       app (the app's meters from now)
//	none   it is refused, no app's sideband is open       done: billed the floor, unmetered
//	own    an app's sideband refused 409 by the upstream  app (the gateway's closes; the app's is
//	                                                      dialed again and meters)
//	own    the gateway's sideband ends                    done
//	app    the app's sideband ends after session.closed   done
//	app    it ends before                                 app (another open app's sideband), else
//	                                                      none (the gateway's attaches again)
//
// Done writes the session's record, billed at least the 15 s floor that
// OpenAI bills at creation, credited against the duration. The floor is
// booked against the key's budget at creation (budgets.meterLive), and
// only the seconds beyond it as they are read.

// liveWebRTCFloor is the least a WebRTC session is billed, in seconds.
const liveWebRTCFloor = 15.0

// liveMetering is a WebRTC Live session the gateway meters, and which
// sideband feeds its meter (info.live.meter) now.
type liveMetering struct {
	cm   *callMeters
	info *sessionInfo
	d    *routes.Deployment
	id   string
	adm  *admission.Admission // the session's (admission.Gate.Admit's): given back when it is done

	mu      sync.Mutex
	own     *callMeter                // the gateway's sideband, while it meters
	app     *appSideband              // the app's sideband that meters, while it does
	handing *appSideband              // the app's sideband the gateway's own made way for
	open    map[*appSideband]struct{} // the app's sidebands attached through the gateway
	metered bool                      // some sideband has metered the session
	done    bool
	// endedAt: the app ended the session through the gateway (hangup or
	// reject) before any sideband metered it: its seconds are known.
	endedAt time.Time
}

// endedByRequest notes that the app ended session id through the gateway,
// so that a session hung up before the gateway's sideband could attach (the
// upstream then refuses it: 409 session_closed) is billed its floor or its
// time to the hang-up, not marked unmetered.
func (cm *callMeters) endedByRequest(id string) {
	if v, ok := cm.sessions.Load(id); ok {
		lm := v.(*liveMetering)
		lm.mu.Lock()
		if !lm.metered && lm.endedAt.IsZero() {
			lm.endedAt = time.Now()
		}
		lm.mu.Unlock()
	}
}

// startLive meters Live session id on d against key until it ends: the
// floor is booked now, the gateway's own sideband attached in the
// background.
// adm, the session's admission, is given back when it ends.
func (cm *callMeters) startLive(key *routes.ClientKey, d *routes.Deployment, id string, adm *admission.Admission) {
	info := &sessionInfo{id: usage.NewSessionID(), key: key, group: d.Group, deployment: d, start: time.Now(), kind: kindLive}
	ls := &liveState{info: info, floor: liveWebRTCFloor}
	ls.meter.OnTokens = ls.bookBackend
	ls.meter.OnDelegation = ls.refuseBackend
	ls.hangUp = func() {
		cm.log.Warn("Live WebRTC session delegates to a model its key may not use; hanging it up",
			"key", key.Name, "session", id, "deployment", d.Name)
		cm.hangUp(d, id)
	}
	info.live = ls
	// Booked against the key's budget as the seconds grow, in GPT-Live's
	// 30 s windows; over it, the call is hung up upstream, and the
	// session.closed that follows books the final usage.
	cm.budgets.meterLive(info, ls, func(string) { cm.hangUp(d, id) })
	lm := &liveMetering{cm: cm, info: info, d: d, id: id, adm: adm, open: map[*appSideband]struct{}{}}
	cm.sessions.Store(id, lm)
	go lm.attachOwn()
}

// attachOwn attaches the gateway's own sideband to meter the session; when
// it cannot, an app's sideband open through the gateway meters, else the
// session is done. A refusal (409) is tried again a few times while no
// app's sideband is open: the upstream may still count one that just left.
func (lm *liveMetering) attachOwn() {
	cm := lm.cm
	ctx, cancel := context.WithTimeout(cm.ctx, cm.timeout)
	defer cancel()
	var conn *upstream.Upgraded
	var err error
	for i := range liveTakeOverTries {
		conn, err = cm.dialer.Dial(ctx, liveDialTarget(lm.d, "/"+lm.id+"/attach", url.Values{"graceful_close": {"true"}}))
		ue, refused := errors.AsType[*upstream.Error](err)
		lm.mu.Lock()
		others := len(lm.open) > 0
		lm.mu.Unlock()
		if !refused || ue.Status != http.StatusConflict || others || ctx.Err() != nil {
			break
		}
		time.Sleep(time.Duration(i+1) * 20 * time.Millisecond)
	}
	lm.mu.Lock()
	if err == nil && !lm.done {
		own := cm.watch(lm.info, lm.id, conn, lm)
		lm.metered, lm.own = true, own
		lm.mu.Unlock()
		own.start(conn.Preface) // not under lm.mu: its end (ownGone) takes it
		return
	}
	if err == nil { // done meanwhile (a shutdown)
		lm.mu.Unlock()
		conn.Endpoint.Drop()
		return
	}
	for sb := range lm.open {
		lm.adopt(sb)
		lm.mu.Unlock()
		cm.log.Info("Live session metered from the app's sideband: the upstream refused the gateway's own",
			"session", lm.id, "deployment", lm.d.Name, "err", err)
		return
	}
	metered := lm.metered || !lm.endedAt.IsZero()
	lm.mu.Unlock()
	if !metered {
		cm.log.Warn("Live session not metered: the gateway's sideband did not attach and no sideband of the app's goes "+
			"through the gateway; billing the 15 s floor, unmetered", "session", lm.id, "deployment", lm.d.Name, "err", err)
		cm.metrics.dialFailures.WithLabelValues(lm.d.Group).Inc()
	}
	lm.finish()
}

// adopt makes sb's frames meter the session (lm.mu held).
func (lm *liveMetering) adopt(sb *appSideband) {
	lm.app, lm.metered = sb, true
	sb.on.Store(true)
}

// ownGone is the gateway's own sideband m ending: the session is done,
// unless m made way for an app's sideband.
func (lm *liveMetering) ownGone(m *callMeter) {
	lm.mu.Lock()
	mine := lm.own == m
	if mine {
		lm.own = nil
	}
	lm.mu.Unlock()
	if mine {
		lm.finish()
	}
}

// finish writes the session's record, once: billed at least the floor;
// unmetered when no sideband ever read it, unconfirmed when none read its
// session.closed.
func (lm *liveMetering) finish() {
	lm.mu.Lock()
	if lm.done {
		lm.mu.Unlock()
		return
	}
	lm.done, lm.app = true, nil
	for sb := range lm.open {
		sb.on.Store(false)
	}
	metered, endedAt := lm.metered, lm.endedAt
	lm.mu.Unlock()
	lm.adm.Release()
	cm, info := lm.cm, lm.info
	if !metered && !endedAt.IsZero() {
		// Ended by the app's request before a sideband metered it: its
		// seconds are its time to that request (at least the floor).
		metered = true
		info.live.meter.Seconds = max(info.live.meter.Seconds, endedAt.Sub(info.start).Seconds())
	}
	cm.sessions.CompareAndDelete(lm.id, lm)
	rec := usage.Record{SessionID: info.id, KeyName: info.key.Name, ModelGroup: lm.d.Group, Deployment: lm.d.Name,
		StartedAt: info.start.UTC(), EndedAt: time.Now().UTC(), DurationMS: time.Since(info.start).Milliseconds(),
		Outcome: "call_ended", Unmetered: !metered}
	if !metered {
		rec.Outcome = "unmetered"
	}
	cm.log.Info("call metered", "call_id", lm.id, "session_id", info.id)
	info.live.fillWebRTC(&rec)
	cm.records.record(info, &rec)
}

// fillWebRTC completes a WebRTC session's record: as a WebSocket session's
// (fill), with the 15 s floor; an unmetered one is not unconfirmed, it is
// marked as what it is.
func (ls *liveState) fillWebRTC(rec *usage.Record) {
	ls.meter.Seconds = max(ls.meter.Seconds, liveWebRTCFloor)
	ls.fill(rec)
	rec.Unconfirmed = rec.Unconfirmed && !rec.Unmetered
}

// appSideband is an app's sideband through the gateway to a session the
// gateway meters: the inspector on its upstream frames, which feeds the
// session's meter while on. A nil *appSideband meters nothing (a session
// the gateway does not meter).
type appSideband struct {
	lm   *liveMetering
	on   atomic.Bool
	left bool // its session ended (under lm.mu)
}

// sidebandOf is the metering side of an app's sideband to session id (nil
// when the gateway does not meter it: made elsewhere, or already booked).
func (cm *callMeters) sidebandOf(id string, made bool) *appSideband {
	if !made {
		return nil
	}
	v, ok := cm.sessions.Load(id)
	if !ok {
		return nil
	}
	return &appSideband{lm: v.(*liveMetering)}
}

// inspector is the sideband's inspector of its upstream frames.
func (sb *appSideband) inspector() frames.Inspector {
	if sb == nil {
		return unmetered{}
	}
	return sb
}

// Wants implements frames.Inspector: the usage events, while it meters.
func (sb *appSideband) Wants(prefix []byte) bool {
	return sb.on.Load() && sb.lm.info.live.meter.Wants(prefix)
}

// Inspect implements frames.Inspector.
func (sb *appSideband) Inspect(p []byte) { sb.lm.info.live.meter.Inspect(p) }

// takeOver is the app's sideband refused 409 by the upstream: if the
// gateway's own sideband holds the session, it makes way (closed, and
// waited for) and takeOver reports true: the app's is dialed again.
func (sb *appSideband) takeOver() bool {
	if sb == nil {
		return false
	}
	lm := sb.lm
	lm.mu.Lock()
	own := lm.own
	if own == nil || lm.done || lm.handing != nil {
		lm.mu.Unlock()
		return false
	}
	lm.own, lm.handing = nil, sb
	lm.mu.Unlock()
	lm.cm.log.Info("Live session: the upstream refused the app's sideband beside the gateway's; the gateway's makes way and "+
		"the app's meters the session", "session", lm.id, "deployment", lm.d.Name)
	ep := own.h.Endpoint()
	_ = ep.Send(frames.AppendClose(nil, ws.StatusNormalClosure, "", true))
	ep.Close()
	select {
	case <-own.gone:
	case <-time.After(lm.cm.timeout):
	}
	return true
}

// liveTakeOverTries bounds the dials of an app's sideband after the
// gateway's made way: the upstream may count the closed one a moment longer.
const liveTakeOverTries = 10

// redial dials the app's sideband again after takeOver.
func (sb *appSideband) redial(dial func() (*upstream.Upgraded, error)) (*upstream.Upgraded, error) {
	var err error
	for i := range liveTakeOverTries {
		var conn *upstream.Upgraded
		if conn, err = dial(); err == nil {
			return conn, nil
		}
		if ue, ok := errors.AsType[*upstream.Error](err); !ok || ue.Status != http.StatusConflict {
			break
		}
		time.Sleep(time.Duration(i+1) * 20 * time.Millisecond)
	}
	return nil, err
}

// attached is the app's sideband attached upstream: open, and metering if
// the gateway's own made way for it.
func (sb *appSideband) attached() {
	if sb == nil {
		return
	}
	lm := sb.lm
	lm.mu.Lock()
	defer lm.mu.Unlock()
	switch {
	case lm.done:
	case sb.left: // its client left during the dial: the gateway's own meters on
		if lm.handing == sb {
			lm.handing = nil
			go lm.attachOwn()
		}
	case lm.handing == sb:
		lm.handing = nil
		lm.open[sb] = struct{}{}
		lm.adopt(sb)
	default:
		lm.open[sb] = struct{}{}
	}
}

// failed is the app's sideband not attached: if the gateway's own made
// way for it, the gateway's attaches again.
func (sb *appSideband) failed() {
	if sb == nil {
		return
	}
	lm := sb.lm
	lm.mu.Lock()
	again := lm.handing == sb && !lm.done
	if again {
		lm.handing = nil
	}
	lm.mu.Unlock()
	if again {
		go lm.attachOwn()
	}
}

// ended is the app's sideband ending (sessionEnded): if it metered, the
// session is done after its session.closed, else another of the app's
// sidebands or the gateway's own meters on.
func (sb *appSideband) ended() {
	if sb == nil {
		return
	}
	lm := sb.lm
	lm.mu.Lock()
	sb.left = true
	delete(lm.open, sb)
	if lm.app != sb || lm.done {
		lm.mu.Unlock()
		return
	}
	lm.app = nil
	sb.on.Store(false)
	if lm.info.live.meter.Closed {
		lm.mu.Unlock()
		lm.finish()
		return
	}
	for other := range lm.open {
		lm.adopt(other)
		lm.mu.Unlock()
		return
	}
	lm.mu.Unlock()
	go lm.attachOwn()
}
