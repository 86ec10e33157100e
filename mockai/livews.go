package mockai

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/gorilla/websocket"
)

// The primary Live socket: WS /v1/live/sessions (Azure: /openai/v1/live/...)
// and WS /v1/live/sessions/{id}/fork. There is no model in the URL; the
// first client event must be session.start, whose session names it:
//
//	session.start              -> session.started (session: id live_…, model, status, expires_at)
//	                              (a fork's names no model: it continues the stored session's)
//	session.input_audio.append -> session.input_transcript.delta, session.output_audio.delta
//	                              (AudioDeltaBytes of PCM; the first after FirstAudioDelay),
//	                              session.output_transcript.delta; reflected to sidebands
//	                              (scripted: Config.InputTranscripts, OutputTranscripts,
//	                              LiveConfig.ClientDelegations; mockai's doc "GPT-Live")
//	session.update             -> session.updated (delegation and triggers only)
//	session.close              -> session.closed (reason close_requested, final usage), close 1000
//	response.create            -> with Responses delegation: session.delegation.created and
//	                              response.event wrapping response.created,
//	                              response.output_text.delta and response.completed (usage:
//	                              LiveBackendUsage); without it an error
//	session.input_audio.mute / unmute, session.instructions / thinking / commentary.append
//	                           -> the matching .muted / .unmuted / .appended
//	response.item.create, decision.*, session.output_audio.fixture.play,
//	transport.dtmf.send        -> accepted, recorded (GET /mock/events), not answered
//
// and session.usage.updated every LiveConfig.UsageInterval. Anything else
// first (another event, a binary frame, non-JSON) gets an error
// session_not_started and close 4000 "invalid_request_error.session_not_started";
// a session.start that fails the strict config check gets its error
// (unknown_parameter with param, ...) and the same kind of close. Once
// started, bad events get an error event and the socket stays open; a
// binary frame gets invalid_value.

// LiveBackendUsage is the token usage in every delegated response.completed,
// in the Responses API's names, so tests can predict the backend tokens.
var LiveBackendUsage = map[string]any{
	"input_tokens": 120, "input_tokens_details": map[string]any{"cached_tokens": 20},
	"output_tokens": 30, "output_tokens_details": map[string]any{"reasoning_tokens": 10},
	"total_tokens": 150,
}

// liveSessionPaths are the primary Live routes (OpenAI, Azure).
var liveSessionPaths = []string{"/v1/live/sessions", "/openai/v1/live/sessions"}

// handleLiveWS answers a WebSocket upgrade on a primary or fork route.
func (s *Server) handleLiveWS(w http.ResponseWriter, r *http.Request) {
	var parent *liveSession // the stored session a fork continues
	s.handleUpgrade(w, r, func() bool {
		if id := r.PathValue("id"); id != "" {
			var status int
			var code, msg string
			if parent, status, code, msg = s.forkable(id); parent == nil {
				writeHTTPError(w, status, "invalid_request_error", code, msg)
				return false
			}
		}
		return true
	}, func(sess *session, rec *Record) { s.serveLive(sess, rec, parent) })
}

// serveLive runs a primary socket to its end; parent is the stored session
// a fork continues (nil for a new session).
func (s *Server) serveLive(sess *session, rec *Record, parent *liveSession) {
	if sess.cfg.StopReading { // the upgraded socket never answers, not even session.start
		sess.stall()
		return
	}
	ls := sess.startLive(rec, parent)
	if ls == nil {
		return
	}
	s.setRecordSession(rec, ls.id)
	sess.liveLoop(ls)
	// The client left without session.close (or it was answered): the
	// session ends with connection_lost, which only sidebands can hear of.
	ls.mu.Lock()
	ls.primary = nil
	ls.mu.Unlock()
	ls.end("connection_lost", true)
}

// liveEvent holds the fields of a Live client event that mockai reads.
type liveEvent struct {
	Type    string          `json:"type"`
	EventID string          `json:"event_id"`
	Session json.RawMessage `json:"session"`
	Audio   *string         `json:"audio"`
}

// readLive reads one client event: ok false means the socket ended; a
// non-nil error event means the message was not a usable event.
func (s *session) readLive() (ev liveEvent, data []byte, bad map[string]any, ok bool) {
	mt, data, err := s.ws.ReadMessage()
	if err != nil {
		s.lastReadErr = err
		s.srv.log.Debug("live socket closed", "session", s.id, "err", err)
		return ev, nil, nil, false
	}
	s.srv.framesIn.Add(1)
	switch {
	case mt != websocket.TextMessage:
		return ev, nil, liveError("invalid_value", "Binary frames are not supported; send JSON text frames with base64 audio.", "", ""), true
	case json.Unmarshal(data, &ev) != nil:
		return ev, nil, liveError("invalid_value", "The message is not a valid JSON event.", "", ""), true
	}
	return ev, data, nil, true
}

