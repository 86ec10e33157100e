package protocol

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"net/url"
	"strings"

	"github.com/gobwas/ws"

	"rtgate/frames"
	"rtgate/server/eventtype"
)

// Realtime is OpenAI's Realtime API (/v1/realtime), the GA interface.
type Realtime struct{}

var _ Protocol = Realtime{}

// Name implements Protocol.
func (Realtime) Name() string { return "realtime" }

// Model implements Protocol: the model query ("" for a transcription
// session that names none: the gateway picks its group).
func (Realtime) Model(q url.Values) (string, bool) { return q.Get("model"), false }

// Warm implements Protocol: a session.created.
func (Realtime) Warm(payload []byte) bool {
	t, ok := eventtype.Of(payload)
	return ok && string(t) == "session.created"
}

// Prime implements Protocol: a session.update with config, whose model
// (the URL's, the deployment's name for it) and read-only fields are
// dropped.
func (Realtime) Prime(config []byte) []byte {
	var session map[string]json.RawMessage
	_ = json.Unmarshal(config, &session)
	for _, k := range []string{"model", "object", "id", "expires_at"} {
		delete(session, k)
	}
	body, _ := json.Marshal(map[string]any{"type": "session.update", "event_id": NewEventID(), "session": session})
	return frames.AppendFrame(nil, ws.OpText, body, true)
}

// errorEvent is the shape of a Realtime error event.
type errorEvent struct {
	Type    string `json:"type"`
	EventID string `json:"event_id"`
	Error   struct {
		Type    string  `json:"type"`
		Code    string  `json:"code"`
		Message string  `json:"message"`
		Param   *string `json:"param"`
		EventID *string `json:"event_id"`
		Status  int     `json:"status,omitempty"`
	} `json:"error"`
}

// Refusal implements Protocol: an error event of type server_error (an
// unmasked frame, from the gateway as the server).
func (Realtime) Refusal(code, message string, status int) []byte {
	ev := errorEvent{Type: "error", EventID: NewEventID()}
	ev.Error.Type = "server_error"
	ev.Error.Code = code
	ev.Error.Message = message
	ev.Error.Status = status
	body, _ := json.Marshal(ev)
	return frames.AppendFrame(nil, ws.OpText, body, false)
}

// UsageEvent implements Protocol: response.done, and a transcription's
// completed event.
func (Realtime) UsageEvent(typ []byte) bool {
	return string(typ) == eventtype.ResponseDone || string(typ) == eventtype.TranscriptionComplete
}

// End implements Protocol: a close frame is enough when no response is in
// flight; one that is gets a response.cancel first (Cancel, usage.Flights),
// whose answer carries its usage.
func (Realtime) End() []byte { return nil }

// Cancel is the client event (a masked frame) that asks the upstream to
// cancel response id: the gateway's farewell to a response in flight
// (usage.Flights), answered by its response.done, status cancelled, with
// the usage of what was produced.
func (Realtime) Cancel(id string) []byte {
	body, _ := json.Marshal(map[string]string{"type": "response.cancel", "event_id": NewOwnEventID(), "response_id": id})
	return frames.AppendFrame(nil, ws.OpText, body, true)
}

// Turn implements Protocol. The beta names of the deltas are read too:
// they cost nothing, and an upstream still speaking them is measured.
func (Realtime) Turn(typ []byte) TurnMark {
	switch string(typ) {
	case "response.output_audio.delta", "response.output_text.delta", "response.audio.delta", "response.text.delta":
		return FirstOutput
	case "response.created":
		return TurnStart
	case "input_audio_buffer.speech_stopped":
		return SpeechEnd
	case "input_audio_buffer.speech_started":
		return SpeechStart
	case eventtype.ResponseDone:
		return TurnEnd
	case "session.created", "session.updated":
		return TurnConfig
	case "error":
		return TurnError
	}
	return NotTurn
}

// Rebuild implements Protocol: Prime's session.update, then one
// conversation.item.create per item.
func (r Realtime) Rebuild(config []byte, items [][]byte) [][]byte {
	out := [][]byte{r.Prime(config)}
	for _, it := range items {
		body, _ := json.Marshal(map[string]any{"type": "conversation.item.create", "event_id": NewEventID(),
			"item": json.RawMessage(it)})
		out = append(out, frames.AppendFrame(nil, ws.OpText, body, true))
	}
	return out
}

// Event ids the gateway makes are marked GatewayEventPrefix, so that nobody
// mistakes them for the upstream's. Those of the events the gateway sends
// for its own sake (a response.cancel at a session's end or a rollover, a
// session.update it imposes) are marked OwnEventPrefix besides: their
// answers are the gateway's, an error included (AnswersGateway). The others
// stand in for a client's own event (a client secret's configuration), or
// are answered to a primer that consumes every reply (a resume's replay).
const (
	GatewayEventPrefix = "event_gw_"
	OwnEventPrefix     = GatewayEventPrefix + "own_"
)

// NewEventID makes the id of an event the gateway itself sends, marked
// GatewayEventPrefix.
func NewEventID() string { return GatewayEventPrefix + randomHex() }

// NewOwnEventID makes the id of an event the gateway sends for its own
// sake, marked OwnEventPrefix: the upstream's error answering it never
// reaches the client (AnswersGateway).
func NewOwnEventID() string { return OwnEventPrefix + randomHex() }

func randomHex() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// AnswersGateway reports whether p, the payload of an upstream error event
// (the caller read its type), answers an event the gateway sent for its
// own sake: its error.event_id carries OwnEventPrefix. code is the
// error's code.
func (Realtime) AnswersGateway(p []byte) (code string, ok bool) {
	if !bytes.Contains(p, []byte(OwnEventPrefix)) {
		return "", false // the common case: no parse
	}
	var ev errorEvent
	if json.Unmarshal(p, &ev) != nil || ev.Type != "error" || ev.Error.EventID == nil ||
		!strings.HasPrefix(*ev.Error.EventID, OwnEventPrefix) {
		return "", false
	}
	return ev.Error.Code, true
}
