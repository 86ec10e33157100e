package mockai

// What browser and phone apps need from the upstream, for the gateway's
// tests: WebRTC calls (POST /v1/realtime/calls answers an SDP offer with a
// syntactically valid SDP answer, 201 and Location: /v1/realtime/calls/{id}),
// sideband connections (?call_id=) that join their call, transcription
// sessions (?intent=transcription, or a session.update of type
// transcription) that answer each input_audio_buffer.commit with a
// conversation.item.input_audio_transcription.completed event carrying
// usage, and records of what arrived so tests can assert on what reached the
// upstream:
//
//	GET  /mock/calls                 the calls created, with their offers and session parts
//	GET  /mock/events                client events received (type, session, call, the JSON;
//	                                 audio appends are not recorded)
//	POST /mock/calls/{id}/respond    every sideband of the call gets a response.done with usage
//	POST /v1/realtime/calls/{id}/hangup  (OpenAI's call control) ends the call: every sideband of
//	                                 it is closed with 1000
//
// A session.update whose instructions are RejectInstructions, or whose input
// transcription model is RejectTranscriptionModel, is refused with an
// invalid_value error, so tests can see a rejected config.

import (
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"
)

// RejectInstructions in a session.update makes mockai refuse it.
const RejectInstructions = "mockai: reject this session"

// RejectTranscriptionModel as a session.update's input transcription model
// makes mockai refuse it (a model the upstream does not serve).
const RejectTranscriptionModel = "mockai-reject-transcribe"

// CallRecord is one call created through /v1/realtime/calls. It holds the
// key: test data, never logged.
type CallRecord struct {
	ID          string          `json:"id"`
	Path        string          `json:"path"`
	Key         string          `json:"key"`
	ContentType string          `json:"content_type"`
	Offer       string          `json:"offer"`
	Session     json.RawMessage `json:"session,omitempty"`
	At          time.Time       `json:"at"`
}

// EventRecord is one client event a session received.
type EventRecord struct {
	SessionID string          `json:"session_id"`
	CallID    string          `json:"call_id,omitempty"`
	Intent    string          `json:"intent,omitempty"`
	Type      string          `json:"type"`
	Event     json.RawMessage `json:"event"` // up to 4 KiB of it; audio is cut
	At        time.Time       `json:"at"`
}

// maxAppRecords bounds each record list.
const maxAppRecords = 10000

// appState is the Server's state for calls, sidebands and records.
type appState struct {
	mu      sync.Mutex
	calls   []CallRecord
	events  []EventRecord
	members map[string]map[*session]struct{} // call id → its sideband sessions
	kinds   map[*session]sessionKind
}

type sessionKind struct{ callID, intent string }

func (s *Server) mountApps(mux *http.ServeMux) {
	for _, p := range []string{"/v1/realtime/calls", "/openai/v1/realtime/calls"} {
		mux.HandleFunc("POST "+p, s.handleCall)
		mux.HandleFunc("POST "+p+"/{id}/hangup", s.handleCallHangup)
	}
	mux.HandleFunc("GET /mock/calls", func(w http.ResponseWriter, _ *http.Request) {
		s.apps.mu.Lock()
		defer s.apps.mu.Unlock()
		writeJSON(w, http.StatusOK, append([]CallRecord{}, s.apps.calls...))
	})
	mux.HandleFunc("GET /mock/events", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, s.Events())
	})
	mux.HandleFunc("POST /mock/calls/{id}/respond", func(w http.ResponseWriter, r *http.Request) {
		n := s.respondOnCall(r.PathValue("id"))
		writeJSON(w, http.StatusOK, map[string]int{"sidebands": n})
	})
}

// Calls returns the calls created so far.
func (s *Server) Calls() []CallRecord {
	s.apps.mu.Lock()
	defer s.apps.mu.Unlock()
	return append([]CallRecord{}, s.apps.calls...)
}

// Events returns the client events received so far.
func (s *Server) Events() []EventRecord {
	s.apps.mu.Lock()
	defer s.apps.mu.Unlock()
	return append([]EventRecord{}, s.apps.events...)
}

