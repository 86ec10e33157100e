package mockai

// Realtime translation sessions: WS /v1/realtime/translations?model=… (and
// Azure's /openai/v1/realtime/translations). OpenAI's reference
// (developers.openai.com, "Translation client events" and "Translation
// server events"; the official Node SDK's OpenAIRealtimeTranslationWS) is
// the model:
//
//	(upgrade)                          -> session.created {session: {id, type: translation, model, expires_at, audio}}
//	session.update {session: {audio}}  -> session.updated (only audio.output.language,
//	                                      audio.input.transcription and audio.input.noise_reduction
//	                                      may change; anything else is unknown_parameter)
//	session.input_audio_buffer.append  -> session.output_transcript.delta and
//	                                      session.output_audio.delta (elapsed_ms: audio time so far),
//	                                      and session.input_transcript.delta when transcription is set
//	session.close                      -> session.closed, then close 1000
//
// The events carry no usage: OpenAI bills translation by the minute of
// session, which is why the gateway meters it by wall clock.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"

	"github.com/gorilla/websocket"
)

// mountTranslation adds the translation routes.
func (s *Server) mountTranslation(mux *http.ServeMux) {
	for _, p := range []string{"/v1/realtime/translations", "/openai/v1/realtime/translations"} {
		mux.HandleFunc("GET "+p, s.handleTranslation)
	}
}

// handleTranslation answers one upgrade on a translation route: the model
// query is required, as OpenAI requires it.
func (s *Server) handleTranslation(w http.ResponseWriter, r *http.Request) {
	s.handleUpgrade(w, r, func() bool {
		if r.URL.Query().Get("model") == "" {
			writeHTTPError(w, http.StatusBadRequest, "invalid_request_error", "missing_required_parameter",
				"missing required parameter: 'model'")
			return false
		}
		return true
	}, s.serveTranslation)
}

// translation is a translation session's own state (the handler
// goroutine's only).
type translation struct {
	*session
	language      string
	transcription any   // audio.input.transcription (nil: none)
	noise         any   // audio.input.noise_reduction
	audioMS       int64 // input audio appended so far, in ms of PCM16 24 kHz
}

// serveTranslation runs a translation session to its end.
func (s *Server) serveTranslation(sess *session, rec *Record) {
	q, _ := url.ParseQuery(rec.Query)
	sess.model = q.Get("model")
	s.setRecordSession(rec, sess.id)
	t := &translation{session: sess, language: "es"}
	if !s.sleep(sess.ctx, sess.cfg.SessionDelay) {
		return
	}
	s.sessions.Add(1)
	if t.send(map[string]any{"type": "session.created", "event_id": newID("event_"), "session": t.object()}) != nil {
		return
	}
	for {
		mt, data, err := sess.ws.ReadMessage()
		if err != nil {
			return
		}
		s.framesIn.Add(1)
		if t.handle(mt, data) {
			return
		}
	}
}

// object is the translation session as session.created/updated show it.
func (t *translation) object() map[string]any {
	return map[string]any{
		"id": t.id, "object": "realtime.translation_session", "type": "translation", "model": t.model,
		"expires_at": t.expiresAt,
		"audio": map[string]any{
			"input":  map[string]any{"transcription": t.transcription, "noise_reduction": t.noise},
			"output": map[string]any{"language": t.language},
		},
	}
}

// handle answers one client message; it reports true once the session is
// closed.
func (t *translation) handle(mt int, data []byte) bool {
	if mt != websocket.TextMessage {
		t.sendError("invalid_value", "Binary frames are not supported; send JSON text frames.", "", "")
		return false
	}
	var ev clientEvent
	if err := json.Unmarshal(data, &ev); err != nil {
		t.sendError("invalid_value", "The message is not valid JSON.", "", "")
		return false
	}
	t.srv.noteEvent(t.session, ev.Type, data)
	switch ev.Type {
	case "session.update":
		t.update(ev)
	case "session.input_audio_buffer.append":
		t.append(ev)
	case "session.close":
		_ = t.send(map[string]any{"type": "session.closed", "event_id": newID("event_")})
		t.wmu.Lock()
		t.writeClose(websocket.CloseNormalClosure, "")
		t.wmu.Unlock()
		for { // the client's close answer, or the close deadline
			if _, _, err := t.ws.ReadMessage(); err != nil {
				return true
			}
		}
	default:
		t.sendError("invalid_value", fmt.Sprintf("Invalid value: '%s'. Unknown translation client event type.", ev.Type), "type", ev.EventID)
	}
	return false
}

// update applies a session.update: audio only.
func (t *translation) update(ev clientEvent) {
	var upd struct {
		Audio *struct {
			Input *struct {
				Transcription  *json.RawMessage `json:"transcription"`
				NoiseReduction *json.RawMessage `json:"noise_reduction"`
			} `json:"input"`
			Output *struct {
				Language *string `json:"language"`
			} `json:"output"`
		} `json:"audio"`
	}
	dec := json.NewDecoder(bytes.NewReader(ev.Session))
	dec.DisallowUnknownFields()
	if len(ev.Session) == 0 || dec.Decode(&upd) != nil {
		t.sendError("unknown_parameter", "A translation session.update may only change audio.output.language, "+
			"audio.input.transcription and audio.input.noise_reduction; the model and type are set at creation.", "session", ev.EventID)
		return
	}
	if a := upd.Audio; a != nil {
		if a.Output != nil && a.Output.Language != nil {
			t.language = *a.Output.Language
		}
		if a.Input != nil && a.Input.Transcription != nil {
			_ = json.Unmarshal(*a.Input.Transcription, &t.transcription)
		}
		if a.Input != nil && a.Input.NoiseReduction != nil {
			_ = json.Unmarshal(*a.Input.NoiseReduction, &t.noise)
		}
	}
	_ = t.send(map[string]any{"type": "session.updated", "event_id": newID("event_"), "session": t.object()})
}

// append answers appended audio with one delta of each kind.
func (t *translation) append(ev clientEvent) {
	if ev.Audio == nil {
		t.sendError("missing_required_parameter", "Missing required parameter: 'audio'.", "audio", ev.EventID)
		return
	}
	w, err := decodeAudio(*ev.Audio)
	if err != nil {
		t.sendError("invalid_value", "Invalid 'audio': not valid base64.", "audio", ev.EventID)
		return
	}
	t.srv.audioAppends.Add(1)
	t.srv.audioBytes.Add(w.n)
	t.audioMS += w.n / 48
	if t.transcription != nil {
		_ = t.send(map[string]any{"type": "session.input_transcript.delta", "event_id": newID("event_"),
			"delta": "Hello ", "elapsed_ms": t.audioMS})
	}
	_ = t.send(map[string]any{"type": "session.output_transcript.delta", "event_id": newID("event_"),
		"delta": "Hola ", "elapsed_ms": t.audioMS})
	_ = t.send(map[string]any{"type": "session.output_audio.delta", "event_id": newID("event_"),
		"delta": t.srv.audioDelta, "elapsed_ms": t.audioMS, "format": "pcm16", "sample_rate": 24000, "channels": 1})
}
