package session

// The upstream's answers to the events the gateway sends a Realtime
// upstream for its own sake, beside the client's conversation. Their ids
// carry protocol.NewOwnEventID's mark (event_gw_own_), so an upstream error
// naming one (error.event_id) is known for the gateway's. A client must
// never get an error for an event it did not send: it cannot make sense of
// it (at a rollover it would look like the client's own cancel failing; at
// a session's end it comes before the close):
//
//	the gateway's event                        the upstream's answer             the client gets
//	response.cancel (a session's end, a        response.done, status cancelled   it: its response ended so
//	  rollover it forces: forcedRollover)      error response_cancel_not_active  no: the response had ended on its
//	                                                                               own (its response.done came)
//	session.update (a transcription model      session.updated                   it: its session's transcription
//	  the key may not use:                                                         changed, and it is told how
//	  checkTranscriptionModel)                 error                             no: logged as a warning; the meter
//	                                                                               prices the model in force
//
// Other events the gateway makes (protocol.NewEventID, no own_ mark) are
// not filtered: a client secret's session.update stands in for the
// client's own configuration, and its error is the client's (the session
// is refused with it: primeSession); a resume's replay is answered to
// the primer, which consumes every reply. GPT-Live is not filtered either:
// the gateway's session.start there stands in for the client's own.
//
// The errors are held back by the session's frames.Holder (setupWatch, which
// is continuity's holder too; without continuity it only filters:
// poller.FilterUpstream): the scanner offers it small text frames whole
// (frames.MaxHold), and only an error event naming the mark is parsed;
// every other frame is forwarded as before, zero-copy. An error over
// frames.MaxHold bytes would reach the client (no upstream error is that
// long). Each held error is logged (at debug for a cancel that crossed its
// response's end, which is expected) and counted in
// rtgate_gateway_event_errors_total{reason}. The mark is the gateway's: a
// client that named its own events event_gw_own_… would lose their errors.

import "rtgate/server/protocol"

// codeCancelNotActive is the upstream's error for a response.cancel that
// found no response in progress.
const codeCancelNotActive = "response_cancel_not_active"

// holdGatewayAnswer reports whether p, an upstream error event of a Realtime
// session, answers the gateway's own event, which the client must not get;
// it logs and counts it. It runs on the upstream's read path.
func (w *setupWatch) holdGatewayAnswer(p []byte) bool {
	code, ok := protocol.Realtime{}.AnswersGateway(p)
	if !ok {
		return false
	}
	reason := "other"
	if code == codeCancelNotActive {
		reason = codeCancelNotActive
		w.mgr.log.Debug("upstream error for the gateway's response.cancel kept from the client: the response had ended",
			"session", w.id, "code", code)
	} else {
		w.mgr.log.Warn("upstream error for an event of the gateway's kept from the client",
			"session", w.id, "code", code)
	}
	w.mgr.metrics.gatewayErrors.WithLabelValues(reason).Inc()
	return true
}

// registerGatewayErrors adds rtgate_gateway_event_errors_total.
func (m *metrics) registerGatewayErrors() {
	m.gatewayErrors = newReasonCounter("rtgate_gateway_event_errors_total",
		"Upstream error events answering an event the gateway sent itself (a response.cancel at a session's end or "+
			"a rollover, a session.update setting the transcription model), kept from the client: reason "+
			"response_cancel_not_active (the response had ended on its own) or other.", codeCancelNotActive, "other")
	m.reg.MustRegister(m.gatewayErrors)
}
