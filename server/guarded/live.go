package guarded

import (
	"bytes"
	"encoding/json"
	"strings"
	"time"

	"github.com/gobwas/ws"

	"rtgate/frames"
	"rtgate/server/eventtype"
	"rtgate/server/guardrail"
	"rtgate/server/protocol"
)

// GPT-Live (../../../shared/live-protocol.md). The model answers on its
// own: there is no create_response to turn off, no response.cancel, no
// conversation.item.truncate. So a Live guard holds the model's output
// (session.output_audio.delta, session.output_transcript.delta,
// session.delegation.created) in the order it came, lets each event go
// once what it depends on has been checked, and on a block drops what it
// holds and what the model says after it, and tells the model with
// session.instructions.append (or a delegation's result).
//
//	mode                            what an output event waits for
//	realtime_input_transcription    the check of the user's turn so far: the
//	                                session.input_transcript.delta text since the
//	                                model last spoke (one check at a time, the
//	                                newest text next), bounded by the guardrails'
//	                                timeout and on_error
//	realtime_output_transcription   a transcript delta: the check of the answer's
//	                                transcript up to it; an audio delta: a checked
//	                                transcript delta whose end_ms reaches the
//	                                audio's end, or the holdback (past it, the
//	                                audio goes on unchecked)
//	realtime_tool_call              a delegation: its check (and what came after
//	                                it waits behind it)
//	pre_call                        (client side) a response.item.create with user
//	                                text: its check; the client's events behind it
//	                                wait
//
// Where an audio delta ends: the primary socket's audio deltas carry no
// timeline position, only the transcript deltas do (start_ms, end_ms on the
// session's timeline). An answer's audio is placed from the start_ms of its
// first transcript delta on, by the bytes of its audio deltas at the
// session's format (session.start's audio.format: PCM16 at 24000 or 16000
// Hz, G.711 at 8000 one byte a sample). An answer is the model's output
// from its first event after the user spoke.
//
// Blocks:
//
//	the user's turn    held output after it dropped; the client a guardrail_violation
//	                   error; upstream session.instructions.append: the turn was
//	                   blocked, say the violation message instead
//	the model's words  held output dropped; the client the error; upstream
//	                   session.instructions.append: the answer was blocked, do not
//	                   repeat it
//	a delegation       never the client's (nor its response.events); the client the
//	                   error; upstream the delegation's result as a refusal:
//	                   session.commentary.append with its delegation_id (client
//	                   delegations), session.instructions.append without one (a
//	                   Responses or Decisions delegation, which takes no id)
//
// After a block the model's output is dropped until the user speaks again
// (an input transcript delta) or the upstream acknowledges the gateway's
// instructions (session.instructions.appended answering them): what comes
// after that is the model's answer to them (the spoken warning). The
// acknowledgements and errors answering the gateway's own events never
// reach the client. end_session_after_n_fails and on_violation end_session
// end the session as for Realtime: the error, then close 1008 (the
// session's farewell sends session.close upstream).

// liveText is the text of one side (the user's or the model's), in turns:
// offsets are cumulative over the session (base is text[0]'s), so that a
// check in flight and the events waiting for it agree on where they are
// while old turns are let go. Under Session.mu.
type liveText struct {
	text     []byte
	base     int
	starts   []int // where the turns not yet settled start, ascending
	checked  int   // the text up to here has passed (or was settled)
	checking bool  // a check runs
}

func (t *liveText) total() int { return t.base + len(t.text) }

// add appends a delta (newTurn: it starts a turn) and returns the text's end.
func (t *liveText) add(delta string, newTurn bool) int {
	if newTurn && !t.checking && t.checked == t.total() {
		t.base, t.text, t.starts = t.total(), t.text[:0], t.starts[:0] // nothing of the old turns is needed now
	}
	if newTurn || len(t.starts) == 0 {
		t.starts = append(t.starts, t.total())
	}
	t.text = append(t.text, delta...)
	return t.total()
}

