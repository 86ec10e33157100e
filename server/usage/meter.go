package usage

import (
	"encoding/json"

	"rtgate/server/eventtype"
)

// Meter is a session's frames.Inspector on the upstream's frames: it picks
// the usage-bearing events (response.done, transcription completed) out with
// eventtype.Of, allocating nothing for the frames it passes over, which are
// nearly all of them, and sums their usage. It is written only from the
// upstream's read path and read once the session has ended, so it needs no
// lock.
//
// In a Realtime conversation session with input transcription on
// (SplitTranscription), the transcription runs on a model of its own
// (session.audio.input.transcription.model), priced at its own prices: its
// events' usage goes to Transcription, by model, not to Usage. The model is
// read from the upstream's session.created and session.updated (the
// effective configuration, whatever the client asked for).
type Meter struct {
	Usage Usage
	// OnEvent, if set, is called from the read path with each event's
	// usage once it is added (where spend is booked as it happens). The
	// event has already been forwarded to the client. It must not block.
	OnEvent func(add Usage)

	// SplitTranscription keeps a conversation session's transcription
	// usage apart (Transcription); OnTranscription, if set, gets each
	// such event's usage and model (as OnEvent does for the rest).
	SplitTranscription bool
	Transcription      []ModelUsage
	OnTranscription    func(model string, add Usage)
	// OnTranscriptionModel, if set, gets the transcription model each
	// session.created or session.updated names ("" for none: off).
	OnTranscriptionModel func(model string)
	transcriptionModel   string
}

// ModelUsage is the usage of one model beside the session's own.
type ModelUsage struct {
	Model string `json:"model"`
	Usage Usage  `json:"usage"`
}

// Wants picks the usage-bearing events out of the upstream's text frames.
func (m *Meter) Wants(prefix []byte) bool {
	t, ok := eventtype.Of(prefix)
	return ok && m.WantsType(t)
}

// WantsType is Wants for an event whose type was already read.
func (m *Meter) WantsType(t []byte) bool {
	switch string(t) {
	case eventtype.ResponseDone, eventtype.TranscriptionComplete:
		return true
	case "session.created", "session.updated":
		return m.SplitTranscription
	}
	return false
}

// Inspect implements frames.Inspector: it books the event's usage. An event
// that does not parse adds nothing (the client got it verbatim all the same).
func (m *Meter) Inspect(p []byte) {
	if m.SplitTranscription {
		if t, ok := eventtype.Of(p); ok && (string(t) == "session.created" || string(t) == "session.updated") {
			m.readTranscriptionModel(p)
			return
		}
	}
	m.Book(p)
}

// Book adds an event's usage and returns what it added; ok is false when the
// event carried none (or did not parse). A split transcription's usage is
// not returned: it is the transcription model's (Transcription).
func (m *Meter) Book(p []byte) (add Usage, ok bool) {
	add, err := Parse(p)
	if err != nil || add == (Usage{}) {
		return Usage{}, false
	}
	if m.SplitTranscription && add.Transcriptions > 0 {
		m.bookTranscription(add)
		return Usage{}, false
	}
	m.Usage.Add(add)
	if m.OnEvent != nil {
		m.OnEvent(add)
	}
	return add, true
}

// bookTranscription adds a transcription's usage under the model in force.
func (m *Meter) bookTranscription(add Usage) {
	model := m.transcriptionModel
	i := 0
	for i < len(m.Transcription) && m.Transcription[i].Model != model {
		i++
	}
	if i == len(m.Transcription) {
		m.Transcription = append(m.Transcription, ModelUsage{Model: model})
	}
	m.Transcription[i].Usage.Add(add)
	if m.OnTranscription != nil {
		m.OnTranscription(model, add)
	}
}

// readTranscriptionModel reads session.audio.input.transcription.model of
// a session.created or session.updated.
func (m *Meter) readTranscriptionModel(p []byte) {
	var ev struct {
		Session struct {
			Audio struct {
				Input struct {
					Transcription *struct {
						Model string `json:"model"`
					} `json:"transcription"`
				} `json:"input"`
			} `json:"audio"`
		} `json:"session"`
	}
	if json.Unmarshal(p, &ev) != nil {
		return
	}
	model := ""
	if tr := ev.Session.Audio.Input.Transcription; tr != nil {
		model = tr.Model
	}
	m.transcriptionModel = model
	if m.OnTranscriptionModel != nil {
		m.OnTranscriptionModel(model)
	}
}

// TranscriptionModel is the transcription model in force ("" for none).
func (m *Meter) TranscriptionModel() string { return m.transcriptionModel }
