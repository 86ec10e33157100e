package guarded

import (
	"bytes"
	"encoding/json"
	"time"

	"github.com/gobwas/ws"

	"rtgate/frames"
	"rtgate/server/eventtype"
	"rtgate/server/guardrail"
)

// The upstream's events: the session's settings put back to the client's
// view, the user's turns sent for their check, and a response with a
// function call held until every call in it is checked (the package doc).

// callState is the tool guardrails' hold, under Session.mu.
type callState struct {
	holding  bool     // a response with a function call is held
	response string   // its id
	queue    [][]byte // its events from the first call on, in order (payloads)
	queued   int      // their bytes
	done     bool     // its response.done is in the queue
	pending  int      // calls whose check has not finished
	byItem   map[string]*call
	order    []*call
}

// call is one function call of a held response.
type call struct {
	itemID, callID, name, args string
	checked, blocked           bool
	verdict                    guardrail.Verdict
}

// maxHeldResponse bounds what a held response may queue (audio after a
// call); past it the session ends rather than grow without bound.
const maxHeldResponse = 16 << 20

// upstreamSide is the upstream's translator (frames.Translator).
type upstreamSide Session

// FromUpstream is the translator for the upstream's events; a session gets
// a fresh upstream's through the same Session (its holds are the session's).
func (s *Session) FromUpstream() frames.Translator { return (*upstreamSide)(s) }

func (u *upstreamSide) Translate(op ws.OpCode, p []byte, out *frames.Output) {
	s := (*Session)(u)
	if op != ws.OpText {
		if held, _ := s.holdResponse(op, p, nil); !held {
			out.Binary(p)
		}
		return
	}
	typ, _ := eventtype.Of(p[:min(len(p), frames.InspectPrefix)])
	if len(s.outputs) > 0 && !s.holdingCalls() {
		if now, taken := s.holdOutput(p, typ); taken {
			for _, m := range now {
				out.Text(m)
			}
			return
		}
	}
	if held, release := s.holdResponse(op, p, typ); held {
		if release {
			msgs, refusals := s.takeRelease()
			for _, m := range msgs {
				out.Text(m)
			}
			s.refuse(refusals)
		}
		return
	}
	switch string(typ) {
	case "session.created", "session.updated":
		if len(s.input) > 0 {
			client, own, first := s.upstreamSession(p)
			out.Text(client)
			if first {
				go s.started(own)
			}
			return
		}
	case "error":
		if len(s.input) > 0 && bytes.Contains(p, []byte(`"input_audio_buffer_commit_empty"`)) {
			s.commitAnswered(false) // a commit of nothing: no turn to await
		}
	case "input_audio_buffer.committed":
		if len(s.input) > 0 {
			var ev event
			if json.Unmarshal(p, &ev) == nil && ev.ItemID != "" {
				s.committed(ev.ItemID)
			}
		}
	case eventtype.TranscriptionComplete, "conversation.item.input_audio_transcription.failed":
		if len(s.input) > 0 {
			var ev event
			if json.Unmarshal(p, &ev) == nil && ev.ItemID != "" {
				out.Text(p)
				s.transcribed(ev.ItemID, ev.Transcript, ev.Type != eventtype.TranscriptionComplete)
				return
			}
		}
	case "response.output_item.added":
		if len(s.tools) > 0 && s.startHold(p) {
			return
		}
	}
	out.Text(p)
}

// startHold starts holding a response at its first function call's
// output_item.added; false for any other item.
func (s *Session) startHold(p []byte) bool {
	var ev event
	if json.Unmarshal(p, &ev) != nil || ev.Item == nil || ev.Item.Type != "function_call" {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	c := &s.calls
	c.holding = true
	c.response = ev.ResponseID
	c.queue = append(c.queue, append([]byte(nil), p...))
	c.queued += len(p)
	c.add(ev.Item)
	return true
}

// add notes a function call of the held response.
func (c *callState) add(it *item) {
	if _, ok := c.byItem[it.ID]; ok {
		return
	}
	cl := &call{itemID: it.ID, callID: it.CallID, name: it.Name}
	c.byItem[it.ID] = cl
	c.order = append(c.order, cl)
	c.pending++
}

// holdingCalls reports whether a response is held for its calls' check:
// then its events are the call hold's, not the output hold's.
func (s *Session) holdingCalls() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls.holding
}