// handleCall answers an SDP offer.
func (s *Server) handleCall(w http.ResponseWriter, r *http.Request) {
	key := presentedKey(r)
	if s.cfg.Key != "" && key != s.cfg.Key {
		writeHTTPError(w, http.StatusUnauthorized, "invalid_request_error", "invalid_api_key", "Incorrect API key provided.")
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		return
	}
	rec := CallRecord{ID: newID("rtc_"), Path: r.URL.Path, Key: key, ContentType: r.Header.Get("Content-Type"), At: time.Now()}
	mt, params, _ := mime.ParseMediaType(rec.ContentType)
	switch mt {
	case "application/sdp":
		rec.Offer = string(body)
	case "multipart/form-data":
		mr := multipart.NewReader(strings.NewReader(string(body)), params["boundary"])
		for {
			p, err := mr.NextPart()
			if err != nil {
				break
			}
			b, _ := io.ReadAll(p)
			switch p.FormName() {
			case "sdp":
				rec.Offer = string(b)
			case "session":
				if !json.Valid(b) {
					writeHTTPError(w, http.StatusBadRequest, "invalid_request_error", "invalid_value", "session is not JSON")
					return
				}
				rec.Session = b
			}
		}
	default:
		writeHTTPError(w, http.StatusUnsupportedMediaType, "invalid_request_error", "unsupported_media_type", "send application/sdp or multipart/form-data")
		return
	}
	if !strings.HasPrefix(rec.Offer, "v=0") {
		writeHTTPError(w, http.StatusBadRequest, "invalid_request_error", "invalid_offer", "the SDP offer must start with v=0")
		return
	}
	s.apps.mu.Lock()
	if len(s.apps.calls) >= maxAppRecords {
		s.apps.calls = s.apps.calls[1:]
	}
	s.apps.calls = append(s.apps.calls, rec)
	s.apps.mu.Unlock()
	w.Header().Set("Content-Type", "application/sdp")
	w.Header().Set("Location", "/v1/realtime/calls/"+rec.ID)
	w.WriteHeader(http.StatusCreated)
	_, _ = io.WriteString(w, sdpAnswer(rec.Offer))
}

// sdpAnswer is a minimal, syntactically valid answer to offer: one audio
// section (and a data channel when offered), ICE-lite with a loopback
// candidate, the offer's mids.
func sdpAnswer(offer string) string {
	mids := []string{}
	for _, line := range strings.Split(offer, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "a=mid:"); ok {
			mids = append(mids, v)
		}
	}
	if len(mids) == 0 {
		mids = []string{"0"}
	}
	var b strings.Builder
	now := time.Now().UnixNano()
	fmt.Fprintf(&b, "v=0\r\no=- %d 2 IN IP4 127.0.0.1\r\ns=-\r\nt=0 0\r\na=group:BUNDLE %s\r\na=ice-lite\r\n", now, strings.Join(mids, " "))
	for i, mid := range mids {
		if strings.Contains(offer, "m=application") && i == len(mids)-1 && len(mids) > 1 {
			fmt.Fprintf(&b, "m=application 9 UDP/DTLS/SCTP webrtc-datachannel\r\nc=IN IP4 127.0.0.1\r\na=mid:%s\r\na=sctp-port:5000\r\n", mid)
		} else {
			fmt.Fprintf(&b, "m=audio 9 UDP/TLS/RTP/SAVPF 111\r\nc=IN IP4 127.0.0.1\r\na=mid:%s\r\na=rtpmap:111 opus/48000/2\r\na=sendrecv\r\na=rtcp-mux\r\n", mid)
		}
		b.WriteString("a=ice-ufrag:mock\r\na=ice-pwd:mockaimockaimockaimock00\r\n")
		b.WriteString("a=fingerprint:sha-256 00:11:22:33:44:55:66:77:88:99:AA:BB:CC:DD:EE:FF:00:11:22:33:44:55:66:77:88:99:AA:BB:CC:DD:EE:FF\r\n")
		b.WriteString("a=setup:passive\r\na=candidate:1 1 udp 2130706431 127.0.0.1 9 typ host\r\n")
	}
	return b.String()
}

// joinApps registers a session's call and intent from its query; the
// returned func leaves.
func (s *Server) joinApps(rawQuery string, sess *session) func() {
	q, _ := url.ParseQuery(rawQuery)
	k := sessionKind{callID: q.Get("call_id"), intent: q.Get("intent")}
	a := &s.apps
	a.mu.Lock()
	if a.kinds == nil {
		a.kinds = map[*session]sessionKind{}
		a.members = map[string]map[*session]struct{}{}
	}
	a.kinds[sess] = k
	if k.callID != "" {
		if a.members[k.callID] == nil {
			a.members[k.callID] = map[*session]struct{}{}
		}
		a.members[k.callID][sess] = struct{}{}
	}
	a.mu.Unlock()
	return func() {
		a.mu.Lock()
		delete(a.kinds, sess)
		if m := a.members[k.callID]; m != nil {
			delete(m, sess)
			if len(m) == 0 {
				delete(a.members, k.callID)
			}
		}
		a.mu.Unlock()
	}
}

// noteEvent records a client event the session received. Audio appends,
// the one high-rate event (every 20-100 ms of every session under load), are
// not recorded, so that benchmarks do not pay a lock per frame for them.
func (s *Server) noteEvent(sess *session, typ string, data []byte) {
	if typ == "input_audio_buffer.append" {
		return
	}
	a := &s.apps
	a.mu.Lock()
	defer a.mu.Unlock()
	k := a.kinds[sess]
	ev := data
	if len(ev) > 4096 || !json.Valid(ev) {
		ev, _ = json.Marshal(map[string]any{"truncated": len(data)})
	}
	if len(a.events) >= maxAppRecords {
		a.events = a.events[1:]
	}
	a.events = append(a.events, EventRecord{SessionID: sess.id, CallID: k.callID, Intent: k.intent, Type: typ,
		Event: append(json.RawMessage(nil), ev...), At: time.Now()})
}