// next starts the next check, if none runs and text is unchecked: the turn
// the unchecked text begins in, from its start to its end (or the text's).
func (t *liveText) next() (text string, end int, ok bool) {
	if t.checking || t.checked >= t.total() {
		return "", 0, false
	}
	i := 0
	for j, s := range t.starts {
		if s <= t.checked {
			i = j
		}
	}
	t.starts = t.starts[i:]
	s, e := t.starts[0], t.total()
	if len(t.starts) > 1 {
		e = t.starts[1]
	}
	t.checking = true
	return string(t.text[s-t.base : e-t.base]), e, true
}

// turn is the current turn's text.
func (t *liveText) turn() string {
	if len(t.starts) == 0 {
		return ""
	}
	return string(t.text[t.starts[len(t.starts)-1]-t.base:])
}

// settle ends a check that reached end.
func (t *liveText) settle(end int) {
	t.checked = max(t.checked, end)
	t.checking = false
}

// liveAnswer is one answer of the model: where its audio starts on the
// session's timeline (anchor, from its first transcript delta) and how
// much audio it has streamed.
type liveAnswer struct {
	anchor   float64
	anchored bool
	texted   bool // a transcript delta of it came (its text starts a turn of the model's)
	ms       float64
}

// liveHeld is one held upstream event.
type liveHeld struct {
	p      []byte
	at     time.Time
	inEnd  int // the user's text that must have passed first
	audio  bool
	ans    *liveAnswer
	posEnd float64 // an audio delta's end, in ms into its answer
	outEnd int     // a transcript delta: the model's text up to it
	deleg  *liveDeleg
	behind *liveDeleg // a response.event of a held delegation
}

// liveDeleg is a delegation being checked.
type liveDeleg struct {
	id, target, task string
	done             bool
}

// liveMark is a transcript delta not yet passed: its text's end and where
// its audio ends.
type liveMark struct {
	outEnd int
	endMs  float64
}

// liveState is a Live guard's state, under Session.mu.
type liveState struct {
	bytesPerMs float64 // output audio bytes per ms (session.start's audio.format)
	in, out    liveText
	modelSpoke bool // the model's output came since the user's last words
	inBlocked  bool // the user's current turn was blocked: its further words need no check
	dropping   bool // a block: the model's output is dropped (the package doc)
	ownAck     string
	ans        *liveAnswer
	queue      []*liveHeld
	queued     int
	covered    float64 // the session ms up to which checked transcript covers output audio
	marks      []liveMark
	armed      bool
	refused    map[string]bool // blocked delegations: their response.events dropped
}

// maxRefused bounds the blocked delegations remembered (their late
// response.events are dropped).
const maxRefused = 64

// Live is a GPT-Live session's guard: its translators are FromClient and
// FromUpstream; Close ends its checks.
type Live struct {
	s  *Session
	st liveState
}

// NewLive readies a GPT-Live session's guard.
func NewLive(cfg Config) *Live {
	l := &Live{s: New(cfg)}
	l.s.text.holding = false // Live has no session.created to wait for (Realtime's holds the client until it)
	l.st.bytesPerMs = 48     // PCM16 at 24 kHz, Live's default format
	l.st.refused = map[string]bool{}
	return l
}

// Active reports whether any guardrail of the session reads its events.
func (l *Live) Active() bool { return l.s.Active() }

// Close stops the session's checks in flight.
func (l *Live) Close() { l.s.Close() }

// FromClient is the translator for the client's events.
func (l *Live) FromClient() frames.Translator { return (*liveClient)(l) }

// FromUpstream is the translator for the upstream's events.
func (l *Live) FromUpstream() frames.Translator { return (*liveUpstream)(l) }

type liveClient Live

