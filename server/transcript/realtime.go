package transcript

import (
	"bytes"
	"encoding/json"
	"slices"
	"time"

	"rtgate/internal/jsonscan"
	"rtgate/server/eventtype"
)

// What the Recorder reads of a Realtime session (../../shared/protocol.md;
// beta names, which old clients and tools still meet, in brackets):
//
//	upstream
//	input_audio_buffer.committed                       the user's audio item: its transcript's place
//	conversation.item.input_audio_transcription.delta  the user's transcript so far (kept if it never completes)
//	  .completed                                       the user's transcript
//	  .failed                                          the transcript ends partial, status failed
//	response.output_audio_transcript.delta (.audio_)   the assistant's transcript so far
//	  .done                                            the assistant's transcript
//	response.output_text.delta (response.text.delta)   the assistant's text so far
//	  .done                                            the assistant's text
//	response.function_call_arguments.done              a tool call (GA's names the function)
//	response.output_item.done                          a tool call, or an answer, not yet recorded
//	response.done                                      ends what the response left open (partial
//	                                                   unless completed); cancelled: an interruption
//	conversation.item.truncated                        as the client's truncate (WebRTC calls)
//
//	client
//	conversation.item.create                           a message's text, a tool call's output
//	conversation.item.truncate                         the assistant's entry truncated at audio_end_ms
//
// Everything else (audio both ways, above all) is never parsed.

// WantsUpstream reports whether the Recorder reads an upstream Realtime
// event of type typ (eventtype.Of's). It allocates nothing.
func WantsUpstream(typ []byte) bool {
	switch string(typ) {
	case "input_audio_buffer.committed",
		"conversation.item.input_audio_transcription.delta",
		eventtype.TranscriptionComplete,
		"conversation.item.input_audio_transcription.failed",
		"response.output_audio_transcript.delta", "response.output_audio_transcript.done",
		"response.audio_transcript.delta", "response.audio_transcript.done",
		"response.output_text.delta", "response.output_text.done",
		"response.text.delta", "response.text.done",
		"response.function_call_arguments.done",
		"response.output_item.done",
		eventtype.ResponseDone,
		"conversation.item.truncated":
		return true
	}
	return false
}

// WantsClient reports whether the Recorder reads a client Realtime event of
// type typ. It allocates nothing.
func WantsClient(typ []byte) bool {
	switch string(typ) {
	case "conversation.item.create", "conversation.item.truncate":
		return true
	}
	return false
}

// event holds the fields of the events the Recorder reads, Realtime's and
// GPT-Live's (whose response.event wraps a Responses event in Event).
type event struct {
	Type         string          `json:"type"`
	ItemID       string          `json:"item_id"`
	ResponseID   string          `json:"response_id"`
	CallID       string          `json:"call_id"`
	Name         string          `json:"name"`
	Arguments    string          `json:"arguments"`
	Transcript   string          `json:"transcript"`
	Text         string          `json:"text"`
	Delta        string          `json:"delta"`
	Content      json.RawMessage `json:"content"`
	AudioEndMs   *int            `json:"audio_end_ms"`
	Item         *item           `json:"item"`
	DelegationID string          `json:"delegation_id"`
	Response     *struct {
		ID            string         `json:"id"`
		Status        string         `json:"status"`
		StatusDetails *statusDetails `json:"status_details"`
	} `json:"response"`
	Delegation *struct {
		ID         string `json:"id"`
		Target     string `json:"target"`
		ResponseID string `json:"response_id"`
	} `json:"delegation"`
	Event   *event `json:"event"`
	Session *struct {
		Input []item `json:"input"`
	} `json:"session"`
}

// statusDetails says why a Realtime response ended as it did.
type statusDetails struct {
	Reason string `json:"reason"`
}

