// Package protocol is the seam between a session's path through the gateway
// and the voice protocol the session speaks. The front door, the balancer,
// the pool and the relay are the same for every protocol; what differs is
// behind Protocol, with OpenAI's Realtime API as its first implementation
// (Realtime) and GPT-Live as its second (Live; the session side is
// package session's liveState). The answers, per protocol:
//
// Where the model comes from.
//   - Realtime: the URL, before the upgrade: ?model= names a model group;
//     a transcription session (?intent=transcription) names none, and is
//     routed by TRANSCRIPTION_MODEL or the default group; a client secret
//     carries the group it was minted for.
//   - GPT-Live: the client's first event, session.start's
//     session.model, after the upgrade: the gateway holds that event,
//     checks and rewrites the model before the upstream exists
//     (Model's fromFirstEvent; ReadStart and Start.For).
//
// What makes a pooled socket warm.
//   - Realtime: the upstream's session.created, the first frame of every
//     session; the pool holds it and hands it to the client (Warm).
//   - GPT-Live: an upgraded socket on which no session.start was sent yet.
//
// How a session is primed (a configuration applied before the client sees
// anything, e.g. a client secret's).
//   - Realtime: a session.update carrying the configuration (without
//     model, object, id, expires_at), whose session.updated reply becomes
//     the client's session.created (Prime; the primer in server).
//   - GPT-Live: the configuration is session.start's session itself.
//
// How a refusal after the upgrade looks.
//   - Realtime: an error event (type server_error, the gateway's code and
//     message, an event_gw_ id), then a close frame (Refusal).
//   - GPT-Live: an error event of the same shape, then a close.
//
// Which events carry usage, and how they are priced.
//   - Realtime: response.done's response.usage (tokens by modality, cached
//     input apart), and for transcription sessions the
//     conversation.item.input_audio_transcription.completed events' usage;
//     priced per token from the deployment's prices (server/spend). The
//     scanner that picks them out is usage.Meter (allocation-free, kept
//     hand-written); UsageEvent names the events.
//   - GPT-Live: session.usage.updated and session.closed carry cumulative
//     usage.seconds (take its growth), priced per second; response.event
//     wrapping a terminal Responses event carries the backend model's
//     tokens, priced at that model's token prices (usage.LiveMeter).
//   - Translation sessions: wall-clock seconds.
//
// How to end the upstream gracefully.
//   - Realtime: a close frame; no final event is owed (End returns nil).
//   - GPT-Live: session.close, then wait for session.closed, which carries
//     the final usage (End; the reactor's farewell, poller.SetFarewell).
//
// Which events mark a turn (for per-turn latency; server/turns follows
// them, and the client's events the gateway forwards start the clock).
//   - Realtime: a response opens at the upstream's response.created, but
//     its clock starts when the upstream had what it needed to answer: the
//     response.create the gateway forwarded, or, with server VAD, the
//     forwarding of the audio input_audio_buffer.speech_stopped's
//     audio_end_ms points at (the silence window read from
//     session.created/session.updated is the fallback when that audio is
//     no longer known); its first output is the first
//     response.output_audio.delta (response.output_text.delta for a
//     text-only response), by response_id; it ends at response.done,
//     unless that response was a tool call without output (the chain goes
//     on to the response after the client's function_call_output and
//     create). An error event may refuse a create or be the upstream's
//     failure (TurnError). Turn.
//   - GPT-Live (the nearest equivalents its events allow; Live.Turn): it
//     sends no response or done events, so a turn starts at the last
//     session.input_transcript.delta before output (InputSpeech), its
//     first output is the next session.output_audio.delta, and it ends
//     (completed) when the next input transcript delta arrives or the
//     session ends. Time to first audio is measured from the arrival of
//     that input delta, which lags the end of speech by the upstream's
//     transcription (not observable from the events). Interruptions are
//     not told apart: that would need a clock read per audio delta.
//     session.started is its configuration event (TurnConfig: the spans
//     read the session's id there).
//
// How to rebuild a session on a fresh upstream (session continuity).
//   - Realtime: session.update with the kept configuration, then one
//     conversation.item.create per kept item, in order (Rebuild).
//   - GPT-Live: session.start with the configuration and the kept items as
//     its input.
package protocol

import "net/url"

// Protocol is what the session path asks of a voice protocol.
type Protocol interface {
	// Name names the protocol in logs.
	Name() string
	// Model is the model a connect asks for: from its query, or, when
	// fromFirstEvent, from the client's first event (held until read).
	Model(q url.Values) (model string, fromFirstEvent bool)
	// Warm reports whether an upstream's first text frame (its payload)
	// makes a socket ready to hand to a client.
	Warm(payload []byte) bool
	// Prime is the client event (a masked frame) that applies config, a
	// session configuration as JSON, before the client sees anything.
	Prime(config []byte) []byte
	// Refusal is the frame that tells a client, after its upgrade, why
	// its session cannot go on: code and message are the gateway's,
	// status an upstream's HTTP status (0 for none).
	Refusal(code, message string, status int) []byte
	// UsageEvent reports whether an upstream event of type typ carries
	// usage.
	UsageEvent(typ []byte) bool
	// End is the client frame that ends the upstream session gracefully
	// (nil: a close frame does).
	End() []byte
	// Turn says what an event of type typ is to a turn.
	Turn(typ []byte) TurnMark
	// Rebuild is the client frames (masked) that rebuild a session on a
	// fresh upstream from its configuration and its kept items (each a
	// conversation item as JSON).
	Rebuild(config []byte, items [][]byte) [][]byte
}

// TurnMark is an event's place in a turn.
type TurnMark int

const (
	NotTurn     TurnMark = iota
	TurnStart            // a response starts (the turn starts unless one is open)
	FirstOutput          // output of the response (the first one counts)
	TurnEnd              // the response is done (whole event wanted: its status)
	SpeechEnd            // server VAD heard the end of speech (after its silence window)
	TurnConfig           // the session's configuration (whole event wanted: the VAD window)
	SpeechStart          // server VAD heard speech start (the user-speech span)
	// InputSpeech: GPT-Live's input transcript delta, the user speaking.
	// Before the turn's output it moves the turn's start (the user is
	// still talking); after it, the turn that spoke ends and the next
	// starts (GPT-Live sends no response or done events).
	InputSpeech
	// TurnError: an error event (whole event wanted: whether it refuses
	// a response.create, whether it is the upstream's fault).
	TurnError
)