func (c *liveClient) Translate(op ws.OpCode, p []byte, out *frames.Output) {
	l := (*Live)(c)
	s := l.s
	if op != ws.OpText {
		out.Binary(p)
		return
	}
	if s.queueBehindText(p) {
		return
	}
	typ, _ := eventtype.Of(p[:min(len(p), frames.InspectPrefix)])
	switch string(typ) {
	case "session.start":
		l.readStart(p)
	case "response.item.create":
		if len(s.preCall) > 0 && l.holdItem(p) {
			return
		}
	case "response.create":
		if s.dropBlockedCreate() {
			return
		}
	}
	out.Text(p)
}

// readStart reads the output audio's format from session.start.
func (l *Live) readStart(p []byte) {
	var ev struct {
		Session struct {
			Audio struct {
				Format struct {
					Type string  `json:"type"`
					Rate float64 `json:"rate"`
				} `json:"format"`
			} `json:"audio"`
		} `json:"session"`
	}
	if json.Unmarshal(p, &ev) != nil {
		return
	}
	f := ev.Session.Audio.Format
	rate := 48.0
	switch {
	case f.Type == "audio/pcmu" || f.Type == "audio/pcma":
		rate = 8
	case f.Rate == 16000:
		rate = 32
	}
	l.s.mu.Lock()
	l.st.bytesPerMs = rate
	l.s.mu.Unlock()
}

// holdItem holds a response.item.create with user text and checks it on a
// goroutine of its own; false for any other item (it goes on).
func (l *Live) holdItem(p []byte) bool {
	var ev event
	if json.Unmarshal(p, &ev) != nil || ev.Item.userText() == "" {
		return false
	}
	s := l.s
	s.mu.Lock()
	s.text.holding = true
	s.mu.Unlock()
	go l.checkItems(append([]byte(nil), p...), ev)
	return true
}

// checkItems checks held user text, then lets the client's waiting events
// go in order, each response.item.create with user text among them checked
// in turn; a response.create behind a blocked item is dropped.
func (l *Live) checkItems(p []byte, ev event) {
	l.s.drainTexts(p, ev, "response.item.create", func(typ, q []byte) []byte {
		if string(typ) == "response.create" && l.s.dropBlockedCreate() {
			return nil
		}
		return q
	})
}

type liveUpstream Live

func (u *liveUpstream) Translate(op ws.OpCode, p []byte, out *frames.Output) {
	l := (*Live)(u)
	if op != ws.OpText {
		out.Binary(p)
		return
	}
	typ, _ := eventtype.Of(p[:min(len(p), frames.InspectPrefix)])
	switch string(typ) {
	case "session.input_transcript.delta":
		l.heard(p)
	case "session.output_audio.delta", "session.output_transcript.delta", "session.delegation.created":
		for _, m := range l.output(p, string(typ)) {
			out.Text(m)
		}
		return
	case eventtype.LiveResponse:
		if now, taken := l.backend(p); taken {
			for _, m := range now {
				out.Text(m)
			}
			return
		}
	case "session.instructions.appended", "session.commentary.appended", "session.thinking.appended", "error":
		if l.ownAnswer(p, string(typ)) {
			return
		}
	}
	out.Text(p)
}

// ownAnswer reports whether p answers one of the gateway's own events (it
// never reaches the client); the acknowledgement of the instructions a
// block sent ends the block's drop.
func (l *Live) ownAnswer(p []byte, typ string) bool {
	if !bytes.Contains(p, []byte(protocol.OwnEventPrefix)) {
		return false
	}
	var ev struct {
		ClientEventID string `json:"client_event_id"`
		Error         struct {
			ClientEventID string `json:"client_event_id"`
			EventID       string `json:"event_id"`
		} `json:"error"`
	}
	if json.Unmarshal(p, &ev) != nil {
		return false
	}
	id := ev.ClientEventID
	if id == "" {
		id = ev.Error.ClientEventID
	}
	if id == "" {
		id = ev.Error.EventID
	}
	if !strings.HasPrefix(id, protocol.OwnEventPrefix) {
		return false
	}
	if typ == "error" {
		l.s.cfg.Log.Warn("the upstream refused a guardrail's event", "session", l.s.cfg.CallID)
	}
	s := l.s
	s.mu.Lock()
	if typ == "session.instructions.appended" && id == l.st.ownAck {
		l.st.dropping, l.st.ownAck, l.st.ans = false, "", nil
	}
	s.mu.Unlock()
	return true
}

