package xai

import (
	"encoding/json"

	"rtgate/frames"
)

// The session.created that xAI does not send. OpenAI's first event carries
// the session's effective configuration; clients wait for it before they
// treat the session as open (the gateway's pool, too, counts a socket ready
// once past it). xAI's first event is conversation.created, and the session
// is configured afterwards by the client's session.update, answered with
// session.updated. The synthesised event states xAI's documented defaults,
// so that a client reading it learns nothing false, and leaves out what has
// no documented default (instructions, turn detection).

// gaSession is the session object of the synthesised session.created:
// openai-node's RealtimeSessionCreateRequest (type is the one required
// member) plus the object and id OpenAI's own session.created carries.
type gaSession struct {
	// Type "realtime": the only required member, and the GA discriminator
	// between conversation and transcription sessions.
	Type string `json:"type"`
	// Object and ID are what OpenAI's session.created carries
	// (protocol.md); the ID is derived from xAI's conversation id, so that
	// it names this xAI session in logs on both sides.
	Object string `json:"object"`
	ID     string `json:"id"`
	// Model is the one the client connected with; omitted when unknown
	// rather than guessed.
	Model string `json:"model,omitempty"`
	// OutputModalities ["audio"]: a Grok voice response is audio with its
	// transcript, which GA spells ["audio"] (OpenAI's default too).
	OutputModalities []string `json:"output_modalities"`
	Audio            gaAudio  `json:"audio"`
	// Tools empty: a session starts with none until session.update sets
	// them.
	Tools []struct{} `json:"tools"`
}

type gaAudio struct {
	Input  gaAudioIn  `json:"input"`
	Output gaAudioOut `json:"output"`
}

// gaAudioIn and gaAudioOut: PCM16 at 24 kHz both ways, xAI's default
// (docs.x.ai: audio/pcm, rates 8000-48000, default 24000; pipecat's and
// agentscope's xAI clients default to it too) and the GA default, so a
// client that never sets a format computes audio durations right.
type gaAudioIn struct {
	Format gaFormat `json:"format"`
}

type gaAudioOut struct {
	Format gaFormat `json:"format"`
	// Voice "eve": xAI's default voice (docs.x.ai lists Eve first; pipecat
	// names it xAI's own default). xAI's voice ids are case-insensitive.
	Voice string `json:"voice"`
}

type gaFormat struct {
	Type string `json:"type"`
	Rate int    `json:"rate"`
}

// defaultSession is the session a synthesised session.created states, for
// xAI conversation conv ("" when unknown).
func (n *Normalizer) defaultSession(conv string) gaSession {
	id := "sess_xai"
	if conv != "" {
		id = "sess_" + conv
	}
	pcm := gaFormat{Type: "audio/pcm", Rate: 24000}
	return gaSession{
		Type:             "realtime",
		Object:           "realtime.session",
		ID:               id,
		Model:            n.model,
		OutputModalities: []string{"audio"},
		Audio:            gaAudio{Input: gaAudioIn{Format: pcm}, Output: gaAudioOut{Format: pcm, Voice: "eve"}},
		Tools:            []struct{}{},
	}
}

// conversationCreated answers xAI's first event: a session.created first,
// unless one has gone out, then the event itself, which GA knows.
func (n *Normalizer) conversationCreated(p []byte, out *frames.Output) {
	if !n.sessionSent {
		n.sessionSent = true
		var ev struct {
			EventID      string `json:"event_id"`
			Conversation struct {
				ID string `json:"id"`
			} `json:"conversation"`
		}
		_ = json.Unmarshal(p, &ev) // what does not decode stays empty: defaults
		eventID := "event_xai_session_created"
		if ev.EventID != "" {
			eventID = ev.EventID + "_session"
		}
		created := struct {
			// Type first: the gateway reads an event's type off its
			// first bytes.
			Type    string    `json:"type"`
			EventID string    `json:"event_id"`
			Session gaSession `json:"session"`
		}{"session.created", eventID, n.defaultSession(ev.Conversation.ID)}
		if b, err := json.Marshal(created); err == nil { // plain strings: cannot fail
			out.Text(b)
		}
	}
	out.Text(p)
}