// item is a conversation item (Realtime's) or a Responses input or output
// item (GPT-Live's): content and output may be a string or a list of parts.
type item struct {
	ID        string          `json:"id"`
	Type      string          `json:"type"`
	Role      string          `json:"role"`
	CallID    string          `json:"call_id"`
	Name      string          `json:"name"`
	Arguments string          `json:"arguments"`
	Content   json.RawMessage `json:"content"`
	Output    json.RawMessage `json:"output"`
}

// part is a content part; audio parts' audio is not decoded.
type part struct {
	Type       string `json:"type"`
	Text       string `json:"text"`
	Transcript string `json:"transcript"`
}

// Upstream reads an upstream Realtime event (its whole payload) chosen by
// WantsUpstream. p is not retained. An event that does not parse changes
// nothing; its error says why.
func (r *Recorder) Upstream(p []byte) error {
	typ, ok := eventtype.Of(p)
	if !ok {
		return ErrNoType
	}
	switch string(typ) {
	case "conversation.item.input_audio_transcription.delta":
		return r.delta(typ, p, KindTranscript, "user")
	case "response.output_audio_transcript.delta", "response.audio_transcript.delta":
		return r.delta(typ, p, KindTranscript, "assistant")
	case "response.output_text.delta", "response.text.delta":
		return r.delta(typ, p, KindText, "assistant")
	}
	var ev event
	if err := json.Unmarshal(p, &ev); err != nil {
		return errEvent(string(typ), err)
	}
	t := r.now()
	switch string(typ) {
	case "input_audio_buffer.committed":
		if ev.ItemID == "" {
			return nil
		}
		r.mu.Lock()
		if r.byItem[ev.ItemID] == nil && !r.wasCut(ev.ItemID) {
			r.open(t, Entry{Kind: KindTranscript, Role: "user", ItemID: ev.ItemID})
		}
		r.mu.Unlock()
	case eventtype.TranscriptionComplete:
		r.whole(t, Entry{Kind: KindTranscript, Role: "user", ItemID: ev.ItemID, Text: ev.Transcript})
	case "conversation.item.input_audio_transcription.failed":
		r.mu.Lock()
		if x := r.byItem[ev.ItemID]; x != nil && x.open {
			e, n, _ := r.asFinished(x)
			e.Status = "failed"
			r.finish(x, e, n)
		} else if x == nil && ev.ItemID != "" && !r.wasCut(ev.ItemID) {
			r.add(t, Entry{Kind: KindTranscript, Role: "user", ItemID: ev.ItemID, Partial: true, Status: "failed"}, 0)
		}
		r.mu.Unlock()
	case "response.output_audio_transcript.done", "response.audio_transcript.done":
		r.whole(t, Entry{Kind: KindTranscript, Role: "assistant", ItemID: ev.ItemID, ResponseID: ev.ResponseID, Text: ev.Transcript})
	case "response.output_text.done", "response.text.done":
		r.whole(t, Entry{Kind: KindText, Role: "assistant", ItemID: ev.ItemID, ResponseID: ev.ResponseID, Text: ev.Text})
	case "response.function_call_arguments.done":
		r.whole(t, Entry{Kind: KindToolCall, Role: "assistant", ItemID: ev.ItemID, ResponseID: ev.ResponseID,
			CallID: ev.CallID, Name: ev.Name, Arguments: ev.Arguments})
	case "response.output_item.done":
		if ev.Item != nil {
			if e, ok := outputEntry(ev.Item); ok {
				e.ResponseID = ev.ResponseID
				r.whole(t, e)
			}
		}
	case eventtype.ResponseDone:
		if ev.Response != nil {
			r.responseDone(t, ev.Response.ID, ev.Response.Status, ev.Response.StatusDetails)
		}
	case "conversation.item.truncated":
		r.truncated(t, ev.ItemID, ev.AudioEndMs)
	}
	return nil
}

