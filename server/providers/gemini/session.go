package gemini

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/gobwas/ws"

	"rtgate/frames"
)

// Session is one client's session with Gemini: the state both directions of
// the translation share. The client's events and Gemini's messages arrive on
// different goroutines (each socket's reads), so the state is behind a mutex;
// it is held only while one message is translated.
type Session struct {
	mu    sync.Mutex
	model string // Gemini's model resource: models/<model>, or Vertex's full path
	shown string // the model the client is told about (the deployment's)
	id    string // the session id the client sees
	idp   string // prefix of the gateway's item and response ids
	next  int    // the next id's number

	cfg         config // the session as the client configured it (defaults until then)
	setupSent   bool
	greeted     bool // session.created was handed out
	updatedOwed bool // a session.update waits for setupComplete
	// autoAnswer is when Gemini was last given what makes it answer on its
	// own (a commit, a tool response, response.create): a response.create
	// within autoAnswerWait of it asks nothing more.
	autoAnswer time.Time
	createHeld bool // a response.create was held for Gemini's own answer (Recheck)
	unasked    bool // the response in progress began on its own, and no response.create claimed it yet
	// OnHeld, if set, is told (under the session's lock: it must not
	// block) that a response.create was held, so that the gateway calls
	// Recheck after AutoAnswerWait.
	OnHeld       func()
	activityOpen bool   // turn detection off: activityStart sent, activityEnd not yet
	manualTurns  bool   // turn detection is off (cfg's, kept apart: every append asks)
	scratch      []byte // the message being built (audio, both ways): reused

	// Resumption (resume.go): the newest handle Gemini gave; whether it
	// was given at a resumable point with nothing said or asked since;
	// whether the conversation has begun; the function calls the client
	// has not answered yet.
	handle      string
	handleQuiet bool
	said        bool
	unanswered  map[string]struct{}
	// OnGoAway, if set, is told (under the session's lock: it must not
	// block) that Gemini will close the connection in timeLeft.
	OnGoAway func(timeLeft time.Duration)

	// The user's turn in progress.
	userItem   string // its item id; "" until one is needed
	userText   []byte // its input transcription so far
	lastItemID string // the newest item, for previous_item_id

	// The response in progress (Gemini's model turn).
	resp      string // its id; "" when none
	item      string // its message item's id
	cancelled bool   // the client cancelled it: the rest of the turn is not relayed
	msgOpen   bool   // its message item was announced (output_item.added)
	// cancelReason is why it was cancelled: client_cancelled
	// (response.cancel) or turn_detected (Gemini's interrupted).
	cancelReason string
	transcript   []byte // its output transcription so far
	text         []byte // its text output so far
	audioParts   int
	outputs      []json.RawMessage // function_call items of the response (toolCall)
	usage        *usage            // the turn's usage, once Gemini reported it
	doneOwed     *pendingDone      // response.done held for a usageMetadata right after the turn
	calls        map[string]string // function call id -> name, for toolResponse

	// The items the client was shown, newest last, for
	// conversation.item.retrieve (the agents SDK retrieves every
	// transcribed and every truncated item): at most maxKept.
	kept  map[string][]byte
	order []string
}

// maxKept bounds the items a session keeps for retrieval.
const maxKept = 64

// keep remembers an item (its JSON) for retrieval, forgetting the oldest
// past maxKept.
func (s *Session) keep(id string, item []byte) {
	if _, ok := s.kept[id]; !ok {
		s.order = append(s.order, id)
	}
	s.kept[id] = item
	if len(s.order) > maxKept {
		delete(s.kept, s.order[0])
		s.order = s.order[1:]
	}
}

// pendingDone is a response.done waiting for its usage.
type pendingDone struct {
	resp, status, reason string
	output               []json.RawMessage
}

// AutoAnswerWait is how long after a commit or a tool response the
// gateway takes Gemini to be answering on its own: a response.create in
// that time (OpenAI's clients send one after a manual commit) is held
// rather than asking for a second answer, and asked after all (Recheck) if
// Gemini has not begun by then (the audio held no speech it heard).
const AutoAnswerWait = 3 * time.Second

// Recheck is what the gateway sends Gemini AutoAnswerWait after a
// response.create was held (OnHeld): the message that asks it to answer,
// when it has not begun to on its own, else nil.
func (s *Session) Recheck() []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.createHeld || s.resp != "" {
		return nil
	}
	s.createHeld = false
	s.autoAnswer = time.Now()
	s.moved()
	return []byte(`{"clientContent":{"turnComplete":true}}`)
}

// New starts the translation of one session. model is Gemini's model
// resource ("models/gemini-3.8-live" on AI Studio, "projects/P/locations/L/
// publishers/google/models/M" on Vertex AI); shown is the model the client is
// told about.
func New(model, shown string) *Session {
	s := &Session{model: model, shown: shown, id: "sess_" + randomID(), idp: randomID(),
		calls: map[string]string{}, kept: map[string][]byte{}, unanswered: map[string]struct{}{}}
	s.setConfig(defaultConfig())
	return s
}

// randomID is 12 hex digits from crypto/rand.
func randomID() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// newID is a fresh gateway id with prefix (item_, resp_, event_).
func (s *Session) newID(prefix string) string {
	return string(s.appendID(nil, prefix))
}