// heard reads the user's words: a delta after the model spoke starts a
// turn (and ends a block's drop); the turn so far is checked.
func (l *Live) heard(p []byte) {
	var d struct {
		Delta string `json:"delta"`
	}
	if json.Unmarshal(p, &d) != nil {
		return
	}
	s, st := l.s, &l.st
	s.mu.Lock()
	newTurn := st.modelSpoke || st.in.total() == 0
	if newTurn {
		st.modelSpoke, st.ans, st.inBlocked = false, nil, false
		st.dropping, st.ownAck = false, ""
	}
	end := st.in.add(d.Delta, newTurn)
	var text string
	var ok bool
	if st.inBlocked {
		st.in.checked = max(st.in.checked, end)
	} else if len(s.input) > 0 {
		text, end, ok = st.in.next()
	}
	s.mu.Unlock()
	if ok {
		go l.checkInput(text, end)
	}
}

// output takes one of the model's output events: what may go to the client
// now, in order (the event itself among them when nothing holds it).
func (l *Live) output(p []byte, typ string) [][]byte {
	s, st := l.s, &l.st
	var d struct {
		Delta      string  `json:"delta"`
		StartMs    float64 `json:"start_ms"`
		EndMs      float64 `json:"end_ms"`
		Delegation struct {
			ID     string `json:"id"`
			Target string `json:"target"`
		} `json:"delegation"`
	}
	if typ != "session.output_audio.delta" {
		if json.Unmarshal(p, &d) != nil {
			return [][]byte{p}
		}
	}
	s.mu.Lock()
	st.modelSpoke = true
	if st.dropping {
		s.mu.Unlock()
		return nil // a blocked turn's or answer's
	}
	if st.ans == nil && typ != "session.delegation.created" {
		st.ans = &liveAnswer{}
	}
	h := &liveHeld{p: append([]byte(nil), p...), at: time.Now()}
	if len(s.input) > 0 {
		h.inEnd = st.in.total()
	}
	var outText string
	var outEnd int
	var outOK bool
	var deleg *liveDeleg
	switch typ {
	case "session.output_audio.delta":
		h.audio, h.ans = true, st.ans
		st.ans.ms += float64(audioBytes(p)) / st.bytesPerMs
		h.posEnd = st.ans.ms
	case "session.output_transcript.delta":
		if !st.ans.anchored {
			st.ans.anchor, st.ans.anchored = d.StartMs, true
		}
		if len(s.outputs) > 0 {
			h.outEnd = st.out.add(d.Delta, !st.ans.texted)
			st.marks = append(st.marks, liveMark{outEnd: h.outEnd, endMs: d.EndMs})
			outText, outEnd, outOK = st.out.next()
		}
		st.ans.texted = true
	case "session.delegation.created":
		if len(s.tools) > 0 {
			deleg = &liveDeleg{id: d.Delegation.ID, target: d.Delegation.Target, task: st.in.turn()}
			h.deleg = deleg
		}
	}
	st.queue = append(st.queue, h)
	st.queued += len(p)
	over := st.queued > maxHeldResponse
	now := l.releasable(time.Now())
	arm := l.arm()
	s.mu.Unlock()
	if over {
		s.cfg.Log.Warn("output held for its guardrails' checks grew past its bound; ending the session",
			"session", s.cfg.CallID, "bytes", maxHeldResponse)
		go s.cfg.Relay.Terminate(ws.StatusInternalServerError, "guardrail hold overflow", nil)
	}
	if outOK {
		go l.checkOutput(outText, outEnd)
	}
	if deleg != nil {
		go l.checkDelegation(deleg)
	}
	if arm > 0 {
		time.AfterFunc(arm, l.holdbackDue)
	}
	return now
}

