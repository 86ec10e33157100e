package gemini

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
	"time"

	"github.com/gobwas/ws"

	"rtgate/frames"
)

// clientEvent is the part of a client event the translation reads.
type clientEvent struct {
	Type    string          `json:"type"`
	EventID string          `json:"event_id"`
	Session json.RawMessage `json:"session"`
	Item    *struct {
		ID      string `json:"id"`
		Type    string `json:"type"`
		Role    string `json:"role"`
		CallID  string `json:"call_id"`
		Output  string `json:"output"`
		Content []struct {
			Type string `json:"type"`
			Text string `json:"text"`
		} `json:"content"`
	} `json:"item"`
	ItemID       string `json:"item_id"`
	ContentIndex int    `json:"content_index"`
	AudioEndMS   int    `json:"audio_end_ms"`
}

// appendPrefix starts an input_audio_buffer.append as OpenAI's SDKs write
// it; such an event takes the fast path (appendAudio).
var appendPrefix = []byte(`{"type":"input_audio_buffer.append"`)

// fromClient translates one client event. Callers hold s.mu.
func (s *Session) fromClient(op ws.OpCode, p []byte, out *frames.Output) {
	if op != ws.OpText {
		out.Reply(s.errorEvent("invalid_value", "binary frames are not Realtime API events", "", ""))
		return
	}
	if bytes.HasPrefix(p, appendPrefix) {
		if audio, ok := appendAudio(p); ok {
			s.ensureSetup(out)
			s.appendAudio(audio, out)
			return
		}
	}
	var ev clientEvent
	if err := json.Unmarshal(p, &ev); err != nil || ev.Type == "" {
		out.Reply(s.errorEvent("invalid_value", "the event is not a JSON object with a type", "", ""))
		return
	}
	if ev.Type == "session.update" {
		s.sessionUpdate(ev, out)
		return
	}
	s.ensureSetup(out)
	switch ev.Type {
	case "input_audio_buffer.append":
		var a struct {
			Audio string `json:"audio"`
		}
		_ = json.Unmarshal(p, &a)
		s.appendAudio([]byte(a.Audio), out)
	case "input_audio_buffer.commit":
		s.commit(ev.EventID, out)
	case "input_audio_buffer.clear":
		out.Reply(event("input_audio_buffer.cleared", map[string]any{"event_id": s.newID("event_")}))
	case "conversation.item.create":
		s.itemCreate(ev, out)
	case "response.create":
		if s.resp != "" && !s.cancelled && s.unasked {
			s.unasked = false // Gemini answered the commit before the client asked: this is that response
			return
		}
		if s.resp != "" && !s.cancelled {
			// As OpenAI answers: one response at a time.
			out.Reply(s.errorEvent("conversation_already_has_active_response",
				"Conversation already has an active response in progress: "+s.resp+". Wait until the response is finished before creating a new one.", "", ev.EventID))
			return
		}
		switch {
		case (s.resp == "" || s.cancelled) && time.Since(s.autoAnswer) > AutoAnswerWait:
			// (a cancelled response still open waits for Gemini's turn to
			// end; a new turn interrupts it)
			out.Text([]byte(`{"clientContent":{"turnComplete":true}}`))
			s.autoAnswer = time.Now() // the answer's turn is on its way
			s.moved()
		case s.resp == "":
			// Gemini should be answering on its own: held, and asked
			// again if it has not begun by AutoAnswerWait (Recheck).
			s.createHeld = true
			if s.OnHeld != nil {
				s.OnHeld()
			}
		}
	case "response.cancel":
		s.cancel(ev.EventID, out)
	case "conversation.item.truncate":
		// Gemini's context cannot be edited: what the caller did not hear
		// stays in the model's context. OpenAI's acknowledgement keeps the
		// client's state machine going (the agents SDK truncates on every
		// interruption).
		out.Reply(event("conversation.item.truncated", map[string]any{"event_id": s.newID("event_"),
			"item_id": ev.ItemID, "content_index": ev.ContentIndex, "audio_end_ms": ev.AudioEndMS}))
	case "conversation.item.delete":
		delete(s.kept, ev.ItemID)
		out.Reply(event("conversation.item.deleted", map[string]any{"event_id": s.newID("event_"), "item_id": ev.ItemID}))
	case "conversation.item.retrieve":
		// Answered from the items the gateway showed the client.
		item, ok := s.kept[ev.ItemID]
		if !ok {
			out.Reply(s.errorEvent("item_retrieve_invalid_item_id",
				"Error retrieving item: the item with id '"+ev.ItemID+"' does not exist.", "", ev.EventID))
			return
		}
		out.Reply(event("conversation.item.retrieved", map[string]any{"event_id": s.newID("event_"), "item": json.RawMessage(item)}))
	case "output_audio_buffer.clear":
		out.Reply(event("output_audio_buffer.cleared", map[string]any{"event_id": s.newID("event_"), "response_id": s.resp}))
	default:
		out.Reply(s.errorEvent("invalid_value", "Invalid value: '"+ev.Type+"'. Unsupported client event for Gemini Live.", "type", ev.EventID))
	}
}

