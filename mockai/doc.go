// Package mockai is a fake OpenAI Realtime and GPT-Live upstream: a WebSocket server that speaks
// enough of the GA Realtime protocol (OpenAI's reference:
// https://platform.openai.com/docs/api-reference/realtime; what of it mockai serves
// is listed below) for the gateway's tests and for wsbench, on loopback, with knobs
// for latency and faults. It runs one goroutine per connection (two while a response streams) and
// holds about 20 KiB per idle session, so a single process serves 9,000+ sessions.
//
// Start a server in-process with [Start], point the gateway's upstream base at
// [Server.BaseURL], and inspect what reached the upstream with [Server.Records] and
// [Server.Stats]. The cmd/mockai binary serves the same thing as a separate process;
// there the records and counters are at GET /mock/records and GET /mock/stats.
//
// # Conversation
//
// After the upgrade the server sends session.created unprompted (after
// Config.SessionDelay). Client events are answered in order:
//
//	session.update            -> session.updated (the session, shallowly merged)
//	input_audio_buffer.append -> nothing (the audio is counted, see usage below)
//	input_audio_buffer.commit -> input_audio_buffer.committed
//	input_audio_buffer.clear  -> input_audio_buffer.cleared
//	conversation.item.create  -> conversation.item.added, conversation.item.done
//	response.create           -> response.created, rate_limits.updated, then after
//	                             Config.FirstAudioDelay: AudioDeltas x
//	                             response.output_audio.delta (AudioDeltaInterval apart),
//	                             one response.output_audio_transcript.delta, response.done
//	response.cancel           -> the deltas stop; response.done with status "cancelled"
//
// Anything else gets an error event of type invalid_request_error and the connection
// stays open: code invalid_value for non-JSON text, binary frames, a missing or
// unknown type and bad field values; missing_required_parameter for a missing
// session, audio or item; conversation_already_has_active_response for a
// response.create during a response; response_cancel_not_active for a
// response.cancel without one. session.update does not insist on session.type, but
// rejects values other than "realtime" and "transcription". Client messages may be up
// to 16 MiB (OpenAI allows 15 MiB per event).
//
// A client's close frame is answered with the same code and reason.
//
// With Config.Echo (cmd/mockai -echo) the conversation is replaced by an echo: after
// session.created, every data message is sent back verbatim with its type (text or
// binary), whatever it contains. Benchmarks use it to time round trips through a relay.
//
// # One segment
//
// With Config.OneSegment (cmd/mockai -one-segment) the 101 response and
// session.created leave in one socket write, so they reach the client in one TCP
// segment; with TLS they are two TLS records in that segment. A relay that drains
// only its socket and not what crypto/tls has already decrypted stalls on it.
// session.created follows the 101 at once unless Config.SessionDelay is set (the
// default is 0, cmd/mockai -session-delay 0).
//
// # Usage numbers
//
// Every response.done carries a usage object that tests can predict exactly. All
// audio is PCM16 at 24 kHz, and one audio token stands for 480 bytes (10 ms):
//
//	input audio tokens  = A / 480, where A is the raw (base64-decoded) bytes appended
//	                      since the previous response.create, less uncommitted bytes
//	                      dropped by input_audio_buffer.clear
//	input text tokens   = 10
//	output audio tokens = B / 480, where B is the raw bytes in the deltas actually sent
//	                      (AudioDeltas*AudioDeltaBytes for a completed response)
//	output text tokens  = 5 if the transcript delta was sent, else 0
//	input_tokens  = input text + input audio;  output_tokens = output text + output audio
//	total_tokens  = input_tokens + output_tokens; image and cached tokens are always 0
//
// All divisions round down.
//
// # Faults
//
// The fault knobs count the data frames (messages) the server has sent on a
// connection, session.created included; control frames are not counted. Once a fault
// fires, the server sends nothing more on that connection. Config.StallFor bounds a
// stall (StopReading): the connection is then dropped without a close frame.
//
// With Config.FaultsFromQuery (cmd/mockai -faults-from-query) each connection may ask
// for its own fault in its query, which a relay passes through, so a soak test knows
// exactly which sessions it made faulty:
//
//	?model=gpt-realtime&fault=drop&fault_after=3   drop the TCP connection after 3 frames
//	&fault=close&fault_after=N                     close 1011 after N frames (default 1)
//	&fault=malformed&fault_after=N                 a frame with a reserved opcode after N
//	&fault=stall                                   stop reading and sending after session.created
//	&fault=401                                     answer the upgrade with HTTP 401 (any 400-599)
//	&fault=no_closed                               GPT-Live: session.close gets no session.closed
//
// A bad fault or fault_after value is refused with HTTP 400 and a message naming it.
//
// # GPT-Live
//
// The same server speaks GPT-Live (live.go and its siblings describe each
// route): WS /v1/live/sessions (and Azure's /openai/v1/live/sessions) with
// session.start first and a strict configuration, audio answered with output
// audio and transcripts, session.usage.updated every LiveConfig.UsageInterval,
// session.close answered by session.closed, Responses delegation wrapped in
// response.event; sidebands (…/{id}/attach) with reflected audio; the WebRTC
// create (POST /v1/live/sessions), forks (POST and WS …/{id}/fork), the
// recording (GET …/{id}/content) and SIP call controls. The knobs above apply
// to Live sockets too: UpgradeDelay, SessionDelay (session.start to
// session.started), FirstAudioDelay (before the first output delta), the
// frame faults (session.started is frame 1), StopReading (session.start is
// never read), StatusCode, the key checks and FaultsFromQuery; LiveConfig adds
// the usage and media schedule, expiry, a start timeout and NoClosed. GET /mock/live/sessions
// lists the sessions with their usage, and /mock/live/incoming,
// /mock/live/sessions/{id}/respond and …/end play what OpenAI's side would do.
package mockai
