package mockai

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"
)

// xAI's Grok Voice Agent dialect (WS /xai/v1/realtime, POST
// /xai/v1/realtime/client_secrets). It is OpenAI's GA Realtime protocol
// with the deviations a real xAI session shows and LiteLLM's
// XAIRealtimeNormalizer repairs; the package doc lists each with its
// sources. The session machinery is the OpenAI dialect's: a session whose
// dialect is dialectXAI opens differently (xaiOpen), sends pings
// (startPings), adds the message item and content part events around its
// output (beginOutput, endOutput), and has every event it sends reshaped
// by xaiShape, so the OpenAI code builds GA-shaped events and this file
// says, in one place, how xAI's differ.

// dialect is the protocol a realtime session speaks.
type dialect uint8

const (
	dialectOpenAI dialect = iota
	dialectXAI
)

func (d dialect) String() string {
	if d == dialectXAI {
		return "xai"
	}
	return "openai"
}

const (
	// xaiPrefix is where the xAI dialect is served: a deployment's api_base
	// is http://host:port/xai/v1, and the gateway dials <base>/realtime.
	xaiPrefix = "/xai/v1"
	// defaultXAIPingInterval is Config.XAIPingInterval's default: short,
	// so that tests see pings. xAI's own interval is not documented.
	defaultXAIPingInterval = time.Second
	// xaiDefaultModel names the session when the URL has no model (xAI's
	// alias; docs.x.ai, developers/models).
	xaiDefaultModel = "grok-voice-latest"
	// xaiDefaultVoice is the voice of a session that has not set one:
	// docs.x.ai's current examples use eve and list it first (its older
	// guide called Ara the default; xAI documents no server default now).
	xaiDefaultVoice = "eve"
	// xaiDefaultSecretTTL is a client secret's life when the request does
	// not say: xAI documents no default, this is OpenAI's.
	xaiDefaultSecretTTL = 600 * time.Second
	// xaiMaxSecretTTL bounds expires_after.seconds (OpenAI's bound; xAI
	// documents none).
	xaiMaxSecretTTL = 7200 * time.Second
	// maxXAISecrets bounds the client secrets a server remembers.
	maxXAISecrets = 10000
)

// XAIVoices are the voice ids docs.x.ai lists for the Voice Agent API, in
// its order (its older guide wrote them capitalised: Eve, Ara, ...).
// session.update takes them in any case; mockai does not refuse other
// names either, since what xAI does with them is not documented.
func XAIVoices() []string { return []string{"eve", "ara", "rex", "sal", "leo"} }

// dialectOfPath is a Record's Dialect: "xai" on xAI's routes.
func dialectOfPath(path string) string {
	if strings.HasPrefix(path, xaiPrefix+"/") {
		return dialectXAI.String()
	}
	return ""
}

// XAIBaseURL is what a gateway deployment of provider xai takes as its
// api_base: "http://127.0.0.1:port/xai/v1" ("https://..." with TLS). The
// voice socket is at <base>/realtime (ws:// or wss://), client secrets
// at POST <base>/realtime/client_secrets.
func (s *Server) XAIBaseURL() string {
	scheme := "http"
	if s.cfg.TLS {
		scheme = "https"
	}
	return scheme + "://" + s.Addr() + xaiPrefix
}

func (s *Server) mountXAI(mux *http.ServeMux) {
	mux.HandleFunc(xaiPrefix+"/realtime", s.handleXAIRealtime)
	mux.HandleFunc("POST "+xaiPrefix+"/realtime/client_secrets", s.handleXAIClientSecret)
	mux.HandleFunc("GET /mock/xai/client_secrets", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, s.XAISecretRequests())
	})
}

// handleXAIRealtime answers an upgrade on xAI's route. The same knobs
// apply as on OpenAI's (handleUpgrade); the model may be left out.
func (s *Server) handleXAIRealtime(w http.ResponseWriter, r *http.Request) {
	s.handleUpgrade(w, r, nil, s.serveXAI)
}

