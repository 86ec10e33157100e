package gemini

import (
	"bytes"
	"encoding/json"
	"time"

	"rtgate/frames"
)

// serverMessage is what the translation reads of a Gemini server message.
type serverMessage struct {
	SetupComplete *struct{} `json:"setupComplete"`
	ServerContent *struct {
		ModelTurn *struct {
			Parts []struct {
				Text       string `json:"text"`
				Thought    bool   `json:"thought"` // a thinking model's thought summary: not the answer
				InlineData *struct {
					MimeType string `json:"mimeType"`
					Data     string `json:"data"`
				} `json:"inlineData"`
			} `json:"parts"`
		} `json:"modelTurn"`
		TurnComplete       bool `json:"turnComplete"`
		Interrupted        bool `json:"interrupted"`
		InputTranscription *struct {
			Text string `json:"text"`
		} `json:"inputTranscription"`
		OutputTranscription *struct {
			Text string `json:"text"`
		} `json:"outputTranscription"`
	} `json:"serverContent"`
	ToolCall *struct {
		FunctionCalls []struct {
			ID   string          `json:"id"`
			Name string          `json:"name"`
			Args json.RawMessage `json:"args"`
		} `json:"functionCalls"`
	} `json:"toolCall"`
	UsageMetadata           *geminiUsage `json:"usageMetadata"`
	SessionResumptionUpdate *struct {
		NewHandle string `json:"newHandle"`
		Resumable bool   `json:"resumable"`
	} `json:"sessionResumptionUpdate"`
	GoAway *struct {
		TimeLeft string `json:"timeLeft"`
	} `json:"goAway"`
	ToolCallCancellation *struct {
		IDs []string `json:"ids"`
	} `json:"toolCallCancellation"`
}

// geminiUsage is Gemini's usageMetadata.
type geminiUsage struct {
	Prompt   int              `json:"promptTokenCount"`
	Cached   int              `json:"cachedContentTokenCount"`
	Response int              `json:"responseTokenCount"`
	Total    int              `json:"totalTokenCount"`
	Thoughts int              `json:"thoughtsTokenCount"`
	PromptBy []modalityTokens `json:"promptTokensDetails"`
	RespBy   []modalityTokens `json:"responseTokensDetails"`
	CacheBy  []modalityTokens `json:"cacheTokensDetails"`
	ToolUse  int              `json:"toolUsePromptTokenCount"`
}

type modalityTokens struct {
	Modality string `json:"modality"`
	Count    int    `json:"tokenCount"`
}

// usage is OpenAI's response.usage.
type usage struct {
	Total  int `json:"total_tokens"`
	Input  int `json:"input_tokens"`
	Output int `json:"output_tokens"`
	InDet  struct {
		Text          int `json:"text_tokens"`
		Audio         int `json:"audio_tokens"`
		Image         int `json:"image_tokens"`
		Cached        int `json:"cached_tokens"`
		CachedDetails struct {
			Text  int `json:"text_tokens"`
			Audio int `json:"audio_tokens"`
			Image int `json:"image_tokens"`
		} `json:"cached_tokens_details"`
	} `json:"input_token_details"`
	OutDet struct {
		Text  int `json:"text_tokens"`
		Audio int `json:"audio_tokens"`
	} `json:"output_token_details"`
}

// add folds Gemini's usage in, per modality. Thinking tokens are output
// tokens (billed as output text).
func (u *usage) add(g *geminiUsage, audio bool) {
	u.Input += g.Prompt + g.ToolUse
	u.Output += g.Response + g.Thoughts
	u.Total = u.Input + u.Output
	u.InDet.Cached += g.Cached
	for _, m := range g.PromptBy {
		switch m.Modality {
		case "AUDIO":
			u.InDet.Audio += m.Count
		case "IMAGE", "VIDEO":
			u.InDet.Image += m.Count
		default:
			u.InDet.Text += m.Count
		}
	}
	u.InDet.Text += g.ToolUse
	for _, m := range g.CacheBy {
		switch m.Modality {
		case "AUDIO":
			u.InDet.CachedDetails.Audio += m.Count
		case "IMAGE", "VIDEO":
			u.InDet.CachedDetails.Image += m.Count
		default:
			u.InDet.CachedDetails.Text += m.Count
		}
	}
	for _, m := range g.RespBy {
		if m.Modality == "AUDIO" {
			u.OutDet.Audio += m.Count
		} else {
			u.OutDet.Text += m.Count
		}
	}
	u.OutDet.Text += g.Thoughts
	if len(g.RespBy) == 0 { // no breakdown: the session's output modality
		if audio {
			u.OutDet.Audio += g.Response
		} else {
			u.OutDet.Text += g.Response
		}
	}
}

