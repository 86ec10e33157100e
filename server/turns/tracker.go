// Package turns measures a voice session's turns: how long the caller waited
// for the first audio of an answer, how long the answer took, and how it
// ended. The protocol says what each upstream event is to a turn
// (protocol.Protocol.Turn); the client's events the gateway forwards say when
// the upstream had what it needed to answer (Watch.Client); a Tracker per
// session follows both through the tables below; Metrics exports what the
// trackers measure.
//
// # When a turn's clock starts
//
// At the moment the upstream had what it needed to answer, never at the
// upstream's response.created: an upstream that is slow to start a response
// (queueing, a loaded region, a cold model) sends response.created late,
// together with its first audio, and a clock started there measures nothing
// of the wait. Whichever the response answers:
//
//   - a response.create the gateway forwarded upstream (the client's): the
//     moment it was forwarded. Forwarded creates are matched to
//     response.created first in, first out, per conversation: "auto" (the
//     default) apart from "none" (out of band); the upstream answers each
//     create in order with response.created or an error, so an error that
//     refuses a create (its event_id, or, without one, a code that refuses
//     a create) takes it off the queue.
//   - server VAD (server_vad or semantic_vad with create_response): the
//     moment the gateway forwarded the audio that speech_stopped's
//     audio_end_ms points at (audioClock), not the event's arrival (a slow
//     upstream sends that late too). When that audio is no longer known
//     (older than the clock keeps), the event's arrival less the silence
//     window.
//   - a commit of the audio buffer with server VAD's create_response: the
//     moment it was forwarded, unless a response.create follows it (the
//     response then answers the create).
//   - none of them seen (a resume's replay, an upstream that answers on its
//     own): the response.created's arrival.
//
// A VAD speech end or commit answers the next response of the "auto"
// conversation when it was forwarded before the oldest create still waiting;
// otherwise that create does.
//
// # A turn, per the Realtime API (responses kept by id)
//
//	event                                 measured
//	response.created                      the response's start (above); kind: voice, text
//	                                      (output_modalities ["text"]) or out of band
//	                                      (conversation_id null)
//	its first audio/text delta            first output = now - start (response_id picks the
//	                                      response when more than one is open)
//	later deltas                          nothing: no lock, no clock read, no allocation
//	response.done, a tool call, no output the turn goes on: the client runs the tool; the next
//	                                      response after the client's function_call_output
//	                                      and response.create restarts the clock at that
//	                                      create, and the time between is tool time
//	response.done, otherwise              duration = now - the turn's start; outcome
//	error refusing a create               the create leaves the queue (no turn)
//	error server_error / rate limit       a penalty sample (Event.Penalty)
//	the session ends                      open turns unfinished
//
// Out-of-band responses (conversation "none") and text-only responses in a
// voice session are measured apart (Kind) and are not turns: they never
// feed the voice first-audio figures, the turn counts or routing. In a
// text-only session (output_modalities ["text"]) text responses are its
// turns, and their first output routes.
//
// # Failures
//
// A turn the upstream fails is a penalty sample for latency routing
// (Event.Penalty): a response.done with status failed, unless its error is
// the client's own (invalid_request_error); an error event of type
// server_error or a rate limit; a response, or a forwarded create, with no
// output after FirstOutputBound (seen at its response.done or the session's
// end).
//
// # A turn, per GPT-Live (liveTurn)
//
// GPT-Live sends no response or done events; InputSpeech is an input
// transcript delta, FirstOutput an output audio delta:
//
//	idle      InputSpeech                         open      start = now
//	open      InputSpeech, no output              open      start = now (the user is still talking)
//	open      FirstOutput                         open      first audio = now - start
//	open      InputSpeech after output            open      the turn that spoke ends, completed;
//	                                                        the next starts, start = now
//	open      the session ends, after output      -         outcome completed (unfinished without)
//
// Outcomes: completed, interrupted (status cancelled: reason turn_detected
// or client_cancelled), failed, incomplete, unfinished.
package turns

