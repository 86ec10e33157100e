package guarded

import (
	"bytes"
	"encoding/json"
	"time"

	"rtgate/server/guardrail"
)

// The user's speech (mode realtime_input_transcription): the package doc's
// first table.

// listenState is what the input guardrails track, under Session.mu.
type listenState struct {
	clientAuto bool            // the client wants an answer to each turn (its create_response)
	injected   bool            // the gateway's session.update went out
	awaiting   map[string]bool // committed turns whose transcript is not checked yet
	arrived    map[string]bool // those of them whose transcript came (their check runs)
	commits    int             // the client's commits the upstream has not answered yet (committed, or an error)
	held       [][]byte        // the client's response.creates waiting for the checks
	// What the upstream's session says (before the client's view is put
	// back), so that a client's update of the audio settings keeps the
	// gateway's: a server that replaces the audio object whole would
	// otherwise turn the answers back on.
	upTD         map[string]any
	upTranscribe any
}

// session is a session object and where its turn detection and input
// transcription live in its dialect.
type session struct {
	root  map[string]any // the event
	s     map[string]any // its session
	input map[string]any // GA: session.audio.input; beta: the session itself
	beta  bool
}

// readSession decodes a session.update, session.created or session.updated.
func readSession(p []byte) (*session, bool) {
	d := json.NewDecoder(bytes.NewReader(p))
	d.UseNumber()
	var root map[string]any
	if d.Decode(&root) != nil {
		return nil, false
	}
	s, ok := root["session"].(map[string]any)
	if !ok {
		return nil, false
	}
	out := &session{root: root, s: s}
	_, ga := s["audio"]
	_, typed := s["type"]
	_, betaTD := s["turn_detection"]
	_, betaTr := s["input_audio_transcription"]
	if !ga && !typed && (betaTD || betaTr) {
		out.beta, out.input = true, s
		return out, true
	}
	if audio, ok := s["audio"].(map[string]any); ok {
		out.input, _ = audio["input"].(map[string]any)
	}
	return out, true
}

func (se *session) trKey() string {
	if se.beta {
		return "input_audio_transcription"
	}
	return "transcription"
}

func (se *session) bytes() []byte {
	b, _ := marshalTypeFirst(se.root)
	return b
}

// ensureInput makes the GA session's audio.input (for an update that sets
// audio without it).
func (se *session) ensureInput() map[string]any {
	if se.input != nil {
		return se.input
	}
	audio, _ := se.s["audio"].(map[string]any)
	if audio == nil {
		audio = map[string]any{}
		se.s["audio"] = audio
	}
	se.input = map[string]any{}
	audio["input"] = se.input
	return se.input
}

