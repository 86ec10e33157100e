package mockai

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"
)

// bytesPerAudioToken is the PCM16 24 kHz audio one token stands for: 10 ms.
const bytesPerAudioToken = 480

// Fixed token counts of every response (see the package doc).
const (
	inputTextTokens  = 10
	outputTextTokens = 5
	transcript       = "Hello from mockai."
)

// errStopped means the connection is closing (or a fault fired): nothing more is sent.
var errStopped = errors.New("mockai: connection is closing")

// session is one upgraded connection. The handler goroutine reads client events and
// answers them in order; while a response is active, a second goroutine streams its
// audio. Both write through send, which serializes frames and fires the fault knobs.
type session struct {
	srv    *Server
	cfg    *Config
	ws     *websocket.Conn
	id     string
	convID string
	ctx    context.Context
	cancel context.CancelFunc
	// faulted is closed when a fault knob ends the connection, so a session that
	// stopped reading can still end.
	faulted   chan struct{}
	faultOnce sync.Once

	// held, when not nil, holds the 101 response until the first data frame is
	// written, so both go out in one socket write (Config.OneSegment).
	held *heldConn

	// dialect is what the session speaks (dialectOpenAI, or xAI's from
	// /xai/v1/realtime): set before run, read-only after. send reshapes
	// the events it writes for it (xai.go).
	dialect dialect

	// lastReadErr is why the last read failed (Live's start timeout tells a
	// deadline from a peer that left). Used only by the handler goroutine.
	lastReadErr error

	wmu     sync.Mutex
	sent    int  // data frames sent
	stopped bool // a close frame went out or a fault fired: send nothing more
	// Config.Cut's count (session.cutDue)
	responsesCreated, responsesDone int
	deltaSeen, cutChecked           bool

	// Used only by the handler goroutine.
	model     string
	createdAt time.Time
	expiresAt int64
	// overrides holds the session.update fields merged so far (nil until the first
	// update); the full session object is rebuilt from it on demand, so an idle
	// session holds no copy of it.
	overrides      map[string]any
	pendingAudio   int64 // raw bytes appended and not yet committed
	committedAudio int64 // raw bytes committed since the last response
	lastItemID     string
	lastItemType   string   // "message", "function_call_output", ...: decides tool calls (session.shape)
	vad            vadState // server VAD, when session.update asked for it (detectSpeech)
	// items are the conversation's items, for conversation.item.retrieve,
	// .truncate and .delete (items.go).
	items itemLog
	// commits counts the committed user turns and audioResponses the
	// audio responses started: they pick the scripted input and output
	// transcripts (Config.InputTranscripts, OutputTranscripts).
	commits, audioResponses int
	// transcriptTail is closed once the newest delayed transcription
	// (Config.TranscriptionDelay) is sent or dropped, so the next waits
	// for it and transcripts keep the order of their turns.
	transcriptTail chan struct{}

	rmu    sync.Mutex
	active *response      // the response being streamed, nil when none
	rwg    sync.WaitGroup // response goroutines
}

// response is one response.create being answered.
type response struct {
	id, itemID string
	ctx        context.Context
	cancel     context.CancelFunc
	// voice is the session's voice when the response started (the xAI
	// dialect's response objects show it; "" shows OpenAI's "alloy").
	voice string
	// prevItemID is the conversation's newest item when the response
	// started (the xAI dialect's conversation.item.added of a call names it).
	prevItemID string
	// itemOpened: the xAI dialect announced the response's message item
	// and content part (beginOutput). Used only by the streaming goroutine.
	itemOpened bool
	// cancelReason is why it was cancelled (client_cancelled, turn_detected),
	// "" while it runs; guarded by session.rmu.
	cancelReason     string
	inputAudioTokens int
	text             bool      // output_modalities ["text"]: text deltas, no audio
	tool             *toolCall // a function call instead of speech (session.shape)
	// transcript is what an audio response says (Config.OutputTranscripts,
	// else the fixed text); set before its goroutine starts.
	transcript string
	// outOfBand: response.conversation "none": outside the conversation,
	// beside the active response, conversation_id null (responseParams).
	outOfBand bool
	// announced: its response.created was sent (with
	// Config.CreatedWithFirstOutput, only at its first output).
	announced atomic.Bool
}

