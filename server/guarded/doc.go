// Package guarded runs a Realtime session under its guardrails: it holds
// back the events a guardrail must see before anyone acts on them, asks the
// guardrails (package guardrail), and lets the events go, or stops them and
// says so, in the order they came.
//
// A guarded session is relayed through a pair of frames.Translators, one per
// direction (FromClient, FromUpstream), so only sessions with a guardrail
// pay for reading their events; every other session stays byte for byte.
// Events no mode reads pass through unchanged (one copy each: a
// translating relay frames what it emits).
//
// # The user's speech (mode realtime_input_transcription, LiteLLM's)
//
// The model must not answer a turn before its transcript has been checked.
// The gateway turns the upstream's create_response off (and input
// transcription on, when the client has not: its cost is the client key's)
// and answers each turn itself once the check passes. The client still
// sees the create_response it asked for in session.created and
// session.updated.
//
//	state      event                                          next, and what is sent
//	starting   a client event                                 starting: held (a turn committed before
//	                                                          the gateway's update would go unchecked)
//	starting   session.created                                open: the gateway's session.update
//	                                                          (create_response false, transcription
//	                                                          on), then the held events, in order
//	open       client session.update                          open: create_response noted, sent false
//	open       client input_audio_buffer.commit               awaiting (its item, once committed says it;
//	                                                          an empty buffer's error ends the wait)
//	open       input_audio_buffer.committed                   awaiting (its item)
//	awaiting   client response.create                         awaiting: held
//	awaiting   transcription.completed                        checking: the client gets the transcript
//	awaiting   transcription.failed                           checking, as an error of the check
//	checking   passed                                         open: the held response.create, else one
//	                                                          of the gateway's if the client wants answers
//	checking   blocked                                        open: upstream response.cancel, the item
//	                                                          deleted, a system item asking the model to
//	                                                          speak the violation message, response.create;
//	                                                          the client a guardrail_violation error; held
//	                                                          response.creates dropped
//	checking   blocked, n-th fail or on_violation end_session ended: the error, then close 1008
//
// # The user's text (mode pre_call, LiteLLM's)
//
// A user message item (conversation.item.create with input_text) is held
// until checked; the client's events after it wait behind it, in order.
// Blocked: the client gets a guardrail_violation error, the item and the
// response.create that follows it never reach the model.
//
// # Tool calls before they run (mode realtime_tool_call, rtgate's)
//
// From a function call's response.output_item.added, the response's
// upstream events are held, until its response.done has come and every
// call in it has been checked (its name and arguments, at
// response.function_call_arguments.done). Passed: they go on as they came.
// Blocked: the client gets a guardrail_violation error and none of the
// blocked call's events (its output item dropped from response.done too);
// the upstream gets a function_call_output refusing the call and a
// response.create, so the model answers knowing it was refused. Audio the
// model streams after a call, in the same response, waits with it.
//
// A check that times out or fails follows its guardrail's on_error (fail
// open or closed); every check is counted and timed (package guardrail's
// metrics) and every action reaches Config.OnAction, which the session
// puts in its conversation record and log.
package guarded