// clientUpdate rewrites the client's session.update: create_response noted
// and turned off, input transcription kept on.
func (s *Session) clientUpdate(p []byte) []byte {
	se, ok := readSession(p)
	if !ok {
		return p
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	l := &s.listen
	_, setsAudio := se.s["audio"]
	if !setsAudio && !se.beta && se.input == nil {
		return p // nothing of the audio input changes
	}
	in := se.input
	if in == nil {
		in = se.ensureInput()
	}
	if td, ok := in["turn_detection"]; ok {
		if m, isMap := td.(map[string]any); isMap {
			cr, given := m["create_response"]
			l.clientAuto = !given || cr == true
			m["create_response"] = false
		} else {
			l.clientAuto = false // no turn detection: the client asks for every answer
		}
	} else if l.upTD != nil && !se.beta {
		in["turn_detection"] = withCreate(l.upTD, false)
	}
	if tr, ok := in[se.trKey()]; ok && tr == nil || !ok && !se.beta {
		if l.upTranscribe != nil {
			in[se.trKey()] = l.upTranscribe
		} else {
			in[se.trKey()] = map[string]any{"model": DefaultTranscriptionModel}
		}
	}
	return se.bytes()
}

// withCreate is a copy of turn detection td with create_response set.
func withCreate(td map[string]any, create bool) map[string]any {
	c := make(map[string]any, len(td)+1)
	for k, v := range td {
		c[k] = v
	}
	c["create_response"] = create
	return c
}

// upstreamSession reads the upstream's session.created or session.updated:
// it notes what the upstream holds, puts the client's create_response back
// in what the client gets, and, the first time (first), returns the
// gateway's own session.update (create_response off, transcription on)
// for the upstream, nil when the session needs none.
func (s *Session) upstreamSession(p []byte) (client, own []byte, first bool) {
	se, ok := readSession(p)
	s.mu.Lock()
	defer s.mu.Unlock()
	l := &s.listen
	first = !l.injected
	l.injected = true
	if !ok || se.input == nil {
		return p, nil, first
	}
	td, _ := se.input["turn_detection"].(map[string]any)
	tr := se.input[se.trKey()]
	l.upTD, l.upTranscribe = td, tr
	if first {
		change := map[string]any{}
		if td != nil && td["create_response"] != false {
			change["turn_detection"] = withCreate(td, false)
		}
		if tr == nil {
			change[se.trKey()] = map[string]any{"model": DefaultTranscriptionModel}
		}
		if len(change) > 0 {
			var sess map[string]any
			if se.beta {
				sess = change
			} else {
				sess = map[string]any{"type": "realtime", "audio": map[string]any{"input": change}}
			}
			own = ownEvent("session.update", map[string]any{"session": sess})
		}
	}
	if td != nil {
		se.input["turn_detection"] = withCreate(td, l.clientAuto)
		return se.bytes(), own, first
	}
	return p, own, first
}

// started sends the gateway's own session.update (own, if any), then the
// client's events that waited for the session's start, in order (their
// user texts checked on the way, checkTexts).
func (s *Session) started(own []byte) {
	if own != nil {
		s.toUpstream(own)
	}
	s.checkTexts(nil, event{})
}

// TranscriptWait bounds how long a committed turn waits for its
// transcript: past it the turn is handled as a failed transcription (its
// guardrails' on_error decides), so that a transcript that never comes
// cannot hold the client's response.create for ever.
const TranscriptWait = 10 * time.Second

// clientCommit notes the client's own commit: its turn is awaited from
// now, before the upstream says committed, so that a response.create sent
// right behind it waits for the turn's check too. A commit the upstream
// never answers (an empty buffer's error, a lost event) stops counting
// when it errs, or after TranscriptWait.
func (s *Session) clientCommit() {
	s.mu.Lock()
	s.listen.commits++
	s.mu.Unlock()
	time.AfterFunc(TranscriptWait, func() { s.commitAnswered(false) })
}

// commitAnswered counts one of the client's commits answered (committed:
// the turn is awaited by its item now; else an error or the wait ran out),
// and lets the held response.creates go when nothing is awaited any more.
func (s *Session) commitAnswered(committed bool) {
	s.mu.Lock()
	l := &s.listen
	if l.commits == 0 || s.ended {
		s.mu.Unlock()
		return
	}
	l.commits--
	var creates [][]byte
	if !committed && l.commits == 0 && len(l.awaiting) == 0 {
		creates, l.held = l.held, nil
	}
	s.mu.Unlock()
	s.toUpstream(creates...)
}

// committed notes a user turn whose transcript the input guardrails await.
func (s *Session) committed(itemID string) {
	s.mu.Lock()
	s.listen.awaiting[itemID] = true
	s.mu.Unlock()
	s.commitAnswered(true)
	time.AfterFunc(TranscriptWait, func() {
		s.mu.Lock()
		waiting := s.listen.awaiting[itemID] && !s.listen.arrived[itemID] && !s.ended
		s.mu.Unlock()
		if waiting {
			s.transcribed(itemID, "", true)
		}
	})
}

// holdCreate holds the client's response.create while a turn awaits its
// check; false when none does (it goes on).
func (s *Session) holdCreate(p []byte) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.listen.awaiting) == 0 && s.listen.commits == 0 {
		return false
	}
	s.listen.held = append(s.listen.held, append([]byte(nil), p...))
	return true
}

// transcribed checks a turn's transcript (failed: the transcription failed,
// which its guardrails' on_error decides) on a goroutine of its own, then
// answers it or stops it.
func (s *Session) transcribed(itemID, transcript string, failed bool) {
	s.mu.Lock()
	s.listen.arrived[itemID] = true // its wait is over
	s.mu.Unlock()
	go func() {
		var v guardrail.Verdict
		var took time.Duration
		if failed {
			v = couldNotCheck(s.input, "the input transcription failed")
		} else {
			v, took = s.check(s.input, guardrail.InputTranscription, guardrail.Input{Texts: []string{transcript}})
		}
		s.mu.Lock()
		l := &s.listen
		if s.ended || !l.awaiting[itemID] {
			s.mu.Unlock()
			return // the session ended, or the turn was settled already (its wait ran out)
		}
		delete(l.awaiting, itemID)
		delete(l.arrived, itemID)
		var creates [][]byte
		if len(l.awaiting) == 0 && l.commits == 0 {
			creates, l.held = l.held, nil
		}
		auto := l.clientAuto
		s.mu.Unlock()
		a := Action{At: time.Now(), Mode: guardrail.InputTranscription, ItemID: itemID, Verdict: v, Latency: took, Checked: transcript}
		if !v.Blocked {
			s.act(a)
			switch {
			case len(creates) > 0:
				s.toUpstream(creates...)
			case auto:
				s.toUpstream(ownEvent("response.create", nil))
			}
			return
		}
		errEv := violationError(v.Guardrail, v.Reason, "")
		if s.violation() {
			a.Ended = true
			s.act(a)
			s.end(errEv)
			return
		}
		s.act(a)
		s.toClient(errEv)
		events := [][]byte{ownEvent("response.cancel", nil), ownEvent("conversation.item.delete", map[string]any{"item_id": itemID})}
		s.toUpstream(append(events, spokenWarning(s.violationMessage)...)...)
	}()
}

// couldNotCheck is the verdict on a check that could not run (nothing to check):
// blocked if any of set fails closed, as its on_error says.
func couldNotCheck(set guardrail.Set, reason string) guardrail.Verdict {
	for _, g := range set {
		if !g.Spec().FailOpen {
			return guardrail.Verdict{Blocked: true, Errored: true, Guardrail: g.Name(), Reason: reason}
		}
	}
	return guardrail.Verdict{Errored: true, Reason: reason}
}