import (
	"bytes"
	"encoding/json"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"rtgate/internal/jsonscan"
	"rtgate/internal/sketch"
)

// Outcomes of a turn, the outcome label of rtgate_turns_total.
const (
	Completed   = "completed"
	Interrupted = "interrupted"
	Failed      = "failed"
	Incomplete  = "incomplete"
	Unfinished  = "unfinished"
)

// FirstOutputBound is how long a response (or a forwarded create) may go
// without its first output before the turn counts as failed by the
// upstream (a penalty sample; balance.Penalty is what it weighs in
// routing).
const FirstOutputBound = 10 * time.Second

// Kind is what a response is to the figures.
type Kind uint8

const (
	Voice     Kind = iota // an answer of the conversation that speaks
	Text                  // output_modalities ["text"]
	OutOfBand             // conversation "none"
)

// String is the kind as the kind label says it.
func (k Kind) String() string { return [...]string{"voice", "text", "out_of_band"}[k] }

// Event is what one mark measured, for the caller to export.
type Event struct {
	Kind Kind
	// Routes: the figure feeds latency routing (a voice turn; a text
	// turn of a text-only session).
	Routes bool
	// FirstAudio is set (HasFirstAudio) at the response's first output
	// (audio, or text for a text response).
	FirstAudio    time.Duration
	HasFirstAudio bool
	// Tool is the client's time running a tool within a turn (HasTool,
	// at the response after it): from the tool call's response.done to
	// the client's create.
	Tool    time.Duration
	HasTool bool
	// Penalty: the upstream failed the turn.
	Penalty bool
	// Outcome is set when the turn ended, with its Duration.
	Outcome  string
	Duration time.Duration
}

// Tracker follows one session's turns. The upstream's read path drives it
// with the upstream's events, the client's with the events the gateway
// forwarded; its mutex guards what both touch, and the upstream's deltas
// after a response's first pass it by an atomic count (waiting).
type Tracker struct {
	// Now is the clock (time.Now when nil).
	Now func() time.Time
	// Observe gets every Event measured (nil: none are kept but the
	// session's summary).
	Observe func(Event)

	waiting atomic.Int32 // open responses (or a Live turn) without output yet
	timed   atomic.Bool  // server VAD is on: forwarded audio is timed (audioClock)

	// mu is a leaf, taken under either of the relay's locks (its client
	// lock on the upstream's read path, its upstream lock on the
	// client's): Observe is called after it is let go (emit), so that
	// what Observe takes (the balancer's mutex) is never under it.
	mu sync.Mutex
	// What the upstream's configuration says.
	silence        time.Duration
	perMS          float64 // bytes of input audio per millisecond; 0: PCM16 at 24 kHz
	createResponse bool    // server VAD creates responses itself
	textSession    bool    // output_modalities ["text"]
	turns          int
	firstAudio     *sketch.Durations // nil until the first turn with output
	// The turns' state, made at the session's first create, append,
	// response or speech (an idle session has none).
	*turnState
}

// turnState is what a session's turns keep once it has some.
type turnState struct {
	// What the gateway forwarded (Watch.Client).
	creates [2]queue // by conversation: auto, none
	audio   audioClock
	commit  time.Time // a forwarded commit that a VAD response may answer
	// What the upstream said.
	trigger time.Time // a VAD speech end not answered yet
	open    []*response
	chain   chain // a tool call's turn, waiting for the client's output
	live    liveTurn
}

// state is the turns' state, made on first use (mu held).
func (t *Tracker) state() *turnState {
	if t.turnState == nil {
		t.turnState = &turnState{}
	}
	return t.turnState
}

// response is one open response, by id.
type response struct {
	id         string
	start      time.Time // its clock's start
	turnStart  time.Time // its turn's (a tool chain's first response's)
	kind       Kind
	routes     bool
	output     bool
	turn       bool // a turn (not out of band nor a voice session's text)
	fromCreate bool // answers a forwarded create
}