// audioPart is the start of a Gemini message that is one audio part of
// the model's turn and nothing else, most of a session's messages; the two
// orders its fields come in are taken by audioData without decoding.
var (
	audioPart   = []byte(`{"serverContent":{"modelTurn":{"parts":[{"inlineData":{`)
	mimeFirst   = []byte(`"mimeType":"audio/pcm;rate=24000","data":"`)
	mimeLast    = []byte(`","mimeType":"audio/pcm;rate=24000"}}]}}}`)
	dataFirst   = []byte(`"data":"`)
	partClosing = []byte(`"}}]}}}`)
)

// audioData returns the base64 audio of a message that is a single 24 kHz
// PCM audio part and nothing else, as Gemini encodes one (or with its two
// fields the other way round); ok is false for anything else, which is
// decoded in full. base64 needs no JSON escapes, so the string is the
// audio as it is.
func audioData(p []byte) (data []byte, ok bool) {
	rest, found := bytes.CutPrefix(p, audioPart)
	if !found {
		return nil, false
	}
	var tail []byte
	if r, found := bytes.CutPrefix(rest, mimeFirst); found {
		rest, tail = r, partClosing
	} else if r, found := bytes.CutPrefix(rest, dataFirst); found {
		rest, tail = r, mimeLast
	} else {
		return nil, false
	}
	end := bytes.IndexByte(rest, '"')
	if end < 0 || !bytes.Equal(rest[end:], tail) || bytes.IndexByte(rest[:end], '\\') >= 0 {
		return nil, false
	}
	return rest[:end], true
}

// audioDelta relays one audio chunk of the model's turn as
// response.output_audio.delta, built in place (no allocation once the
// session's scratch buffer has grown).
func (s *Session) audioDelta(data []byte, out *frames.Output) {
	s.startResponse(out)
	s.openMessage(out)
	s.audioParts++
	if s.cancelled {
		return
	}
	b := append(s.scratch[:0], `{"type":"response.output_audio.delta","event_id":"`...)
	b = s.appendID(b, "event_")
	b = append(b, `","response_id":"`...)
	b = append(b, s.resp...)
	b = append(b, `","item_id":"`...)
	b = append(b, s.item...)
	b = append(b, `","output_index":0,"content_index":0,"delta":"`...)
	b = append(b, data...)
	b = append(b, `"}`...)
	out.Text(b)
	s.scratch = b[:0]
}

// startsOutput reports whether the message carries a turn's output (what
// only a new turn can carry once the last one completed), as opposed to a
// turn's end, usage or housekeeping.
func (m *serverMessage) startsOutput() bool {
	sc := m.ServerContent
	return m.ToolCall != nil || sc != nil && (sc.ModelTurn != nil || sc.OutputTranscription != nil || sc.InputTranscription != nil)
}

// newTurn settles what a turn that ended left open, before output that can
// only be a new turn's: a response.done still waiting for its usage goes
// without it. (An interrupted response stays open, relaying nothing, until
// Gemini's turnComplete, which follows interrupted: output that arrives
// between them is the interrupted turn's.)
func (s *Session) newTurn(out *frames.Output) {
	if s.doneOwed != nil {
		s.flushDone(nil, out)
	}
}

