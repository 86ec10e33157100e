package mockai

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// What a turn needs beyond a plain response.create (see the package doc,
// "Turns"): server VAD on appended audio, text-only responses, tool calls
// and the first-audio delay that an operator can change while mockai runs.

// vadThreshold is the peak |sample| of PCM16 above which an append counts as
// speech (about -36 dBFS). Silence (all zeros, what wsbench sends) is far
// below it; PCMPattern (peak 5,000) is far above it.
const vadThreshold = 500

// maxFirstAudioDelay bounds the first-audio delay a query or the admin knob
// may set: long enough for any test, short enough that a typo ("10h") is
// refused rather than hanging a run.
const maxFirstAudioDelay = time.Minute

// turnDetection is the server VAD a session asked for with session.update
// (audio.input.turn_detection of type server_vad). mockai simulates VAD only
// when a client asks for it explicitly, although its default session object
// advertises server_vad: clients that commit by hand (wsbench, the gateway's
// tests) keep the conversation they had.
type turnDetection struct {
	on                bool
	prefixPaddingMs   int64
	silenceDurationMs int64
	createResponse    bool
	interruptResponse bool
}

// vadState follows the appended audio of a VAD session. Used only by the
// handler goroutine.
type vadState struct {
	td       turnDetection
	speaking bool
	posBytes int64  // audio appended since the session started
	silence  int64  // bytes of silence since the last speech, while speaking
	itemID   string // the user item the current speech becomes
}

// parseTurnDetection reads turn_detection from a session.update's merged
// overrides; anything but an explicit server_vad is off.
func parseTurnDetection(overrides map[string]any) turnDetection {
	audio, _ := overrides["audio"].(map[string]any)
	input, _ := audio["input"].(map[string]any)
	td, _ := input["turn_detection"].(map[string]any)
	if td == nil || td["type"] != "server_vad" {
		return turnDetection{}
	}
	num := func(k string, def int64) int64 {
		if f, ok := td[k].(float64); ok && f >= 0 {
			return int64(f)
		}
		return def
	}
	flag := func(k string) bool {
		b, ok := td[k].(bool)
		return !ok || b // the API's defaults are true
	}
	return turnDetection{
		on:                true,
		prefixPaddingMs:   num("prefix_padding_ms", 300),
		silenceDurationMs: num("silence_duration_ms", 200),
		createResponse:    flag("create_response"),
		interruptResponse: flag("interrupt_response"),
	}
}

// peakWriter counts decoded PCM16 bytes and keeps the loudest sample, so an
// append is classified without holding a decoded copy of it.
type peakWriter struct {
	n    int64
	peak int
	odd  bool
	lo   byte
}

func (w *peakWriter) Write(p []byte) (int, error) {
	for _, b := range p {
		if !w.odd {
			w.lo, w.odd = b, true
			continue
		}
		w.odd = false
		v := int(int16(uint16(w.lo) | uint16(b)<<8))
		if v < 0 {
			v = -v
		}
		w.peak = max(w.peak, v)
	}
	w.n += int64(len(p))
	return len(p), nil
}

// decodeAudio counts (and, for VAD, measures) an append's audio.
func decodeAudio(b64 string) (peakWriter, error) {
	var w peakWriter
	_, err := io.Copy(&w, base64.NewDecoder(base64.StdEncoding, strings.NewReader(b64)))
	return w, err
}

// audioMs is the length of n bytes of 24 kHz PCM16 in milliseconds.
func audioMs(n int64) int64 { return n / bytesPerMilli }