// chain is a turn whose last response called a tool without output.
type chain struct {
	active    bool
	turnStart time.Time
	doneAt    time.Time
	kind      Kind
	routes    bool
}

func (t *Tracker) now() time.Time {
	if t.Now != nil {
		return t.Now()
	}
	return time.Now()
}

// events is what one mark measured, emitted once the lock is let go.
type events struct {
	n int
	e [6]Event
}

func (es *events) add(ev Event) {
	if es.n < len(es.e) {
		es.e[es.n] = ev
		es.n++
	}
}

// update runs f under the lock when the session has turns, then emits what
// it measured.
func (t *Tracker) update(f func(st *turnState, now time.Time, es *events)) {
	var es events
	t.mu.Lock()
	if st := t.turnState; st != nil {
		f(st, t.now(), &es)
	}
	t.mu.Unlock()
	t.emit(&es)
}

func (t *Tracker) emit(es *events) {
	for i := range es.n {
		if t.Observe != nil {
			t.Observe(es.e[i])
		}
	}
}

// output is the first output of one of the open responses: respID is the
// response_id its delta carries, read only when more than one response
// waits. A delta after every open response's first costs an atomic load.
func (t *Tracker) output(prefix []byte) {
	if t.waiting.Load() == 0 {
		return // the hot path: every delta after the first
	}
	var es events
	t.mu.Lock()
	now := t.now()
	if t.live.open {
		t.liveOutput(now, &es)
	} else if r := t.deltaOf(prefix); r != nil && !r.output {
		r.output = true
		t.waiting.Add(-1)
		ev := Event{Kind: r.kind, Routes: r.routes, FirstAudio: max(now.Sub(r.start), 0), HasFirstAudio: true}
		if r.routes {
			t.countFirstAudio(ev.FirstAudio)
		}
		es.add(ev)
	}
	t.mu.Unlock()
	t.emit(&es)
}

// deltaOf is the open response a delta belongs to: the only one, else the
// one its response_id names, else the only one still without output.
func (t *Tracker) deltaOf(prefix []byte) *response {
	if len(t.open) == 1 {
		return t.open[0]
	}
	if id, ok := jsonscan.String(prefix, `"response_id"`); ok {
		for _, r := range t.open {
			if r.id == string(id) {
				return r
			}
		}
	}
	var only *response
	for _, r := range t.open {
		if !r.output {
			if only != nil {
				return nil
			}
			only = r
		}
	}
	return only
}

func (t *Tracker) countFirstAudio(d time.Duration) {
	if t.firstAudio == nil {
		t.firstAudio = &sketch.Durations{}
	}
	t.firstAudio.Add(d)
}

// createdEvent is what response.created says of a response.
type createdEvent struct {
	Response struct {
		ID               string          `json:"id"`
		ConversationID   json.RawMessage `json:"conversation_id"`
		OutputModalities []string        `json:"output_modalities"`
		Modalities       []string        `json:"modalities"` // beta
	} `json:"response"`
}

// created is a response.created (payload p): the response opens, its clock
// started at what it answers.
func (t *Tracker) created(p []byte) {
	var c createdEvent
	_ = json.Unmarshal(p, &c) // unreadable: a voice response of the conversation
	var es events
	t.mu.Lock()
	defer func() { t.mu.Unlock(); t.emit(&es) }()
	t.state()
	now := t.now()
	r := &response{id: c.Response.ID, kind: Voice}
	mods := c.Response.OutputModalities
	if mods == nil {
		mods = c.Response.Modalities
	}
	switch {
	case bytes.Equal(bytes.TrimSpace(c.Response.ConversationID), []byte("null")):
		r.kind = OutOfBand
	case len(mods) == 1 && mods[0] == "text":
		r.kind = Text
	}
	r.turn = r.kind == Voice || (r.kind == Text && t.textSession)
	r.routes = r.turn
	r.start, r.fromCreate = t.startOf(r.kind == OutOfBand, now)
	r.turnStart = r.start
	if r.turn {
		if c := t.chain; c.active {
			t.chain = chain{}
			if r.fromCreate && !r.start.Before(c.doneAt) {
				// The client's tool output and create: the chain goes on.
				r.turnStart = c.turnStart
				es.add(Event{Kind: r.kind, Routes: r.routes, Tool: r.start.Sub(c.doneAt), HasTool: true})
			} else { // the user spoke instead: the chain's turn is over
				es.add(Event{Kind: c.kind, Routes: c.routes, Outcome: Completed, Duration: max(c.doneAt.Sub(c.turnStart), 0)})
				t.turns++
			}
		} else {
			t.turns++
		}
	}
	t.open = append(t.open, r)
	t.waiting.Add(1)
}

