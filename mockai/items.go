package mockai

import (
	"encoding/json"
	"fmt"
	"slices"
	"sync"
)

// The conversation's items as the server holds them, for
// conversation.item.retrieve, .truncate and .delete. @openai/agents-realtime
// retrieves the item after every input_audio_transcription.completed and
// every conversation.item.truncated, and truncates on every interruption,
// so a relay in front of it needs an upstream that answers all three.
//
// Errors are OpenAI's as clients meet them (invalid_request_error, param
// null): item_retrieve_invalid_item_id "Error retrieving item: the item
// with id '<id>' does not exist." and item_delete_invalid_item_id "Error
// deleting item: ..." (speaches' realtime tests, which hold them to an
// OpenAI endpoint; pipecat's OpenAI service keys on the retrieve code),
// item_truncate_invalid_item_id (pipecat, LiveKit and others treat it as
// the benign race of a late truncate) and "Audio content of Xms is already
// shorter than Yms" for an audio_end_ms past the item's audio (code
// invalid_value is mockai's guess). What mockai refuses beyond that (a
// truncate of anything but an assistant message's audio, a content_index
// other than 0) is mockai's own wording.

// maxItems bounds the items a session keeps: the newest 64; an older one
// is answered as one that does not exist.
const maxItems = 64

// itemLog is a session's items, oldest first. The handler goroutine adds,
// truncates and deletes; a response's streaming goroutine fills in its
// output item when it ends, hence the mutex.
type itemLog struct {
	mu    sync.Mutex
	items []*keptItem
}

// keptItem is one item of the conversation.
type keptItem struct {
	id string
	// item is the item as the server shows it; the log's own copy, never
	// sent itself (retrieve sends a copy), so no event's map is shared.
	item map[string]any
	// audioMs is the length of an assistant message's audio once its
	// response has ended, -1 before: a truncate past it is refused.
	audioMs int64
	// truncated: the client truncated it, so its transcript is gone
	// (OpenAI deletes the text the user has not heard) and stays gone
	// when the response fills in its output afterwards.
	truncated bool
}

// cloneItem deep-copies an item (JSON values only) by a round trip: the
// items are small and this is not the audio path.
func cloneItem(item map[string]any) map[string]any {
	data, err := json.Marshal(item)
	if err != nil {
		return map[string]any{"id": item["id"]}
	}
	var out map[string]any
	if json.Unmarshal(data, &out) != nil {
		return map[string]any{"id": item["id"]}
	}
	return out
}

// add keeps a copy of item, replacing one with the same id, and drops the
// oldest beyond maxItems.
func (l *itemLog) add(item map[string]any, audioMs int64) {
	id, _ := item["id"].(string)
	if id == "" {
		return
	}
	k := &keptItem{id: id, item: cloneItem(item), audioMs: audioMs}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.items = slices.DeleteFunc(l.items, func(e *keptItem) bool { return e.id == id })
	if len(l.items) >= maxItems {
		l.items = slices.Delete(l.items, 0, len(l.items)-maxItems+1)
	}
	l.items = append(l.items, k)
}

// find is the item with id, nil if none. l.mu is held.
func (l *itemLog) find(id string) *keptItem {
	for _, k := range l.items {
		if k.id == id {
			return k
		}
	}
	return nil
}

// get returns a copy of the item with id.
func (l *itemLog) get(id string) (map[string]any, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if k := l.find(id); k != nil {
		return cloneItem(k.item), true
	}
	return nil, false
}

// finish replaces a response's placeholder item with its final form and
// the length of its audio. An item the client deleted meanwhile stays
// deleted; one it truncated keeps no transcript.
func (l *itemLog) finish(item map[string]any, audioMs int64) {
	id, _ := item["id"].(string)
	l.mu.Lock()
	defer l.mu.Unlock()
	k := l.find(id)
	if k == nil {
		return
	}
	k.item, k.audioMs = cloneItem(item), audioMs
	if k.truncated {
		dropTranscripts(k.item)
	}
}

// setTranscript fills in the transcript of a user audio item once it is
// transcribed.
func (l *itemLog) setTranscript(id, text string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if k := l.find(id); k != nil {
		for _, c := range contentParts(k.item) {
			if c["type"] == "input_audio" {
				c["transcript"] = text
			}
		}
	}
}

// remove deletes the item with id and returns the id of the newest item
// left ("" if none); false if there was no such item.
func (l *itemLog) remove(id string) (newest string, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := len(l.items)
	l.items = slices.DeleteFunc(l.items, func(e *keptItem) bool { return e.id == id })
	if len(l.items) == n {
		return "", false
	}
	if len(l.items) > 0 {
		newest = l.items[len(l.items)-1].id
	}
	return newest, true
}

// contentParts are an item's content parts that are objects.
func contentParts(item map[string]any) []map[string]any {
	raw, _ := item["content"].([]any)
	parts := make([]map[string]any, 0, len(raw))
	for _, p := range raw {
		if m, ok := p.(map[string]any); ok {
			parts = append(parts, m)
		}
	}
	return parts
}

// dropTranscripts empties the transcripts of an item's content parts.
func dropTranscripts(item map[string]any) {
	for _, c := range contentParts(item) {
		if _, ok := c["transcript"]; ok {
			c["transcript"] = ""
		}
	}
}

// isAudioPart reports whether a content part is output audio (GA's
// output_audio, the xAI dialect's audio).
func isAudioPart(p map[string]any) bool {
	return p["type"] == "output_audio" || p["type"] == "audio"
}