// backend takes a response.event: one of a blocked delegation's is
// dropped, one of a held delegation's waits behind it.
func (l *Live) backend(p []byte) (now [][]byte, taken bool) {
	if len(l.s.tools) == 0 {
		return nil, false
	}
	var ev struct {
		DelegationID string `json:"delegation_id"`
	}
	if json.Unmarshal(p, &ev) != nil || ev.DelegationID == "" {
		return nil, false
	}
	s, st := l.s, &l.st
	s.mu.Lock()
	defer s.mu.Unlock()
	if st.refused[ev.DelegationID] {
		return nil, true
	}
	var held *liveDeleg
	for _, h := range st.queue {
		if h.deleg != nil && h.deleg.id == ev.DelegationID {
			held = h.deleg
		}
	}
	if held == nil {
		return nil, false
	}
	st.queue = append(st.queue, &liveHeld{p: append([]byte(nil), p...), at: time.Now(), behind: held})
	st.queued += len(p)
	return l.releasable(time.Now()), true
}

// ready reports whether held event h may go (in its order). Callers hold mu.
func (l *Live) ready(h *liveHeld) bool {
	s, st := l.s, &l.st
	switch {
	case h.inEnd > st.in.checked:
		return false
	case h.deleg != nil && !h.deleg.done, h.behind != nil && !h.behind.done:
		return false
	case h.audio && len(s.outputs) > 0:
		return h.ans.anchored && h.ans.anchor+h.posEnd <= st.covered+1 // transcript ms are whole
	case h.outEnd > 0:
		return h.outEnd <= st.out.checked
	}
	return true
}

// releasable takes from the queue what may go now, in order; audio past
// the holdback goes ahead (once the user's text before it has passed).
// Callers hold mu.
func (l *Live) releasable(now time.Time) [][]byte {
	s, st := l.s, &l.st
	var out [][]byte
	inOrder := true
	kept := st.queue[:0]
	for _, h := range st.queue {
		late := h.audio && len(s.outputs) > 0 && now.Sub(h.at) >= s.holdback && h.inEnd <= st.in.checked
		if inOrder && l.ready(h) || late {
			out = append(out, h.p)
			st.queued -= len(h.p)
			continue
		}
		inOrder = false
		kept = append(kept, h)
	}
	clear(st.queue[len(kept):])
	st.queue = kept
	return out
}

// arm returns when the oldest held audio is due, if a timer is to be armed
// for it. Callers hold mu.
func (l *Live) arm() time.Duration {
	s, st := l.s, &l.st
	if st.armed || len(s.outputs) == 0 {
		return 0
	}
	for _, h := range st.queue {
		if h.audio {
			st.armed = true
			return max(s.holdback-time.Since(h.at), time.Millisecond)
		}
	}
	return 0
}

// holdbackDue lets audio past the holdback go.
func (l *Live) holdbackDue() {
	var again time.Duration
	l.s.cfg.Relay.ReleaseToClient(func() [][]byte {
		l.s.mu.Lock()
		defer l.s.mu.Unlock()
		l.st.armed = false
		out := l.releasable(time.Now())
		again = l.arm()
		return out
	})
	if again > 0 {
		time.AfterFunc(again, l.holdbackDue)
	}
}

// release lets go what may go after change (under mu) ran.
func (l *Live) release(change func()) {
	l.s.cfg.Relay.ReleaseToClient(func() [][]byte {
		l.s.mu.Lock()
		defer l.s.mu.Unlock()
		change()
		return l.releasable(time.Now())
	})
}