// serveXAI runs an xAI session to its end.
func (s *Server) serveXAI(sess *session, rec *Record) {
	q, _ := url.ParseQuery(rec.Query)
	sess.model = firstNonEmpty(q.Get("model"), xaiDefaultModel)
	sess.dialect = dialectXAI
	defer s.joinApps(rec.Query, sess)()
	s.setRecordSession(rec, sess.id)
	sess.run()
}

// xaiOpen is how an xAI session starts: conversation.created (after
// session.created only with Config.XAISessionCreated), then a ping.
func (s *session) xaiOpen() error {
	if s.cfg.XAISessionCreated {
		if err := s.send(map[string]any{"type": "session.created", "event_id": newID("event_"), "session": s.sessionObject()}); err != nil {
			return err
		}
	}
	if err := s.send(map[string]any{"type": "conversation.created", "event_id": newID("event_"),
		"conversation": map[string]any{"id": s.convID, "object": "realtime.conversation"}}); err != nil {
		return err
	}
	return s.xaiPing()
}

// xaiPing sends one of xAI's keepalive events, which OpenAI's protocol
// does not have (its type is unknown to GA clients).
func (s *session) xaiPing() error {
	// Counted before it is written, so a client that has read a ping finds it in Stats.
	s.srv.xaiPings.Add(1)
	err := s.send(map[string]any{"type": "ping", "event_id": newID("event_"), "timestamp": time.Now().UnixMilli()})
	if err != nil {
		s.srv.xaiPings.Add(-1)
	}
	return err
}

// startPings sends an xAI session a ping every Config.XAIPingInterval
// until it ends (end cancels the context and waits for the goroutine), a
// fault fires or a write fails. Nothing for the OpenAI dialect.
func (s *session) startPings() {
	every := s.cfg.XAIPingInterval
	if s.dialect != dialectXAI || every <= 0 {
		return
	}
	s.rwg.Add(1)
	go func() {
		defer s.rwg.Done()
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-s.ctx.Done():
				return
			case <-s.faulted:
				return
			case <-t.C:
			}
			if s.xaiPing() != nil {
				return
			}
		}
	}()
}

// xaiSessionObject is the session as xAI's session.created and
// session.updated show it: the voice and turn detection at the top level
// (Grok's session properties; livekit/agents#6276: xAI reads the voice
// there, not at audio.output.voice), shallowly overridden by every
// session.update so far. A voice set only at audio.output.voice leaves
// "voice" as it was, as xAI does.
func (s *session) xaiSessionObject() map[string]any {
	pcm := map[string]any{"type": "audio/pcm", "rate": 24000}
	obj := map[string]any{
		"id":             s.id,
		"object":         "realtime.session",
		"model":          s.model,
		"voice":          xaiDefaultVoice,
		"instructions":   "You are mockai, a fake voice assistant for tests.",
		"turn_detection": map[string]any{"type": "server_vad"},
		"audio": map[string]any{
			"input":  map[string]any{"format": pcm},
			"output": map[string]any{"format": pcm},
		},
		"tools": []any{},
	}
	for k, v := range s.overrides {
		obj[k] = v
	}
	return obj
}

// xaiVoice is the voice the session speaks with now. Used only by the
// handler goroutine.
func (s *session) xaiVoice() string {
	if v, ok := s.overrides["voice"].(string); ok && v != "" {
		return v
	}
	return xaiDefaultVoice
}

// turnDetection is the server VAD the session's updates asked for. The
// xAI dialect also reads turn_detection at the session's top level (where
// xAI's clients put it), and its create_response defaults to false:
// "Unlike OpenAI, xAI does not default turn_detection.create_response to
// True for server_vad" (LiteLLM, XAIRealtimeNormalizer.patch_outgoing_session).
func (s *session) turnDetection() turnDetection {
	if s.dialect != dialectXAI {
		return parseTurnDetection(s.overrides)
	}
	td, _ := s.overrides["turn_detection"].(map[string]any)
	if td == nil {
		audio, _ := s.overrides["audio"].(map[string]any)
		input, _ := audio["input"].(map[string]any)
		td, _ = input["turn_detection"].(map[string]any)
	}
	t := parseTurnDetection(map[string]any{"audio": map[string]any{"input": map[string]any{"turn_detection": td}}})
	if _, set := td["create_response"]; !set {
		t.createResponse = false
	}
	return t
}

