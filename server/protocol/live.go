package protocol

import (
	"encoding/json"
	"errors"
	"net/url"

	"github.com/gobwas/ws"

	"rtgate/frames"
	"rtgate/server/eventtype"
)

// Live is OpenAI's GPT-Live protocol (/v1/live/sessions): the model is in
// the client's first event, session.start; usage is session time.
type Live struct{}

var _ Protocol = Live{}

// Name implements Protocol.
func (Live) Name() string { return "live" }

// Model implements Protocol: never in the URL; session.start names it
// (Start reads it).
func (Live) Model(url.Values) (string, bool) { return "", true }

// Warm implements Protocol: a Live socket is warm once upgraded, before any
// event (no frame of the upstream's makes it so).
func (Live) Warm([]byte) bool { return false }

// Prime implements Protocol: session.start with config as its session.
func (Live) Prime(config []byte) []byte {
	body, _ := json.Marshal(map[string]any{"type": "session.start", "session": json.RawMessage(config)})
	return frames.AppendFrame(nil, ws.OpText, body, true)
}

// Refusal implements Protocol: the same error event as Realtime's.
func (Live) Refusal(code, message string, status int) []byte {
	return Realtime{}.Refusal(code, message, status)
}

// UsageEvent implements Protocol: the events usage.LiveMeter reads.
func (Live) UsageEvent(typ []byte) bool {
	switch string(typ) {
	case eventtype.LiveUsage, eventtype.LiveClosed, eventtype.LiveResponse:
		return true
	}
	return false
}

// End implements Protocol: session.close, answered by session.closed with
// the final usage.
func (Live) End() []byte {
	return frames.AppendFrame(nil, ws.OpText, []byte(`{"type":"session.close"}`), true)
}

// Turn implements Protocol: the output's first audio. (A Live turn has no
// committed input nor a done event: its transcript deltas carry
// start_ms/end_ms instead.)
func (Live) Turn(typ []byte) TurnMark {
	switch string(typ) {
	case "session.output_audio.delta":
		return FirstOutput
	case "session.input_transcript.delta":
		return InputSpeech
	case "session.started":
		return TurnConfig
	}
	return NotTurn
}

// Rebuild implements Protocol: one session.start with the configuration and
// the kept items as its input (Restart, with the configuration's model).
func (Live) Rebuild(config []byte, items [][]byte) [][]byte {
	st := Restart(config, items)
	return [][]byte{frames.AppendFrame(nil, ws.OpText, st.body(st.session), true)}
}

// Restart is the session.start that carries a session onto a fresh upstream
// session (session continuity): the kept configuration with the kept
// messages (InitialItems) as its input, an event id of the gateway's. For
// gives it a deployment's model.
func Restart(config []byte, items [][]byte) Start {
	st := Start{event: map[string]json.RawMessage{}}
	_ = json.Unmarshal(config, &st.session)
	if st.session == nil {
		st.session = map[string]json.RawMessage{}
	}
	_ = json.Unmarshal(st.session["model"], &st.Model)
	input := make([]json.RawMessage, len(items))
	for i, it := range items {
		input[i] = it
	}
	st.session["input"], _ = json.Marshal(input)
	st.event["type"] = json.RawMessage(`"session.start"`)
	st.EventID = NewEventID()
	st.event["event_id"], _ = json.Marshal(st.EventID)
	return st
}

// Kept is what session continuity keeps of a client's session.start: its
// session without input (the configuration), and input's messages.
func (st Start) Kept() (config []byte, input []json.RawMessage) {
	session := make(map[string]json.RawMessage, len(st.session))
	for k, v := range st.session {
		session[k] = v
	}
	_ = json.Unmarshal(session["input"], &input)
	delete(session, "input")
	config, _ = json.Marshal(session)
	return config, input
}

// BackendModel is the Responses model session.start delegates to
// (session.delegation.responses.model), "" without Responses delegation.
func (st Start) BackendModel() string { return delegatedModel(st.session["delegation"]) }

// BodyBackendModel is BackendModel for an HTTP request's body whose
// session is a configuration (a WebRTC create, a SIP accept, a fork): ""
// when it does not delegate to a Responses model, or is not JSON.
func BodyBackendModel(body []byte) string {
	var b struct {
		Session struct {
			Delegation json.RawMessage `json:"delegation"`
		} `json:"session"`
	}
	if json.Unmarshal(body, &b) != nil {
		return ""
	}
	return delegatedModel(b.Session.Delegation)
}

// delegatedModel is a delegation object's Responses model.
func delegatedModel(delegation json.RawMessage) string {
	var d struct {
		Type      string `json:"type"`
		Responses struct {
			Model string `json:"model"`
		} `json:"responses"`
	}
	if json.Unmarshal(delegation, &d) != nil || d.Type != "responses" {
		return ""
	}
	return d.Responses.Model
}

// Start is a client's held session.start: the model it names, and the
// event, to be sent upstream with the deployment's model in its place.
type Start struct {
	Model   string // session.model as the client wrote it
	EventID string // the client's event_id, for the error events answering it
	event   map[string]json.RawMessage
	session map[string]json.RawMessage
}

// Errors reading a first event; their codes are OpenAI's.
var (
	ErrNotStarted   = errors.New("session_not_started")
	ErrMissingModel = errors.New("missing_required_parameter")
)

// ReadStart reads the client's first message, its payload unmasked (text
// false for a binary message). Anything but a session.start naming a model
// is an error: ErrNotStarted (another event, binary, not JSON) or
// ErrMissingModel; the Start holds the event_id when known.
func ReadStart(payload []byte, text bool) (Start, error) {
	var st Start
	if !text {
		return st, ErrNotStarted
	}
	if json.Unmarshal(payload, &st.event) != nil || st.event == nil {
		return st, ErrNotStarted
	}
	var typ string
	_ = json.Unmarshal(st.event["event_id"], &st.EventID)
	if json.Unmarshal(st.event["type"], &typ) != nil || typ != "session.start" {
		return st, ErrNotStarted
	}
	if json.Unmarshal(st.event["session"], &st.session) != nil || st.session == nil {
		return st, ErrMissingModel
	}
	if json.Unmarshal(st.session["model"], &st.Model) != nil || st.Model == "" {
		return st, ErrMissingModel
	}
	return st, nil
}

// For is the session.start to send a deployment whose name for the model is
// model: the client's event with session.model replaced, as a masked frame.
// Every other field goes as the client wrote it.
func (st Start) For(model string) []byte {
	session := make(map[string]json.RawMessage, len(st.session))
	for k, v := range st.session {
		session[k] = v
	}
	session["model"], _ = json.Marshal(model)
	return frames.AppendFrame(nil, ws.OpText, st.body(session), true)
}

// body is the event with session as its session.
func (st Start) body(session map[string]json.RawMessage) []byte {
	event := make(map[string]json.RawMessage, len(st.event))
	for k, v := range st.event {
		event[k] = v
	}
	event["session"], _ = json.Marshal(session)
	body, _ := json.Marshal(event)
	return body
}

// ErrorEvent is an error event (unmasked, from the gateway as the server)
// of error type errType, for a refusal the client caused: the same shape as
// Refusal's, with the client's event id when known.
func ErrorEvent(errType, code, message, clientEventID string) []byte {
	ev := errorEvent{Type: "error", EventID: NewEventID()}
	ev.Error.Type, ev.Error.Code, ev.Error.Message = errType, code, message
	if clientEventID != "" {
		ev.Error.EventID = &clientEventID
	}
	body, _ := json.Marshal(ev)
	return frames.AppendFrame(nil, ws.OpText, body, false)
}