// startLive waits for session.start and answers session.started; nil means
// the socket was refused (or left) before the session started.
func (s *session) startLive(rec *Record, parent *liveSession) *liveSession {
	if d := s.cfg.Live.StartTimeout; d > 0 {
		_ = s.ws.SetReadDeadline(time.Now().Add(d))
	}
	ev, data, bad, ok := s.readLive()
	if !ok {
		if s.cfg.Live.StartTimeout > 0 && s.ctx.Err() == nil && isTimeout(s.lastReadErr) {
			s.failWith(liveError("session_start_timeout",
				fmt.Sprintf("No session.start within %v.", s.cfg.Live.StartTimeout), "", ""), "invalid_request_error", "session_start_timeout")
		}
		return nil
	}
	_ = s.ws.SetReadDeadline(time.Time{})
	if d := s.cfg.Live.StartCrossed; d > 0 && bad == nil {
		if s.srv.sleep(s.ctx, d) {
			s.failWith(liveError("session_start_timeout",
				fmt.Sprintf("No session.start within %v.", s.cfg.Live.StartTimeout), "", ""), "invalid_request_error", "session_start_timeout")
		}
		return nil
	}
	if bad == nil && ev.Type != "session.start" {
		bad = liveError("session_not_started", "The session has not started: the first client event must be session.start.", "", ev.EventID)
	}
	if bad != nil {
		code := "session_not_started"
		bad["error"].(map[string]any)["code"] = code
		s.failWith(bad, "invalid_request_error", code)
		return nil
	}
	var cfg map[string]any
	if err := json.Unmarshal(ev.Session, &cfg); err != nil || cfg == nil {
		s.srv.noteEvent(s, ev.Type, data)
		s.failWith(liveError("missing_required_parameter", "Missing required parameter: 'session' (an object).", "session", ev.EventID),
			"invalid_request_error", "missing_required_parameter")
		return nil
	}
	kind := configWebSocket
	if parent != nil {
		kind = configFork
	}
	ce := checkConfig(kind, cfg)
	if _, hasClient := cfg["client"]; ce == nil && kind == configFork && hasClient {
		// client overrides are for WebRTC forks only (the SDK's ForkSessionConfig).
		ce = unknownParam("session.client")
	}
	if ce != nil {
		s.srv.noteEvent(s, ev.Type, data)
		s.failWith(liveError(ce.code, ce.msg, ce.param, ev.EventID), "invalid_request_error", ce.code)
		return nil
	}
	if !s.srv.sleep(s.ctx, s.cfg.SessionDelay) { // a slow start
		return nil
	}
	var ls *liveSession
	if parent != nil {
		ls = s.srv.fork(parent, transportWebSocket, rec.Key, cfg)
	} else {
		ls = s.srv.newLive(transportWebSocket, rec.Key, cfg["model"].(string), cfg)
	}
	s.id = ls.id
	s.srv.noteEvent(s, ev.Type, data) // under the session's id: what it received (Received)
	ls.mu.Lock()
	ls.primary = s
	ls.mu.Unlock()
	if !ls.start() {
		return nil
	}
	s.srv.sessions.Add(1)
	s.srv.log.Debug("live session started", "session", ls.id, "model", ls.model)
	started := map[string]any{"type": "session.started", "event_id": newID("event_"), "session": ls.resource()}
	if ev.EventID != "" {
		started["client_event_id"] = ev.EventID
	}
	if s.send(started) != nil {
		return nil
	}
	return ls
}

// liveAcks are the client events answered by one acknowledgement.
var liveAcks = map[string]string{
	"session.input_audio.mute":    "session.input_audio.muted",
	"session.input_audio.unmute":  "session.input_audio.unmuted",
	"session.instructions.append": "session.instructions.appended",
	"session.thinking.append":     "session.thinking.appended",
	"session.commentary.append":   "session.commentary.appended",
}

// liveQuiet are the client events accepted and recorded without an answer.
var liveQuiet = map[string]bool{
	"response.item.create": true, "decision.create": true, "decision.item.create": true,
	"decision.item.delete": true, "session.output_audio.fixture.play": true, "transport.dtmf.send": true,
}