func newSession(srv *Server, ws *websocket.Conn, model string) *session {
	s := &session{
		srv:       srv,
		cfg:       &srv.cfg,
		ws:        ws,
		id:        newID("sess_"),
		convID:    newID("conv_"),
		faulted:   make(chan struct{}),
		model:     model,
		createdAt: time.Now(),
	}
	life := time.Hour
	if srv.cfg.SessionCap > 0 {
		life = srv.cfg.SessionCap
	}
	s.expiresAt = s.createdAt.Add(life).Unix()
	s.ctx, s.cancel = context.WithCancel(srv.ctx)
	ws.SetReadLimit(readLimit)
	ws.SetCloseHandler(func(code int, text string) error {
		// Echo the client's code and reason (gorilla's default drops the reason).
		s.wmu.Lock()
		defer s.wmu.Unlock()
		s.writeClose(code, text)
		return nil
	})
	return s
}

// sessionObject is the session as session.created and session.updated describe it:
// the defaults, shallowly overridden by every session.update so far.
func (s *session) sessionObject() map[string]any {
	if s.dialect == dialectXAI {
		return s.xaiSessionObject()
	}
	pcm := map[string]any{"type": "audio/pcm", "rate": 24000}
	obj := map[string]any{
		"type":              "realtime",
		"object":            "realtime.session",
		"id":                s.id,
		"model":             s.model,
		"output_modalities": []string{"audio"},
		"instructions":      "You are mockai, a fake voice assistant for tests.",
		"audio": map[string]any{
			"input": map[string]any{
				"format":          pcm,
				"transcription":   nil,
				"noise_reduction": nil,
				"turn_detection": map[string]any{
					"type":                "server_vad",
					"threshold":           0.5,
					"prefix_padding_ms":   300,
					"silence_duration_ms": 200,
					"idle_timeout_ms":     nil,
					"create_response":     true,
					"interrupt_response":  true,
				},
			},
			"output": map[string]any{"format": pcm, "voice": "alloy", "speed": 1.0},
		},
		"tools":             []any{},
		"tool_choice":       "auto",
		"max_output_tokens": "inf",
		"tracing":           nil,
		"prompt":            nil,
		"truncation":        "auto",
		"expires_at":        s.expiresAt,
	}
	for k, v := range s.overrides {
		obj[k] = v
	}
	if s.cfg.NoExpiresAt {
		delete(obj, "expires_at")
	}
	return obj
}

// run sends session.created (the xAI dialect: conversation.created, see
// xaiOpen) and answers client events until the connection ends.
func (s *session) run() {
	if !s.srv.sleep(s.ctx, s.cfg.SessionDelay) {
		return
	}
	s.srv.sessions.Add(1)
	s.srv.log.Debug("session opened", "session", s.id, "model", s.model, "dialect", s.dialect)
	open := s.xaiOpen
	if s.dialect != dialectXAI {
		open = func() error {
			return s.send(map[string]any{"type": "session.created", "event_id": newID("event_"), "session": s.sessionObject()})
		}
	}
	if err := open(); err != nil {
		return
	}
	defer s.startCap()()
	if s.cfg.StopReading {
		s.stall()
		return
	}
	s.startPings() // xAI's keepalives; nothing in the OpenAI dialect
	if s.cfg.Stream.Interval > 0 {
		s.streamVoice()
		return
	}
	for {
		mt, data, err := s.ws.ReadMessage()
		if err != nil {
			s.srv.log.Debug("session closed", "session", s.id, "err", err)
			return
		}
		s.srv.framesIn.Add(1)
		if s.cfg.Echo {
			if s.write(mt, data) != nil {
				return
			}
			continue
		}
		s.handle(mt, data)
	}
}