// xaiDelta is xAI's output delta: OpenAI's audioDelta without
// output_index and content_index.
type xaiDelta struct {
	Type       string `json:"type"`
	EventID    string `json:"event_id"`
	ResponseID string `json:"response_id"`
	ItemID     string `json:"item_id"`
	Delta      string `json:"delta"`
}

// deltaEvent is an output delta of r (audio, transcript or text) as the
// session's dialect writes it. A struct, not a map: the audio deltas are
// the hot path.
func (s *session) deltaEvent(typ string, r *response, delta string) any {
	if s.dialect == dialectXAI {
		return xaiDelta{typ, newID("event_"), r.id, r.itemID, delta}
	}
	return audioDelta{typ, newID("event_"), r.id, r.itemID, 0, 0, delta}
}

// partType is a content part's type: GA's output_audio and output_text
// are "audio" and "text" in the xAI dialect.
func (s *session) partType(ga string) string {
	if s.dialect != dialectXAI {
		return ga
	}
	return strings.TrimPrefix(ga, "output_")
}

// beginOutput comes before each output delta of r: its response.created
// (once, announce), and in the xAI dialect, once, the message item and
// its content part (response.output_item.added, response.content_part.added),
// so that the events xAI sends without indices are there to see. The
// OpenAI dialect does not send them (mockai never has).
func (s *session) beginOutput(r *response, ga string) {
	s.announce(r)
	if s.dialect != dialectXAI || r.itemOpened {
		return
	}
	r.itemOpened = true
	_ = s.send(map[string]any{"type": "response.output_item.added", "event_id": newID("event_"), "response_id": r.id,
		"output_index": 0, "item": map[string]any{"id": r.itemID, "object": "realtime.item", "type": "message",
			"role": "assistant", "status": "in_progress", "content": []any{}}})
	part := map[string]any{"type": s.partType(ga), "transcript": ""}
	if ga == "output_text" {
		part = map[string]any{"type": s.partType(ga), "text": ""}
	}
	_ = s.send(map[string]any{"type": "response.content_part.added", "event_id": newID("event_"), "response_id": r.id,
		"item_id": r.itemID, "output_index": 0, "content_index": 0, "part": part})
}

// endOutput closes, in the xAI dialect, what beginOutput opened, before
// response.done: response.output_audio.done (if audio was sent),
// response.output_audio_transcript.done (if the transcript was), and
// response.content_part.done and response.output_item.done with content
// (the finished part).
func (s *session) endOutput(r *response, status string, content map[string]any, audio, transcribed bool) {
	if s.dialect != dialectXAI || !r.itemOpened {
		return
	}
	ids := func(typ string) map[string]any {
		return map[string]any{"type": typ, "event_id": newID("event_"), "response_id": r.id, "item_id": r.itemID,
			"output_index": 0, "content_index": 0}
	}
	if audio {
		_ = s.send(ids("response.output_audio.done"))
	}
	if transcribed {
		ev := ids("response.output_audio_transcript.done")
		ev["transcript"] = content["transcript"] // what was sent (Config.OutputTranscripts)
		_ = s.send(ev)
	}
	ev := ids("response.content_part.done")
	ev["part"] = content
	_ = s.send(ev)
	_ = s.send(map[string]any{"type": "response.output_item.done", "event_id": newID("event_"), "response_id": r.id,
		"output_index": 0, "item": map[string]any{"id": r.itemID, "object": "realtime.item", "type": "message",
			"role": "assistant", "status": itemStatus(status), "content": []any{content}}})
}

