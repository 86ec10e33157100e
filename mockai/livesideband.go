package mockai

import (
	"encoding/json"
	"fmt"
	"net/http"
)

// Sidebands: WS /v1/live/sessions/{id}/attach lets a server watch and steer
// a session it does not carry (the app's server beside a browser's WebRTC
// call; the gateway metering one). An unknown id is refused 404 before the
// upgrade, a closed session 409. On attach the sideband gets session.started
// (the session as it is: mockai's choice, OpenAI does not document what a
// late sideband is sent first), then everything the session's other sockets
// get, and reflected audio: session.input_audio.append {audio} and
// session.output_audio.delta {delta}, each with start_ms and end_ms. (OpenAI
// reflects PCM16 24 kHz whatever the primary's format; mockai reflects the
// input audio as the primary sent it.)
//
// A sideband may send session.update, session.close, response.create and
// the other control events (not audio). When the session ends a sideband
// with ?graceful_close=true is closed 1000 after session.closed; without it
// the connection is dropped after session.closed (what the SDK's
// graceful_close opts out of).

// sideband is one attached socket.
type sideband struct {
	sess     *session
	graceful bool
}

// handleAttach answers a sideband upgrade.
func (s *Server) handleAttach(w http.ResponseWriter, r *http.Request) {
	var ls *liveSession
	graceful := false
	s.handleUpgrade(w, r, func() bool {
		switch g := r.URL.Query().Get("graceful_close"); g {
		case "", "false":
		case "true":
			graceful = true
		default:
			writeHTTPError(w, http.StatusBadRequest, "invalid_request_error", "invalid_value",
				fmt.Sprintf("Invalid value for 'graceful_close': %q (expected true or false).", g))
			return false
		}
		if ls = s.liveOr404(w, r); ls == nil {
			return false
		}
		rec := ls.record()
		if rec.State == liveClosed {
			writeHTTPError(w, http.StatusConflict, "invalid_request_error", "session_closed", "The Live session has ended.")
			return false
		}
		if m := s.cfg.Live.MaxSidebands; m < 0 || (m > 0 && rec.Sidebands >= m) {
			writeHTTPError(w, http.StatusConflict, "invalid_request_error", "too_many_sidebands",
				fmt.Sprintf("The Live session already has %d sideband(s) attached.", rec.Sidebands))
			return false
		}
		return true
	}, func(sess *session, rec *Record) { s.serveSideband(sess, rec, ls, graceful) })
}

// serveSideband runs a sideband until it or its session ends.
func (s *Server) serveSideband(sess *session, rec *Record, ls *liveSession, graceful bool) {
	sess.id = ls.id
	// session.started is sent and the sideband joins under ls.mu, so every
	// event broadcast after it reaches the sideband, and after session.started:
	// a client that answers session.started at once misses nothing.
	sb := &sideband{sess: sess, graceful: graceful}
	ls.mu.Lock()
	if ls.state == liveClosed {
		ls.mu.Unlock()
		sess.closeNormal("session closed")
		return
	}
	err := sess.send(map[string]any{"type": "session.started", "event_id": newID("event_"), "session": ls.resourceLocked()})
	if err == nil {
		ls.sidebands[sb] = struct{}{}
	}
	ls.mu.Unlock()
	if err != nil {
		return
	}
	defer func() {
		ls.mu.Lock()
		delete(ls.sidebands, sb)
		ls.mu.Unlock()
	}()
	s.setRecordSession(rec, ls.id)
	for {
		ev, data, bad, ok := sess.readLive()
		if !ok {
			return
		}
		if bad != nil {
			_ = sess.send(bad)
			continue
		}
		s.noteEvent(sess, ev.Type, data)
		switch {
		case ev.Type == "session.close":
			ls.end("close_requested", !sess.cfg.Live.NoClosed)
		case ev.Type == "session.update":
			ls.update(sess, ev)
		case ev.Type == "response.create":
			if !ls.respond(ev.EventID) {
				_ = sess.send(liveError("delegation_required", "response.create needs Responses delegation (session.delegation.type 'responses').", "", ev.EventID))
			}
		case liveAcks[ev.Type] != "":
			_ = sess.send(withClientEvent(map[string]any{"type": liveAcks[ev.Type], "event_id": newID("event_")}, ev.EventID))
		case liveQuiet[ev.Type]:
		default:
			_ = sess.send(liveError("invalid_value", fmt.Sprintf("Invalid value: '%s'. Not a sideband client event.", ev.Type), "type", ev.EventID))
		}
	}
}

// forkable finds the stored, closed session id names for a fork; without
// one it returns the HTTP status, code and message to refuse with.
func (s *Server) forkable(id string) (ls *liveSession, status int, code, msg string) {
	ls = s.lookupLive(id)
	if ls == nil {
		return nil, http.StatusNotFound, "session_not_found", "No Live session " + id + "."
	}
	rec := ls.record()
	switch {
	case !rec.Store:
		return nil, http.StatusBadRequest, "session_not_stored", "Only sessions started with store: true can be forked."
	case rec.State != liveClosed:
		return nil, http.StatusConflict, "session_active", "A session can be forked once it has closed."
	}
	return ls, 0, "", ""
}

// fork starts a new session continuing parent: its model and configuration,
// with the overrides in cfg (already checked as a fork configuration).
func (s *Server) fork(parent *liveSession, transport, key string, cfg map[string]any) *liveSession {
	parent.mu.Lock()
	merged := make(map[string]any, len(parent.config)+len(cfg))
	for k, v := range parent.config {
		merged[k] = v
	}
	model := parent.model
	parent.mu.Unlock()
	for k, v := range cfg {
		if k == "audio" { // only audio.format may change: keep the stored voice
			a, _ := merged["audio"].(map[string]any)
			n := map[string]any{}
			for ak, av := range a {
				n[ak] = av
			}
			for ak, av := range v.(map[string]any) {
				n[ak] = av
			}
			v = n
		}
		merged[k] = v
	}
	if transport != transportWebSocket {
		if a, _ := merged["audio"].(map[string]any); a != nil && a["format"] != nil {
			n := map[string]any{}
			for ak, av := range a {
				if ak != "format" {
					n[ak] = av
				}
			}
			merged["audio"] = n
		}
	}
	ls := s.newLive(transport, key, model, merged)
	ls.forkedOf = parent.id
	return ls
}

// jsonObject decodes an optional JSON object (nil when raw is empty or null).
func jsonObject(raw json.RawMessage) (map[string]any, bool) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, true
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil || m == nil {
		return nil, false
	}
	return m, true
}
