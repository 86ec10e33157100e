package load

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"time"

	"github.com/gorilla/websocket"
)

// Flows: what each turn of a Realtime call sends, beyond the manual and VAD
// turns of turns.go (Config.Flow). They exist for the guardrail benchmark
// (bench/compare, -protocol guardrails), whose legs must send the same
// turn to gateways that answer it differently: a guardrail on the user's
// speech makes the gateway answer a turn itself, after its transcript's
// check, so its calls must not ask; a guardrail on tool calls needs calls
// that make them. Every flow waits for session.created, then speaks each
// turn as one append of 100 ms of silence (the least OpenAI commits) and
// input_audio_buffer.commit. The commit is the end of the turn, what the
// user waits from, so a turn's first audio is measured from it, the first
// turn's too: every turn of these calls is alike.
//
//	FlowCommit         response.create right after the commit, the answer
//	                   to its response.done
//	FlowServerAnswers  nothing more: the server answers by itself (the
//	                   gateway does under a realtime_input_transcription
//	                   guardrail, once the transcript has passed); the
//	                   answer to its response.done. Without anyone to
//	                   answer, the call ends in timeout_first_audio.
//	FlowTool           after session.created, a session.update with one
//	                   function tool and tool_choice required, and its
//	                   session.updated. Each turn: response.create, the
//	                   function call's response to its response.done (no
//	                   audio; without a call: no_tool_call), then a
//	                   function_call_output for the call and response.create,
//	                   and that answer (audio) to its response.done.
type Flow string

// The flows (FlowTurns: turns.go's).
const (
	FlowTurns         Flow = ""
	FlowCommit        Flow = "commit"
	FlowServerAnswers Flow = "server-answers"
	FlowTool          Flow = "tool"
)

// turnAudio is how much silence a flow's turn appends: OpenAI refuses to
// commit less than 100 ms.
const turnAudio = 100 * time.Millisecond

// Messages of the flows.
var (
	// msgTurnAudio appends turnAudio of 24 kHz PCM16 silence in one event.
	msgTurnAudio = []byte(`{"type":"input_audio_buffer.append","audio":"` +
		base64.StdEncoding.EncodeToString(make([]byte, int(turnAudio/audioChunk)*audioChunkBytes)) + `"}`)
	// msgToolSession gives the session one tool and makes every response
	// call it (mockai: a response after a function_call_output speaks).
	msgToolSession = []byte(`{"type":"session.update","session":{"type":"realtime","tool_choice":"required","tools":[` +
		`{"type":"function","name":"lookup_order","description":"Look up an order by its id.",` +
		`"parameters":{"type":"object","properties":{"order_id":{"type":"string"}},"required":["order_id"]}}]}}`)
)

// Event types of the tool flow.
const evArgumentsDone = "response.function_call_arguments.done"

// ParseFlow reads a flow's name ("" or "turns": FlowTurns).
func ParseFlow(s string) (Flow, error) {
	switch f := Flow(s); f {
	case FlowTurns, FlowCommit, FlowServerAnswers, FlowTool:
		return f, nil
	case "turns":
		return FlowTurns, nil
	}
	return "", fmt.Errorf("flow %q: want turns, %s, %s or %s", s, FlowCommit, FlowServerAnswers, FlowTool)
}

// checkFlow validates cfg's flow against the rest of cfg.
func checkFlow(cfg *Config) error {
	if _, err := ParseFlow(string(cfg.Flow)); err != nil {
		return fmt.Errorf("load: %w", err)
	}
	if cfg.Flow == FlowTurns {
		return nil
	}
	if (cfg.Protocol != "" && cfg.Protocol != ProtocolRealtime) || cfg.VAD || cfg.Audio {
		return fmt.Errorf("load: flow %s speaks the Realtime protocol, without VAD turns or streamed audio (it appends its own)", cfg.Flow)
	}
	return nil
}

// flowTurn is one turn of a flow: its audio and commit, then what the
// flow sends, and the answer to its end. It returns the time from the
// commit to the answer's first audio delta.
func (c *Client) flowTurn(ctx context.Context, sess *session, reached Phase) (time.Duration, *turnFailure) {
	send := func(msgs ...[]byte) *turnFailure {
		for _, m := range msgs {
			if err := sess.conn.WriteMessage(websocket.TextMessage, m); err != nil {
				return c.readFailure(ctx, err, reached)
			}
		}
		return nil
	}
	if f := send(msgTurnAudio, msgAudioCommit); f != nil {
		return 0, f
	}
	ended := time.Now()
	switch c.cfg.Flow {
	case FlowServerAnswers:
	case FlowTool:
		if f := send(msgResponseCreate); f != nil {
			return 0, f
		}
		callID, f := c.followToolCall(ctx, sess, reached)
		if f != nil {
			return 0, f
		}
		output, err := functionCallOutput(callID)
		if err != nil {
			return 0, &turnFailure{"protocol", err.Error()}
		}
		if f := send(output, msgResponseCreate); f != nil {
			return 0, f
		}
	default:
		if f := send(msgResponseCreate); f != nil {
			return 0, f
		}
	}
	return c.followResponse(ctx, sess, ended, reached)
}

// followToolCall reads a response that calls a tool to its response.done
// and returns the call's id.
func (c *Client) followToolCall(ctx context.Context, sess *session, reached Phase) (string, *turnFailure) {
	callID := ""
	for {
		msg, err := sess.read()
		if err != nil {
			return "", c.readFailure(ctx, err, reached)
		}
		typ, err := EventType(msg)
		if err != nil {
			return "", &turnFailure{"protocol", err.Error()}
		}
		switch typ {
		case evArgumentsDone:
			id, _, err := stringField(msg, "call_id")
			if err != nil {
				return "", &turnFailure{"protocol", err.Error()}
			}
			callID = id
		case evError:
			class, detail := errorEvent(msg, c.cfg.Key)
			return "", &turnFailure{class, detail}
		case evResponseDone:
			status, err := responseStatus(msg)
			switch {
			case err != nil:
				return "", &turnFailure{"protocol", err.Error()}
			case status != "" && status != "completed":
				return "", &turnFailure{"response_" + sanitizeClass(status), "response.done status " + status}
			case callID == "":
				return "", &turnFailure{"no_tool_call", "the tool turn's response.done without a function call"}
			}
			return callID, nil
		}
	}
}

// functionCallOutput answers the function call callID.
func functionCallOutput(callID string) ([]byte, error) {
	return json.Marshal(map[string]any{"type": "conversation.item.create", "item": map[string]any{
		"type": "function_call_output", "call_id": callID, "output": `{"status":"shipped","eta_days":2}`}})
}