// startOf is when a response of the "auto" conversation (or, oob, the
// "none" one) created now started: what it answers (the package doc).
func (t *Tracker) startOf(oob bool, now time.Time) (start time.Time, fromCreate bool) {
	if oob {
		if at, ok := t.creates[none].pop(); ok && !at.IsZero() {
			return at, true
		}
		return now, false
	}
	trigger := t.trigger
	if trigger.IsZero() {
		trigger = t.commit
	}
	front, ok := t.creates[auto].front()
	switch {
	case !trigger.IsZero() && (!ok || !trigger.After(front.at)):
		if t.trigger.IsZero() {
			t.commit = time.Time{}
		} else {
			t.trigger = time.Time{}
		}
		return trigger, false
	case ok && !front.at.IsZero(): // (zero: still queued, never answered)
		t.creates[auto].pop()
		return front.at, true
	}
	return now, false
}

// doneEvent is what response.done says of how the response ended.
type doneEvent struct {
	Response struct {
		ID            string `json:"id"`
		Status        string `json:"status"`
		StatusDetails *struct {
			Reason string `json:"reason"`
			Error  *struct {
				Type string `json:"type"`
				Code string `json:"code"`
			} `json:"error"`
		} `json:"status_details"`
		Output []struct {
			Type string `json:"type"`
		} `json:"output"`
	} `json:"response"`
}

// done is a response.done (payload p): its response's turn ends, unless the
// response was a tool call that produced no output (the turn goes on to the
// response after the tool's result).
func (t *Tracker) done(p []byte) {
	var d doneEvent
	_ = json.Unmarshal(p, &d) // unreadable: a completed response
	t.update(func(st *turnState, now time.Time, es *events) { t.ended(st, &d, now, es) })
}

// ended is response.done d's response ending (mu held).
func (t *Tracker) ended(st *turnState, d *doneEvent, now time.Time, es *events) {
	i := st.find(d.Response.ID)
	if i < 0 {
		return
	}
	r := st.open[i]
	st.open = append(st.open[:i], st.open[i+1:]...)
	if !r.output {
		t.waiting.Add(-1)
	}
	rs := d.Response
	outcome, penalty := Completed, false
	switch rs.Status {
	case "cancelled":
		outcome = Interrupted
	case "failed":
		outcome = Failed
		penalty = rs.StatusDetails == nil || rs.StatusDetails.Error == nil || upstreamsFault(rs.StatusDetails.Error.Type, rs.StatusDetails.Error.Code)
	case "incomplete":
		outcome = Incomplete
	default:
		if !r.output && r.turn && toolCall(rs.Output) {
			st.chain = chain{active: true, turnStart: r.turnStart, doneAt: now, kind: r.kind, routes: r.routes}
			return
		}
	}
	if !r.output && now.Sub(r.start) > FirstOutputBound {
		penalty = true // no output within the bound: a timeout
	}
	if penalty {
		es.add(Event{Kind: r.kind, Routes: r.routes, Penalty: true})
	}
	if r.turn {
		es.add(Event{Kind: r.kind, Routes: r.routes, Outcome: outcome, Duration: max(now.Sub(r.turnStart), 0)})
	}
}