// detectSpeech runs server VAD over one append of n bytes with the given
// peak, after it was added to pendingAudio:
//
//	state     append   -> state     events
//	silent    loud        speaking  speech_started (the active response is
//	                                cancelled, turn_detected, if interrupt_response)
//	speaking  loud        speaking  (silence count reset)
//	speaking  quiet       speaking  silence += n, until it reaches silence_duration_ms:
//	          ...         silent    speech_stopped, committed (and a response if
//	                                create_response)
//	silent    quiet       silent    -
func (s *session) detectSpeech(n int64, peak int) {
	v := &s.vad
	start := v.posBytes
	v.posBytes += n
	loud := peak >= vadThreshold
	switch {
	case loud && !v.speaking:
		v.speaking, v.silence, v.itemID = true, 0, newID("item_")
		_ = s.send(map[string]any{"type": "input_audio_buffer.speech_started", "event_id": newID("event_"),
			"audio_start_ms": max(audioMs(start)-v.td.prefixPaddingMs, 0), "item_id": v.itemID})
		if v.td.interruptResponse {
			s.cancelActive("turn_detected")
		}
	case loud:
		v.silence = 0
	case v.speaking:
		v.silence += n
		if audioMs(v.silence) < v.td.silenceDurationMs {
			return
		}
		v.speaking = false
		// audio_end_ms includes the silence window, as OpenAI documents it.
		_ = s.send(map[string]any{"type": "input_audio_buffer.speech_stopped", "event_id": newID("event_"),
			"audio_end_ms": audioMs(v.posBytes), "item_id": v.itemID})
		s.commitAudio(v.itemID)
		if v.td.createResponse {
			s.rmu.Lock()
			busy := s.active != nil
			s.rmu.Unlock()
			if !busy {
				s.createResponse(clientEvent{})
			}
		}
	}
}

// commitAudio turns the pending audio into the user item itemID.
func (s *session) commitAudio(itemID string) {
	s.committedAudio += s.pendingAudio
	s.pendingAudio = 0
	item := map[string]any{"id": itemID, "object": "realtime.item", "type": "message", "role": "user", "status": "completed",
		"content": []any{map[string]any{"type": "input_audio", "transcript": nil}}}
	s.items.add(item, 0) // kept (without its audio) before committed names it
	_ = s.send(map[string]any{"type": "input_audio_buffer.committed", "event_id": newID("event_"),
		"previous_item_id": nullable(s.lastItemID), "item_id": itemID})
	if s.cfg.AudioItems { // the item first, then its transcript, as OpenAI sends them
		for _, typ := range []string{"conversation.item.added", "conversation.item.done"} {
			_ = s.send(map[string]any{"type": typ, "event_id": newID("event_"), "previous_item_id": nullable(s.lastItemID), "item": item})
		}
	}
	s.commits++
	s.transcribed(itemID, s.committedAudio, scripted(s.cfg.InputTranscripts, s.commits-1, transcript))
	s.lastItemID, s.lastItemType = itemID, "message"
}

// cancelActive stops the response being streamed, if any, with reason
// (client_cancelled or turn_detected); false means none was active.
func (s *session) cancelActive(reason string) bool {
	s.rmu.Lock()
	defer s.rmu.Unlock()
	r := s.active
	if r == nil {
		return false
	}
	if r.cancelReason == "" {
		r.cancelReason = reason
	}
	r.cancel()
	return true
}

// endActive ends the response being streamed at once, as if it had
// reached its end (status completed, the output sent so far): a cancel
// that came too late (Config.CancelLate).
func (s *session) endActive() {
	s.rmu.Lock()
	defer s.rmu.Unlock()
	if r := s.active; r != nil && r.cancelReason == "" {
		r.cancel()
	}
}

// responseParams are the response.create fields mockai honours.
type responseParams struct {
	OutputModalities []string        `json:"output_modalities"`
	ToolChoice       json.RawMessage `json:"tool_choice"`
}

// toolCall is the function call a response makes instead of speaking.
type toolCall struct {
	name, callID string
}