// liveLoop answers client events on a started session until the socket ends.
func (s *session) liveLoop(ls *liveSession) {
	firstAudio := true
	for {
		ev, data, bad, ok := s.readLive()
		if !ok {
			return
		}
		if bad != nil {
			_ = s.send(bad)
			continue
		}
		if ev.Type != "session.input_audio.append" {
			s.srv.noteEvent(s, ev.Type, data)
		}
		switch {
		case ev.Type == "session.input_audio.append":
			if !s.liveAppend(ls, ev, firstAudio) {
				continue
			}
			firstAudio = false
		case ev.Type == "session.close":
			if s.cfg.Live.NoClosed {
				ls.end("close_requested", false)
			} else {
				ls.end("close_requested", true)
			}
		case ev.Type == "session.start":
			_ = s.send(liveError("session_already_started", "The session has already started.", "", ev.EventID))
		case ev.Type == "session.update":
			ls.update(s, ev)
		case ev.Type == "response.create":
			if !ls.respond(ev.EventID) {
				_ = s.send(liveError("delegation_required", "response.create needs Responses delegation (session.delegation.type 'responses').", "", ev.EventID))
			}
		case liveAcks[ev.Type] != "":
			ls.mu.Lock()
			at := ls.outMs
			ls.mu.Unlock()
			_ = s.send(withClientEvent(map[string]any{"type": liveAcks[ev.Type], "event_id": newID("event_"), "start_ms": at, "end_ms": at}, ev.EventID))
		case liveQuiet[ev.Type]:
		case ev.Type == "":
			_ = s.send(liveError("missing_required_parameter", "Missing required parameter: 'type'.", "type", ev.EventID))
		default:
			_ = s.send(liveError("invalid_value", fmt.Sprintf("Invalid value: '%s'. Unknown client event type.", ev.Type), "type", ev.EventID))
		}
	}
}

// liveAppend takes input audio: it counts toward usage, is reflected to
// sidebands, and is answered with transcripts and output audio.
func (s *session) liveAppend(ls *liveSession, ev liveEvent, first bool) bool {
	if ev.Audio == nil {
		_ = s.send(liveError("missing_required_parameter", "Missing required parameter: 'audio'.", "audio", ev.EventID))
		return false
	}
	n, err := io.Copy(io.Discard, base64.NewDecoder(base64.StdEncoding, strings.NewReader(*ev.Audio)))
	if err != nil {
		_ = s.send(liveError("invalid_value", "Invalid 'audio': not valid base64.", "audio", ev.EventID))
		return false
	}
	s.srv.audioAppends.Add(1)
	s.srv.audioBytes.Add(n)
	ls.mu.Lock()
	start := int64(float64(ls.inBytes) / ls.inRate * 1000)
	ls.inBytes += n
	end := int64(float64(ls.inBytes) / ls.inRate * 1000)
	turn := ls.turns
	ls.turns++
	ls.mu.Unlock()
	ls.reflect("session.input_audio.append", "audio", *ev.Audio, start, end)
	_ = s.send(map[string]any{"type": "session.input_transcript.delta", "event_id": newID("event_"),
		"delta": scripted(s.cfg.InputTranscripts, turn, LiveTranscript), "start_ms": start, "end_ms": end})
	if first && !s.srv.sleep(s.ctx, s.srv.firstAudioDelay(s.cfg)) {
		return false
	}
	// The answer: one audio delta and the default transcript, or with
	// Config.OutputTranscripts AudioDeltas deltas (AudioDeltaInterval
	// apart), each followed by the words it covers (liveWords).
	deltas, plan := 1, []string{LiveTranscript}
	if len(s.cfg.OutputTranscripts) > 0 {
		deltas = max(s.cfg.AudioDeltas, 1)
		plan = liveWords(scripted(s.cfg.OutputTranscripts, turn, ""), deltas)
	}
	for i := range deltas {
		if i > 0 && !s.srv.sleep(s.ctx, s.cfg.AudioDeltaInterval) {
			return false
		}
		ls.mu.Lock()
		outStart := ls.outMs
		outEnd := outStart + int64(s.cfg.AudioDeltaBytes/bytesPerMilli)
		ls.outMs = outEnd
		ls.mu.Unlock()
		_ = s.send(map[string]any{"type": "session.output_audio.delta", "event_id": newID("event_"), "delta": s.srv.audioDelta})
		ls.reflect("session.output_audio.delta", "delta", s.srv.audioDelta, outStart, outEnd)
		if plan[i] != "" {
			_ = s.send(map[string]any{"type": "session.output_transcript.delta", "event_id": newID("event_"), "delta": plan[i], "start_ms": outStart, "end_ms": outEnd})
		}
	}
	if s.cfg.Live.ClientDelegations && ls.clientDelegation() {
		ls.mu.Lock()
		at := ls.outMs
		ls.mu.Unlock()
		_ = s.send(map[string]any{"type": "session.delegation.created", "event_id": newID("event_"), "offset_ms": at,
			"delegation": map[string]any{"id": newID("del_"), "target": "client", "type": "delegation"}})
	}
	return true
}

