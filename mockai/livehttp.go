package mockai

import (
	"cmp"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net/http"
	"slices"
	"strconv"
	"strings"
)

// Live's HTTP routes (also under Azure's /openai/v1), all with the key
// checked as on the sockets (401 for a wrong key):
//
//	POST /v1/live/sessions            WebRTC: {session, transport: {type: webrtc, sdp}}
//	                                  -> 201 {session: {id}, transport: {type, sdp: answer}}
//	POST /v1/live/sessions/{id}/fork  a stored, closed session continued over WebRTC -> 201, same shape
//	GET  /v1/live/sessions/{id}/content  its recording: audio/wav, stereo PCM16 24 kHz
//	                                  (input left, output right), as long as its usage
//	                                  seconds (at least 1 s), streamed in chunks
//	POST /v1/live/sessions/{id}/accept   {session: {type: live, model, ...}}: a ringing SIP call
//	POST /v1/live/sessions/{id}/reject   {status_code: 300-699}: a ringing SIP call
//	POST /v1/live/sessions/{id}/refer    {target_uri: tel:… or sip:…}: an active SIP call
//	POST /v1/live/sessions/{id}/hangup   (no body): ends an active session, reason close_requested
//
// The call controls answer 200 with an empty body. Refusals are OpenAI's
// JSON error shape: 404 session_not_found, 409 for the wrong state, 400 with
// code and param for a bad body (a configuration is as strict as
// session.start's). A fork needs store: true and a closed session (400
// session_not_stored, 409 session_active: mockai's codes; OpenAI documents
// none). What OpenAI would do to announce an inbound SIP call (the
// live.transport.incoming webhook) and what the media would do, tests ask
// for:
//
//	POST /mock/live/incoming               a ringing SIP session -> 201 {"id": "live_…"}
//	POST /mock/live/sessions/{id}/respond  a delegated Responses turn (needs responses delegation)
//	POST /mock/live/sessions/{id}/end?reason=remote_hangup|content|expired|connection_lost|close_requested
//	GET  /mock/live/sessions               every session (LiveSessionRecord)

// maxLiveBody bounds a request body: an SDP offer plus a full configuration
// (16k tokens of instructions, 128 input messages) fits many times over.
const maxLiveBody = 4 << 20

// wavChunk is how much of a recording is written per flush.
const wavChunk = 64 << 10

func (s *Server) mountLive(mux *http.ServeMux) {
	for _, base := range liveSessionPaths {
		mux.HandleFunc("GET "+base, s.handleLiveWS)
		mux.HandleFunc("POST "+base, s.handleLiveCreate)
		mux.HandleFunc("GET "+base+"/{id}/fork", s.handleLiveWS)
		mux.HandleFunc("POST "+base+"/{id}/fork", s.handleLiveForkPost)
		mux.HandleFunc("GET "+base+"/{id}/attach", s.handleAttach)
		mux.HandleFunc("GET "+base+"/{id}/content", s.handleLiveContent)
		for _, action := range []string{"accept", "reject", "refer", "hangup"} {
			mux.HandleFunc("POST "+base+"/{id}/"+action, s.handleLiveControl(action))
		}
	}
	mux.HandleFunc("GET /mock/live/sessions", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, s.LiveSessions())
	})
	mux.HandleFunc("POST /mock/live/incoming", func(w http.ResponseWriter, r *http.Request) {
		ls := s.newLive(transportSIP, "", "", nil)
		ls.mu.Lock()
		ls.state = liveRinging
		ls.mu.Unlock()
		writeJSON(w, http.StatusCreated, map[string]string{"id": ls.id})
	})
	mux.HandleFunc("POST /mock/live/sessions/{id}/respond", func(w http.ResponseWriter, r *http.Request) {
		ls := s.liveOr404(w, r)
		switch {
		case ls == nil:
		case !ls.respond(""):
			writeHTTPError(w, http.StatusBadRequest, "invalid_request_error", "delegation_required", "the session has no Responses delegation")
		default:
			writeJSON(w, http.StatusOK, map[string]string{"id": ls.id})
		}
	})
	mux.HandleFunc("POST /mock/live/sessions/{id}/end", func(w http.ResponseWriter, r *http.Request) {
		reason := cmp.Or(r.URL.Query().Get("reason"), "remote_hangup")
		if !slices.Contains([]string{"close_requested", "expired", "content", "remote_hangup", "connection_lost"}, reason) {
			writeHTTPError(w, http.StatusBadRequest, "invalid_request_error", "invalid_value", "unknown reason "+reason)
			return
		}
		ls := s.liveOr404(w, r)
		if ls == nil {
			return
		}
		ls.end(reason, true)
		writeJSON(w, http.StatusOK, ls.record())
	})
}