// stall never reads again: client frames pile up in the socket buffers
// until the client's writes block. It returns when the session ends, a
// fault fires or StallFor passes (the caller then drops the connection).
func (s *session) stall() {
	var stallEnd <-chan time.Time
	if s.cfg.StallFor > 0 {
		t := time.NewTimer(s.cfg.StallFor)
		defer t.Stop()
		stallEnd = t.C
	}
	select {
	case <-s.ctx.Done():
	case <-s.faulted:
	case <-stallEnd:
	}
}

// fail refuses the session the way OpenAI does after an upgrade: an error event, then
// close 4000 with reason "<type>.<code>".
func (s *session) fail(typ, code, msg string) {
	s.failWith(errorEvent(typ, code, msg, "", ""), typ, code)
}

// failWith is fail with a prepared error event ev (one naming a param).
func (s *session) failWith(ev map[string]any, typ, code string) {
	_ = s.send(ev)
	s.wmu.Lock()
	s.writeClose(4000, typ+"."+code)
	s.wmu.Unlock()
	for { // wait for the client's close answer (or the close deadline)
		if _, _, err := s.ws.ReadMessage(); err != nil {
			return
		}
	}
}

// end stops the session's response goroutine and closes the socket.
func (s *session) end() {
	s.cancel()
	// A session that ended before its first frame still sends its 101.
	_ = s.releaseHeld()
	s.ws.Close() // unblocks a response goroutine stuck writing to a client that does not read
	s.rwg.Wait()
}

// clientEvent holds the fields of any client event that the server looks at.
type clientEvent struct {
	Type    string          `json:"type"`
	EventID string          `json:"event_id"`
	Audio   *string         `json:"audio"`
	Session json.RawMessage `json:"session"`
	Item    json.RawMessage `json:"item"`
	// Response is response.create's optional response object.
	Response json.RawMessage `json:"response"`
}

// handle answers one client message.
func (s *session) handle(mt int, data []byte) {
	if mt != websocket.TextMessage {
		s.sendError("invalid_value", "Binary frames are not supported; send JSON text frames.", "", "")
		return
	}
	var ev clientEvent
	if err := json.Unmarshal(data, &ev); err != nil {
		msg := "Invalid event: " + err.Error()
		if _, ok := errors.AsType[*json.SyntaxError](err); ok {
			msg = "The message is not valid JSON."
		}
		s.sendError("invalid_value", msg, "", "")
		return
	}
	s.srv.noteEvent(s, ev.Type, data)
	switch ev.Type {
	case "session.update":
		s.updateSession(ev)
	case "input_audio_buffer.append":
		s.appendAudio(ev)
	case "input_audio_buffer.commit":
		s.commitAudio(newID("item_"))
	case "input_audio_buffer.clear":
		s.pendingAudio = 0
		_ = s.send(map[string]any{"type": "input_audio_buffer.cleared", "event_id": newID("event_")})
	case "conversation.item.create":
		s.createItem(ev)
	case "conversation.item.retrieve", "conversation.item.truncate", "conversation.item.delete":
		s.handleItemEvent(ev, data)
	case "response.create":
		s.createResponse(ev)
	case "response.cancel":
		if s.cfg.IgnoreCancel {
			break
		}
		if s.cfg.CancelLate {
			s.sendError("response_cancel_not_active", "Cancellation failed: no active response found.", "", ev.EventID)
			s.endActive()
			break
		}
		if !s.cancelActive("client_cancelled") {
			s.sendError("response_cancel_not_active", "Cancellation failed: no active response found.", "", ev.EventID)
		}
	case "":
		s.sendError("invalid_value", "Missing required parameter: 'type'.", "type", ev.EventID)
	default:
		s.sendError("invalid_value", fmt.Sprintf("Invalid value: '%s'. Unknown client event type.", ev.Type), "type", ev.EventID)
	}
}