// xaiOmitsIndices reports whether xAI sends events of type typ without
// output_index and content_index (the events LiteLLM's normaliser gives
// them back to: "xAI omits both fields on every streaming response
// event").
func xaiOmitsIndices(typ string) bool {
	switch typ {
	case "response.output_item.added", "response.output_item.done",
		"response.content_part.added", "response.content_part.done",
		"response.output_text.delta", "response.output_text.done",
		"response.output_audio_transcript.delta", "response.output_audio_transcript.done",
		"response.output_audio.delta", "response.output_audio.done",
		"response.function_call_arguments.delta", "response.function_call_arguments.done":
		return true
	}
	return false
}

// xaiShape rewrites a GA-shaped event as xAI sends it (the package doc
// gives the source of each):
//
//   - the streaming response events lose output_index and content_index;
//   - response.content_part.done loses part;
//   - response.created and response.done carry usage {} (xAI bills by the
//     minute; the response object has no token counts);
//   - conversation.item.added of a function_call item says role "tool".
//
// It changes ev in place (every caller builds its events afresh; an item
// that other events share is copied before it changes) and returns it.
func xaiShape(ev any) any {
	m, ok := ev.(map[string]any)
	if !ok {
		return ev // xaiDelta and the like are built in xAI's shape
	}
	typ, _ := m["type"].(string)
	if xaiOmitsIndices(typ) {
		delete(m, "output_index")
		delete(m, "content_index")
	}
	switch typ {
	case "response.content_part.done":
		delete(m, "part")
	case "response.created", "response.done":
		if resp, ok := m["response"].(map[string]any); ok {
			resp["usage"] = map[string]any{}
		}
	case "conversation.item.added":
		if item, ok := m["item"].(map[string]any); ok && item["type"] == "function_call" {
			cp := make(map[string]any, len(item)+1)
			for k, v := range item {
				cp[k] = v
			}
			cp["role"] = "tool"
			m["item"] = cp
		}
	}
	return m
}

// xaiState holds the client secrets minted with POST
// /xai/v1/realtime/client_secrets, so that an xAI socket opened with one
// is admitted when Config.Key is set (as xAI admits its ephemeral tokens
// "in the same fashion as an API key").
type xaiState struct {
	mu      sync.Mutex
	secrets map[string]time.Time // value -> expiry
	// requests are the client-secret requests received, newest last (at
	// most maxAppRecords).
	requests []XAISecretRequest
}

// XAISecretRequest is one POST /xai/v1/realtime/client_secrets as it
// arrived and how it was answered, so a test sees what a relay forwarded
// (say, that it dropped an OpenAI-style session). It holds the key: test
// data, never logged.
type XAISecretRequest struct {
	Key    string          `json:"key"`
	Body   json.RawMessage `json:"body,omitempty"` // up to 4 KiB of it, when JSON
	Status int             `json:"status"`
	At     time.Time       `json:"at"`
}

// note records a client-secret request.
func (x *xaiState) note(key string, body []byte, status int) {
	rec := XAISecretRequest{Key: key, Status: status, At: time.Now()}
	if len(body) <= 4096 && json.Valid(body) {
		rec.Body = append(json.RawMessage(nil), body...)
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	if len(x.requests) >= maxAppRecords {
		x.requests = x.requests[1:]
	}
	x.requests = append(x.requests, rec)
}

// XAISecretRequests returns the client-secret requests received so far,
// oldest first (GET /mock/xai/client_secrets).
func (s *Server) XAISecretRequests() []XAISecretRequest {
	s.xai.mu.Lock()
	defer s.xai.mu.Unlock()
	return append([]XAISecretRequest{}, s.xai.requests...)
}

// mint remembers a new secret valid for ttl and returns it with its expiry.
// Expired secrets are dropped first; at maxXAISecrets one more is dropped,
// so the map stays bounded.
func (x *xaiState) mint(now time.Time, ttl time.Duration) (string, time.Time) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.secrets == nil {
		x.secrets = make(map[string]time.Time)
	}
	for v, exp := range x.secrets {
		if !now.Before(exp) {
			delete(x.secrets, v)
		}
	}
	for v := range x.secrets {
		if len(x.secrets) < maxXAISecrets {
			break
		}
		delete(x.secrets, v)
	}
	v, exp := newID("xai-mock-secret-"), now.Add(ttl)
	x.secrets[v] = exp
	return v, exp
}