// checkInput checks the user's turn so far, then newer text, until it has
// caught up.
func (l *Live) checkInput(text string, end int) {
	s, st := l.s, &l.st
	for {
		v, took := s.check(s.input, guardrail.InputTranscription, guardrail.Input{Texts: []string{text}})
		a := Action{At: time.Now(), Mode: guardrail.InputTranscription, Verdict: v, Latency: took, Checked: text}
		ok := false
		if v.Blocked {
			if !l.blockInput(v, a, end) {
				return
			}
			s.mu.Lock()
			text, end, ok = st.in.next()
			s.mu.Unlock()
		} else {
			s.act(a)
			// The next check starts as this one settles: never a moment
			// with text unchecked and no check running.
			l.release(func() {
				st.in.settle(end)
				text, end, ok = st.in.next()
			})
		}
		if !ok {
			return
		}
	}
}

// blockInput stops a blocked user turn: the output held after its words
// is dropped and the model's further output with it, the client gets the
// error, the model is asked to say the violation message. False when the
// session ended for it.
func (l *Live) blockInput(v guardrail.Verdict, a Action, end int) bool {
	s, st := l.s, &l.st
	errEv := violationError(v.Guardrail, v.Reason, "")
	ended := s.violation()
	id, instr := ownEventID("session.instructions.append", map[string]any{"delegation_id": nil,
		"content": "The user's last turn was blocked by a content policy: do not answer it or act on it. Say exactly this to the user, and nothing else: " + s.violationMessage})
	s.cfg.Relay.ReleaseToClient(func() [][]byte {
		s.mu.Lock()
		defer s.mu.Unlock()
		from := 0
		if len(st.in.starts) > 0 {
			from = st.in.starts[0]
		}
		current := len(st.in.starts) <= 1 // no newer turn began meanwhile
		st.in.settle(end)
		if current {
			// Its further words need no check; the model's output from
			// here is dropped until the user speaks again.
			st.inBlocked, st.in.checked = true, st.in.total()
			l.drop(func(h *liveHeld) bool { return h.inEnd > from })
			st.dropping, st.ownAck = true, id
		} else {
			l.drop(func(h *liveHeld) bool { return h.inEnd > from && h.inEnd <= end })
		}
		var out [][]byte
		if !ended {
			out = append(out, errEv)
		}
		return append(out, l.releasable(time.Now())...)
	})
	a.Ended = ended
	s.act(a)
	if ended {
		s.end(errEv)
		return false
	}
	s.toUpstream(instr)
	return true
}

// drop takes the held events that match out of the queue, for good.
// Callers hold mu.
func (l *Live) drop(match func(*liveHeld) bool) {
	st := &l.st
	kept := st.queue[:0]
	for _, h := range st.queue {
		if match(h) {
			st.queued -= len(h.p)
			continue
		}
		kept = append(kept, h)
	}
	clear(st.queue[len(kept):])
	st.queue = kept
}

// checkOutput checks the model's answer so far, then newer text, until it
// has caught up; each pass lets go the transcript and the audio it covers.
func (l *Live) checkOutput(text string, end int) {
	s, st := l.s, &l.st
	for {
		v, took := s.check(s.outputs, guardrail.OutputTranscription, guardrail.Input{Response: true, Texts: []string{text}})
		a := Action{At: time.Now(), Mode: guardrail.OutputTranscription, Verdict: v, Latency: took, Checked: text}
		if v.Blocked {
			l.cutOutput(v, a)
			return
		}
		ok := false
		s.act(a)
		l.release(func() {
			st.out.settle(end)
			kept := st.marks[:0]
			for _, m := range st.marks {
				if m.outEnd <= end {
					st.covered = max(st.covered, m.endMs)
					continue
				}
				kept = append(kept, m)
			}
			st.marks = kept
			if !st.dropping {
				text, end, ok = st.out.next()
			}
		})
		if !ok {
			return
		}
	}
}

