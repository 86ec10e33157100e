// Package gemini puts Google's Gemini Live API (BidiGenerateContent, on AI
// Studio and Vertex AI) behind the OpenAI Realtime API: a Session translates
// one client's OpenAI events into Gemini's messages and Gemini's messages
// into OpenAI's events, so that the official openai SDK and
// @openai/agents-realtime hold a voice session with Gemini unchanged.
//
// The two protocols differ in shape more than in meaning. Gemini fixes a
// session's configuration in its first message (setup) and offers no way to
// change it while the connection is open; it starts answering on its own
// when it detects the end of the user's speech, has no response object, no
// item ids and no cancel; it reports usage per turn, per modality. What the
// client sees is therefore partly synthesised by the gateway: the ids, the
// response lifecycle around Gemini's turns, and the acknowledgements OpenAI
// sends for events Gemini never answers.
//
// Client events (OpenAI) to Gemini:
//
//	session.update (first)        setup: instructions, voice, output modalities, tools,
//	                              transcription, turn detection; session.updated once
//	                              Gemini's setupComplete arrives
//	session.update (later)        session.updated when nothing Gemini fixes at setup
//	                              changed; else an error event (invalid_request_error,
//	                              code unsupported_mid_session_update) naming the fields
//	any other event first         setup with the defaults, then the event
//	input_audio_buffer.append     realtimeInput.audio, base64 carried over unchanged,
//	                              labelled audio/pcm;rate=24000 (Gemini resamples)
//	input_audio_buffer.commit     realtimeInput.audioStreamEnd (activityEnd with turn
//	                              detection off); input_audio_buffer.committed back
//	input_audio_buffer.clear      input_audio_buffer.cleared back (Gemini keeps no buffer)
//	conversation.item.create      user text: clientContent (turnComplete false);
//	                              function_call_output: toolResponse; item.added/done back
//	response.create               clientContent{turnComplete:true}, unless Gemini is
//	                              already answering on its own (after speech, a commit or
//	                              a tool response): then nothing
//	response.cancel               the rest of Gemini's turn is not relayed; response.done
//	                              (cancelled) when Gemini ends the turn, with its usage
//	conversation.item.truncate,   answered as OpenAI answers them (truncated, deleted,
//	.delete, .retrieve            or an error for retrieve): Gemini's context cannot be
//	                              edited, which the README's provider table says
//	output_audio_buffer.clear     output_audio_buffer.cleared back
//	anything else                 an error event (invalid_request_error), as OpenAI
//	                              answers an event it does not know
//
// Gemini's messages to client events:
//
//	setupComplete                 session.updated when a session.update is owed one
//	serverContent.modelTurn       response.created, output_item.added, content_part.added
//	                              (the first part of a turn), then
//	                              response.output_audio.delta / output_text.delta
//	serverContent.outputTranscription  response.output_audio_transcript.delta
//	serverContent.inputTranscription   a user item (conversation.item.added) and
//	                              conversation.item.input_audio_transcription.delta,
//	                              .completed when the model's turn starts
//	serverContent.interrupted     input_audio_buffer.speech_started, response.done
//	                              (cancelled, turn_detected)
//	serverContent.turnComplete    the .done events and response.done (completed) with
//	                              the turn's usage (held for a usageMetadata that
//	                              arrives in a message of its own right after)
//	toolCall                      a function_call item per call, with its arguments,
//	                              and response.done
//	usageMetadata                 the response's usage, per modality (input and output
//	                              audio and text tokens, cached tokens)
//	sessionResumptionUpdate       kept: the handle a new connection resumes from
//	                              (resume.go)
//	goAway                        not relayed: the gateway moves the session to a
//	                              new connection (OnGoAway, resume.go)
//	toolCallCancellation          not relayed (OpenAI has no such event)
//
// Ids are the gateway's: resp_, item_ and call ids from Gemini's function
// call ids, stable for the session.
package gemini
