package guarded

import (
	"encoding/json"

	"rtgate/server/protocol"
)

// The events a guarded session reads and writes. Only the fields a check
// needs are decoded; what goes on unchanged is forwarded as it came.

// event is the part of a Realtime event the guards read.
type event struct {
	Type       string `json:"type"`
	EventID    string `json:"event_id"`
	ItemID     string `json:"item_id"`
	ResponseID string `json:"response_id"`
	Transcript string `json:"transcript"`
	Arguments  string `json:"arguments"`
	Item       *item  `json:"item"`
	Response   *struct {
		ID string `json:"id"`
	} `json:"response"`
}

// item is a conversation item as the guards read it.
type item struct {
	ID      string `json:"id"`
	Type    string `json:"type"`
	Role    string `json:"role"`
	Name    string `json:"name"`
	CallID  string `json:"call_id"`
	Content []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	} `json:"content"`
}

// userText is the text of a user message item ("" if it is not one).
func (it *item) userText() string {
	if it == nil || it.Role != "user" {
		return ""
	}
	var t string
	for _, c := range it.Content {
		if c.Type == "input_text" && c.Text != "" {
			if t != "" {
				t += "\n"
			}
			t += c.Text
		}
	}
	return t
}

// ownEvent is one of the gateway's own client events: its id carries the
// gateway's mark, so an upstream error for it never reaches the client
// (package session's gatewayevents.go).
func ownEvent(typ string, fields map[string]any) []byte {
	_, p := ownEventID(typ, fields)
	return p
}

// ownEventID is ownEvent, and the id it got (to know the upstream's answer
// to it).
func ownEventID(typ string, fields map[string]any) (id string, p []byte) {
	id = protocol.NewOwnEventID()
	ev := map[string]any{"type": typ, "event_id": id}
	for k, v := range fields {
		ev[k] = v
	}
	p, _ = marshalTypeFirst(ev)
	return id, p
}

// violationError is the client's guardrail_violation error event (LiteLLM's
// type), naming the guardrail and, when the client sent it, the event.
func violationError(guardrailName, reason, clientEventID string) []byte {
	msg := "Blocked by guardrail " + guardrailName
	if reason != "" {
		msg += ": " + reason
	}
	e := map[string]any{"type": "guardrail_violation", "code": "guardrail_violation", "message": msg,
		"param": nil, "event_id": nil}
	if clientEventID != "" {
		e["event_id"] = clientEventID
	}
	b, _ := marshalTypeFirst(map[string]any{"type": "error", "event_id": protocol.NewEventID(), "error": e})
	return b
}

// spokenWarning is what the model is asked to say after a blocked turn:
// a system item, then a response.create (LiteLLM's sequence).
func spokenWarning(message string) [][]byte {
	return [][]byte{
		ownEvent("conversation.item.create", map[string]any{"item": map[string]any{
			"type": "message", "role": "system",
			"content": []map[string]any{{"type": "input_text",
				"text": "The user's last turn was blocked by a content policy and removed. Say exactly this to the user, and nothing else: " + message}},
		}}),
		ownEvent("response.create", nil),
	}
}

// marshalTypeFirst encodes an event rebuilt from its decoded fields with
// "type" first, as the protocol writes it: the relay reads an event's type
// from its first 256 bytes (eventtype.Of), and encoding/json sorts keys, so
// a response.done would put its response before its type and go unread by
// the accounting.
func marshalTypeFirst[V any](fields map[string]V) ([]byte, error) {
	typ, ok := fields["type"]
	if !ok {
		return json.Marshal(fields)
	}
	rest := make(map[string]V, len(fields)-1)
	for k, v := range fields {
		if k != "type" {
			rest[k] = v
		}
	}
	t, err := json.Marshal(typ)
	if err != nil {
		return nil, err
	}
	b, err := json.Marshal(rest)
	if err != nil {
		return nil, err
	}
	out := append([]byte(`{"type":`), t...)
	if len(b) > 2 { // not {}
		out = append(out, ',')
	}
	return append(out, b[1:]...), nil
}