// cutOutput stops an answer whose words were blocked: what is held of the
// model's output is dropped and what it says next with it (the package
// doc), the client gets the error, the model is told not to repeat it.
func (l *Live) cutOutput(v guardrail.Verdict, a Action) {
	s, st := l.s, &l.st
	errEv := violationError(v.Guardrail, v.Reason, "")
	ended := s.violation()
	id, instr := ownEventID("session.instructions.append", map[string]any{"delegation_id": nil,
		"content": "Your last answer was blocked by a content policy and cut off; the user did not hear the rest of it. Do not repeat it or say what it said."})
	s.cfg.Relay.ReleaseToClient(func() [][]byte {
		s.mu.Lock()
		defer s.mu.Unlock()
		st.out.checked, st.out.checking = st.out.total(), false
		st.marks = st.marks[:0]
		l.drop(func(*liveHeld) bool { return true })
		st.dropping, st.ownAck, st.ans = true, id, nil
		if ended {
			return nil
		}
		return [][]byte{errEv}
	})
	a.Ended = ended
	s.act(a)
	if ended {
		s.end(errEv)
		return
	}
	s.toUpstream(instr)
}

// checkDelegation checks a delegation with the task it carries: the
// event is metadata only ("not the task text", the SDK says), so the task
// is the user's turn that led to it, as a client delegation's handler
// reads it.
func (l *Live) checkDelegation(d *liveDeleg) {
	s, st := l.s, &l.st
	args, _ := json.Marshal(map[string]string{"target": d.target, "transcript": d.task})
	v, took := s.check(s.tools, guardrail.ToolCall, guardrail.Input{Response: true,
		ToolCalls: []guardrail.FunctionCall{{ID: d.id, Name: "delegate_to_" + d.target, Arguments: string(args)}}})
	a := Action{At: time.Now(), Mode: guardrail.ToolCall, ItemID: d.id, Verdict: v, Latency: took,
		Tool: "delegate_to_" + d.target, Arguments: string(args)}
	if !v.Blocked {
		s.act(a)
		l.release(func() { d.done = true })
		return
	}
	errEv := violationError(v.Guardrail, v.Reason, "")
	ended := s.violation()
	s.cfg.Relay.ReleaseToClient(func() [][]byte {
		s.mu.Lock()
		defer s.mu.Unlock()
		d.done = true
		if len(st.refused) >= maxRefused {
			clear(st.refused)
		}
		st.refused[d.id] = true
		l.drop(func(h *liveHeld) bool { return h.deleg == d || h.behind == d })
		var out [][]byte
		if !ended {
			out = append(out, errEv)
		}
		return append(out, l.releasable(time.Now())...)
	})
	a.Ended = ended
	s.act(a)
	if ended {
		s.end(errEv)
		return
	}
	refusal := "The gateway's guardrail " + v.Guardrail + " refused this task; it was not carried out. Tell the user it cannot be done."
	if d.target == "client" {
		_, ev := ownEventID("session.commentary.append", map[string]any{"delegation_id": d.id, "content": refusal})
		s.toUpstream(ev)
		return
	}
	_, ev := ownEventID("session.instructions.append", map[string]any{"delegation_id": nil,
		"content": "The gateway's guardrail " + v.Guardrail + " refused delegation " + d.id + ": do not use its result. Tell the user it cannot be done."})
	s.toUpstream(ev)
}

// audioBytes is the decoded size of an audio delta's base64.
func audioBytes(p []byte) int {
	i := bytes.Index(p, []byte(`"delta":"`))
	if i < 0 {
		return 0
	}
	rest := p[i+len(`"delta":"`):]
	end := bytes.IndexByte(rest, '"')
	if end < 0 {
		return 0
	}
	b := rest[:end]
	n := len(b) * 3 / 4
	for k := len(b) - 1; k >= 0 && k >= len(b)-2 && b[k] == '='; k-- {
		n--
	}
	return n
}