// shape decides what a response produces: text instead of audio when its
// (else the session's) output_modalities are ["text"]; a function call when
// its (else the session's) tool_choice is "required" or names a function,
// the session has tools, and the conversation's last item is not a
// function_call_output (so a chain ends in speech rather than looping).
func (s *session) shape(raw json.RawMessage) (text bool, tool *toolCall) {
	var p responseParams
	if len(raw) > 0 {
		_ = json.Unmarshal(raw, &p) // a malformed response object is answered as a plain one
	}
	mods := p.OutputModalities
	if mods == nil {
		if m, ok := s.overrides["output_modalities"].([]any); ok {
			for _, v := range m {
				if str, ok := v.(string); ok {
					mods = append(mods, str)
				}
			}
		}
	}
	text = len(mods) == 1 && mods[0] == "text"

	var choice any
	if len(p.ToolChoice) > 0 {
		_ = json.Unmarshal(p.ToolChoice, &choice)
	} else {
		choice = s.overrides["tool_choice"]
	}
	tools, _ := s.overrides["tools"].([]any)
	if len(tools) == 0 || s.lastItemType == "function_call_output" {
		return text, nil
	}
	name := ""
	switch c := choice.(type) {
	case string:
		if c != "required" {
			return text, nil
		}
		first, _ := tools[0].(map[string]any)
		name, _ = first["name"].(string)
	case map[string]any:
		if c["type"] != "function" {
			return text, nil
		}
		name, _ = c["name"].(string)
	default:
		return text, nil
	}
	if name == "" {
		return text, nil
	}
	return text, &toolCall{name: name, callID: newID("call_")}
}

// toolArguments is the arguments string of every call mockai makes
// unless Config.ToolArguments scripts them.
const toolArguments = `{}`

// argumentPieces is how a call's arguments are streamed: the default in
// one delta, scripted ones (Config.ToolArguments) in up to four pieces of
// about equal length, at least two when there are two characters, cut
// between runes.
func argumentPieces(scripted string) (args string, pieces []string) {
	if scripted == "" {
		return toolArguments, []string{toolArguments}
	}
	runes := []rune(scripted)
	k := min(len(runes), 4)
	for i := range k {
		pieces = append(pieces, string(runes[i*len(runes)/k:(i+1)*len(runes)/k]))
	}
	return scripted, pieces
}

// streamTool answers a response with a function call and no audio.
func (s *session) streamTool(r *response) {
	item := map[string]any{"id": r.itemID, "object": "realtime.item", "type": "function_call", "status": "in_progress",
		"name": r.tool.name, "call_id": r.tool.callID, "arguments": ""}
	added := func() {
		_ = s.send(map[string]any{"type": "response.output_item.added", "event_id": newID("event_"),
			"response_id": r.id, "output_index": 0, "item": item})
		if s.dialect == dialectXAI { // xAI adds the call to the conversation with role "tool" (xaiShape)
			_ = s.send(map[string]any{"type": "conversation.item.added", "event_id": newID("event_"),
				"previous_item_id": nullable(r.prevItemID), "item": item})
		}
	}
	if !s.cfg.CreatedWithFirstOutput {
		added()
	}
	done := false
	arguments, pieces := argumentPieces(s.cfg.ToolArguments)
	if s.srv.sleep(r.ctx, s.srv.firstAudioDelay(s.cfg)) && r.ctx.Err() == nil {
		if s.cfg.CreatedWithFirstOutput {
			s.announce(r)
			added()
		}
		sent := 0
		for i, piece := range pieces {
			if (i > 0 && !s.srv.sleep(r.ctx, s.cfg.AudioDeltaInterval)) || r.ctx.Err() != nil {
				break
			}
			if s.send(map[string]any{"type": "response.function_call_arguments.delta", "event_id": newID("event_"),
				"response_id": r.id, "item_id": r.itemID, "output_index": 0, "call_id": r.tool.callID, "delta": piece}) != nil {
				break
			}
			sent++
		}
		if sent == len(pieces) {
			done = s.send(map[string]any{"type": "response.function_call_arguments.done", "event_id": newID("event_"),
				"response_id": r.id, "item_id": r.itemID, "output_index": 0, "call_id": r.tool.callID,
				"name": r.tool.name, "arguments": arguments}) == nil
		}
	}
	s.announce(r) // cancelled before its output
	status := s.endResponse(r)
	if done {
		item["arguments"] = arguments
	}
	item["status"] = itemStatus(status)
	s.finishResponseItem(r, []any{item}, 0)
	_ = s.send(map[string]any{"type": "response.output_item.done", "event_id": newID("event_"),
		"response_id": r.id, "output_index": 0, "item": item})
	textSent := done && status == "completed"
	s.sendDone(r, status, []any{item}, computeUsage(r.inputAudioTokens, 0, textSent))
}