// fromGemini translates one Gemini server message. Callers hold s.mu.
func (s *Session) fromGemini(p []byte, out *frames.Output) {
	if data, ok := audioData(p); ok {
		s.newTurn(out)
		s.audioDelta(data, out)
		return
	}
	var m serverMessage
	if err := json.Unmarshal(p, &m); err != nil {
		out.Text(s.errorEvent("upstream_invalid_message", "Gemini sent a message the gateway cannot read", "", ""))
		return
	}
	if m.startsOutput() {
		s.newTurn(out)
	}
	if m.SetupComplete != nil && s.updatedOwed {
		s.updatedOwed = false
		out.Text(s.sessionEvent("session.updated"))
	}
	if r := m.SessionResumptionUpdate; r != nil {
		s.noteHandle(r.NewHandle, r.Resumable)
	}
	if m.GoAway != nil {
		s.goAway(m.GoAway.TimeLeft)
	}
	if c := m.ToolCallCancellation; c != nil {
		for _, id := range c.IDs {
			delete(s.unanswered, id) // Gemini no longer waits for it
		}
	}
	if sc := m.ServerContent; sc != nil {
		if t := sc.InputTranscription; t != nil && t.Text != "" {
			s.inputTranscript(t.Text, out)
		}
		if mt := sc.ModelTurn; mt != nil {
			for _, part := range mt.Parts {
				switch {
				case part.InlineData != nil && part.InlineData.Data != "":
					s.audioDelta([]byte(part.InlineData.Data), out)
				case part.Thought:
					// Not said to the user, and OpenAI has no place for it.
				case part.Text != "":
					s.startResponse(out)
					s.openMessage(out)
					s.text = append(s.text, part.Text...)
					if !s.cancelled {
						out.Text(event("response.output_text.delta", map[string]any{"event_id": s.newID("event_"),
							"response_id": s.resp, "item_id": s.item, "output_index": 0, "content_index": 0, "delta": part.Text}))
					}
				}
			}
		}
		if t := sc.OutputTranscription; t != nil && t.Text != "" {
			s.startResponse(out)
			s.openMessage(out)
			s.transcript = append(s.transcript, t.Text...)
			if !s.cancelled {
				out.Text(event("response.output_audio_transcript.delta", map[string]any{"event_id": s.newID("event_"),
					"response_id": s.resp, "item_id": s.item, "output_index": 0, "content_index": 0, "delta": t.Text}))
			}
		}
		if sc.Interrupted {
			// The user spoke over the answer: it is cancelled at once
			// (nothing more of it is relayed) and ends with Gemini's
			// turnComplete, which follows, carrying the turn's usage.
			out.Text(event("input_audio_buffer.speech_started", map[string]any{"event_id": s.newID("event_"),
				"audio_start_ms": 0, "item_id": s.userTurn()}))
			if s.resp != "" {
				s.cancelled, s.cancelReason = true, "turn_detected"
			}
		}
		if sc.TurnComplete && s.resp != "" {
			status, reason := "completed", ""
			if s.cancelled {
				status, reason = "cancelled", s.cancelReason
			}
			s.endResponse(status, reason, m.UsageMetadata, out)
			m.UsageMetadata = nil
		}
	}
	if tc := m.ToolCall; tc != nil && len(tc.FunctionCalls) > 0 {
		s.toolCall(tc.FunctionCalls, out)
		s.endResponse("completed", "", m.UsageMetadata, out)
		m.UsageMetadata = nil
	}
	if g := m.UsageMetadata; g != nil {
		if s.doneOwed != nil {
			s.flushDone(g, out)
		} else {
			// The response in progress, or (between turns, with no
			// response to carry it) the next one.
			s.addUsage(g)
		}
	}
}

// addUsage adds Gemini's usage report g to the usage of the response it
// belongs to (s.usage, carried by the next response.done).
func (s *Session) addUsage(g *geminiUsage) {
	if s.usage == nil {
		s.usage = &usage{}
	}
	s.usage.add(g, s.audioOut())
}

// inputTranscript relays the user's speech as transcribed: the user's item
// appears with the first words.
func (s *Session) inputTranscript(text string, out *frames.Output) {
	s.moved()
	if len(s.userText) == 0 {
		item := s.userTurn()
		out.Text(event("conversation.item.added", map[string]any{"event_id": s.newID("event_"), "previous_item_id": s.prevItem(),
			"item": map[string]any{"id": item, "object": "realtime.item", "type": "message", "status": "completed", "role": "user",
				"content": []any{map[string]any{"type": "input_audio", "transcript": nil}}}}))
		s.lastItemID = item
	}
	s.userText = append(s.userText, text...)
	out.Text(event("conversation.item.input_audio_transcription.delta", map[string]any{"event_id": s.newID("event_"),
		"item_id": s.userItem, "content_index": 0, "delta": text}))
}

// prevItem is the newest item's id as previous_item_id (null for none).
func (s *Session) prevItem() any {
	if s.lastItemID == "" {
		return nil
	}
	return s.lastItemID
}

// closeUserTurn completes the user's turn in progress: its transcript is
// final once the model answers.
func (s *Session) closeUserTurn(out *frames.Output) {
	if s.userItem != "" && len(s.userText) > 0 {
		s.keep(s.userItem, marshal(map[string]any{"id": s.userItem, "object": "realtime.item", "type": "message", "status": "completed",
			"role": "user", "content": []any{map[string]any{"type": "input_audio", "transcript": string(s.userText)}}}))
		out.Text(event("conversation.item.input_audio_transcription.completed", map[string]any{"event_id": s.newID("event_"),
			"item_id": s.userItem, "content_index": 0, "transcript": string(s.userText),
			"usage": map[string]any{"type": "tokens", "total_tokens": 0, "input_tokens": 0, "output_tokens": 0}}))
	}
	s.userItem, s.userText = "", s.userText[:0]
}

