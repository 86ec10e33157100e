package guarded

import (
	"bytes"
	"encoding/json"
	"time"

	"rtgate/server/eventtype"
	"rtgate/server/guardrail"
)

// The model's output (mode realtime_output_transcription, rtgate's): the
// assistant's transcript (and text) is checked as it streams, and the
// response's events wait for the check of the transcript that covers them,
// in order: audio that came before a transcript delta is covered by it.
// Audio waits at most the holdback (DefaultHoldback, or the guardrails'
// holdback_ms): past it, it goes on unchecked, so that a slow guardrail
// or a transcript that lags the audio never stalls the call for longer.
//
//	state     event                                     next, and what is sent
//	open      an output delta (audio, transcript, text)  holding: it and every event after it
//	                                                    queue, released in order as checks pass
//	holding   transcript or text delta                  holding: the text so far is checked (one
//	                                                    check at a time; the newest text next)
//	holding   check passed                              holding: the queue up to the next
//	                                                    unchecked text goes
//	holding   audio older than the holdback             holding: it goes (ahead of the text)
//	holding   response.done released                    open
//	holding   check blocked                             blocked: held output dropped; the client
//	                                                    a guardrail_violation; upstream
//	                                                    response.cancel and
//	                                                    conversation.item.truncate at the audio
//	                                                    the caller got
//	blocked   any output of the response                blocked: dropped (the text-bearing done
//	                                                    events and response.done's items too)
//	blocked   response.done                             open
//
// One response's output is held at a time: an out-of-band response that
// speaks while another does is held with it.

// DefaultHoldback is how long audio waits for its transcript's check.
const DefaultHoldback = 300 * time.Millisecond

// heldOutput is one queued upstream event of the output hold.
type heldOutput struct {
	p       []byte
	at      time.Time
	audio   bool // an audio delta (may go ahead of its text past the holdback)
	textEnd int  // a transcript or text delta: the text's length up to its end; else 0
	final   bool // the transcript's or text's done: it covers all audio before it
}

// outputState is the output guardrails' hold, under Session.mu.
type outputState struct {
	holding  bool
	blocked  bool
	queue    []*heldOutput
	text     []byte          // the response's transcript and text so far
	checked  int             // how much of text has passed
	checking bool            // a check is running
	items    map[string]bool // the response's output items (for the cut)
	audioMs  float64         // the audio the client got of it (truncate's audio_end_ms)
	armed    bool            // the holdback's timer is armed
}

// outputEventKind is what an upstream event is to the output hold.
func outputEventKind(typ []byte) (delta, audio, textDone bool) {
	switch string(typ) {
	case "response.output_audio.delta", "response.audio.delta":
		return true, true, false
	case "response.output_audio_transcript.delta", "response.audio_transcript.delta", "response.output_text.delta", "response.text.delta":
		return true, false, false
	case "response.output_audio_transcript.done", "response.audio_transcript.done", "response.output_text.done", "response.text.done",
		"response.content_part.done", "response.output_item.done":
		return false, false, true
	}
	return false, false, false
}

// holdOutput queues the upstream event p (type typ) while the output is
// held, starting the hold at the response's first output delta. It
// returns what may go to the client now, in order, and whether p was
// taken (held, or dropped for a blocked response).
func (s *Session) holdOutput(p, typ []byte) (now [][]byte, taken bool) {
	delta, audio, textDone := outputEventKind(typ)
	isDone := string(typ) == "response.done"
	s.mu.Lock()
	o := &s.output
	if !o.holding && !delta {
		s.mu.Unlock()
		return nil, false
	}
	if !o.holding {
		*o = outputState{holding: true, items: map[string]bool{}}
	}
	if o.blocked {
		switch {
		case isDone:
			items := o.items
			*o = outputState{}
			s.mu.Unlock()
			if q := withoutItems(p, items); q != nil {
				return [][]byte{q}, true
			}
			return nil, true
		case delta || textDone:
			s.mu.Unlock()
			return nil, true // the cut response's output: never the client's
		}
		s.mu.Unlock()
		return [][]byte{p}, true // anything else of the session goes on
	}
	h := &heldOutput{p: append([]byte(nil), p...), at: time.Now(), audio: audio}
	var check []byte
	if delta && !audio {
		var ev event
		var d struct {
			Delta string `json:"delta"`
		}
		if json.Unmarshal(p, &ev) == nil && json.Unmarshal(p, &d) == nil {
			o.items[ev.ItemID] = true
			o.text = append(o.text, d.Delta...)
			h.textEnd = len(o.text)
			if !o.checking {
				o.checking = true
				check = bytes.Clone(o.text)
			}
		}
	}
	if textDone && (string(typ) != "response.content_part.done" && string(typ) != "response.output_item.done") {
		h.final, h.textEnd = true, len(o.text)
		if !o.checking && o.checked < len(o.text) {
			o.checking = true
			check = bytes.Clone(o.text)
		}
	}
	o.queue = append(o.queue, h)
	now = s.releasable(time.Now())
	arm := s.armHoldback()
	s.mu.Unlock()
	if check != nil {
		go s.checkOutput(check)
	}
	if arm > 0 {
		time.AfterFunc(arm, s.holdbackDue)
	}
	return now, true
}