// valid reports whether key is a secret minted here that has not expired.
func (x *xaiState) valid(key string, now time.Time) bool {
	if key == "" {
		return false
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	exp, ok := x.secrets[key]
	return ok && now.Before(exp)
}

// keyAccepted says whether key opens a socket on path: any key when
// Config.Key is empty, else Config.Key, and on xAI's route also a live
// client secret minted here.
func (s *Server) keyAccepted(path, key string) bool {
	if s.cfg.Key == "" || key == s.cfg.Key {
		return true
	}
	return dialectOfPath(path) != "" && s.xai.valid(key, time.Now())
}

// handleXAIClientSecret is xAI's POST /v1/realtime/client_secrets: with
// the API key as a bearer, a body {"expires_after": {"seconds": N}} (or
// none) is answered 200 {"value": "<secret>", "expires_at": <unix s>},
// the shape xAI's own voice examples read. xAI documents that the request
// "does not support session or expires_after.anchor"; mockai refuses them
// with 400 so that a relay that forwards an OpenAI-style request unchanged
// is seen. Errors are in xAI's REST shape, {"code": ..., "error": ...}.
func (s *Server) handleXAIClientSecret(w http.ResponseWriter, r *http.Request) {
	key := presentedKey(r)
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	switch {
	case s.cfg.Key != "" && key != s.cfg.Key:
		s.xai.note(key, body, http.StatusUnauthorized)
		writeXAIError(w, http.StatusUnauthorized, "Unauthenticated", "Incorrect API key provided.")
		return
	case err != nil:
		s.xai.note(key, nil, http.StatusBadRequest)
		writeXAIError(w, http.StatusBadRequest, "Client specified an invalid argument", "mock: reading the body: "+err.Error())
		return
	}
	ttl, err := parseXAISecretRequest(body)
	if err != nil {
		s.xai.note(key, body, http.StatusBadRequest)
		writeXAIError(w, http.StatusBadRequest, "Client specified an invalid argument", err.Error())
		return
	}
	s.xai.note(key, body, http.StatusOK)
	value, exp := s.xai.mint(time.Now(), ttl)
	writeJSON(w, http.StatusOK, map[string]any{"value": value, "expires_at": exp.Unix()})
}

// parseXAISecretRequest reads a client-secret request: its life, or why
// it is refused.
func parseXAISecretRequest(body []byte) (time.Duration, error) {
	if len(bytes.TrimSpace(body)) == 0 {
		return xaiDefaultSecretTTL, nil
	}
	var req map[string]json.RawMessage
	if err := json.Unmarshal(body, &req); err != nil || req == nil {
		return 0, fmt.Errorf("the body must be a JSON object")
	}
	if _, ok := req["session"]; ok {
		return 0, fmt.Errorf("'session' is not supported: configure the session with session.update after connecting")
	}
	raw, ok := req["expires_after"]
	if !ok {
		return xaiDefaultSecretTTL, nil
	}
	var ea map[string]json.RawMessage
	if err := json.Unmarshal(raw, &ea); err != nil || ea == nil {
		return 0, fmt.Errorf("'expires_after' must be an object")
	}
	if _, ok := ea["anchor"]; ok {
		return 0, fmt.Errorf("'expires_after.anchor' is not supported")
	}
	rawSec, ok := ea["seconds"]
	if !ok {
		return xaiDefaultSecretTTL, nil
	}
	var sec int64
	if err := json.Unmarshal(rawSec, &sec); err != nil || sec < 1 || time.Duration(sec)*time.Second > xaiMaxSecretTTL {
		return 0, fmt.Errorf("'expires_after.seconds' must be a whole number from 1 to %d", int64(xaiMaxSecretTTL/time.Second))
	}
	return time.Duration(sec) * time.Second, nil
}

// writeXAIError answers with xAI's REST error shape.
func writeXAIError(w http.ResponseWriter, status int, code, msg string) {
	writeJSON(w, status, map[string]string{"code": code, "error": msg})
}
