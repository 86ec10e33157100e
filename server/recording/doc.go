// Package recording records a Realtime session for evals and replay: the audio
// both ways as one two-channel WAV on the session's timeline, and every event
// both ways as JSON lines, stored in a directory or an S3-compatible bucket.
//
// A [Recorder] is fed each text event as the relay forwards it (Client for the
// client's, Upstream for what the client got from the upstream) and turns it
// into three objects, laid out in the store as
//
//	<prefix><session_id>/audio.wav     PCM16 LE, 24 kHz, 2 channels
//	<prefix><session_id>/events.jsonl  {"t_ms", "from", "event", "audio"} per line
//	<prefix><session_id>/meta.json     times, sample rate, what was cut and why
//
// # The timeline
//
// Channel 0 is the user: each input_audio_buffer.append is placed at its
// arrival offset from the session's start, or right after the previous
// append's audio when that ends later (appends never overlap; a client that
// streams faster than real time is laid end to end). Channel 1 is the
// assistant as the caller would have heard it: a response's first
// response.output_audio.delta (beta: response.audio.delta) at its arrival
// offset, or after the previous assistant audio ends when that is later, and
// each next delta of the response right after the one before (a player plays
// them back to back, whatever the network's burst). Interruptions cut it: the
// client's conversation.item.truncate {item_id, audio_end_ms} silences that
// item's audio after audio_end_ms, and a response.done with status
// "cancelled" silences the response's audio placed after the moment the
// response.done arrived (the player stopped there). The next assistant audio
// may then start at the cut. Silence fills every gap.
//
// Audio that is not PCM16 at 24 kHz: G.711 μ-law and A-law (GA
// audio/pcmu, audio/pcma; beta g711_ulaw, g711_alaw) are decoded to PCM16 and
// upsampled ×3 to 24 kHz by linear interpolation (two points between each
// pair of 8 kHz samples, one 8 kHz sample of delay); any other format is not
// recorded, and meta.json says how many events and bytes were left out. The
// format is the session's as the client asked for it (session.update) and as
// the upstream confirmed it (session.created, session.updated).
//
// # events.jsonl
//
// Every event both ways, one JSON object a line, in the order the recorder
// was called: {"t_ms": ms since the start, "from": "client"|"upstream",
// "event": the event as it was}, except that the audio payload of an append
// ("audio") or an output delta ("delta") is removed and the line gets
// "audio": {"channel", "offset", "samples"} instead: where the event's audio
// is in the WAV (offset and samples in samples of that channel), with "cut":
// how many of its last samples are not there (silenced by an interruption or
// past the channel's cap). A replay rebuilds the client's appends from
// channel 0. A text frame that is not JSON is kept as {"text": "..."}
// instead of "event". Nothing is redacted, neither the audio nor the
// events: a recording holds everything the caller said.
//
// # Cost
//
// Only recorded sessions pay. The per-event path finds the type and the
// audio field by scanning the top level of the event (no JSON decode of an
// audio event), decodes the base64 straight into the channel's buffer, and
// copies the rest of the event into the events buffer; only the few small
// events that steer the timeline (session.*, truncate, response.done) are
// decoded. A recording is held in memory until Finish: up to Limits.MaxAudio
// per channel (48,000 bytes a second each) and Limits.MaxEventBytes of
// events. See BenchmarkRecorder.
//
// # Storage
//
// An [Archive] writes finished recordings to a [Store] (DirStore or an S3
// bucket through [NewS3Store]) from its own goroutine, so a session's end
// never waits on the store; while the store fails it keeps up to MaxBuffer
// bytes of recordings and retries, drops (and counts in
// rtgate_recordings_dropped_total) what does not fit, and deletes recordings
// older than Retention. [Open] reads one back.
package recording
