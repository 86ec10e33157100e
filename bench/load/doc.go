// Package load generates Realtime API calls against a WebSocket endpoint and
// measures each one in phases; GPT-Live calls (ProtocolLive) and Gemini Live
// calls (ProtocolGemini: setup, setupComplete, clientContent turns, the
// model's audio parts, turnComplete) are measured in the same phases.
//
// A call is what a voice client does for one exchange:
//
//	dial        TCP connect + TLS handshake (wss) + WebSocket upgrade, measured
//	            from the call's start to the 101 response.
//	session     upgrade done -> the server's session.created event.
//	first_audio response.create sent -> the first output audio delta
//	            (GA "response.output_audio.delta" or beta "response.audio.delta").
//	total       call start -> response.done received and a clean close (the
//	            client sends close 1000 and waits for the server's close frame).
//
// A call's start is the moment it was meant to begin: in closed-loop mode the
// moment a worker picks it up, in open-loop (-rate) mode its scheduled arrival
// time, so queueing delay in the generator counts against latency instead of
// hiding it (no coordinated omission). An open-loop run's arrivals are drawn
// up front from a seed (Schedule: Poisson or even spacing, call lengths)
// and every arrival is accounted for (OpenLoop: started, dropped or
// delayed at the in-flight cap, or not reached).
//
// A call with a length (Options.CallLength) keeps its session open after its
// exchange until the length has passed since its start; that time is in total
// and counted apart as Sample.Held, so total minus held is the exchange.
//
// Failed calls get a class that names what went wrong and where:
//
//	dial                      TCP/TLS error before any HTTP answer
//	handshake_<status>        the upgrade was answered with HTTP <status> (401, 429, 503...)
//	timeout_<phase>           the per-call deadline passed during dial, session,
//	                          first_audio or done (done includes the close handshake)
//	error_event_<code>        the server sent an "error" event (code, else type)
//	unexpected_close_<code>   the socket closed before the call finished; 1006
//	                          means the TCP connection dropped without a close frame
//	response_<status>         response.done carried a status other than completed
//	no_audio                  response.done (Gemini: turnComplete) arrived without any audio
//	no_tool_call              FlowTool: the tool turn's response.done came without a function call
//	interrupted               Gemini: serverContent.interrupted ended the model's turn
//	vad_early_stop            -vad: speech_stopped arrived while the client was
//	                          still sending speech
//	protocol                  a frame or event the client could not parse
//	overload                  open-loop only (WhenFull drop): the arrival was
//	                          skipped because MaxInFlight calls were in flight
//	cancelled                 the run was interrupted (Ctrl-C)
//
// With Config.Audio each call also streams input audio the way a voice client
// does: from the moment the upgrade completes it appends AudioLength (1 s by
// default) of silent 24 kHz PCM16 mono in 20 ms chunks (960 bytes of PCM, 1280
// base64 characters each) at real-time pace, then sends
// input_audio_buffer.commit, and only then (and after session.created)
// response.create. The audio time is therefore part of "total" but not of
// "first_audio".
//
// With Config.Turns (wsbench -turns N) a call is N exchanges on one session,
// manual or server-VAD ones, and the first turn's first audio is reported
// apart from the later turns'; Client.callTurns says what each turn sends and from
// when its first audio is measured. A failure names its turn in Detail.
//
// With Config.Flow (flows.go) each turn is one 100 ms append and a commit,
// measured from the commit, followed by response.create (FlowCommit),
// nothing (FlowServerAnswers: the server answers by itself) or a tool call
// answered with its output (FlowTool): the guardrail benchmark's calls.
package load