func (s *session) updateSession(ev clientEvent) {
	var upd map[string]any
	if err := json.Unmarshal(ev.Session, &upd); err != nil || upd == nil {
		s.sendError("missing_required_parameter", "Missing required parameter: 'session' (an object).", "session", ev.EventID)
		return
	}
	if t, ok := upd["type"]; ok && t != "realtime" && t != "transcription" {
		s.sendError("invalid_value", "Invalid value for 'session.type': expected 'realtime' or 'transcription'.", "session.type", ev.EventID)
		return
	}
	if msg := rejectUpdate(upd); msg != "" {
		s.sendError("invalid_value", msg, "session.instructions", ev.EventID)
		return
	}
	if s.overrides == nil {
		s.overrides = make(map[string]any, len(upd))
	}
	for k, v := range upd {
		if k != "id" && k != "object" { // the server owns these
			s.overrides[k] = v
		}
	}
	s.vad.td = s.turnDetection()
	if !s.vad.td.on {
		s.vad.speaking = false
	}
	_ = s.send(map[string]any{"type": "session.updated", "event_id": newID("event_"), "session": s.sessionObject()})
}

func (s *session) appendAudio(ev clientEvent) {
	if ev.Audio == nil {
		s.sendError("missing_required_parameter", "Missing required parameter: 'audio'.", "audio", ev.EventID)
		return
	}
	// Count the decoded bytes without holding a second copy of up to 11 MiB.
	w, err := decodeAudio(*ev.Audio)
	if err != nil {
		s.sendError("invalid_value", "Invalid 'audio': not valid base64.", "audio", ev.EventID)
		return
	}
	s.pendingAudio += w.n
	s.srv.audioAppends.Add(1)
	s.srv.audioBytes.Add(w.n)
	if s.vad.td.on {
		s.detectSpeech(w.n, w.peak)
	}
}

func (s *session) createItem(ev clientEvent) {
	var item map[string]any
	if err := json.Unmarshal(ev.Item, &item); err != nil || item == nil {
		s.sendError("missing_required_parameter", "Missing required parameter: 'item' (an object).", "item", ev.EventID)
		return
	}
	if id, _ := item["id"].(string); id == "" {
		item["id"] = newID("item_")
	}
	item["object"] = "realtime.item"
	item["status"] = "completed"
	s.items.add(item, 0) // kept before it is announced: a retrieve may follow at once
	prev := nullable(s.lastItemID)
	for _, typ := range []string{"conversation.item.added", "conversation.item.done"} {
		_ = s.send(map[string]any{"type": typ, "event_id": newID("event_"), "previous_item_id": prev, "item": item})
	}
	s.lastItemID, _ = item["id"].(string)
	s.lastItemType, _ = item["type"].(string)
}