// liveOr404 finds the session the request's {id} names, or answers 404.
func (s *Server) liveOr404(w http.ResponseWriter, r *http.Request) *liveSession {
	ls := s.lookupLive(r.PathValue("id"))
	if ls == nil {
		writeHTTPError(w, http.StatusNotFound, "invalid_request_error", "session_not_found", "No Live session "+r.PathValue("id")+".")
	}
	return ls
}

// writeParamError answers with OpenAI's error shape naming param ("" for none).
func writeParamError(w http.ResponseWriter, status int, code, msg, param string) {
	e := map[string]any{"type": "invalid_request_error", "code": code, "message": msg}
	if param != "" {
		e["param"] = param
	}
	writeJSON(w, status, map[string]any{"error": e})
}

// liveHTTPKey checks the key of a Live HTTP request; false means refused.
func (s *Server) liveHTTPKey(w http.ResponseWriter, r *http.Request) (string, bool) {
	key := presentedKey(r)
	if s.cfg.StatusCode != 0 {
		typ, code := errorKind(s.cfg.StatusCode)
		writeHTTPError(w, s.cfg.StatusCode, typ, code, fmt.Sprintf("mock: configured to answer %d", s.cfg.StatusCode))
		return "", false
	}
	if s.cfg.Key != "" && key != s.cfg.Key {
		writeHTTPError(w, http.StatusUnauthorized, "invalid_request_error", "invalid_api_key", "Incorrect API key provided.")
		return "", false
	}
	return key, true
}

// liveBody reads a JSON request body into v; false means refused.
func liveBody(w http.ResponseWriter, r *http.Request, v any, optional bool) bool {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxLiveBody))
	if err != nil {
		writeHTTPError(w, http.StatusRequestEntityTooLarge, "invalid_request_error", "request_too_large",
			fmt.Sprintf("The request body is over %d bytes.", maxLiveBody))
		return false
	}
	if optional && len(strings.TrimSpace(string(body))) == 0 {
		return true
	}
	if mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); mt != "application/json" {
		writeHTTPError(w, http.StatusUnsupportedMediaType, "invalid_request_error", "unsupported_media_type", "Send application/json.")
		return false
	}
	if err := json.Unmarshal(body, v); err != nil {
		writeHTTPError(w, http.StatusBadRequest, "invalid_request_error", "invalid_json", "The body is not a valid JSON object.")
		return false
	}
	return true
}

// webrtcRequest is the body of a WebRTC create or fork.
type webrtcRequest struct {
	Session   json.RawMessage `json:"session"`
	Transport *struct {
		Type string `json:"type"`
		SDP  string `json:"sdp"`
	} `json:"transport"`
}

// parseWebRTC reads and checks a WebRTC body; cfg is its session object.
func parseWebRTC(w http.ResponseWriter, r *http.Request, kind configKind) (cfg map[string]any, offer string, ok bool) {
	var req webrtcRequest
	if !liveBody(w, r, &req, false) {
		return nil, "", false
	}
	cfg, isObj := jsonObject(req.Session)
	bad := func(code, msg, param string) { writeParamError(w, http.StatusBadRequest, code, msg, param) }
	switch {
	case !isObj:
		bad("invalid_type", "Invalid type for 'session': expected an object.", "session")
	case cfg == nil && kind != configFork:
		bad("missing_required_parameter", "Missing required parameter: 'session'.", "session")
	case req.Transport == nil:
		bad("missing_required_parameter", "Missing required parameter: 'transport'.", "transport")
	case req.Transport.Type != "webrtc":
		bad("invalid_value", "Invalid value for 'transport.type': expected 'webrtc'.", "transport.type")
	case !strings.HasPrefix(req.Transport.SDP, "v=0"):
		bad("invalid_offer", "The SDP offer in 'transport.sdp' must start with v=0.", "transport.sdp")
	default:
		if cfg == nil {
			cfg = map[string]any{}
		}
		if ce := checkConfig(kind, cfg); ce != nil {
			bad(ce.code, ce.msg, ce.param)
			return nil, "", false
		}
		return cfg, req.Transport.SDP, true
	}
	return nil, "", false
}