// Client reads a client Realtime event (its unmasked payload) chosen by
// WantsClient. p is not retained.
func (r *Recorder) Client(p []byte) error {
	typ, ok := eventtype.Of(p)
	if !ok {
		return ErrNoType
	}
	var ev event
	if err := json.Unmarshal(p, &ev); err != nil {
		return errEvent(string(typ), err)
	}
	t := r.now()
	switch string(typ) {
	case "conversation.item.create":
		if ev.Item != nil {
			if e, ok := inputEntry(ev.Item); ok {
				r.whole(t, e)
			}
		}
	case "conversation.item.truncate":
		r.truncated(t, ev.ItemID, ev.AudioEndMs)
	}
	return nil
}

// Guardrail records a guardrail's action at t (KindGuardrail), redacted
// like any entry: what a guardrail stopped is kept as the rules allow.
func (r *Recorder) Guardrail(t time.Time, e Entry) {
	e.Kind = KindGuardrail
	n := r.redactEntry(&e)
	r.mu.Lock()
	r.add(t, e, n) // never completes the item it names (complete would)
	r.mu.Unlock()
}

// whole records an entry complete as it is: its text, arguments and output
// redacted first, outside the lock.
func (r *Recorder) whole(t time.Time, e Entry) {
	n := r.redactEntry(&e)
	r.mu.Lock()
	r.complete(t, e, n)
	r.mu.Unlock()
}

// redactEntry redacts e's text, arguments and output in place.
func (r *Recorder) redactEntry(e *Entry) int {
	var a, b, c int
	e.Text, a = redact(r.rules, e.Text)
	e.Arguments, b = redact(r.rules, e.Arguments)
	e.Output, c = redact(r.rules, e.Output)
	return a + b + c
}

// truncated marks a truncation (audio_end_ms absent counts as 0).
func (r *Recorder) truncated(t time.Time, itemID string, audioEndMs *int) {
	ms := 0
	if audioEndMs != nil {
		ms = *audioEndMs
	}
	r.mu.Lock()
	r.truncate(t, itemID, ms)
	r.mu.Unlock()
}

// responseDone ends a Realtime response: what it left open is finished,
// partial unless the response completed, and a cancelled one is an
// interruption.
func (r *Recorder) responseDone(t time.Time, id, status string, details *statusDetails) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if id != "" {
		for _, x := range slices.Clone(r.opens) {
			if x.ResponseID == id {
				x.whole = status == "completed"
				r.finishOpen(x)
			}
		}
	}
	if status != "cancelled" {
		return
	}
	e := Entry{Kind: KindInterruption, ResponseID: id, Status: status}
	if details != nil {
		e.Reason = details.Reason
	}
	r.add(t, e, 0)
}

// delta reads a transcript or text delta of an item: its text joins the
// item's open entry (opened now if it is the first). The common case is read
// by hand, allocating nothing once the entry is open, and reads the clock
// and the response id only for an item's first delta; anything unusual
// (escaped ids) goes through encoding/json.
func (r *Recorder) delta(typ, p []byte, kind Kind, role string) error {
	id, ok1 := jsonscan.String(p, `"item_id"`)
	raw, ok2 := jsonscan.String(p, `"delta"`)
	var resp []byte
	if !ok1 || !ok2 || bytes.IndexByte(id, '\\') >= 0 {
		var ev event
		if err := json.Unmarshal(p, &ev); err != nil {
			return errEvent(string(typ), err)
		}
		id, resp = []byte(ev.ItemID), []byte(ev.ResponseID)
		if len(resp) == 0 {
			resp = nil
		}
		raw = appendEscaped(nil, ev.Delta)
	}
	if len(id) == 0 || len(raw) == 0 {
		return nil
	}
	r.mu.Lock()
	if x := r.byItem[string(id)]; x != nil {
		r.growRaw(x, raw)
		r.mu.Unlock()
		return nil
	}
	r.mu.Unlock()
	// The item's first delta: read the clock (never under the lock), then
	// open its entry unless the other path did meanwhile.
	if resp == nil {
		if v, ok := jsonscan.String(p, `"response_id"`); ok && bytes.IndexByte(v, '\\') < 0 {
			resp = v // the input transcription's deltas have none
		}
	}
	t := r.now()
	r.mu.Lock()
	defer r.mu.Unlock()
	x := r.byItem[string(id)]
	if x == nil && !r.wasCut(string(id)) {
		x = r.open(t, Entry{Kind: kind, Role: role, ItemID: string(id), ResponseID: string(resp)})
	}
	if x != nil {
		r.growRaw(x, raw)
	}
	return nil
}