func (s *session) createResponse(ev clientEvent) {
	oob := outOfBand(ev.Response)
	s.rmu.Lock()
	if s.active != nil && !oob {
		s.rmu.Unlock()
		s.sendError("conversation_already_has_active_response",
			"Conversation already has an active response in progress.", "", ev.EventID)
		return
	}
	r := &response{
		id:        newID("resp_"),
		itemID:    newID("item_"),
		outOfBand: oob,
	}
	r.text, r.tool = s.shape(ev.Response)
	if !r.text && r.tool == nil && !s.cfg.FailResponses {
		r.transcript = scripted(s.cfg.OutputTranscripts, s.audioResponses, transcript)
		s.audioResponses++
	}
	s.keepResponseItem(r)
	if s.dialect == dialectXAI {
		r.voice, r.prevItemID = s.xaiVoice(), s.lastItemID
	}
	switch {
	case oob: // outside the conversation: its items and audio stay
	case r.tool != nil: // the call is the conversation's newest item
		s.lastItemID, s.lastItemType = r.itemID, "function_call"
	default:
		// So is the answer's message: the next item's previous_item_id.
		// (Its type is left: it decides the next tool call, session.shape.)
		s.lastItemID = r.itemID
	}
	r.ctx, r.cancel = context.WithCancel(s.ctx)
	if !oob {
		r.inputAudioTokens = int((s.pendingAudio + s.committedAudio) / bytesPerAudioToken)
		s.active = r
	}
	s.rmu.Unlock()
	if !oob {
		s.pendingAudio, s.committedAudio = 0, 0
	}

	// Sent here, not by the streaming goroutine, so they precede any later
	// answer; with CreatedWithFirstOutput, by the streaming goroutine with
	// the first output (announce).
	if !s.cfg.CreatedWithFirstOutput {
		s.announce(r)
	}
	s.rwg.Add(1)
	switch {
	case s.cfg.FailResponses:
		go func() { defer s.rwg.Done(); s.streamFailure(r) }()
	case r.tool != nil:
		go func() { defer s.rwg.Done(); s.streamTool(r) }()
	case r.text:
		go func() { defer s.rwg.Done(); s.streamText(r) }()
	default:
		go s.stream(r)
	}
}

// announce sends r's response.created and rate_limits.updated, once.
func (s *session) announce(r *response) {
	if r.announced.Swap(true) {
		return
	}
	_ = s.send(map[string]any{"type": "response.created", "event_id": newID("event_"),
		"response": s.responseObject(r, "in_progress", nil, []any{}, nil)})
	_ = s.send(map[string]any{"type": "rate_limits.updated", "event_id": newID("event_"),
		"rate_limits": []map[string]any{
			{"name": "requests", "limit": 10000, "remaining": 9999, "reset_seconds": 0.006},
			{"name": "tokens", "limit": 2000000, "remaining": 1995000, "reset_seconds": 0.15},
		}})
}

// audioDelta is a response.output_audio.delta (and, with another type, the transcript delta).
type audioDelta struct {
	Type         string `json:"type"`
	EventID      string `json:"event_id"`
	ResponseID   string `json:"response_id"`
	ItemID       string `json:"item_id"`
	OutputIndex  int    `json:"output_index"`
	ContentIndex int    `json:"content_index"`
	Delta        string `json:"delta"`
}

// stream sends a response's audio and transcript, then response.done.
func (s *session) stream(r *response) {
	defer s.rwg.Done()
	var sp spoken
	if s.srv.sleep(r.ctx, s.srv.firstAudioDelay(s.cfg)) {
		sp = s.speak(r)
	}
	if len(s.cfg.OutputTranscripts) > 0 && s.dialect != dialectXAI && (sp.deltas > 0 || r.ctx.Err() == nil) {
		// The xAI dialect sends its own .done (endOutput).
		_ = s.send(map[string]any{"type": "response.output_audio_transcript.done", "event_id": newID("event_"),
			"response_id": r.id, "item_id": r.itemID, "output_index": 0, "content_index": 0, "transcript": sp.text})
	}

	status := s.endResponse(r)
	content := map[string]any{"type": s.partType("output_audio"), "transcript": sp.text}
	textSent := sp.deltas > 0
	s.endOutput(r, status, content, sp.audioBytes > 0, textSent)
	output := []any{map[string]any{
		"id": r.itemID, "object": "realtime.item", "type": "message", "role": "assistant",
		"status": itemStatus(status), "content": []any{content},
	}}
	s.finishResponseItem(r, output, sp.audioBytes)
	s.sendDone(r, status, output, computeUsage(r.inputAudioTokens, sp.audioBytes, textSent))
}

// spoken is what speak sent of a response: the raw audio bytes, the
// transcript deltas and their text.
type spoken struct {
	audioBytes, deltas int
	text               string
}

