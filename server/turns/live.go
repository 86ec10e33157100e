package turns

import "time"

// liveTurn is a GPT-Live session's turn (the table in the package doc):
// GPT-Live sends no response events, so a turn runs from the last input
// transcript delta before the answer's first output audio. Guarded by
// Tracker.mu; waiting counts it while it has no output.
type liveTurn struct {
	open, output bool
	start        time.Time
	turns        int
}

// liveSpeech is an input transcript delta: the user speaking.
func (t *Tracker) liveSpeech() {
	var es events
	t.mu.Lock()
	now := t.now()
	l := &t.state().live
	switch {
	case !l.open:
		l.open, l.output, l.start = true, false, now
		l.turns++
		t.waiting.Add(1)
	case !l.output:
		l.start = now // still talking
	default:
		es.add(Event{Kind: Voice, Routes: true, Outcome: Completed, Duration: max(now.Sub(l.start), 0)})
		l.output, l.start = false, now
		l.turns++
		t.waiting.Add(1)
	}
	t.mu.Unlock()
	t.emit(&es)
}

// liveOutput is the open Live turn's first output audio (mu held).
func (t *Tracker) liveOutput(now time.Time, es *events) {
	l := &t.live
	if l.output {
		return
	}
	l.output = true
	t.waiting.Add(-1)
	d := max(now.Sub(l.start), 0)
	t.countFirstAudio(d)
	es.add(Event{Kind: Voice, Routes: true, FirstAudio: d, HasFirstAudio: true})
}

// liveClose ends the Live turn with the session (mu held): completed when
// it spoke, else unfinished.
func (t *Tracker) liveClose(now time.Time) (Event, bool) {
	l := &t.live // turnState made (Close's caller checked)
	if !l.open {
		return Event{}, false
	}
	outcome := Unfinished
	if l.output {
		outcome = Completed
	}
	l.open = false
	return Event{Kind: Voice, Routes: true, Outcome: outcome, Duration: max(now.Sub(l.start), 0)}, true
}