// textDeltas are the pieces of the transcript a text-only response streams.
var textDeltas = []string{"Hello ", "from ", "mockai."}

// streamText answers a text-only response: output_text deltas, then done.
func (s *session) streamText(r *response) {
	sent := 0
	if s.srv.sleep(r.ctx, s.srv.firstAudioDelay(s.cfg)) {
		for i, d := range textDeltas {
			if (i > 0 && !s.srv.sleep(r.ctx, s.cfg.AudioDeltaInterval)) || r.ctx.Err() != nil {
				break
			}
			s.beginOutput(r, "output_text")
			if s.send(s.deltaEvent("response.output_text.delta", r, d)) != nil {
				break
			}
			sent++
		}
	}
	status := s.endResponse(r)
	text := strings.Join(textDeltas[:sent], "")
	if sent == len(textDeltas) {
		_ = s.send(map[string]any{"type": "response.output_text.done", "event_id": newID("event_"), "response_id": r.id,
			"item_id": r.itemID, "output_index": 0, "content_index": 0, "text": text})
	}
	content := map[string]any{"type": s.partType("output_text"), "text": text}
	s.endOutput(r, status, content, false, false)
	output := []any{map[string]any{
		"id": r.itemID, "object": "realtime.item", "type": "message", "role": "assistant",
		"status": itemStatus(status), "content": []any{content},
	}}
	s.finishResponseItem(r, output, 0)
	s.sendDone(r, status, output, computeUsage(r.inputAudioTokens, 0, sent == len(textDeltas)))
}

// itemStatus is an output item's status for a response that ended with status.
func itemStatus(status string) string {
	if status == "cancelled" {
		return "incomplete"
	}
	return status
}

// endResponse marks r finished (a new response may start) and returns its
// status: "completed", or "cancelled" when response.cancel or speech stopped it.
func (s *session) endResponse(r *response) string {
	s.announce(r) // ended before its first output: created all the same
	s.rmu.Lock()
	if s.active == r {
		s.active = nil
	}
	reason := r.cancelReason
	s.rmu.Unlock()
	r.cancel()
	if reason != "" {
		return "cancelled"
	}
	return "completed"
}

// sendDone sends response.done; a cancelled one names its reason.
func (s *session) sendDone(r *response, status string, output []any, u usage) {
	var details any
	if status == "cancelled" {
		details = map[string]any{"type": "cancelled", "reason": r.cancelReason}
	}
	_ = s.send(map[string]any{"type": "response.done", "event_id": newID("event_"),
		"response": s.responseObject(r, status, details, output, u)})
}

// firstAudioDelay is the wait before a response's first output: the
// connection's own when its query set one, else the server's current value
// (Config.FirstAudioDelay until POST /mock/config changes it).
func (s *Server) firstAudioDelay(cfg *Config) time.Duration {
	if cfg.firstAudioPinned {
		return cfg.FirstAudioDelay
	}
	return time.Duration(s.firstAudio.Load())
}

// SetFirstAudioDelay changes the first-audio delay of responses that start
// from now on (connections that set their own in the query keep theirs).
func (s *Server) SetFirstAudioDelay(d time.Duration) error {
	if d < 0 || d > maxFirstAudioDelay {
		return fmt.Errorf("first audio delay %v: want 0 to %v", d, maxFirstAudioDelay)
	}
	s.firstAudio.Store(int64(d))
	return nil
}

// parseFirstAudioDelay reads a first_audio_delay value ("250ms", "1s").
func parseFirstAudioDelay(v string) (time.Duration, error) {
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 || d > maxFirstAudioDelay {
		return 0, fmt.Errorf("%s=%q: want a duration from 0 to %v, like 250ms", paramFirstAudioDelay, v, maxFirstAudioDelay)
	}
	return d, nil
}

