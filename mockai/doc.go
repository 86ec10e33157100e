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
//	response.cancel           -> the deltas stop; response.done with status "cancelled",
//	                             status_details.reason "client_cancelled", and the usage
//	                             of the deltas sent (IgnoreCancel: no answer at all;
//	                             CancelLate: error response_cancel_not_active, then the
//	                             response ends at once, status "completed")
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
// # Turns
//
// What a test of per-turn latency needs:
//
//   - Server VAD, only once a session.update sets audio.input.turn_detection
//     to {type: "server_vad", ...} (the default session advertises server_vad,
//     but clients that never ask keep committing by hand). An append whose
//     loudest PCM16 sample reaches 500 is speech, anything quieter silence
//     (wsbench's zeros; PCMPattern is speech). The first speech sends
//     input_audio_buffer.speech_started {audio_start_ms, item_id}
//     (audio_start_ms less prefix_padding_ms) and, with interrupt_response
//     (default true), cancels the active response: response.done status
//     "cancelled", reason "turn_detected". Once silence_duration_ms (default
//     200) of silence has been appended after speech, counted in audio time
//     (bytes / 48 per ms) not wall time: input_audio_buffer.speech_stopped
//     {audio_end_ms (the window included, as OpenAI documents), item_id},
//     input_audio_buffer.committed, and with create_response (default true)
//     and no response active, a response as response.create would start.
//   - Text-only responses: when the response.create's response.output_modalities,
//     else the session's output_modalities, are ["text"], the response sends
//     three response.output_text.delta ("Hello ", "from ", "mockai.", the
//     first after the first-audio delay), response.output_text.done and
//     response.done with an output_text part; no audio, output audio tokens 0.
//   - Tool calls: when the session has tools and the response's (else the
//     session's) tool_choice is "required" or {type: "function", name}, the
//     response is a function call instead of speech: response.output_item.added
//     (a function_call item with call_id and name: the named tool, else the
//     first), after the first-audio delay response.function_call_arguments.delta
//     and .done (arguments "{}"), response.output_item.done, response.done; no
//     audio. The deterministic rule that ends a chain: when the conversation's
//     newest item is a function_call_output (conversation.item.create), the
//     next response speaks, whatever tool_choice says. So tool call, the
//     client's output, response.create, audio.
//   - The first-audio delay (Config.FirstAudioDelay, before the first audio,
//     text or arguments delta; Live's first output delta too) can change while
//     the server runs: POST /mock/config?first_audio_delay=250ms sets it for
//     every response that starts from then on (GET /mock/config shows it;
//     0 to 1m, else HTTP 400), so a test can swap which of two mockai
//     deployments is faster. With FaultsFromQuery a connection may pin its
//     own with ?first_audio_delay=250ms, which the admin knob then leaves alone.
//   - Config.CreatedWithFirstOutput (cmd/mockai -created-with-first-output)
//     holds each response's response.created until its first output delta,
//     as an upstream slow to start a response sends it; Config.FailResponses
//     (-fail-responses) fails every response (response.done status failed,
//     status_details.error type server_error, no output, after the
//     first-audio delay). Per-deployment first-audio delays: one mockai per
//     deployment, each with its own -first-audio-delay.
//   - Out-of-band responses: a response.create whose response.conversation
//     is "none" runs beside the active response (never refused as
//     conversation_already_has_active_response), adds nothing to the
//     conversation, and its response objects say conversation_id null.
//   - An OTLP/HTTP trace sink, POST /v1/traces: the export is read, counted
//     (Stats.TraceBytes) and answered 200, so a benchmark can point a
//     gateway's OTEL_EXPORTER_OTLP_ENDPOINT at mockai.
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
//	&first_audio_delay=250ms                       this connection's own first-audio delay (see Turns)
//
// A bad fault or fault_after value is refused with HTTP 400 and a message naming it.
//
// # Continuity
//
// For a relay that carries a conversation onto a fresh upstream session
// (Cut): Config.Cut ends sessions after (or, with During, inside) their
// Nth response, by a TCP drop, a close frame with a chosen code (1011,
// 1012, ...) or half a frame then a drop, on the first Cut.Times sessions
// only, so the replacement lives (cmd/mockai -cut, -cut-after, -cut-during,
// -cut-code, -cut-times). A GPT-Live session's answers count as its
// responses (an answer starts at the input transcript delta an append is
// heard with, its output is the output audio delta, it is done at the
// output transcript delta), and so do its delegated responses (wrapped in
// response.event); its cap is LiveConfig.MaxDuration (session.closed,
// reason expired, then close 1000). Config.SessionCap is OpenAI's cap: expires_at in
// session.created says it, and at the cap the session gets an error event
// session_expired and close 1001 (cmd/mockai -session-cap 1m). What each
// session received (its client events but appends, in order) is
// [Server.Received], GET /mock/sessions/{id}/received.
//
// # GPT-Live
//
// The same server speaks GPT-Live (liveState and its routes' handlers
// describe each): WS /v1/live/sessions (and Azure's /openai/v1/live/sessions) with
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
// the usage and media schedule (MediaChunk: seconds faster than real time), expiry, a start timeout, NoClosed and
// MaxSidebands (a sideband beyond it refused 409; negative refuses all). GET /mock/live/sessions
// lists the sessions with their usage, and /mock/live/incoming,
// /mock/live/sessions/{id}/respond and …/end play what OpenAI's side would do.
//
// # Realtime translation
//
// WS /v1/realtime/translations?model=… (and Azure's
// /openai/v1/realtime/translations): session.created of type translation,
// session.update of the audio settings, appended audio answered with
// transcript and audio deltas, session.close answered by session.closed
// (handleTranslation). No event carries usage.
package mockai
