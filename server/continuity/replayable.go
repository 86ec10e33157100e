package continuity

// The replayable form of an item: what conversation.item.create accepts of
// an item the upstream showed (replayable), and a message of the gateway's
// own making (messageBody).

import "encoding/json"

// wireItem is a conversation item as the upstream shows it.
type wireItem struct {
	ID        string        `json:"id"`
	Type      string        `json:"type"`
	Role      string        `json:"role"`
	Content   []wireContent `json:"content"`
	CallID    string        `json:"call_id"`
	Name      string        `json:"name"`
	Arguments string        `json:"arguments"`
	Output    string        `json:"output"`
}

type wireContent struct {
	Type       string  `json:"type"`
	Text       *string `json:"text"`
	Transcript *string `json:"transcript"`
}

// replayable turns an upstream item into the item a conversation.item.create
// replays (see the package doc). pending: a user's audio whose transcript
// has not come yet (kept in order, its body later).
func replayable(raw json.RawMessage) (id string, body []byte, pending, ok bool) {
	var it wireItem
	if json.Unmarshal(raw, &it) != nil || it.ID == "" {
		return "", nil, false, false
	}
	switch it.Type {
	case "function_call":
		body, _ = json.Marshal(struct {
			ID        string `json:"id"`
			Type      string `json:"type"`
			CallID    string `json:"call_id"`
			Name      string `json:"name"`
			Arguments string `json:"arguments"`
		}{it.ID, it.Type, it.CallID, it.Name, it.Arguments})
		return it.ID, body, false, true
	case "function_call_output":
		body, _ = json.Marshal(struct {
			ID     string `json:"id"`
			Type   string `json:"type"`
			CallID string `json:"call_id"`
			Output string `json:"output"`
		}{it.ID, it.Type, it.CallID, it.Output})
		return it.ID, body, false, true
	case "message":
	default:
		return "", nil, false, false
	}
	var parts []map[string]string
	audio := false
	for _, c := range it.Content {
		text := ""
		switch {
		case c.Text != nil:
			text = *c.Text
		case c.Transcript != nil:
			text = *c.Transcript
		}
		switch c.Type {
		case "input_audio":
			audio = true
			if text == "" {
				continue
			}
			parts = append(parts, map[string]string{"type": "input_text", "text": text})
		case "input_text":
			parts = append(parts, map[string]string{"type": "input_text", "text": text})
		case "output_audio", "output_text", "audio", "text":
			if it.Role != "assistant" {
				continue
			}
			parts = append(parts, map[string]string{"type": "output_text", "text": text})
		}
	}
	switch it.Role {
	case "user", "system", "assistant":
	default:
		return "", nil, false, false
	}
	if len(parts) == 0 {
		if audio && it.Role == "user" {
			return it.ID, nil, true, true // its transcript may follow
		}
		return "", nil, false, false
	}
	return it.ID, messageBody(it.ID, it.Role, parts), false, true
}

// messageBody is a message item with the given content parts.
func messageBody(id, role string, parts []map[string]string) []byte {
	body, _ := json.Marshal(struct {
		ID      string              `json:"id"`
		Type    string              `json:"type"`
		Role    string              `json:"role"`
		Content []map[string]string `json:"content"`
	}{id, "message", role, parts})
	return body
}