// startResponse opens a response for Gemini's model turn at its first
// output, with OpenAI's opening events.
func (s *Session) startResponse(out *frames.Output) {
	if s.resp != "" {
		return
	}
	s.closeUserTurn(out)
	// Begun on its own after a commit or a tool response, before the
	// client's response.create for it came: that one, when it comes, is
	// this response's, not a second one.
	s.unasked = !s.createHeld && !s.autoAnswer.IsZero() && time.Since(s.autoAnswer) <= AutoAnswerWait
	s.autoAnswer, s.createHeld = time.Time{}, false
	s.resp, s.item, s.cancelled = s.newID("resp_"), s.newID("item_"), false
	s.moved()
	s.transcript, s.text, s.audioParts, s.outputs = s.transcript[:0], s.text[:0], 0, nil
	out.Text(event("response.created", map[string]any{"event_id": s.newID("event_"),
		"response": s.response(s.resp, "in_progress", "", nil, nil)}))
}

// openMessage announces the response's message item and its content part
// before its first output is relayed: a response that only calls tools has
// no message.
func (s *Session) openMessage(out *frames.Output) {
	if s.msgOpen || s.cancelled {
		return
	}
	s.msgOpen = true
	s.lastItemID = s.item
	out.Text(event("response.output_item.added", map[string]any{"event_id": s.newID("event_"),
		"response_id": s.resp, "output_index": 0, "item": s.message("in_progress")}))
	empty := map[string]any{"type": "output_audio", "transcript": ""}
	if !s.audioOut() {
		empty = map[string]any{"type": "output_text", "text": ""}
	}
	out.Text(event("response.content_part.added", map[string]any{"event_id": s.newID("event_"),
		"response_id": s.resp, "item_id": s.item, "output_index": 0, "content_index": 0, "part": empty}))
}

// audioOut says whether the session answers in audio.
func (s *Session) audioOut() bool {
	return !(len(s.cfg.Modalities) == 1 && s.cfg.Modalities[0] == "text")
}

// part is the response message's content part as it stands.
func (s *Session) part() map[string]any {
	if s.audioOut() {
		return map[string]any{"type": "output_audio", "transcript": string(s.transcript)}
	}
	return map[string]any{"type": "output_text", "text": string(s.text)}
}

// message is the response's message item.
func (s *Session) message(status string) map[string]any {
	content := []any{}
	if status != "in_progress" {
		content = append(content, s.part())
	}
	return map[string]any{"id": s.item, "object": "realtime.item", "type": "message", "status": status,
		"role": "assistant", "content": content}
}

// response is the response object of response.created and response.done.
func (s *Session) response(id, status, reason string, output []any, u *usage) map[string]any {
	if output == nil {
		output = []any{}
	}
	r := map[string]any{"object": "realtime.response", "id": id, "status": status, "status_details": nil,
		"output": output, "conversation_id": "conv_" + s.idp, "output_modalities": s.cfg.Modalities,
		"max_output_tokens": "inf", "metadata": nil, "usage": nil,
		"audio": map[string]any{"output": map[string]any{"format": audioFormat{"audio/pcm", 24000}, "voice": s.cfg.Voice}}}
	switch status {
	case "cancelled":
		r["status_details"] = map[string]any{"type": "cancelled", "reason": reason}
	case "failed": // the connection was lost (Lost)
		r["status_details"] = map[string]any{"type": "failed", "error": map[string]any{"type": "server_error", "code": "upstream_lost",
			"message": "The connection to Gemini Live was lost during this response; the session continues on a new connection."}}
	}
	if u != nil {
		r["usage"] = u
	}
	return r
}