// sessionKind is the kind of the session's turns: text in a text-only
// session, else voice (mu held).
func (t *Tracker) sessionKind() Kind {
	if t.textSession {
		return Text
	}
	return Voice
}

// upstreamsFault reports whether an error (type, code) is the upstream's,
// not the client's own bad request.
func upstreamsFault(typ, code string) bool {
	if typ == "invalid_request_error" {
		return false
	}
	return typ == "server_error" || strings.Contains(typ, "rate_limit") || strings.Contains(code, "rate_limit") || typ == ""
}

func (st *turnState) find(id string) int {
	for i, r := range st.open {
		if r.id == id {
			return i
		}
	}
	return -1
}

func toolCall(output []struct {
	Type string `json:"type"`
}) bool {
	for _, o := range output {
		if o.Type == "function_call" || o.Type == "mcp_call" {
			return true
		}
	}
	return false
}

// errorEvent is what an error event says.
type errorEvent struct {
	Error struct {
		Type    string `json:"type"`
		Code    string `json:"code"`
		Param   string `json:"param"`
		EventID string `json:"event_id"`
	} `json:"error"`
}

// refusesCreate reports whether an error (code, param) refuses a
// response.create.
func refusesCreate(code, param string) bool {
	return code == "conversation_already_has_active_response" || strings.HasPrefix(param, "response")
}

// failed is an error event (payload p): one that refuses a forwarded create
// takes it off its queue; one that is the upstream's fault is a penalty.
func (t *Tracker) failed(p []byte) {
	var e errorEvent
	if json.Unmarshal(p, &e) != nil {
		return
	}
	var es events
	t.mu.Lock()
	er := e.Error
	st := t.state()
	switch {
	case er.EventID != "":
		if !st.creates[auto].remove(er.EventID) {
			st.creates[none].remove(er.EventID)
		}
	case refusesCreate(er.Code, er.Param):
		if _, ok := st.creates[auto].pop(); !ok {
			st.creates[none].pop()
		}
	}
	if er.Type != "invalid_request_error" && upstreamsFault(er.Type, er.Code) {
		es.add(Event{Kind: t.sessionKind(), Routes: true, Penalty: true})
	}
	t.mu.Unlock()
	t.emit(&es)
}

// speechEnd is a speech_stopped (payload p): with VAD creating responses,
// the next response of the conversation answers the audio up to its
// audio_end_ms.
func (t *Tracker) speechEnd(p []byte) {
	ms, ok := jsonscan.Int(p, `"audio_end_ms"`)
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.createResponse {
		return // the client's create answers it
	}
	st := t.state()
	now := t.now()
	at, known := time.Time{}, false
	if ok {
		at, known = st.audio.at(ms)
	}
	if !known {
		at = now.Add(-t.silence)
	}
	st.trigger = at
}

// configEvent is where a session's configuration keeps its VAD, its input
// audio format and its output modalities: GA (audio.input) or beta.
type configEvent struct {
	Session struct {
		Type  string `json:"type"` // realtime (or none: beta); transcription and translation make no responses
		Audio struct {
			Input struct {
				TurnDetection *vad `json:"turn_detection"`
				Format        *struct {
					Type string `json:"type"`
					Rate int    `json:"rate"`
				} `json:"format"`
			} `json:"input"`
		} `json:"audio"`
		TurnDetection    *vad     `json:"turn_detection"`
		InputAudioFormat string   `json:"input_audio_format"`
		OutputModalities []string `json:"output_modalities"`
		Modalities       []string `json:"modalities"`
	} `json:"session"`
}

type vad struct {
	Type              string `json:"type"`
	SilenceDurationMS int64  `json:"silence_duration_ms"`
	CreateResponse    *bool  `json:"create_response"`
}