// handleLiveCreate answers a WebRTC create: the request starts the session.
func (s *Server) handleLiveCreate(w http.ResponseWriter, r *http.Request) {
	key, ok := s.liveHTTPKey(w, r)
	if !ok {
		return
	}
	cfg, offer, ok := parseWebRTC(w, r, configWebRTC)
	if !ok {
		return
	}
	s.answerWebRTC(w, s.newLive(transportWebRTC, key, cfg["model"].(string), cfg), offer)
}

// handleLiveForkPost continues a stored, closed session over WebRTC.
func (s *Server) handleLiveForkPost(w http.ResponseWriter, r *http.Request) {
	key, ok := s.liveHTTPKey(w, r)
	if !ok {
		return
	}
	parent, status, code, msg := s.forkable(r.PathValue("id"))
	if parent == nil {
		writeHTTPError(w, status, "invalid_request_error", code, msg)
		return
	}
	cfg, offer, ok := parseWebRTC(w, r, configFork)
	if !ok {
		return
	}
	if a, _ := cfg["audio"].(map[string]any); a != nil {
		writeParamError(w, http.StatusBadRequest, "unknown_parameter", "WebRTC forks negotiate their audio format; omit session.audio.", "session.audio")
		return
	}
	s.answerWebRTC(w, s.fork(parent, transportWebRTC, key, cfg), offer)
}

// answerWebRTC starts a WebRTC session's clock and answers 201.
func (s *Server) answerWebRTC(w http.ResponseWriter, ls *liveSession, offer string) {
	if !ls.start() {
		ls.end("connection_lost", false)
		writeHTTPError(w, http.StatusServiceUnavailable, "server_error", "shutting_down", "the server is shutting down")
		return
	}
	s.sessions.Add(1)
	writeJSON(w, http.StatusCreated, map[string]any{
		"session":   map[string]any{"id": ls.id},
		"transport": map[string]any{"type": "webrtc", "sdp": sdpAnswer(offer)},
	})
}

// handleLiveContent streams a stored, closed session's recording.
func (s *Server) handleLiveContent(w http.ResponseWriter, r *http.Request) {
	if _, ok := s.liveHTTPKey(w, r); !ok {
		return
	}
	ls := s.liveOr404(w, r)
	if ls == nil {
		return
	}
	rec := ls.record()
	switch {
	case !rec.Store:
		writeHTTPError(w, http.StatusNotFound, "invalid_request_error", "recording_not_found", "Sessions without store: true are not recorded.")
		return
	case rec.State != liveClosed:
		writeHTTPError(w, http.StatusConflict, "invalid_request_error", "session_active", "The recording is available once the session has closed.")
		return
	}
	writeWAV(w, max(rec.Seconds, 1))
}