// holdResponse queues an event of a held response (typ nil: binary),
// reading what the hold needs of it: held is false when no response is
// held; release says the response may go now (its end is queued and every
// call in it checked).
func (s *Session) holdResponse(op ws.OpCode, p, typ []byte) (held, release bool) {
	s.mu.Lock()
	c := &s.calls
	if !c.holding {
		s.mu.Unlock()
		return false, false
	}
	if op == ws.OpText { // a binary message in a Realtime session is dropped while held
		c.queue = append(c.queue, append([]byte(nil), p...))
		c.queued += len(p)
	}
	var check *call
	switch string(typ) {
	case "response.output_item.added":
		var ev event
		if json.Unmarshal(p, &ev) == nil && ev.Item != nil && ev.Item.Type == "function_call" {
			c.add(ev.Item)
		}
	case "response.function_call_arguments.done":
		var ev event
		if json.Unmarshal(p, &ev) == nil {
			if cl, ok := c.byItem[ev.ItemID]; ok && !cl.checked {
				cl.args, cl.checked = ev.Arguments, true
				check = cl
			}
		}
	case "response.done":
		var ev event
		c.done = json.Unmarshal(p, &ev) != nil || ev.Response == nil || c.response == "" || ev.Response.ID == c.response
	}
	over := c.queued > maxHeldResponse
	release = c.done && c.pending == 0
	s.mu.Unlock()
	if over {
		s.cfg.Log.Warn("a response held for its tool calls' check grew past its bound; ending the session",
			"session", s.cfg.CallID, "bytes", maxHeldResponse)
		go s.cfg.Relay.Terminate(ws.StatusInternalServerError, "guardrail hold overflow", nil)
		return true, false
	}
	if check != nil {
		go s.checkCall(check)
	}
	return true, release
}

// checkCall checks one function call, and lets the response go once it
// is the last and the response has ended.
func (s *Session) checkCall(cl *call) {
	v, took := s.check(s.tools, guardrail.ToolCall, guardrail.Input{Response: true,
		ToolCalls: []guardrail.FunctionCall{{ID: cl.callID, Name: cl.name, Arguments: cl.args}}})
	s.mu.Lock()
	cl.verdict, cl.blocked = v, v.Blocked
	c := &s.calls
	c.pending--
	release := c.done && c.pending == 0
	s.mu.Unlock()
	s.act(Action{At: time.Now(), Mode: guardrail.ToolCall, ItemID: cl.itemID, Verdict: v, Latency: took,
		Tool: cl.name, Arguments: cl.args})
	if !release {
		return
	}
	var refusals [][]byte
	s.cfg.Relay.ReleaseToClient(func() [][]byte {
		var msgs [][]byte
		msgs, refusals = s.takeRelease()
		return msgs
	})
	s.refuse(refusals)
}

// takeRelease ends a held response whose end has come and whose calls are
// all checked: what the client gets, in order (a guardrail_violation error
// for each blocked call, then the response's events less the blocked calls'
// and their output items in response.done), and the refusals the upstream
// is to get. Nothing when the hold is not ready (another release took it).
func (s *Session) takeRelease() (msgs, refusals [][]byte) {
	s.mu.Lock()
	c := &s.calls
	if !c.holding || !c.done || c.pending != 0 {
		s.mu.Unlock()
		return nil, nil
	}
	queue, calls := c.queue, c.order
	*c = callState{byItem: map[string]*call{}}
	s.mu.Unlock()

	blocked := map[string]bool{}
	for _, cl := range calls {
		if !cl.blocked {
			continue
		}
		blocked[cl.itemID] = true
		msgs = append(msgs, violationError(cl.verdict.Guardrail, cl.verdict.Reason, ""))
		refusals = append(refusals, ownEvent("conversation.item.create", map[string]any{"item": map[string]any{
			"type": "function_call_output", "call_id": cl.callID,
			"output": "The gateway's guardrail " + cl.verdict.Guardrail + " refused this call; it did not run.",
		}}))
	}
	for _, p := range queue {
		if len(blocked) == 0 {
			msgs = append(msgs, p)
		} else if q := withoutItems(p, blocked); q != nil {
			msgs = append(msgs, q)
		}
	}
	return msgs, refusals
}

// refuse tells the upstream its blocked calls did not run and asks for an
// answer that knows it; or, past the session's violations, ends it. Called
// outside the relay's locks? Not needed: it only sends, from a goroutine of
// its own.
func (s *Session) refuse(refusals [][]byte) {
	if len(refusals) == 0 {
		return
	}
	go func() {
		if s.violation() {
			s.end(violationError("", "the session has reached its guardrail violations", ""))
			return
		}
		s.toUpstream(append(refusals, ownEvent("response.create", nil))...)
	}()
}

// withoutItems is event p without what belongs to the items named: nil for
// an event about one of them, response.done with them taken out of its
// output, p itself otherwise.
func withoutItems(p []byte, items map[string]bool) []byte {
	var ev event
	if json.Unmarshal(p, &ev) != nil {
		return p
	}
	if items[ev.ItemID] || ev.Item != nil && items[ev.Item.ID] {
		return nil
	}
	if ev.Type != "response.done" {
		return p
	}
	var root map[string]json.RawMessage
	if json.Unmarshal(p, &root) != nil {
		return p
	}
	var resp map[string]json.RawMessage
	if json.Unmarshal(root["response"], &resp) != nil {
		return p
	}
	var output []json.RawMessage
	if json.Unmarshal(resp["output"], &output) != nil {
		return p
	}
	kept := output[:0]
	for _, o := range output {
		var it item
		if json.Unmarshal(o, &it) == nil && items[it.ID] {
			continue
		}
		kept = append(kept, o)
	}
	resp["output"], _ = json.Marshal(kept)
	root["response"], _ = json.Marshal(resp)
	b, _ := marshalTypeFirst(root)
	return b
}
