// Package mockai is a fake OpenAI Realtime and GPT-Live upstream (and xAI's Grok Voice Agent,
// see "xAI" below): a WebSocket server that speaks
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
//	input_audio_buffer.commit -> input_audio_buffer.committed (and, when the session
//	                             transcribes its input, see Scripts,
//	                             conversation.item.input_audio_transcription.completed)
//	input_audio_buffer.clear  -> input_audio_buffer.cleared
//	conversation.item.create  -> conversation.item.added, conversation.item.done
//	response.create           -> response.created, rate_limits.updated, then after
//	                             Config.FirstAudioDelay: AudioDeltas x
//	                             response.output_audio.delta (AudioDeltaInterval apart),
//	                             one response.output_audio_transcript.delta, response.done
//	                             (Config.OutputTranscripts: the transcript in pieces
//	                             between the audio deltas, then its .done; see Scripts)
//	response.cancel           -> the deltas stop; response.done with status "cancelled",
//	                             status_details.reason "client_cancelled", and the usage
//	                             of the deltas sent (IgnoreCancel: no answer at all;
//	                             CancelLate: error response_cancel_not_active, then the
//	                             response ends at once, status "completed")
//	conversation.item.retrieve -> conversation.item.retrieved {event_id, item}: the item
//	                             as the server holds it (below)
//	conversation.item.truncate -> conversation.item.truncated {event_id, item_id,
//	                             content_index, audio_end_ms}; the item's transcript is
//	                             deleted, as OpenAI deletes text the user has not heard
//	conversation.item.delete  -> conversation.item.deleted {event_id, item_id}
//
// The items a session keeps for those three, the newest 64 per session (an older
// one is answered as one that does not exist), in both Realtime dialects: the items
// of conversation.item.create as announced; the user audio item of each commit or
// VAD turn (content input_audio, no audio data), with its transcript once
// transcription.completed is sent; each response's output item from
// response.created on (status in_progress, no content), then as response.done shows
// it (the assistant message with its transcript, or the function_call with its
// arguments). Out-of-band and failed responses add none. @openai/agents-realtime
// retrieves after every transcription.completed and truncated, and truncates on
// every interruption. An unknown item_id gets item_retrieve_invalid_item_id,
// item_truncate_invalid_item_id or item_delete_invalid_item_id ("Error retrieving
// item: the item with id '...' does not exist.", OpenAI's codes and wording); a
// truncate gets invalid_value for an audio_end_ms past the item's audio ("Audio
// content of Xms is already shorter than Yms"; any end while its response runs),
// for an item that is not an assistant message's audio, and for a content_index
// other than 0. Deleting the newest item makes the one before it the next item's
// previous_item_id.
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
//     and .done (arguments "{}" in one delta; Config.ToolArguments: those, in
//     two or more deltas, see Scripts), response.output_item.done, response.done; no
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
// # Scripts
//
// A test can script what mockai says (every knob off by default, and the
// defaults above then stay as they are), for guardrail and
// conversation-record tests:
//
//   - Input transcripts. A session transcribes its input when it was
//     opened with ?intent=transcription, a session.update made it a
//     transcription session, or set audio.input.transcription (GA) or the
//     beta interface's top-level input_audio_transcription (the event is
//     named the same in both; mockai refuses the beta handshake itself,
//     see Conversation). Each committed turn of such a session
//     (input_audio_buffer.commit or a server VAD turn) gets
//     conversation.item.input_audio_transcription.completed {item_id,
//     content_index 0, transcript, usage} after its
//     input_audio_buffer.committed (and after the item's added and done
//     with Config.AudioItems), and the user item keeps the transcript.
//     The text is "Hello from mockai.", or with Config.InputTranscripts
//     the session's Nth commit's InputTranscripts[(N-1) % len] (commits
//     count whether transcribed or not). Config.TranscriptionDelay sends
//     it that long after the commit without holding anything else: the
//     response server VAD starts comes first, as OpenAI's does when
//     transcription is slow; transcripts keep the order of their turns,
//     and a retrieve before then shows the item's transcript null.
//   - Output transcripts. Config.OutputTranscripts is what each audio
//     response of a session says, in order, cycling (text-only responses,
//     function calls and FailResponses' do not count). It is split into
//     words, each with the whitespace after it, spread over the
//     response's audio deltas from the first on: after each audio delta,
//     one response.output_audio_transcript.delta with the words that
//     delta covers (several when there are more words than deltas, none
//     after some when there are fewer; with no audio, one delta per word
//     at once); then response.output_audio_transcript.done {response_id,
//     item_id, output_index, content_index, transcript} with all that was
//     sent, and response.done's message has it as its transcript. A
//     cancel stops the transcript with the audio: .done (when a delta was
//     sent) and response.done carry what was sent. The xAI dialect sends
//     its .done among the events that close its output, as before.
//     Config.OutputTranscriptLag sends each transcript delta (the default
//     one too, which covers the last audio delta) that long after the
//     audio delta it covers, without delaying the audio: late
//     transcripts, as OpenAI's sometimes are. Deltas not yet sent when
//     the response is cancelled are dropped; .done and response.done come
//     after every delta.
//   - Tool arguments. Config.ToolArguments is the arguments string of
//     every function call (see Turns), streamed in up to four pieces of
//     about equal length (two or more when it has two characters or more,
//     cut between runes, AudioDeltaInterval apart), whole in
//     response.function_call_arguments.done, response.output_item.done
//     and response.done; not checked to be JSON. A call cancelled before
//     its .done has arguments "".
//
// cmd/mockai: -input-transcript (repeated), -transcription-delay,
// -output-transcript (repeated), -output-transcript-lag, -tool-arguments.
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
//	output text tokens  = 5 if a transcript delta was sent (a function call: if its
//	                      arguments were, and it completed), else 0, whatever the
//	                      transcript's length (Config.OutputTranscripts)
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
// What a Live session says is scripted by the same fields as a Realtime
// one's (all off by default: then every turn's transcripts are
// LiveTranscript, as before). Each session.input_audio.append is a user
// turn the model answers: the session's Nth append gets
// InputTranscripts[(N-1) % len] as its session.input_transcript.delta, and
// with OutputTranscripts its answer is AudioDeltas output audio deltas
// (AudioDeltaInterval apart), each followed by a
// session.output_transcript.delta with the words it covers (spread as for
// Realtime; a delta that covers none has no transcript event) whose
// start_ms/end_ms are that audio delta's place on the output timeline
// (AudioDeltaBytes at 48 bytes a millisecond, whatever the session's
// format). LiveConfig.ClientDelegations (cmd/mockai
// -live-client-delegations) ends each answer with a
// session.delegation.created of target client. OutputTranscriptLag and
// TranscriptionDelay do not apply to Live.
//
// # Realtime translation
//
// WS /v1/realtime/translations?model=… (and Azure's
// /openai/v1/realtime/translations): session.created of type translation,
// session.update of the audio settings, appended audio answered with
// transcript and audio deltas, session.close answered by session.closed
// (handleTranslation). No event carries usage.
//
// # xAI
//
// The same server speaks xAI's Grok Voice Agent dialect (xai.go) on
// WS /xai/v1/realtime: a gateway deployment xai/<model> with api_base
// [Server.XAIBaseURL] (http://127.0.0.1:PORT/xai/v1) dials
// <base>/realtime?model=... with Authorization: Bearer <key>, as it dials
// wss://api.x.ai/v1/realtime (docs.x.ai, Voice Agent API). The model may be
// left out (grok-voice-latest). Every knob above applies as on OpenAI's
// route (the fault frame counts include pings; after the opening, Echo and
// Stream send their own frames, Stream's deltas with OpenAI's indices); the records say Dialect
// "xai", Stats.Sessions counts the session and Stats.XAIPings its pings.
// The conversation is the OpenAI dialect's (audio, transcripts, text-only
// responses, tool calls, server VAD, cancels, FailResponses), with
// what a real xAI session shows and LiteLLM's XAIRealtimeNormalizer
// (github.com/BerriAI/litellm, litellm/llms/xai/realtime/transformation.py,
// read 2026) repairs. Each deviation and what supports it:
//
//   - The opening. By default conversation.created
//     {conversation: {id, object: "realtime.conversation"}} comes first and
//     no session.created at all: so LiteLLM's xAI docs
//     (docs.litellm.ai/docs/providers/xai_realtime), Voximplant's Grok
//     reference ("ConversationCreated: the first message at connection"),
//     pipecat's Grok events (src/pipecat/services/grok/realtime/events.py,
//     "the first message received after connecting") and the project's
//     notes. xAI has changed since: LiteLLM PR #28424 (2026-05-21, against
//     the live API) and litellm-docs PR #362 (2026-06-16, by xAI staff)
//     report session.created first, then conversation.created;
//     Config.XAISessionCreated (cmd/mockai -xai-session-created) opens so.
//     The default stays the old opening because it is what a relay has to
//     repair for OpenAI clients, which wait for session.created. (One more
//     client, an audio-arena pipeline on pipecat, says conversation.created
//     comes before session.created; mockai has no mode for that order.)
//   - ping {event_id, timestamp (ms)}: one right after conversation.created,
//     then every Config.XAIPingInterval (-xai-ping-interval; default 1 s,
//     negative: only the first) while the session is open. Type and fields:
//     pipecat's PingEvent and xAI's cookbook (xai-org/xai-cookbook, Android
//     VoiceServerEvent.kt, Ping(timestamp)); LiteLLM drops them, Vision
//     Agents and the audio-arena pipeline ignore them. xAI's interval is
//     documented nowhere.
//   - usage {} on response.created and response.done, where OpenAI sends
//     null and token counts (xAI bills by the minute, docs.x.ai models page):
//     LiteLLM ("usage: {} on response.created / response.done"), the
//     audio-arena pipeline ("xAI sends empty usage object {}"), pipecat
//     ("Grok sends empty usage in some events"). Bifrost's duration-typed
//     usage appears only in its synthetic test events; not reproduced.
//   - role "tool" on conversation.item.added of the model's function_call
//     item (sent after response.output_item.added; OpenAI's items of that
//     type have no role): LiteLLM ("role: tool on conversation.item.added
//     function_call items", mapped to assistant); the audio-arena pipeline
//     skips such items; pipecat's ConversationItem allows role tool.
//     Whether xAI also marks function_call_output items is not known:
//     mockai echoes them as the client sent them.
//   - No output_index or content_index on response.output_item.added/.done,
//     response.content_part.added/.done, the output_text, output_audio and
//     output_audio_transcript deltas and .done, and
//     response.function_call_arguments.delta/.done: LiteLLM ("xAI omits both
//     fields on every streaming response event"), xAI's cookbook (its audio
//     delta has event_id, response_id, item_id, delta; its transcript delta
//     no index either) and Bifrost's xAI test events. (pipecat's Grok models,
//     written from the docs, still require output_index on a few.)
//   - No part on response.content_part.done (LiteLLM: "Missing part on
//     response.content_part.done"); response.content_part.added keeps it,
//     since LiteLLM names only .done (it fills both defensively).
//   - Content parts of type "audio" and "text" where GA has output_audio and
//     output_text (content_part.added, response.done's output): LiteLLM's
//     fallback part {type: audio, transcript: ""}, Vision Agents' xAI plugin
//     (GetStream/Vision-Agents, xai_realtime.py) and pipecat's ItemContent.
//   - To show those events the xAI dialect sends, around a response's
//     output, response.output_item.added and response.content_part.added,
//     then response.output_audio.done, response.output_audio_transcript.done,
//     response.content_part.done and response.output_item.done (xAI's
//     cookbook and Vision Agents handle each). The OpenAI dialect still
//     sends none of them for audio and text answers.
//   - The voice is the session's top-level "voice" (livekit/agents PR
//     #6276: xAI reads it there, OpenAI at audio.output.voice, which xAI
//     ignores and so does mockai): default "eve" (docs.x.ai's current
//     examples use it and list it first; its older guide called Ara the
//     default), and eve, ara, rex, sal, leo ([XAIVoices]; the older guide
//     capitalised them) in any case. Other names are not refused (xAI's
//     answer is not documented).
//     session.created/.updated show voice, instructions, turn_detection,
//     audio formats and tools at xAI's places; response objects the voice.
//   - Server VAD also from a top-level turn_detection (where pipecat and
//     Vision Agents send it), and create_response defaults to false: "Unlike
//     OpenAI, xAI does not default turn_detection.create_response to True
//     for server_vad" (LiteLLM's patch_outgoing_session). A spoken turn
//     then ends at input_audio_buffer.committed unless the client asked.
//   - status_details as a string: no source found (none of the above shows
//     one), so response.done keeps OpenAI's object.
//
// Client secrets, POST /xai/v1/realtime/client_secrets (docs.x.ai,
// "Ephemeral Tokens"): with the API key as a bearer and a body
// {"expires_after": {"seconds": N}} (or none: 600 s, OpenAI's default,
// since xAI gives none; N from 1 to 7200), the answer is 200
// {"value": "<secret>", "expires_at": <unix seconds>}, top-level and not
// under client_secret, the shape xAI's voice examples read
// (xai-voice-examples, examples/agent/web/xai/backend-nodejs) and
// Bifrost's xAI test serves (Vision Agents reads client_secret.value,
// OpenAI's old shape; mockai follows xAI's own code). The docs say the
// request "does not support session or expires_after.anchor"; mockai
// refuses both with 400, so a relay that forwards an OpenAI-style request
// unchanged is seen. Errors are xAI's REST shape {"code": ..., "error": ...}
// (a real one in vercel/ai#10533; Bifrost's tests); the codes and the 401
// for a wrong key are mockai's. A secret opens /xai/v1/realtime "in the
// same fashion as an API key" (docs.x.ai) while it lives, also when
// Config.Key is set; OpenAI's routes do not take it. mockai remembers at
// most 10,000 secrets. What each request carried and how it was answered
// is [Server.XAISecretRequests], GET /mock/xai/client_secrets.
//
// # Gemini Live
//
// The same server speaks Google's Gemini Live API (BidiGenerateContent;
// gemini.go, where each wire fact names its source) at
// /ws/google.ai.generativelanguage.{v1,v1beta,v1alpha}.GenerativeService.BidiGenerateContent
// (AI Studio: the key as ?key= or x-goog-api-key) and
// /ws/google.cloud.aiplatform.{v1,v1beta1}.LlmBidiService/BidiGenerateContent
// (Vertex AI: also Authorization: Bearer), under [Server.GeminiBaseURL],
// and at "//ws/...", which is what @google/genai dials. Every server
// message is a binary frame holding JSON. After the upgrade, as Google
// does, a missing credential is closed 1008 and a key other than
// Config.Key 1007 (a Vertex bearer 1008). The first message must be setup,
// else close 1007 "Request contains an invalid argument.", as for a second
// setup; an unknown field of a message or of setup closes 1007 as
// protobuf JSON refuses it (proto snake_case names are accepted). setup is
// answered setupComplete (after Config.SessionDelay). Then:
//
//	realtimeInput.audio           counted (Stats.AudioBytes, the rate from its mimeType);
//	                              with automatic activity detection (the default),
//	                              speech (a PCM16 peak of 500) interrupts the model and
//	                              silenceDurationMs (200) of silence after it ends the
//	                              user's turn
//	realtimeInput.audioStreamEnd  ends the user's turn if audio came since the last one
//	activityStart, activityEnd    with detection disabled: interrupt, end the turn
//	realtimeInput.text            interrupts; a user turn
//	clientContent                 interrupts; with turnComplete, a user turn
//	toolResponse                  once every call is answered, a spoken turn
//
// A model turn, after Config.FirstAudioDelay: inputTranscription (when
// setup asked and audio came), AudioDeltas modelTurn audio parts (PCM16
// 24 kHz, PCMPattern, AudioDeltaInterval apart; three text parts with
// responseModalities ["TEXT"]), outputTranscription (when setup asked),
// generationComplete, turnComplete, then usageMetadata in a message of its
// own (GeminiConfig.UsageWithTurnComplete: in the turnComplete message)
// and, when setup asked for session resumption, sessionResumptionUpdate
// {newHandle, resumable}. Interrupted: interrupted, turnComplete,
// usageMetadata. A tool call, when setup declared functions and the user's
// text names one (or GeminiConfig.ToolCall): toolCall {functionCalls:
// [{id, name, args}]} and usageMetadata, then nothing until the
// toolResponse; speech over a pending call sends toolCallCancellation.
// Usage: prompt TEXT 10 plus AUDIO at 32 tokens a second of input;
// response AUDIO output bytes / 1500, or TEXT 5; Vertex names the response
// counts candidatesTokenCount and candidatesTokensDetails. A setup with a
// handle mockai issued resumes (GeminiSession.ResumedFrom; an unknown
// handle closes 1008). GeminiConfig.GoAwayAfter sends goAway {timeLeft}
// and closes 1011 when it has passed. The fault knobs (frame counts,
// StopReading, StatusCode, FaultsFromQuery, UpgradeDelay,
// RejectStatus) apply; Cut, SessionCap, Echo and Stream do not. Records
// say Dialect "gemini" or "vertex" and Auth; [Server.GeminiSessions]
// (GET /mock/gemini/sessions) what setup asked and what came after it;
// [Server.Received] the client messages but audio chunks.
package mockai
