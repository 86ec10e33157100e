package guarded

import (
	"encoding/json"
	"time"

	"github.com/gobwas/ws"

	"rtgate/frames"
	"rtgate/server/eventtype"
	"rtgate/server/guardrail"
)

// The client's events: session.update rewritten for the input guardrails,
// response.create held while a turn awaits its check, and user text (mode
// pre_call) held until checked with the events behind it.

// textState is the pre_call guardrails' queue, under Session.mu.
type textState struct {
	holding bool     // a user text is being checked: the client's events wait
	queue   [][]byte // the waiting events, in order (payloads)
	// dropCreate: a text was blocked, and the response.create that asks
	// for its answer has not come yet; it is dropped when it does.
	dropCreate bool
}

// clientSide is the client's translator (frames.Translator).
type clientSide Session

// FromClient is the translator for the client's events.
func (s *Session) FromClient() frames.Translator { return (*clientSide)(s) }

func (c *clientSide) Translate(op ws.OpCode, p []byte, out *frames.Output) {
	s := (*Session)(c)
	if op != ws.OpText {
		out.Binary(p)
		return
	}
	if s.queueBehindText(p) {
		return
	}
	typ, _ := eventtype.Of(p[:min(len(p), frames.InspectPrefix)])
	if string(typ) == "conversation.item.create" && len(s.preCall) > 0 && s.holdText(p) {
		return
	}
	if q := s.route(typ, p); q != nil {
		out.Text(q)
	}
}

// route is what becomes of a client event of type typ that no text check
// holds: what goes upstream (nil: nothing, for now).
func (s *Session) route(typ, p []byte) []byte {
	switch string(typ) {
	case "session.update":
		if len(s.input) > 0 {
			return s.clientUpdate(p)
		}
	case "response.create":
		if s.dropBlockedCreate() || len(s.input) > 0 && s.holdCreate(p) {
			return nil
		}
	case "input_audio_buffer.commit":
		if len(s.input) > 0 {
			s.clientCommit()
		}
	case "conversation.item.create":
		s.mu.Lock()
		s.text.dropCreate = false
		s.mu.Unlock()
	}
	return p
}

// queueBehindText queues p while a user text is checked.
func (s *Session) queueBehindText(p []byte) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	t := &s.text
	if !t.holding {
		return false
	}
	t.queue = append(t.queue, append([]byte(nil), p...))
	return true
}

// holdText holds a user message item with text and checks it on a
// goroutine of its own; false for any other item (it goes on).
func (s *Session) holdText(p []byte) bool {
	var ev event
	if json.Unmarshal(p, &ev) != nil || ev.Item.userText() == "" {
		return false
	}
	s.mu.Lock()
	s.text.holding = true
	s.mu.Unlock()
	go s.checkTexts(append([]byte(nil), p...), ev)
	return true
}

// checkTexts checks held user text, then lets the client's waiting events
// go in order (drainTexts): a Realtime session's.
func (s *Session) checkTexts(p []byte, ev event) {
	s.drainTexts(p, ev, "conversation.item.create", s.route)
}

// drainTexts checks held user text p (nil: none), then lets the client's
// waiting events go in order, each user text among them (an event of type
// itemType with user text) checked in turn and each other event passed
// through route (nil: it goes no further); it stops holding once the queue
// is empty, after what it took has gone, so nothing sent meanwhile
// overtakes it.
func (s *Session) drainTexts(p []byte, ev event, itemType string, route func(typ, p []byte) []byte) {
	for {
		if !s.checkText(p, ev) {
			return
		}
		// The queue, up to the next user text.
		var batch [][]byte
		s.mu.Lock()
		t := &s.text
		p = nil
		for len(t.queue) > 0 {
			next := t.queue[0]
			t.queue = t.queue[1:]
			var nev event
			if typ, _ := eventtype.Of(next[:min(len(next), frames.InspectPrefix)]); string(typ) == itemType &&
				json.Unmarshal(next, &nev) == nil && nev.Item.userText() != "" {
				p, ev = next, nev
				break
			}
			batch = append(batch, next)
		}
		if p == nil && len(batch) == 0 {
			t.holding = false
			s.mu.Unlock()
			return
		}
		s.mu.Unlock()
		var send [][]byte
		for _, q := range batch {
			typ, _ := eventtype.Of(q[:min(len(q), frames.InspectPrefix)])
			if r := route(typ, q); r != nil {
				send = append(send, r)
			}
		}
		s.toUpstream(send...)
	}
}

// checkText checks one user text item: passed, it goes upstream; blocked,
// the client gets the error and the response.create waiting behind it is
// dropped. False when the session ended.
func (s *Session) checkText(p []byte, ev event) bool {
	if p == nil {
		return true
	}
	text := ev.Item.userText()
	v, took := s.check(s.preCall, guardrail.PreCall, guardrail.Input{Texts: []string{text}})
	a := Action{At: time.Now(), Mode: guardrail.PreCall, ItemID: ev.Item.ID, Verdict: v, Latency: took, Checked: text}
	if !v.Blocked {
		s.act(a)
		s.toUpstream(p)
		return true
	}
	errEv := violationError(v.Guardrail, v.Reason, ev.EventID)
	if s.violation() {
		a.Ended = true
		s.act(a)
		s.end(errEv)
		return false
	}
	s.act(a)
	s.toClient(errEv)
	s.mu.Lock()
	t := &s.text
	t.dropCreate = true
	for i, q := range t.queue {
		if typ, _ := eventtype.Of(q[:min(len(q), frames.InspectPrefix)]); string(typ) == "response.create" {
			t.queue = append(t.queue[:i], t.queue[i+1:]...)
			t.dropCreate = false
			break
		}
	}
	s.mu.Unlock()
	return true
}

// dropBlockedCreate drops the response.create that follows a blocked text.
func (s *Session) dropBlockedCreate() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.text.dropCreate {
		return false
	}
	s.text.dropCreate = false
	return true
}