// appendID appends a fresh gateway id with prefix to b, without
// allocating: the audio paths build their events in place.
func (s *Session) appendID(b []byte, prefix string) []byte {
	s.next++
	b = append(b, prefix...)
	b = append(b, s.idp...)
	return strconv.AppendInt(b, int64(s.next), 10)
}

// setConfig makes c the session's configuration.
func (s *Session) setConfig(c config) {
	s.cfg = c
	on, _, _ := c.vad()
	s.manualTurns = !on
}

// Created is the session.created the client gets as soon as the upstream is
// connected: Gemini says nothing until it has a setup, and the client's
// setup comes from the client's first session.update, which OpenAI's
// clients send only once they have session.created. Nil after the first
// call: a session is created once, whatever its connects.
func (s *Session) Created() []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.greeted {
		return nil
	}
	s.greeted = true
	return s.sessionEvent("session.created")
}

// Configure applies a session configuration given before the client's
// first event (a client secret's: OpenAI's session object), as the first
// session.update would; the setup carries it.
func (s *Session) Configure(session json.RawMessage) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.setupSent {
		// The client's events came first (before its session.created,
		// which comes only after this): the setup went without the
		// secret's configuration, and Gemini cannot take it now.
		return errors.New("the client sent events before its session was created; with a client secret, wait for session.created")
	}
	var u sessionUpdate
	if err := json.Unmarshal(session, &u); err != nil {
		return fmt.Errorf("reading the session configuration: %w", err)
	}
	next, bad := s.cfg.apply(u)
	if len(bad) > 0 {
		return fmt.Errorf("%s: %s", bad[0][0], bad[0][1])
	}
	s.setConfig(next)
	return nil
}

// sessionEvent is session.created or session.updated for the current
// configuration.
func (s *Session) sessionEvent(typ string) []byte {
	return event(typ, map[string]any{"event_id": s.newID("event_"), "session": s.cfg.openAI(s.id, s.shown)})
}

// Model is Gemini's model resource the session's setup names.
func (s *Session) Model() string { return s.model }

// FromClient is the translator of the client's events (set on the client's
// side of the relay).
func (s *Session) FromClient() frames.Translator { return clientSide{s} }

// FromUpstream is the translator of Gemini's messages (set on the
// upstream's side of the relay).
func (s *Session) FromUpstream() frames.Translator { return upstreamSide{s} }

type clientSide struct{ s *Session }

func (c clientSide) Translate(op ws.OpCode, p []byte, out *frames.Output) {
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	c.s.fromClient(op, p, out)
}

type upstreamSide struct{ s *Session }

func (u upstreamSide) Translate(op ws.OpCode, p []byte, out *frames.Output) {
	u.s.mu.Lock()
	defer u.s.mu.Unlock()
	u.s.fromGemini(p, out)
}

// TranslateClose explains a close Gemini sends with no error event of its
// own (1007 for a setup it refuses, 1008 for a policy, 1011): the client
// gets OpenAI's error event first, then the close as Gemini sent it. A
// normal close (1000) and 1001 need no words. (A client's own close with
// another code, echoed by Gemini, is explained too: rare, and harmless.)
func (u upstreamSide) TranslateClose(c frames.Close, out *frames.Output) {
	u.s.mu.Lock()
	defer u.s.mu.Unlock()
	u.s.explainClose(c, out)
}

// ClosedEvent is TranslateClose's error event framed for the client (nil
// for a close that needs no words): for a close the gateway held back to
// resume the session, and then could not.
func (s *Session) ClosedEvent(c frames.Close) []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out frames.Output
	s.explainClose(c, &out)
	return out.Take()
}

// explainClose emits the error event for Gemini's close c. Callers hold
// s.mu.
func (s *Session) explainClose(c frames.Close, out *frames.Output) {
	if c.Code == ws.StatusNormalClosure || c.Code == ws.StatusGoingAway {
		// Gemini's normal ends, and the echo of a client that left (1001):
		// nothing to explain.
		return
	}
	msg := "Gemini Live closed the session (" + strconv.Itoa(int(c.Code)) + ")"
	if c.Reason != "" {
		msg += ": " + c.Reason
	}
	out.Text(event("error", map[string]any{"event_id": s.newID("event_"), "error": map[string]any{
		"type": "server_error", "code": "upstream_closed", "message": msg}}))
}

// event encodes an event of type typ with fields, its type first: the
// gateway reads an event's type off the front of its frame (eventtype.Of,
// within the first 256 bytes), and encoding/json writes a map's keys in
// order.
func event(typ string, fields map[string]any) []byte {
	body := marshal(fields)
	b := make([]byte, 0, len(body)+len(typ)+12)
	b = append(b, `{"type":`...)
	b = append(b, marshal(typ)...)
	if len(body) > 2 {
		b = append(b, ',')
	}
	return append(b, body[1:]...)
}

// marshal encodes v, which is always encodable (maps and slices of plain
// values): an error here is a bug, not input.
func marshal(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic("gemini: " + err.Error())
	}
	return b
}

// errorEvent is an OpenAI error event of type invalid_request_error.
func (s *Session) errorEvent(code, message, param, clientEventID string) []byte {
	e := map[string]any{"type": "invalid_request_error", "code": code, "message": message}
	if param != "" {
		e["param"] = param
	}
	if clientEventID != "" {
		e["event_id"] = clientEventID
	}
	return event("error", map[string]any{"event_id": s.newID("event_"), "error": e})
}