// pendingText is a transcript delta waiting for its time
// (Config.OutputTranscriptLag).
type pendingText struct {
	at   time.Time
	text string
}

// speak streams r's audio deltas (AudioDeltaInterval apart) and its
// transcript deltas, each after the audio delta it covers
// (transcriptPlan), OutputTranscriptLag later; it stops when r is
// cancelled, dropping transcript deltas not yet due. The loop ends once
// every audio delta is sent and no transcript delta waits; each pass
// sends a delta or sleeps until the next one is due.
func (s *session) speak(r *response) (sp spoken) {
	var text strings.Builder
	n, lag := s.cfg.AudioDeltas, s.cfg.OutputTranscriptLag
	lead, plan := s.transcriptPlan(r.transcript, n)
	sendText := func(t string) bool {
		if r.ctx.Err() != nil {
			return false
		}
		s.beginOutput(r, "output_audio")
		if s.send(s.deltaEvent("response.output_audio_transcript.delta", r, t)) != nil {
			return false
		}
		sp.deltas++
		text.WriteString(t)
		return true
	}
	defer func() { sp.text = text.String() }() // on every return: what was sent
	for _, t := range lead {                   // no audio to follow: the transcript at once
		if !sendText(t) {
			return sp
		}
	}
	var queue []pendingText
	var nextAudio time.Time
	for i := 0; i < n || len(queue) > 0; {
		if r.ctx.Err() != nil {
			return sp
		}
		now := time.Now()
		if len(queue) > 0 && !queue[0].at.After(now) {
			if !sendText(queue[0].text) {
				return sp
			}
			queue = queue[1:]
			continue
		}
		if i < n && !nextAudio.After(now) {
			s.beginOutput(r, "output_audio")
			if s.send(s.deltaEvent("response.output_audio.delta", r, s.srv.audioDelta)) != nil {
				return sp
			}
			sp.audioBytes += s.cfg.AudioDeltaBytes
			switch t := plan[i]; {
			case t == "":
			case lag > 0:
				queue = append(queue, pendingText{time.Now().Add(lag), t})
			case !sendText(t):
				return sp
			}
			i++
			nextAudio = time.Now().Add(s.cfg.AudioDeltaInterval)
			continue
		}
		var wake time.Time
		switch {
		case i < n && len(queue) > 0:
			wake = nextAudio
			if queue[0].at.Before(wake) {
				wake = queue[0].at
			}
		case i < n:
			wake = nextAudio
		default:
			wake = queue[0].at
		}
		if !s.srv.sleep(r.ctx, time.Until(wake)) {
			return sp
		}
	}
	return sp
}

// transcriptPlan places a response's transcript over its n audio deltas:
// plan[i] is the transcript delta sent after audio delta i ("" for none),
// lead what is sent before any audio (only when there is none). The fixed
// transcript (no Config.OutputTranscripts) is one delta after the last
// audio delta; a scripted one is split into words spread over the audio
// deltas from the first on, several words to a delta when there are more
// words than deltas.
func (s *session) transcriptPlan(text string, n int) (lead, plan []string) {
	var pieces []string
	if len(s.cfg.OutputTranscripts) == 0 {
		pieces = []string{text}
	} else {
		pieces = words(text)
	}
	if n == 0 {
		return pieces, nil
	}
	plan = make([]string, n)
	if len(s.cfg.OutputTranscripts) == 0 {
		plan[n-1] = text
		return nil, plan
	}
	k := len(pieces)
	for i := range plan {
		from, to := (i*k+n-1)/n, ((i+1)*k+n-1)/n // ceilings: the first delta carries the first word
		plan[i] = strings.Join(pieces[from:to], "")
	}
	return nil, plan
}