// config reads a session.created or session.updated (payload p): the VAD
// (its silence window, whether it creates responses), the input audio's
// bytes per millisecond, and whether the session is text-only. Semantic VAD
// has no fixed window: 0.
func (t *Tracker) config(p []byte) {
	var c configEvent
	if json.Unmarshal(p, &c) != nil {
		return
	}
	s := c.Session
	t.mu.Lock()
	defer t.mu.Unlock()
	v := s.Audio.Input.TurnDetection
	if v == nil {
		v = s.TurnDetection
	}
	t.silence, t.createResponse = 0, false
	if v != nil && v.Type != "" && (s.Type == "" || s.Type == "realtime") {
		t.createResponse = v.CreateResponse == nil || *v.CreateResponse
		if v.Type == "server_vad" && v.SilenceDurationMS > 0 {
			t.silence = time.Duration(v.SilenceDurationMS) * time.Millisecond
		}
	}
	t.timed.Store(t.createResponse)
	if f := s.Audio.Input.Format; f != nil {
		t.perMS = bytesPerMS(f.Type, f.Rate, t.perMS)
	} else if s.InputAudioFormat != "" {
		t.perMS = bytesPerMS(s.InputAudioFormat, 0, t.perMS)
	}
	mods := s.OutputModalities
	if mods == nil {
		mods = s.Modalities
	}
	if mods != nil {
		t.textSession = len(mods) == 1 && mods[0] == "text"
	}
}

// Resumed is the session carried onto a fresh upstream (continuity): what
// was forwarded to the lost one is no one's to answer, and the fresh one
// counts its audio from zero. Its responses still open end as failed.
func (t *Tracker) Resumed() {
	t.update(func(st *turnState, now time.Time, es *events) {
		for _, r := range st.open {
			if !r.output {
				t.waiting.Add(-1)
			}
			if r.turn {
				es.add(Event{Kind: r.kind, Routes: r.routes, Outcome: Failed, Duration: max(now.Sub(r.turnStart), 0)})
			}
		}
		st.open = st.open[:0]
		st.creates[auto].reset()
		st.creates[none].reset()
		st.audio.reset()
		st.trigger, st.commit, st.chain = time.Time{}, time.Time{}, chain{}
	})
}

// Close ends the session: turns still open are unfinished; a response or
// a forwarded create without output for longer than FirstOutputBound is a
// penalty.
func (t *Tracker) Close() {
	t.update(t.closed)
}

// closed ends the session's turns (mu held).
func (t *Tracker) closed(st *turnState, now time.Time, es *events) {
	penalty := false
	for _, r := range st.open {
		late := !r.output && now.Sub(r.start) > FirstOutputBound
		penalty = penalty || (late && r.routes)
		if r.turn {
			es.add(Event{Kind: r.kind, Routes: r.routes, Outcome: Unfinished, Duration: max(now.Sub(r.turnStart), 0)})
		}
	}
	if at, ok := st.creates[auto].front(); ok && !at.at.IsZero() && now.Sub(at.at) > FirstOutputBound {
		penalty = true // a create never answered
	}
	if c := st.chain; c.active {
		es.add(Event{Kind: c.kind, Routes: c.routes, Outcome: Unfinished, Duration: max(now.Sub(c.turnStart), 0)})
	}
	if ev, ok := t.liveClose(now); ok {
		es.add(ev)
	}
	if penalty {
		es.add(Event{Kind: t.sessionKind(), Routes: true, Penalty: true})
	}
	st.open, st.chain = nil, chain{}
	t.waiting.Store(0)
}

// Summary is the session's turns and their time to first output's p50 and
// p95 (turns that route: voice, a text-only session's text), for its usage
// record.
func (t *Tracker) Summary() (turns int, p50, p95 time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	turns = t.turns
	if t.turnState != nil {
		turns += t.live.turns
	}
	if t.firstAudio == nil {
		return turns, 0, 0
	}
	return turns, t.firstAudio.Quantile(0.5), t.firstAudio.Quantile(0.95)
}