// growRaw adds a raw (escaped) JSON string's text to x's deltas.
func (r *Recorder) growRaw(x *entry, raw []byte) {
	if !x.open {
		return
	}
	n := len(x.pending)
	text, ok := jsonscan.AppendUnescaped(x.pending, raw)
	if !ok {
		return
	}
	// grow accounts for the text: undo the append, then let it decide.
	x.pending = text[:n]
	r.grow(x, text[n:])
}

// appendEscaped appends s as the inside of a JSON string (for growRaw).
func appendEscaped(dst []byte, s string) []byte {
	b, _ := json.Marshal(s)
	return append(dst, b[1:len(b)-1]...)
}

// inputEntry is the entry of an item a client created: a message's text, a
// tool call, or a tool call's output; ok is false for anything else (audio
// without a transcript, images).
func inputEntry(it *item) (Entry, bool) {
	switch it.Type {
	case "function_call_output":
		return Entry{Kind: KindToolOutput, Role: "tool", ItemID: it.ID, CallID: it.CallID, Output: contentText(it.Output)}, true
	case "function_call":
		return Entry{Kind: KindToolCall, Role: "assistant", ItemID: it.ID, CallID: it.CallID, Name: it.Name, Arguments: it.Arguments}, true
	case "message", "":
		if it.Role == "" {
			return Entry{}, false
		}
		text := contentText(it.Content)
		if text == "" {
			return Entry{}, false
		}
		return Entry{Kind: KindText, Role: it.Role, ItemID: it.ID, Text: text}, true
	}
	return Entry{}, false
}

// outputEntry is the entry of an item the model output: a tool call, or an
// assistant message's transcript or text.
func outputEntry(it *item) (Entry, bool) {
	switch it.Type {
	case "function_call":
		return Entry{Kind: KindToolCall, Role: "assistant", ItemID: it.ID, CallID: it.CallID, Name: it.Name, Arguments: it.Arguments}, true
	case "message":
		var parts []part
		if json.Unmarshal(it.Content, &parts) != nil {
			return Entry{}, false
		}
		for _, pt := range parts {
			switch pt.Type {
			case "output_audio", "audio":
				if pt.Transcript != "" {
					return Entry{Kind: KindTranscript, Role: orElse(it.Role, "assistant"), ItemID: it.ID, Text: pt.Transcript}, true
				}
			case "output_text", "text":
				if pt.Text != "" {
					return Entry{Kind: KindText, Role: orElse(it.Role, "assistant"), ItemID: it.ID, Text: pt.Text}, true
				}
			}
		}
	}
	return Entry{}, false
}

// contentText is a content or output value's text: the string itself, or
// its parts' text (a spoken part's transcript) joined by newlines.
func contentText(raw json.RawMessage) string {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return ""
	}
	if raw[0] == '"' {
		var s string
		_ = json.Unmarshal(raw, &s)
		return s
	}
	var parts []part
	if json.Unmarshal(raw, &parts) != nil {
		return ""
	}
	var b []byte
	for _, pt := range parts {
		text := pt.Text
		if text == "" {
			text = pt.Transcript
		}
		if text == "" {
			continue
		}
		if len(b) > 0 {
			b = append(b, '\n')
		}
		b = append(b, text...)
	}
	return string(b)
}