// words splits text into words, each with the whitespace after it (the
// first also with any before it), so that they join back into text.
func words(text string) []string {
	var out []string
	start := 0
	for i := 1; i < len(text); i++ {
		if isSpace(text[i-1]) && !isSpace(text[i]) {
			out = append(out, text[start:i])
			start = i
		}
	}
	if start < len(text) {
		out = append(out, text[start:])
	}
	return out
}

// isSpace reports ASCII whitespace (never part of a UTF-8 sequence).
func isSpace(b byte) bool { return b == ' ' || b == '\t' || b == '\n' || b == '\r' }

// scripted is texts[n], cycling, or def when texts is empty.
func scripted(texts []string, n int, def string) string {
	if len(texts) == 0 {
		return def
	}
	return texts[n%len(texts)]
}

func (s *session) responseObject(r *response, status string, details, output, usage any) map[string]any {
	voice := "alloy"
	if r.voice != "" {
		voice = r.voice
	}
	return map[string]any{
		"object":            "realtime.response",
		"id":                r.id,
		"status":            status,
		"status_details":    details,
		"output":            output,
		"conversation_id":   r.conversationID(s.convID),
		"output_modalities": r.modalities(),
		"max_output_tokens": "inf",
		"audio": map[string]any{"output": map[string]any{
			"format": map[string]any{"type": "audio/pcm", "rate": 24000},
			"voice":  voice,
		}},
		"usage":    usage,
		"metadata": nil,
	}
}

// usage is response.done's token accounting; see the package doc for the formula.
type usage struct {
	TotalTokens        int                `json:"total_tokens"`
	InputTokens        int                `json:"input_tokens"`
	OutputTokens       int                `json:"output_tokens"`
	InputTokenDetails  inputTokenDetails  `json:"input_token_details"`
	OutputTokenDetails outputTokenDetails `json:"output_token_details"`
}

type inputTokenDetails struct {
	TextTokens          int `json:"text_tokens"`
	AudioTokens         int `json:"audio_tokens"`
	ImageTokens         int `json:"image_tokens"`
	CachedTokens        int `json:"cached_tokens"`
	CachedTokensDetails struct {
		TextTokens  int `json:"text_tokens"`
		AudioTokens int `json:"audio_tokens"`
		ImageTokens int `json:"image_tokens"`
	} `json:"cached_tokens_details"`
}

type outputTokenDetails struct {
	TextTokens  int `json:"text_tokens"`
	AudioTokens int `json:"audio_tokens"`
}

func computeUsage(inputAudioTokens, outputAudioBytes int, textSent bool) usage {
	var u usage
	u.InputTokenDetails.TextTokens = inputTextTokens
	u.InputTokenDetails.AudioTokens = inputAudioTokens
	u.OutputTokenDetails.AudioTokens = outputAudioBytes / bytesPerAudioToken
	if textSent {
		u.OutputTokenDetails.TextTokens = outputTextTokens
	}
	u.InputTokens = u.InputTokenDetails.TextTokens + u.InputTokenDetails.AudioTokens
	u.OutputTokens = u.OutputTokenDetails.TextTokens + u.OutputTokenDetails.AudioTokens
	u.TotalTokens = u.InputTokens + u.OutputTokens
	return u
}

// sendError sends an error event; the connection stays open. param and clientEventID
// are null when empty.
func (s *session) sendError(code, msg, param, clientEventID string) {
	_ = s.send(errorEvent("invalid_request_error", code, msg, param, clientEventID))
}

func errorEvent(typ, code, msg, param, clientEventID string) map[string]any {
	return map[string]any{"type": "error", "event_id": newID("event_"), "error": map[string]any{
		"type": typ, "code": code, "message": msg, "param": nullable(param), "event_id": nullable(clientEventID),
	}}
}

// send writes ev as one text frame, then fires any fault knob that is due.
// In the xAI dialect the event is first reshaped as xAI sends it (xaiShape).
func (s *session) send(ev any) error {
	if s.dialect == dialectXAI {
		ev = xaiShape(ev)
	}
	data, err := encodeEvent(ev)
	if err != nil {
		return fmt.Errorf("encode event: %w", err)
	}
	return s.write(websocket.TextMessage, data)
}