// liveWords spreads text's words over n audio deltas, as a Realtime
// response's scripted transcript is (transcriptPlan): the first delta
// carries the first word; a delta may carry none.
func liveWords(text string, n int) []string {
	pieces := words(text)
	plan := make([]string, n)
	k := len(pieces)
	for i := range plan {
		from, to := (i*k+n-1)/n, ((i+1)*k+n-1)/n
		plan[i] = strings.Join(pieces[from:to], "")
	}
	return plan
}

// clientDelegation reports whether the session delegates to its client
// (delegation omitted, null or of type client).
func (ls *liveSession) clientDelegation() bool {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	d, _ := ls.config["delegation"].(map[string]any)
	return d == nil || d["type"] == "client"
}

// update applies a session.update: only delegation and triggers may change.
func (ls *liveSession) update(from *session, ev liveEvent) {
	var upd map[string]any
	if err := json.Unmarshal(ev.Session, &upd); err != nil || upd == nil {
		_ = from.send(liveError("missing_required_parameter", "Missing required parameter: 'session' (an object).", "session", ev.EventID))
		return
	}
	for _, k := range sortedKeys(upd) {
		if k != "delegation" && k != "triggers" {
			_ = from.send(liveError("unknown_parameter", fmt.Sprintf("Unknown parameter: 'session.%s' (only delegation and triggers can change after startup).", k), "session."+k, ev.EventID))
			return
		}
	}
	if d, present := upd["delegation"]; present && d != nil {
		if ce := checkDelegation(d); ce != nil {
			_ = from.send(liveError(ce.code, ce.msg, ce.param, ev.EventID))
			return
		}
	}
	ls.mu.Lock()
	merged := make(map[string]any, len(ls.config)+len(upd))
	for k, v := range ls.config {
		merged[k] = v
	}
	for k, v := range upd {
		merged[k] = v
	}
	ls.configure(merged)
	ls.mu.Unlock()
	ls.broadcast(withClientEvent(map[string]any{"type": "session.updated", "event_id": newID("event_"), "session": ls.resource()}, ev.EventID))
}

// respond plays one delegated Responses turn to every socket of the
// session; false without Responses delegation.
func (ls *liveSession) respond(clientEventID string) bool {
	ls.mu.Lock()
	backend, at := ls.backend, ls.outMs
	ls.mu.Unlock()
	if backend == "" {
		return false
	}
	delID, respID := newID("del_"), newID("resp_")
	ls.broadcast(withClientEvent(map[string]any{"type": "session.delegation.created", "event_id": newID("event_"), "offset_ms": at,
		"delegation": map[string]any{"id": delID, "target": "responses", "type": "delegation", "response_id": respID}}, clientEventID))
	resp := func(status string, usage any) map[string]any {
		return map[string]any{"id": respID, "object": "response", "status": status, "model": backend, "output": []any{}, "usage": usage}
	}
	for _, inner := range []map[string]any{
		{"type": "response.created", "sequence_number": 0, "response": resp("in_progress", nil)},
		{"type": "response.output_text.delta", "sequence_number": 1, "item_id": newID("msg_"), "output_index": 0, "content_index": 0, "delta": LiveTranscript},
		{"type": "response.completed", "sequence_number": 2, "response": resp("completed", LiveBackendUsage)},
	} {
		ls.broadcast(map[string]any{"type": "response.event", "event_id": newID("event_"), "delegation_id": delID, "event": inner})
	}
	return true
}

// isTimeout says err is a read deadline passing.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, os.ErrDeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout())
}

// liveError is a Live error event (the SDK's ErrorEvent): param and
// client_event_id only when known.
func liveError(code, msg, param, clientEventID string) map[string]any {
	e := map[string]any{"type": "invalid_request_error", "code": code, "message": msg}
	if param != "" {
		e["param"] = param
	}
	ev := map[string]any{"type": "error", "event_id": newID("event_"), "error": e}
	if clientEventID != "" {
		e["client_event_id"] = clientEventID
		ev["client_event_id"] = clientEventID
	}
	return ev
}

func withClientEvent(ev map[string]any, clientEventID string) map[string]any {
	if clientEventID != "" {
		ev["client_event_id"] = clientEventID
	}
	return ev
}
