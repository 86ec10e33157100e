package session

// A session's end: the client leaving (clientLeft), then, once both sockets
// are closed, the registry, the slots and counts given back, the metrics
// and the record (sessionEnded); terminate ends a session on the gateway's
// initiative.

import (
	"time"

	"github.com/gobwas/ws"

	"rtgate/frames"
	"rtgate/poller"
	"rtgate/server/protocol"
	"rtgate/server/routes"
	"rtgate/server/usage"
)

// clientLeft is what the client socket closing means to the gateway: an
// upstream still being dialed for it is no longer wanted (cancelled first),
// then the session hears that its client is gone.
func (m *Manager) clientLeft(sess *poller.Session) {
	m.sessMu.Lock()
	info := m.sessions[sess]
	m.sessMu.Unlock()
	if info != nil {
		info.dialMu.Lock()
		info.clientLeft = true
		if info.cancelDial != nil {
			info.cancelDial()
		}
		info.dialMu.Unlock()
		if info.live != nil {
			info.live.clientLeft()
		}
	}
	sess.ClientGone()
}

// sessionEnded is SessionConfig.OnEnd: the session leaves the registry,
// gives back its slots and counts, and its record is written.
func (m *Manager) sessionEnded(sess *poller.Session) {
	m.sessMu.Lock()
	info := m.sessions[sess]
	delete(m.sessions, sess)
	m.sessMu.Unlock()
	if info == nil {
		m.sessionsOpen.Add(-1)
		return
	}
	if info.keyCounted {
		m.admitter.Release(info.key.Name)
	}
	deployment := ""
	dep := info.uncount(m.balancer, false)
	info.depMu.Lock() // a resume may have swapped it
	reserved := info.reserved
	info.reserved = nil
	info.depMu.Unlock()
	m.balancer.Release(reserved)
	if dep != nil {
		deployment = dep.Name
	}
	mt := m.metrics
	mt.sessionsOpen.Dec()
	mt.protocolOpen.WithLabelValues(info.protocol()).Dec()
	fin, bin, fout, bout := sess.Counters()
	mt.frames.WithLabelValues("client_to_upstream").Add(float64(fin))
	mt.bytes.WithLabelValues("client_to_upstream").Add(float64(bin))
	mt.frames.WithLabelValues("upstream_to_client").Add(float64(fout))
	mt.bytes.WithLabelValues("upstream_to_client").Add(float64(bout))

	cl, from, ok := sess.FirstClose()
	outcome := sessionOutcome(sess, cl, from, ok)
	if dep == nil && info.left() {
		outcome = "client_lost" // it left while its upstream was being dialed
	}
	mt.sessionsTotal.WithLabelValues(outcome, info.key.Name).Inc()
	m.estimateFlights(info) // responses still in flight: billed an estimate
	u := info.meter.Usage
	est := info.estimatedUsage()
	if est != nil {
		u.Add(*est)
	}
	if info.live != nil {
		u = info.live.meter.Usage // the backend tokens
	}
	m.metrics.countTokens(info.group, info.key.Name, u)

	rec := usage.Record{
		SessionID: info.id, KeyName: info.key.Name, ModelGroup: info.group, Deployment: deployment,
		StartedAt: info.start.UTC(), EndedAt: time.Now().UTC(), DurationMS: time.Since(info.start).Milliseconds(),
		PoolHit: info.poolHit, Outcome: outcome, Protocol: "realtime",
		FramesIn: fin, BytesIn: bin, FramesOut: fout, BytesOut: bout,
		Usage: u, Estimated: est, Unconfirmed: est != nil, Transcription: info.meter.Transcription,
	}
	info.resumeRecord(&rec)
	if info.guard != nil {
		info.guard.Close() // its checks in flight are for nobody now
	}
	if info.live != nil {
		info.live.closeGuard()
	}
	m.storeRecording(info)
	if info.conv != nil && info.conv.Kept() {
		conv := info.conv.Close()
		rec.Conversation = &conv
	}
	info.stopRollover()
	info.keep.Release()
	if ok {
		rec.CloseCode, rec.CloseReason, rec.CloseSide = int(cl.Code), cl.Reason, from.String()
	}
	if info.live != nil {
		info.live.fill(&rec)
		mt.liveSeconds.WithLabelValues(rec.ModelGroup, rec.KeyName).Add(rec.Seconds)
		if rec.Unconfirmed {
			mt.liveUnconfirmed.WithLabelValues(rec.ModelGroup).Inc()
		}
	}
	rec.Turns, rec.FirstAudioP50MS, rec.FirstAudioP95MS = mt.endTurns(info)
	info.trace.End()
	if info.kind == kindLiveSideband {
		rec.Protocol = routes.ProtocolLive // its session's usage is the session's own record (liveMetering), not this one's
		info.sideband.ended()
	}
	if dep != nil && dep.BilledByTime() && info.live == nil {
		rec.Seconds = float64(rec.DurationMS) / 1000 // wall clock: xAI bills the minute of connection
		if info.key.Budget.Max > 0 {
			m.budgets.bookAfter(info, info.timeToBook(dep)) // what the responses did not book (budgets.timeToBook)
		}
	}
	if info.kind == kindTranslation && dep != nil {
		rec.Protocol, rec.Seconds = routes.ProtocolTranslation, float64(rec.DurationMS)/1000 // wall clock: billed by the minute of session
	}
	m.records.record(info, &rec)
	mt.protocolTotal.WithLabelValues(info.protocol(), rec.Outcome).Inc()
	explainBeta(m.log, rec)
	m.sessionsOpen.Add(-1) // last: tests and Drain take 0 to mean all is done
}

// sessionOutcome classifies how a session ended, for metrics.
func sessionOutcome(sess *poller.Session, cl frames.Close, from frames.Side, ok bool) string {
	switch {
	case sess.UpstreamUnavailable():
		return "upstream_unavailable"
	case !ok:
		return "unknown"
	case cl.Code == ws.StatusAbnormalClosure: // the socket dropped without a close frame
		return from.String() + "_lost"
	case cl.Code == ws.StatusProtocolError || cl.Code == ws.StatusInvalidFramePayloadData || cl.Code == ws.StatusMessageTooBig:
		return from.String() + "_protocol_error"
	}
	return from.String() + "_closed"
}

// terminate ends a session on the gateway's initiative with an error event
// (errCode, message) and close code and reason.
func terminate(p protocol.Protocol, sess *poller.Session, code ws.StatusCode, reason, errCode, message string) {
	sess.Terminate(code, reason, p.Refusal(errCode, message, 0))
}