// handleConfig is the admin knob: GET /mock/config shows the settings that
// can change while mockai runs, POST /mock/config?first_audio_delay=250ms
// changes them (a test swaps which of two deployments is faster).
func (s *Server) handleConfig(w http.ResponseWriter, r *http.Request) {
	switch r.Method {
	case http.MethodGet:
	case http.MethodPost:
		if err := r.ParseForm(); err != nil {
			writeHTTPError(w, http.StatusBadRequest, "invalid_request_error", "invalid_value", "mock: "+err.Error())
			return
		}
		v := r.Form.Get(paramFirstAudioDelay)
		if v == "" {
			writeHTTPError(w, http.StatusBadRequest, "invalid_request_error", "missing_required_parameter",
				"mock: nothing to change: want "+paramFirstAudioDelay+"=<duration>")
			return
		}
		d, err := parseFirstAudioDelay(v)
		if err != nil {
			writeHTTPError(w, http.StatusBadRequest, "invalid_request_error", "invalid_value", "mock: "+err.Error())
			return
		}
		_ = s.SetFirstAudioDelay(d) // in range: checked above
	default:
		w.Header().Set("Allow", "GET, POST")
		writeHTTPError(w, http.StatusMethodNotAllowed, "invalid_request_error", "method_not_allowed", "mock: GET or POST")
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"first_audio_delay": time.Duration(s.firstAudio.Load()).String()})
}

// outOfBand reports whether a response.create's response object asks for
// a response outside the conversation (conversation "none").
func outOfBand(raw json.RawMessage) bool {
	var p struct {
		Conversation string `json:"conversation"`
	}
	_ = json.Unmarshal(raw, &p) // absent or malformed: in the conversation
	return p.Conversation == "none"
}

// conversationID is the response object's conversation_id: the session's
// conversation, null for an out-of-band response (as OpenAI documents).
func (r *response) conversationID(conv string) any {
	if r.outOfBand {
		return nil
	}
	return conv
}

// streamFailure answers a response as a failing upstream does
// (Config.FailResponses): after the first-audio delay, response.done with
// status failed and a server_error, no output.
func (s *session) streamFailure(r *response) {
	_ = s.srv.sleep(r.ctx, s.srv.firstAudioDelay(s.cfg))
	status := s.endResponse(r)
	s.items.remove(r.itemID) // no output: nothing joins the conversation
	details := map[string]any{"type": "cancelled", "reason": r.cancelReason}
	if status != "cancelled" {
		status = "failed"
		details = map[string]any{"type": "failed", "error": map[string]any{"type": "server_error", "code": "server_error",
			"message": "mock: The server had an error while processing your request (FailResponses)."}}
	}
	_ = s.send(map[string]any{"type": "response.done", "event_id": newID("event_"),
		"response": s.responseObject(r, status, details, []any{}, computeUsage(r.inputAudioTokens, 0, false))})
}

// modalities is the response's output_modalities as response objects show it.
func (r *response) modalities() []string {
	if r.text {
		return []string{"text"}
	}
	return []string{"audio"}
}

// handleTraces is an OTLP/HTTP trace sink (POST /v1/traces): it reads and
// discards the export and answers an empty ExportTraceServiceResponse, so a
// benchmark can measure a gateway's tracing cost against a receiver that
// costs it nothing (OTEL_EXPORTER_OTLP_ENDPOINT=http://mockai-address).
// The bytes received are counted in Stats.TraceBytes.
func (s *Server) handleTraces(w http.ResponseWriter, r *http.Request) {
	n, err := io.Copy(io.Discard, io.LimitReader(r.Body, 64<<20))
	if err != nil {
		writeHTTPError(w, http.StatusBadRequest, "invalid_request_error", "invalid_value", "mock: reading the export: "+err.Error())
		return
	}
	s.traceBytes.Add(n)
	w.Header().Set("Content-Type", "application/x-protobuf")
	w.WriteHeader(http.StatusOK) // an empty message is zero bytes
}
