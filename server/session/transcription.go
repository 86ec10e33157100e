package session

// Transcription sessions (?intent=transcription) carry no model in the URL,
// and their transcription model only arrives later in a session.update, so
// the gateway routes them at connect time: by a model query when there is
// one, else by the secret's session config when the client came with a
// client secret, else by TRANSCRIPTION_MODEL (a model group), else the
// default group. They are metered from the usage on
// conversation.item.input_audio_transcription.completed events, since they
// have no response.done.

import "net/url"

// isTranscription reports whether a connect is a transcription session.
func isTranscription(q url.Values) bool { return q.Get("intent") == "transcription" }