// appendAudio finds the audio of an input_audio_buffer.append without
// decoding the event: base64 needs no JSON escapes, so the string between
// the quotes is the audio, unless it holds a backslash (then the caller
// decodes). The base64 is carried to Gemini unchanged.
func appendAudio(p []byte) ([]byte, bool) {
	const key = `"audio":"`
	i := bytes.Index(p, []byte(key))
	if i < 0 {
		return nil, false
	}
	rest := p[i+len(key):]
	j := bytes.IndexByte(rest, '"')
	if j < 0 || bytes.IndexByte(rest[:j], '\\') >= 0 {
		return nil, false
	}
	return rest[:j], true
}

// appendAudio sends the audio to Gemini, labelled with its rate.
func (s *Session) appendAudio(audio []byte, out *frames.Output) {
	if s.manualTurns && !s.activityOpen {
		out.Text([]byte(`{"realtimeInput":{"activityStart":{}}}`))
		s.activityOpen = true
		s.moved() // the user's turn began
	}
	b := append(s.scratch[:0], `{"realtimeInput":{"audio":{"mimeType":"audio/pcm;rate=`...)
	b = strconv.AppendInt(b, int64(s.cfg.InputFormat.Rate), 10)
	b = append(b, `","data":"`...)
	b = append(b, audio...)
	b = append(b, `"}}}`...)
	out.Text(b)
	s.scratch = b[:0]
}

// ensureSetup sends the setup with the configuration so far, before the
// first event that is not a session.update: Gemini takes nothing before it.
func (s *Session) ensureSetup(out *frames.Output) {
	if s.setupSent {
		return
	}
	out.Text(s.cfg.setup(s.model, ""))
	s.setupSent = true
}

// sessionUpdate answers a session.update: the first becomes the setup, a
// later one is acknowledged when it changes nothing Gemini fixed at setup
// and refused, with the fields named, when it does.
func (s *Session) sessionUpdate(ev clientEvent, out *frames.Output) {
	var u sessionUpdate
	if len(ev.Session) == 0 || json.Unmarshal(ev.Session, &u) != nil {
		out.Reply(s.errorEvent("missing_required_parameter", "Missing required parameter: 'session'.", "session", ev.EventID))
		return
	}
	next, bad := s.cfg.apply(u)
	if len(bad) > 0 {
		out.Reply(s.errorEvent("invalid_value", bad[0][1], bad[0][0], ev.EventID))
		return
	}
	if !s.setupSent {
		s.setConfig(next)
		out.Text(s.cfg.setup(s.model, ""))
		s.setupSent, s.updatedOwed = true, true
		return
	}
	if changed := s.cfg.changed(next); len(changed) > 0 {
		out.Reply(s.errorEvent("unsupported_mid_session_update",
			"Gemini Live fixes the session at its start: "+strings.Join(changed, ", ")+
				" cannot change once the session has begun (reconnect with the new configuration)",
			"session."+changed[0], ev.EventID))
		return
	}
	out.Reply(s.sessionEvent("session.updated"))
}

