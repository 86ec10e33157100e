package server

import (
	"fmt"
	"time"

	"github.com/gobwas/ws"

	"rtgate/poller"
)

// What the gateway tells a client, in its protocol's words (s.proto builds
// the frames: server/protocol). The reactor (poller) relays frames and
// reports events; the server decides what an event means to the client, and
// keeps the per-session bookkeeping that feeds metrics (pool hit, setup
// time).

// dialFailed tells the client that no upstream could be reached (status is
// the HTTP status of the last refusal, 0 when none answered).
func (s *Server) dialFailed(sess *poller.Session, status int) {
	msg := "the upstream could not be reached"
	if status != 0 {
		msg = fmt.Sprintf("the upstream refused the connection with HTTP %d", status)
	}
	sess.DialFailed(s.proto.Refusal("upstream_unavailable", msg, status))
}

// terminate ends a session on the gateway's initiative with an error event
// (errCode, message) and close code and reason.
func (s *Server) terminate(sess *poller.Session, code ws.StatusCode, reason, errCode, message string) {
	sess.Terminate(code, reason, s.proto.Refusal(errCode, message, 0))
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