// writeWAV streams seconds of stereo PCM16 24 kHz: the sawtooth on the left
// (input), its inverse on the right (output), flushed every wavChunk so a
// relay that buffers whole bodies is visible.
func writeWAV(w http.ResponseWriter, seconds float64) {
	const rate, channels, bits = 24000, 2, 16
	frames := int64(seconds * rate)
	dataLen := frames * channels * bits / 8
	h := make([]byte, 44)
	copy(h[0:], "RIFF")
	binary.LittleEndian.PutUint32(h[4:], uint32(36+dataLen))
	copy(h[8:], "WAVEfmt ")
	binary.LittleEndian.PutUint32(h[16:], 16)
	binary.LittleEndian.PutUint16(h[20:], 1) // PCM
	binary.LittleEndian.PutUint16(h[22:], channels)
	binary.LittleEndian.PutUint32(h[24:], rate)
	binary.LittleEndian.PutUint32(h[28:], rate*channels*bits/8)
	binary.LittleEndian.PutUint16(h[32:], channels*bits/8)
	binary.LittleEndian.PutUint16(h[34:], bits)
	copy(h[36:], "data")
	binary.LittleEndian.PutUint32(h[40:], uint32(dataLen))
	w.Header().Set("Content-Type", "audio/wav")
	w.Header().Set("Content-Length", strconv.FormatInt(44+dataLen, 10))
	w.WriteHeader(http.StatusOK)
	if _, err := w.Write(h); err != nil {
		return
	}
	mono := PCMPattern(wavChunk / 2)
	buf := make([]byte, wavChunk)
	for i := 0; i+3 < len(buf); i += 4 {
		copy(buf[i:i+2], mono[i/2:i/2+2])
		buf[i+2], buf[i+3] = ^mono[i/2], ^mono[i/2+1]
	}
	rc := http.NewResponseController(w)
	for left := dataLen; left > 0; {
		n := min(left, int64(len(buf)))
		if _, err := w.Write(buf[:n]); err != nil {
			return
		}
		_ = rc.Flush()
		left -= n
	}
}

// handleLiveControl answers one SIP call control.
func (s *Server) handleLiveControl(action string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if _, ok := s.liveHTTPKey(w, r); !ok {
			return
		}
		ls := s.liveOr404(w, r)
		if ls == nil {
			return
		}
		var body map[string]any
		if !liveBody(w, r, &body, action == "hangup") {
			return
		}
		rec := ls.record()
		bad := func(status int, code, msg, param string) { writeParamError(w, status, code, msg, param) }
		wantState := liveActive
		if action == "accept" || action == "reject" {
			wantState = liveRinging
		}
		if rec.State != wantState {
			bad(http.StatusConflict, "invalid_state", fmt.Sprintf("Cannot %s a session that is %s.", action, rec.State), "")
			return
		}
		switch action {
		case "accept":
			cfg, ok := body["session"].(map[string]any)
			if !ok {
				bad(http.StatusBadRequest, "missing_required_parameter", "Missing required parameter: 'session'.", "session")
				return
			}
			if ce := checkConfig(configAccept, cfg); ce != nil {
				bad(http.StatusBadRequest, ce.code, ce.msg, ce.param)
				return
			}
			delete(cfg, "type")
			if !ls.start() {
				bad(http.StatusServiceUnavailable, "shutting_down", "the server is shutting down", "")
				return
			}
			ls.mu.Lock()
			ls.state, ls.model, ls.key = liveActive, cfg["model"].(string), presentedKey(r)
			ls.configure(cfg)
			ls.mu.Unlock()
			s.sessions.Add(1)
		case "reject":
			code, ok := body["status_code"].(float64)
			if !ok || code != float64(int(code)) || code < 300 || code > 699 {
				bad(http.StatusBadRequest, "invalid_value", "'status_code' must be a SIP status from 300 to 699.", "status_code")
				return
			}
			ls.mu.Lock()
			ls.state, ls.reason = liveClosed, "rejected"
			ls.mu.Unlock()
			close(ls.done)
		case "refer":
			uri, _ := body["target_uri"].(string)
			if !strings.HasPrefix(uri, "tel:") && !strings.HasPrefix(uri, "sip:") {
				bad(http.StatusBadRequest, "invalid_value", "'target_uri' must be a tel: or sip: URI.", "target_uri")
				return
			}
			if rec.Transport != transportSIP {
				bad(http.StatusBadRequest, "invalid_value", "Only SIP sessions can be referred.", "")
				return
			}
		case "hangup":
			if len(body) > 0 {
				bad(http.StatusBadRequest, "unknown_parameter", "hangup takes no body.", "")
				return
			}
		}
		ls.mu.Lock()
		ls.actions = append(ls.actions, action)
		ls.mu.Unlock()
		if action == "hangup" {
			ls.end("close_requested", true)
		}
		w.WriteHeader(http.StatusOK)
	}
}