// itemEvent holds the fields of the item events that mockai reads.
type itemEvent struct {
	ItemID       string `json:"item_id"`
	ContentIndex *int64 `json:"content_index"`
	AudioEndMs   *int64 `json:"audio_end_ms"`
}

// handleItemEvent answers conversation.item.retrieve, .truncate and .delete
// (ev.Type says which; data is the whole event).
func (s *session) handleItemEvent(ev clientEvent, data []byte) {
	var ie itemEvent
	if err := json.Unmarshal(data, &ie); err != nil {
		s.sendError("invalid_value", "Invalid event: "+err.Error(), "", ev.EventID)
		return
	}
	if ie.ItemID == "" {
		s.sendError("missing_required_parameter", "Missing required parameter: 'item_id'.", "item_id", ev.EventID)
		return
	}
	switch ev.Type {
	case "conversation.item.retrieve":
		item, ok := s.items.get(ie.ItemID)
		if !ok {
			s.sendError("item_retrieve_invalid_item_id",
				fmt.Sprintf("Error retrieving item: the item with id '%s' does not exist.", ie.ItemID), "", ev.EventID)
			return
		}
		_ = s.send(map[string]any{"type": "conversation.item.retrieved", "event_id": newID("event_"), "item": item})
	case "conversation.item.delete":
		newest, ok := s.items.remove(ie.ItemID)
		if !ok {
			s.sendError("item_delete_invalid_item_id",
				fmt.Sprintf("Error deleting item: the item with id '%s' does not exist.", ie.ItemID), "", ev.EventID)
			return
		}
		if s.lastItemID == ie.ItemID { // the next item's previous_item_id
			s.lastItemID = newest
		}
		_ = s.send(map[string]any{"type": "conversation.item.deleted", "event_id": newID("event_"), "item_id": ie.ItemID})
	case "conversation.item.truncate":
		s.truncateItem(ev, ie)
	}
}

// truncateItem answers conversation.item.truncate: the assistant message's
// audio is cut at audio_end_ms and its transcript deleted, as OpenAI does
// with text the user has not heard.
func (s *session) truncateItem(ev clientEvent, ie itemEvent) {
	switch {
	case ie.ContentIndex == nil:
		s.sendError("missing_required_parameter", "Missing required parameter: 'content_index'.", "content_index", ev.EventID)
		return
	case ie.AudioEndMs == nil:
		s.sendError("missing_required_parameter", "Missing required parameter: 'audio_end_ms'.", "audio_end_ms", ev.EventID)
		return
	case *ie.AudioEndMs < 0:
		s.sendError("invalid_value", "Invalid value for 'audio_end_ms': it must be 0 or more.", "audio_end_ms", ev.EventID)
		return
	}
	l := &s.items
	l.mu.Lock()
	k := l.find(ie.ItemID)
	var code, msg, param string
	switch {
	case k == nil:
		code, msg = "item_truncate_invalid_item_id",
			fmt.Sprintf("Error truncating item: the item with id '%s' does not exist.", ie.ItemID)
	case k.item["type"] != "message" || k.item["role"] != "assistant":
		code, msg, param = "invalid_value", "Only assistant messages can be truncated.", "item_id"
	case *ie.ContentIndex != 0:
		code, msg, param = "invalid_value",
			fmt.Sprintf("Invalid value for 'content_index': item '%s' has no content part %d.", ie.ItemID, *ie.ContentIndex), "content_index"
	case k.audioMs >= 0 && (len(contentParts(k.item)) == 0 || !isAudioPart(contentParts(k.item)[0])):
		code, msg, param = "invalid_value", "Only audio content can be truncated.", "content_index"
	case k.audioMs >= 0 && *ie.AudioEndMs > k.audioMs:
		code, msg, param = "invalid_value",
			fmt.Sprintf("Audio content of %dms is already shorter than %dms", k.audioMs, *ie.AudioEndMs), "audio_end_ms"
	default:
		// While the response runs (audioMs -1) any end is taken: the
		// audio is still growing.
		k.truncated = true
		dropTranscripts(k.item)
	}
	l.mu.Unlock()
	if code != "" {
		s.sendError(code, msg, param, ev.EventID)
		return
	}
	_ = s.send(map[string]any{"type": "conversation.item.truncated", "event_id": newID("event_"),
		"item_id": ie.ItemID, "content_index": *ie.ContentIndex, "audio_end_ms": *ie.AudioEndMs})
}

// keepResponseItem keeps the item a response is producing, as it stands
// when the response starts (in_progress, no content yet), so that a
// truncate or retrieve during the response finds it. Out-of-band
// responses add nothing to the conversation.
func (s *session) keepResponseItem(r *response) {
	if r.outOfBand {
		return
	}
	item := map[string]any{"id": r.itemID, "object": "realtime.item", "type": "message", "role": "assistant",
		"status": "in_progress", "content": []any{}}
	if r.tool != nil {
		item = map[string]any{"id": r.itemID, "object": "realtime.item", "type": "function_call", "status": "in_progress",
			"name": r.tool.name, "call_id": r.tool.callID, "arguments": ""}
	}
	s.items.add(item, -1)
}

// finishResponseItem records a response's output item as response.done
// shows it, with audioBytes of output audio; called before response.done
// is sent, so a client that retrieves on response.done finds it.
func (s *session) finishResponseItem(r *response, output []any, audioBytes int) {
	if r.outOfBand {
		return
	}
	for _, o := range output {
		if item, ok := o.(map[string]any); ok {
			s.items.finish(item, audioMs(int64(audioBytes)))
		}
	}
}