// commit ends the user's audio turn: Gemini answers on its own.
func (s *Session) commit(eventID string, out *frames.Output) {
	if !s.manualTurns {
		out.Text([]byte(`{"realtimeInput":{"audioStreamEnd":true}}`))
	} else {
		if !s.activityOpen {
			out.Text([]byte(`{"realtimeInput":{"activityStart":{}}}`))
		}
		out.Text([]byte(`{"realtimeInput":{"activityEnd":{}}}`))
		s.activityOpen = false
	}
	s.autoAnswer = time.Now()
	s.moved()
	item := s.userTurn()
	out.Reply(event("input_audio_buffer.committed", map[string]any{"event_id": s.newID("event_"),
		"item_id": item, "previous_item_id": nil}))
}

// userTurn is the id of the user's turn in progress, made when first
// needed.
func (s *Session) userTurn() string {
	if s.userItem == "" {
		s.userItem = s.newID("item_")
	}
	return s.userItem
}

// itemCreate adds a client's item: user text goes into Gemini's context
// (answered at response.create), a function call's output answers Gemini's
// tool call (Gemini then answers on its own).
func (s *Session) itemCreate(ev clientEvent, out *frames.Output) {
	it := ev.Item
	if it == nil {
		out.Reply(s.errorEvent("missing_required_parameter", "Missing required parameter: 'item'.", "item", ev.EventID))
		return
	}
	id := it.ID
	if id == "" {
		id = s.newID("item_")
	}
	var item map[string]any
	switch {
	case it.Type == "function_call_output":
		name := s.calls[it.CallID]
		out.Text(marshal(map[string]any{"toolResponse": map[string]any{"functionResponses": []any{
			map[string]any{"id": it.CallID, "name": name, "response": map[string]any{"output": it.Output}}}}}))
		s.autoAnswer = time.Now()
		delete(s.unanswered, it.CallID)
		item = map[string]any{"id": id, "object": "realtime.item", "type": "function_call_output", "status": "completed",
			"call_id": it.CallID, "output": it.Output}
	case it.Type == "message" && (it.Role == "user" || it.Role == "system"):
		var parts []any
		content := []any{}
		for _, c := range it.Content {
			if c.Type == "input_text" || c.Type == "text" {
				parts = append(parts, map[string]any{"text": c.Text})
				content = append(content, map[string]any{"type": "input_text", "text": c.Text})
			}
		}
		if len(parts) == 0 {
			out.Reply(s.errorEvent("invalid_value", "Gemini Live takes text items only: input_audio and input_image items are not relayed to it", "item.content", ev.EventID))
			return
		}
		out.Text(marshal(map[string]any{"clientContent": map[string]any{
			"turns": []any{map[string]any{"role": "user", "parts": parts}}, "turnComplete": false}}))
		item = map[string]any{"id": id, "object": "realtime.item", "type": "message", "status": "completed",
			"role": it.Role, "content": content}
	default:
		out.Reply(s.errorEvent("invalid_value", "Gemini Live takes user text and function_call_output items only", "item.type", ev.EventID))
		return
	}
	s.moved()
	prev := s.prevItem()
	s.lastItemID = id
	s.keep(id, marshal(item))
	out.Reply(event("conversation.item.added", map[string]any{"event_id": s.newID("event_"), "previous_item_id": prev, "item": item}))
	out.Reply(event("conversation.item.done", map[string]any{"event_id": s.newID("event_"), "previous_item_id": prev, "item": item}))
}

// cancel stops relaying the response in progress: Gemini cannot stop a
// turn, so its rest is dropped and response.done (cancelled) follows when
// Gemini ends the turn, carrying the turn's usage.
func (s *Session) cancel(eventID string, out *frames.Output) {
	if s.resp == "" || s.cancelled {
		out.Reply(s.errorEvent("response_cancel_not_active", "Cancellation failed: no active response found.", "", eventID))
		return
	}
	s.cancelled, s.cancelReason = true, "client_cancelled"
}
