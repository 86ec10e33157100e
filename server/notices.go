package server

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"time"

	"github.com/gobwas/ws"

	"rtgate/frames"
	"rtgate/poller"
	"rtgate/server/usage"
)

// What the gateway tells a client in the Realtime API's own words. The
// reactor (poller) relays frames and reports events; the server decides what
// an event means to an OpenAI client and builds the frames: error events with
// event_gw_ ids, the user-facing messages, and the per-session bookkeeping
// that feeds metrics (pool hit, setup time).

// errorEvent is the shape of an OpenAI Realtime error event.
type errorEvent struct {
	Type    string `json:"type"`
	EventID string `json:"event_id"`
	Error   struct {
		Type    string  `json:"type"`
		Code    string  `json:"code"`
		Message string  `json:"message"`
		Param   *string `json:"param"`
		EventID *string `json:"event_id"`
		Status  int     `json:"status,omitempty"`
	} `json:"error"`
}

// errorNotice is a text frame carrying a server_error event; status is the
// upstream's HTTP status when there was one.
func errorNotice(code, message string, status int) []byte {
	ev := errorEvent{Type: "error", EventID: newEventID()}
	ev.Error.Type = "server_error"
	ev.Error.Code = code
	ev.Error.Message = message
	ev.Error.Status = status
	body, _ := json.Marshal(ev)
	return frames.AppendFrame(nil, ws.OpText, body, false)
}

// newEventID makes the id of an event the gateway itself sends, marked
// event_gw_ so that nobody mistakes it for the upstream's.
func newEventID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return "event_gw_" + hex.EncodeToString(b[:])
}

// upstreamInvalidNotice is SessionConfig.UpstreamInvalid.
func upstreamInvalidNotice(reason string) []byte {
	return errorNotice("upstream_protocol_error", "the upstream sent an invalid frame: "+reason, 0)
}

// dialFailed tells the client that no upstream could be reached (status is
// the HTTP status of the last refusal, 0 when none answered).
func (s *Server) dialFailed(sess *poller.Session, status int) {
	msg := "the upstream could not be reached"
	if status != 0 {
		msg = fmt.Sprintf("the upstream refused the connection with HTTP %d", status)
	}
	sess.DialFailed(errorNotice("upstream_unavailable", msg, status))
}

// terminate ends a session on the gateway's initiative with an error event
// (errCode, message) and close code and reason.
func (s *Server) terminate(sess *poller.Session, code ws.StatusCode, reason, errCode, message string) {
	sess.Terminate(code, reason, errorNotice(errCode, message, 0))
}

// sessionStart returns when the session's client upgrade completed.
func (s *Server) sessionStart(sess *poller.Session) time.Time {
	s.sessMu.Lock()
	defer s.sessMu.Unlock()
	if info := s.sessions[sess]; info != nil {
		return info.start
	}
	return time.Now()
}

// redial is SessionConfig.Redial: a warm socket died before the client sent
// it anything, so the session gets a fresh upstream through the ordinary
// connect path (failover included).
func (s *Server) redial(sess *poller.Session) bool {
	s.sessMu.Lock()
	info := s.sessions[sess]
	s.sessMu.Unlock()
	if info == nil || info.redial == nil {
		return false
	}
	s.uncount(info, true)
	s.metrics.warmRedials.Inc()
	go info.redial()
	return true
}

// setupWatch is the session's frames.Inspector: it records the session setup
// time at the first upstream text frame (session.created) and passes every
// frame on to the session's usage accounting.
type setupWatch struct {
	*sessionInfo
	srv  *Server
	seen bool // only the upstream read path touches it
}

// Wants implements frames.Inspector.
func (w *setupWatch) Wants(prefix []byte) bool {
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
	return w.meter.Wants(prefix)
}

// Inspect implements frames.Inspector: the usage meter reads the event.
func (w *setupWatch) Inspect(p []byte) { w.meter.Inspect(p) }

// isSessionCreated is SessionConfig's test for the first frame of a
// redialed upstream: its session.created is consumed, since the client has
// the warm socket's.
func isSessionCreated(payload []byte) bool {
	t, ok := usage.EventType(payload)
	return ok && string(t) == "session.created"
}