// releasable takes from the hold what may go now, in order: each event
// once everything before it has gone and, for a text delta, once its text
// has passed; for audio, once a checked text delta covers it (one that came
// at least the transcript lag after it, or the transcript's done); and,
// out of order, audio past the holdback. A released response.done ends the
// hold. Callers hold mu.
func (s *Session) releasable(now time.Time) [][]byte {
	o := &s.output
	var out [][]byte
	inOrder := true
	kept := o.queue[:0]
	for i, h := range o.queue {
		switch {
		case inOrder && !h.audio && (h.textEnd == 0 || h.textEnd <= o.checked):
		case inOrder && h.audio && s.covered(i):
		case h.audio && now.Sub(h.at) >= s.holdback:
		default:
			inOrder = false
			kept = append(kept, h)
			continue
		}
		out = append(out, h.p)
		if h.audio {
			o.audioMs += audioMs(h.p)
		}
		if inOrder && isResponseDone(h.p) {
			// The response ended: whatever follows is the next one's
			// (or none), and starts a hold of its own.
			inOrder = false
		}
	}
	o.queue = kept
	if len(o.queue) == 0 && len(out) > 0 && isResponseDone(out[len(out)-1]) {
		*o = outputState{}
	}
	return out
}

// covered reports whether the audio delta queue[i] is covered by checked
// text: a text delta after it, late enough (the transcript lag), or the
// transcript's end, whose text has passed. Callers hold mu.
func (s *Session) covered(i int) bool {
	o := &s.output
	a := o.queue[i]
	for _, h := range o.queue[i+1:] {
		switch {
		case h.final && h.textEnd <= o.checked:
			return true
		case h.final || h.textEnd == 0 || h.textEnd > o.checked:
		case h.at.Sub(a.at) >= s.transcriptLag:
			return true
		}
	}
	return false
}

// isResponseDone reports whether p is a response.done.
func isResponseDone(p []byte) bool {
	typ, _ := eventtype.Of(p[:min(len(p), 256)])
	return string(typ) == "response.done"
}

// audioMs is the duration of an audio delta's PCM16 24 kHz audio (48 bytes
// a millisecond), from its base64's length.
func audioMs(p []byte) float64 { return float64(audioBytes(p)) / 48 }

// armHoldback returns when the oldest waiting audio is due, if a timer is
// to be armed for it (none armed yet). Callers hold mu.
func (s *Session) armHoldback() time.Duration {
	o := &s.output
	if o.armed {
		return 0
	}
	for _, h := range o.queue {
		if h.audio {
			o.armed = true // holdbackDue disarms it
			return max(s.holdback-time.Since(h.at), time.Millisecond)
		}
	}
	return 0
}

// holdbackDue lets audio past the holdback go.
func (s *Session) holdbackDue() {
	var again time.Duration
	s.cfg.Relay.ReleaseToClient(func() [][]byte {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.output.armed = false
		if !s.output.holding {
			return nil
		}
		out := s.releasable(time.Now())
		again = s.armHoldback()
		return out
	})
	if again > 0 {
		time.AfterFunc(again, s.holdbackDue)
	}
}

// checkOutput checks the response's text so far, then the newer text
// that came meanwhile, until it has caught up; each pass lets go what it
// covers, a block cuts the response.
func (s *Session) checkOutput(text []byte) {
	for text != nil {
		v, took := s.check(s.outputs, guardrail.OutputTranscription, guardrail.Input{Response: true, Texts: []string{string(text)}})
		if v.Blocked {
			s.cutOutput(v, took, string(text))
			return
		}
		if v.Errored {
			s.act(Action{At: time.Now(), Mode: guardrail.OutputTranscription, Verdict: v, Latency: took, Checked: string(text)})
		}
		var next []byte
		s.cfg.Relay.ReleaseToClient(func() [][]byte {
			s.mu.Lock()
			defer s.mu.Unlock()
			o := &s.output
			if !o.holding || o.blocked {
				o.checking = false
				return nil
			}
			o.checked = max(o.checked, len(text))
			if len(o.text) > o.checked {
				next = bytes.Clone(o.text)
			} else {
				o.checking = false
			}
			return s.releasable(time.Now())
		})
		text = next
	}
}

// cutOutput stops a response whose text was blocked: the client gets the
// error in place of what was held; the upstream cancels the response and
// truncates its item at the audio the caller got, so the model's context
// matches the call.
func (s *Session) cutOutput(v guardrail.Verdict, took time.Duration, text string) {
	var items []string
	var heardMs float64
	errEv := violationError(v.Guardrail, v.Reason, "")
	end := s.violation()
	s.cfg.Relay.ReleaseToClient(func() [][]byte {
		s.mu.Lock()
		defer s.mu.Unlock()
		o := &s.output
		o.blocked, o.checking = true, false
		heardMs = o.audioMs
		for id := range o.items {
			items = append(items, id)
		}
		// What was held and is not output goes on after the error (which
		// the end's notice carries instead when the session ends).
		var out [][]byte
		if !end {
			out = append(out, errEv)
		}
		for _, h := range o.queue {
			typ, _ := eventtype.Of(h.p[:min(len(h.p), 256)])
			if d, _, done := outputEventKind(typ); d || done {
				continue
			}
			if string(typ) == "response.done" {
				if q := withoutItems(h.p, o.items); q != nil {
					out = append(out, q)
				}
				*o = outputState{}
				break
			}
			out = append(out, h.p)
		}
		if o.holding {
			o.queue = nil
		}
		return out
	})
	a := Action{At: time.Now(), Mode: guardrail.OutputTranscription, Verdict: v, Latency: took, Checked: text, Ended: end}
	s.act(a)
	if end {
		s.end(errEv)
		return
	}
	events := [][]byte{ownEvent("response.cancel", nil)}
	for _, id := range items {
		events = append(events, ownEvent("conversation.item.truncate", map[string]any{
			"item_id": id, "content_index": 0, "audio_end_ms": int(heardMs)}))
	}
	s.toUpstream(events...)
}
