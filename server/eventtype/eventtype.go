// Package eventtype is the vocabulary of the upstream's events: Of and Inner
// read an event's type off the front of a frame without decoding it or
// allocating (they run on every upstream frame of every session), and the
// constants name the event types that more than one package acts on.
//
// It sits below every package that reads events (usage, turns, continuity,
// protocol, and the session path in server), so that naming response.done
// imports nothing but this: when the vocabulary lived in usage, protocol and
// continuity imported the accounting for it.
package eventtype

// Realtime event types that carry usage: a response's in response.done,
// which ends every response whatever its status, and a transcription
// session's in each completed input audio transcription.
const (
	ResponseDone          = "response.done"
	TranscriptionComplete = "conversation.item.input_audio_transcription.completed"
)

// GPT-Live's event types that carry usage (../shared/live-protocol.md):
// session time as a cumulative usage.seconds in session.usage.updated and,
// final, in session.closed; and, with Responses delegation, the backend
// model's tokens in the response.completed (incomplete, failed) that
// response.event wraps.
const (
	LiveUsage    = "session.usage.updated"
	LiveClosed   = "session.closed"
	LiveResponse = "response.event"
	// LiveStarted names the session (session.id): usage.LiveMeter reads
	// it once, when its OnStarted is set.
	LiveStarted = "session.started"
	// LiveUpdated carries the session's configuration after a
	// session.update: usage.LiveMeter reads its delegation when its
	// OnDelegation is set.
	LiveUpdated = "session.updated"
)