// encodeEvent marshals an event with its "type" first, as OpenAI sends them
// (encoding/json would sort the map's keys). Relays that read only the start
// of a frame to learn its type depend on that order.
func encodeEvent(ev any) ([]byte, error) {
	m, ok := ev.(map[string]any)
	typ, hasType := m["type"]
	if !ok || !hasType {
		return json.Marshal(ev)
	}
	rest := make(map[string]any, len(m)-1)
	for k, v := range m {
		if k != "type" {
			rest[k] = v
		}
	}
	head, err := json.Marshal(map[string]any{"type": typ})
	if err != nil {
		return nil, err
	}
	body, err := json.Marshal(rest)
	if err != nil {
		return nil, err
	}
	if len(body) == 2 { // {}
		return head, nil
	}
	out := append(head[:len(head)-1], ',')
	return append(out, body[1:]...), nil
}

// write sends data as one message of type mt, then fires any fault knob that is due.
func (s *session) write(mt int, data []byte) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if s.stopped {
		return errStopped
	}
	// Counted before writing, so a client that has read a frame always finds it in Stats.
	s.srv.framesOut.Add(1)
	if err := s.ws.WriteMessage(mt, data); err != nil {
		s.srv.framesOut.Add(-1)
		s.stopped = true
		return fmt.Errorf("write event: %w", err)
	}
	s.sent++
	if err := s.releaseHeld(); err != nil {
		s.stopped = true
		return err
	}
	s.injectFault()
	if s.cutDue(data) {
		s.cut()
	}
	return nil
}

// releaseHeld sends the held 101 together with what followed it (see heldConn).
func (s *session) releaseHeld() error {
	if s.held == nil {
		return nil
	}
	return s.held.release()
}

// injectFault fires the fault knob whose frame count was just reached. s.wmu is held.
// A knob that is off (0) never matches, since sent is at least 1 here.
func (s *session) injectFault() {
	switch s.sent {
	case s.cfg.CloseAfterFrames:
		s.writeClose(websocket.CloseInternalServerErr, fmt.Sprintf("mock: closing after %d frames", s.sent))
	case s.cfg.DropAfterFrames:
		s.stopped = true
		_ = s.ws.UnderlyingConn().Close() // FIN without a close frame
	case s.cfg.MalformedAfterFrames:
		s.stopped = true
		// FIN + reserved opcode 0x3, empty payload: a conforming client must fail the
		// connection. Written on the raw stream (inside TLS when serving wss).
		_, _ = s.ws.UnderlyingConn().Write([]byte{0x83, 0x00})
		_ = s.ws.SetReadDeadline(time.Now().Add(closeWait))
	default:
		return
	}
	s.faultOnce.Do(func() { close(s.faulted) })
}

// writeClose sends a close frame unless the session has already stopped sending, and
// bounds the wait for the peer's answer. s.wmu is held.
func (s *session) writeClose(code int, reason string) {
	if s.stopped {
		return
	}
	s.stopped = true
	// FormatCloseMessage turns 1005 (no status) into an empty payload, as the RFC wants.
	_ = s.ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(code, reason), time.Now().Add(closeWait))
	_ = s.ws.SetReadDeadline(time.Now().Add(closeWait))
}

// nullable is nil (JSON null) for "", else the string.
func nullable(v string) any {
	if v == "" {
		return nil
	}
	return v
}

const idAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"

// newID makes an OpenAI-style id: prefix plus 20 random characters (~119 bits).
func newID(prefix string) string {
	b := make([]byte, len(prefix)+20)
	copy(b, prefix)
	for i := len(prefix); i < len(b); i++ {
		b[i] = idAlphabet[rand.IntN(len(idAlphabet))]
	}
	return string(b)
}
