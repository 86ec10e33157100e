package server

// Transcription sessions (?intent=transcription) carry no model in the URL,
// and their transcription model only arrives later in a session.update, so
// the gateway routes them at connect time: by a model query when there is
// one, else by the secret's session config when the client came with a
// client secret, else by TRANSCRIPTION_MODEL (a model group), else the
// default group. They are metered from the usage on
// conversation.item.input_audio_transcription.completed events, since they
// have no response.done.

import (
	"encoding/json"
	"fmt"
	"net/url"

	"rtgate/server/routes"
)

const transcriptionCompleted = "conversation.item.input_audio_transcription.completed"

// isTranscription reports whether a connect is a transcription session.
func isTranscription(q url.Values) bool { return q.Get("intent") == "transcription" }

// transcriptionGroup picks the model group of a transcription session whose
// transcription model is model ("" when unknown): that model when it is a
// group, else TRANSCRIPTION_MODEL, else the default group.
func (s *Server) transcriptionGroup(table *routes.Table, model string) string {
	if _, ok := table.Groups[model]; ok && model != "" {
		return model
	}
	if s.cfg.TranscriptionModel != "" {
		return s.cfg.TranscriptionModel
	}
	return table.Default
}

// transcriptionModelOf reads session.audio.input.transcription.model.
func transcriptionModelOf(session map[string]any) string {
	audio, _ := session["audio"].(map[string]any)
	input, _ := audio["input"].(map[string]any)
	tr, _ := input["transcription"].(map[string]any)
	m, _ := tr["model"].(string)
	return m
}

// connectGroup picks the model group of a WebSocket connect.
func (s *Server) connectGroup(table *routes.Table, q url.Values, grant *secretGrant) (string, *httpError) {
	switch {
	case grant != nil:
		return grant.claims.Group, nil // the secret was minted for it
	case isTranscription(q) && q.Get("model") == "":
		q := url.Values{"model": {s.transcriptionGroup(table, "")}}
		return s.group(table, q)
	}
	return s.group(table, q)
}

// transcriptionUsage is the usage a transcription completed event reports.
type transcriptionUsage struct {
	Type  string `json:"type"`
	Usage *struct {
		Type              string `json:"type"` // "tokens" or "duration"
		TotalTokens       int64  `json:"total_tokens"`
		InputTokens       int64  `json:"input_tokens"`
		OutputTokens      int64  `json:"output_tokens"`
		InputTokenDetails struct {
			TextTokens  int64 `json:"text_tokens"`
			AudioTokens int64 `json:"audio_tokens"`
		} `json:"input_token_details"`
	} `json:"usage"`
}

// AddTranscription adds the token usage of one transcription completed
// event (output tokens are text). Duration-billed usage carries no tokens
// and adds none.
func (u *Usage) AddTranscription(payload []byte) error {
	var ev transcriptionUsage
	if err := json.Unmarshal(payload, &ev); err != nil {
		return fmt.Errorf("reading transcription usage: %w", err)
	}
	if ev.Type != transcriptionCompleted || ev.Usage == nil {
		return nil
	}
	x := ev.Usage
	if x.TotalTokens < 0 || x.InputTokens < 0 || x.OutputTokens < 0 || x.InputTokenDetails.TextTokens < 0 || x.InputTokenDetails.AudioTokens < 0 {
		return fmt.Errorf("reading transcription usage: negative counts")
	}
	u.InputTokens += x.InputTokens
	u.OutputTokens += x.OutputTokens
	u.TotalTokens += x.TotalTokens
	u.InputText += x.InputTokenDetails.TextTokens
	u.InputAudio += x.InputTokenDetails.AudioTokens
	u.OutputText += x.OutputTokens
	return nil
}

// addUsage is the session inspector's: a response.done or a transcription
// completed event.
func (i *sessionInfo) addUsage(p []byte) {
	t, _ := EventType(p)
	if string(t) == transcriptionCompleted {
		_ = i.usage.AddTranscription(p)
		return
	}
	_ = i.usage.AddResponseDone(p)
}

// metered reports whether an event type carries usage.
func metered(t []byte) bool {
	return string(t) == "response.done" || string(t) == transcriptionCompleted
}