// rejectUpdate says why a session.update is refused ("" if it is not).
func rejectUpdate(upd map[string]any) string {
	if upd["instructions"] == RejectInstructions {
		return "Invalid value for 'session.instructions': mockai was asked to reject it."
	}
	audio, _ := upd["audio"].(map[string]any)
	input, _ := audio["input"].(map[string]any)
	if tr, _ := input["transcription"].(map[string]any); tr["model"] == RejectTranscriptionModel {
		return "Invalid value for 'session.audio.input.transcription.model': mockai does not serve it."
	}
	return ""
}

// transcribed answers a committed buffer with its transcript text when
// the session transcribes its input: a transcription session, or a
// realtime one whose session.update turned input transcription on
// (transcribing). With Config.TranscriptionDelay the event goes out that
// long after the commit from a goroutine of its own, so the session's
// other events (the response VAD starts) are not held; transcripts still
// keep the order of their turns.
func (s *session) transcribed(itemID string, audioBytes int64, text string) {
	a := &s.srv.apps
	a.mu.Lock()
	k := a.kinds[s]
	a.mu.Unlock()
	if k.intent != "transcription" && s.overrides["type"] != "transcription" && !transcribing(s.overrides) {
		return
	}
	audio := max(audioBytes/bytesPerAudioToken, 1)
	completed := func() {
		s.items.setTranscript(itemID, text) // before the event: clients retrieve the item on it
		_ = s.send(map[string]any{"type": "conversation.item.input_audio_transcription.completed", "event_id": newID("event_"),
			"item_id": itemID, "content_index": 0, "transcript": text,
			"usage": map[string]any{"type": "tokens", "total_tokens": audio + outputTextTokens, "input_tokens": audio,
				"input_token_details": map[string]any{"text_tokens": 0, "audio_tokens": audio}, "output_tokens": outputTextTokens}})
	}
	if s.cfg.TranscriptionDelay <= 0 {
		completed()
		return
	}
	due := time.Now().Add(s.cfg.TranscriptionDelay)
	prev, done := s.transcriptTail, make(chan struct{})
	s.transcriptTail = done
	s.rwg.Add(1) // end waits for it
	go func() {
		defer s.rwg.Done()
		defer close(done)
		if prev != nil {
			select {
			case <-prev:
			case <-s.ctx.Done():
				return
			}
		}
		if s.srv.sleep(s.ctx, time.Until(due)) {
			completed()
		}
	}()
}

// transcribing reports whether a session's configuration turns input
// transcription on (audio.input.transcription set, as OpenAI's realtime
// sessions do; or the beta interface's top-level input_audio_transcription,
// which a client may still send): its committed audio is then transcribed
// too. The event is the same in both interfaces.
func transcribing(overrides map[string]any) bool {
	if tr, ok := overrides["input_audio_transcription"]; ok && tr != nil {
		return true
	}
	audio, _ := overrides["audio"].(map[string]any)
	input, _ := audio["input"].(map[string]any)
	tr, ok := input["transcription"]
	return ok && tr != nil
}

// handleCallHangup ends a call: its sidebands are closed with 1000 (the
// media side has nothing to end in a mock). A call that has no sideband
// open is answered 200 all the same, as OpenAI answers an ended call's
// hang-up.
func (s *Server) handleCallHangup(w http.ResponseWriter, r *http.Request) {
	if key := presentedKey(r); s.cfg.Key != "" && key != s.cfg.Key {
		writeHTTPError(w, http.StatusUnauthorized, "invalid_request_error", "invalid_api_key", "Incorrect API key provided.")
		return
	}
	a := &s.apps
	a.mu.Lock()
	var members []*session
	for m := range a.members[r.PathValue("id")] {
		members = append(members, m)
	}
	a.mu.Unlock()
	for _, m := range members {
		m.closeNormal("call ended")
	}
	w.WriteHeader(http.StatusOK)
}

// respondOnCall sends every sideband of the call a response.done with
// usage (as if the call's media had produced a response); it returns how
// many got it.
func (s *Server) respondOnCall(callID string) int {
	a := &s.apps
	a.mu.Lock()
	var members []*session
	for m := range a.members[callID] {
		members = append(members, m)
	}
	a.mu.Unlock()
	for _, m := range members {
		_ = m.send(map[string]any{"type": "response.done", "event_id": newID("event_"), "response": map[string]any{
			"object": "realtime.response", "id": newID("resp_"), "status": "completed", "output": []any{},
			"usage": map[string]any{"total_tokens": 100 + outputTextTokens, "input_tokens": 100, "output_tokens": outputTextTokens,
				"input_token_details":  map[string]any{"text_tokens": 0, "audio_tokens": 100, "image_tokens": 0, "cached_tokens": 0},
				"output_token_details": map[string]any{"text_tokens": 0, "audio_tokens": outputTextTokens}}}})
	}
	return len(members)
}