// endResponse closes the response in progress with OpenAI's closing events
// and response.done. Its usage is g (Gemini's, in the same message) or what
// the turn reported; when neither came yet, response.done waits for a
// usageMetadata in the next message (flushDone).
func (s *Session) endResponse(status, reason string, g *geminiUsage, out *frames.Output) {
	var output []json.RawMessage
	if s.msgOpen || s.audioParts > 0 || len(s.transcript) > 0 || len(s.text) > 0 {
		if s.msgOpen { // what was opened is closed, cancelled or not
			if s.audioOut() {
				out.Text(event("response.output_audio.done", map[string]any{"event_id": s.newID("event_"),
					"response_id": s.resp, "item_id": s.item, "output_index": 0, "content_index": 0}))
				out.Text(event("response.output_audio_transcript.done", map[string]any{"event_id": s.newID("event_"),
					"response_id": s.resp, "item_id": s.item, "output_index": 0, "content_index": 0, "transcript": string(s.transcript)}))
			} else {
				out.Text(event("response.output_text.done", map[string]any{"event_id": s.newID("event_"),
					"response_id": s.resp, "item_id": s.item, "output_index": 0, "content_index": 0, "text": string(s.text)}))
			}
			out.Text(event("response.content_part.done", map[string]any{"event_id": s.newID("event_"),
				"response_id": s.resp, "item_id": s.item, "output_index": 0, "content_index": 0, "part": s.part()}))
		}
		itemStatus := "completed"
		if status != "completed" {
			itemStatus = "incomplete"
		}
		msg := marshal(s.message(itemStatus))
		s.keep(s.item, msg)
		if s.msgOpen { // what was opened is closed, cancelled or not
			out.Text(event("response.output_item.done", map[string]any{"event_id": s.newID("event_"),
				"response_id": s.resp, "output_index": 0, "item": json.RawMessage(msg)}))
		}
		output = append(output, msg)
	}
	output = append(output, s.outputs...)
	pd := &pendingDone{resp: s.resp, status: status, reason: reason, output: output}
	if g != nil {
		s.addUsage(g)
	}
	s.resp, s.cancelled, s.msgOpen, s.cancelReason = "", false, false, ""
	if s.usage != nil {
		s.doneOwed = pd
		s.flushDone(nil, out)
		return
	}
	s.doneOwed = pd // its usage comes in the next message, if at all
}

// flushDone sends the owed response.done, with g added to the turn's usage.
func (s *Session) flushDone(g *geminiUsage, out *frames.Output) {
	pd := s.doneOwed
	if pd == nil {
		return
	}
	s.doneOwed = nil
	if g != nil {
		s.addUsage(g)
	}
	u := s.usage
	if u == nil {
		u = &usage{}
	}
	s.usage = nil
	outputs := make([]any, len(pd.output))
	for i, o := range pd.output {
		outputs[i] = o
	}
	body := s.response(pd.resp, pd.status, pd.reason, outputs, u)
	out.Text(event("response.done", map[string]any{"event_id": s.newID("event_"), "response": body}))
}

// toolCall relays Gemini's function calls as function_call items of the
// response in progress.
func (s *Session) toolCall(calls []struct {
	ID   string          `json:"id"`
	Name string          `json:"name"`
	Args json.RawMessage `json:"args"`
}, out *frames.Output) {
	s.startResponse(out)
	for i, c := range calls {
		callID := c.ID
		if callID == "" {
			callID = s.newID("call_")
		}
		s.calls[callID] = c.Name
		s.unanswered[callID] = struct{}{}
		args := "{}"
		if len(c.Args) > 0 && string(c.Args) != "null" {
			args = string(c.Args)
		}
		id := s.newID("item_")
		index := i
		if s.msgOpen {
			index++ // after the message item
		}
		item := map[string]any{"id": id, "object": "realtime.item", "type": "function_call", "status": "in_progress",
			"call_id": callID, "name": c.Name, "arguments": ""}
		out.Text(event("response.output_item.added", map[string]any{"event_id": s.newID("event_"),
			"response_id": s.resp, "output_index": index, "item": item}))
		out.Text(event("response.function_call_arguments.delta", map[string]any{"event_id": s.newID("event_"),
			"response_id": s.resp, "item_id": id, "output_index": index, "call_id": callID, "delta": args}))
		out.Text(event("response.function_call_arguments.done", map[string]any{"event_id": s.newID("event_"),
			"response_id": s.resp, "item_id": id, "output_index": index, "call_id": callID, "name": c.Name, "arguments": args}))
		item["status"], item["arguments"] = "completed", args
		done := marshal(item)
		s.keep(id, done)
		out.Text(event("response.output_item.done", map[string]any{"event_id": s.newID("event_"),
			"response_id": s.resp, "output_index": index, "item": json.RawMessage(done)}))
		s.outputs = append(s.outputs, done)
		s.lastItemID = id
	}
}
