// Package turns measures a voice session's turns from the upstream's events:
// how long the user waited for the first audio of an answer, how long the
// answer took, and how it ended. The protocol says what each event is to a
// turn (protocol.Protocol.Turn); a Tracker per session follows the marks
// through the table below; Metrics exports what the trackers measure.
//
// A turn, per the Realtime API:
//
//	state     event (mark)                        next      measured
//	idle      response.created (TurnStart)        open      start = now
//	idle      speech_stopped (SpeechEnd)          open      start = now - silence window
//	open      TurnStart / SpeechEnd, no output    open      SpeechEnd restarts the clock (the user said more)
//	open      first delta (FirstOutput)           open      first audio = now - start
//	open      later deltas                        open      (nothing: no clock read, no allocation)
//	open      SpeechEnd after output              open      the next turn's start is kept
//	open      response.done, a tool call          open      (the chain goes on)
//	          without output, completed
//	open      response.done, otherwise            idle      duration = now - start; outcome
//	open      the session ends                    -         outcome unfinished
//
// A turn, per GPT-Live (no response or done events; InputSpeech is an
// input transcript delta, FirstOutput an output audio delta):
//
//	idle      InputSpeech                         open      start = now
//	open      InputSpeech, no output              open      start = now (the user is still talking)
//	open      FirstOutput                         open      first audio = now - start
//	open      InputSpeech after output            open      the turn that spoke ends, completed;
//	                                                        the next starts, start = now
//	open      the session ends, after output      -         outcome completed (unfinished without)
//
// A GPT-Live turn is timed from the last input transcript delta before the
// answer (the last words heard), so the transcription's own lag is inside
// it. Interruptions are not told apart: telling whether output was still
// streaming when the user spoke would need a clock read per audio delta.
//
// The silence window is the session's server VAD silence_duration_ms, read
// from session.created and session.updated (TurnConfig): the upstream sends
// speech_stopped only after that much silence, which the user waited too.
//
// Outcomes: completed, interrupted (status cancelled: reason turn_detected
// or client_cancelled), failed, incomplete, unfinished.
package turns

import (
	"encoding/json"
	"time"

	"rtgate/server/protocol"
)

// Outcomes of a turn, the outcome label of rtgate_turns_total.
const (
	Completed   = "completed"
	Interrupted = "interrupted"
	Failed      = "failed"
	Incomplete  = "incomplete"
	Unfinished  = "unfinished"
)

// Event is what one mark measured, for the caller to export.
type Event struct {
	// FirstAudio is set (HasFirstAudio) at the turn's first output.
	FirstAudio    time.Duration
	HasFirstAudio bool
	// Outcome is set when the turn ended, with its Duration.
	Outcome  string
	Duration time.Duration
}

// Tracker follows one session's turns. It is driven only from the
// upstream's read path and read once the session has ended, so it needs no
// lock (like usage.Meter).
type Tracker struct {
	// Now is the clock (time.Now when nil); it is read only at marks
	// that measure, never for the deltas after the first.
	Now func() time.Time

	start, next time.Time // next: a later speech's end, while a turn speaks
	silence     time.Duration
	open        bool
	output      bool // the open turn's first output was seen
	turns       int
	firstAudio  *Sketch // nil until the first turn with output
	bySpeech    bool    // GPT-Live: turns end at the next speech (InputSpeech)
}

func (t *Tracker) now() time.Time {
	if t.Now != nil {
		return t.Now()
	}
	return time.Now()
}

// Wants reports whether a mark needs its whole event (Inspect).
func Wants(m protocol.TurnMark) bool { return m == protocol.TurnEnd || m == protocol.TurnConfig }

// Mark moves the tracker on an event that is m to a turn. Marks that need
// their event (Wants) are passed to Done or Config instead.
func (t *Tracker) Mark(m protocol.TurnMark) (ev Event) {
	switch m {
	case protocol.FirstOutput:
		if !t.open || t.output {
			return ev // the hot path: every delta after the first
		}
		t.output = true
		ev.FirstAudio, ev.HasFirstAudio = max(t.now().Sub(t.start), 0), true
		if t.firstAudio == nil {
			t.firstAudio = &Sketch{}
		}
		t.firstAudio.Add(ev.FirstAudio)
	case protocol.TurnStart:
		if !t.open {
			start := t.next
			if start.IsZero() {
				start = t.now()
			}
			t.begin(start)
		}
	case protocol.InputSpeech:
		t.bySpeech = true
		now := t.now()
		switch {
		case !t.open:
			t.begin(now)
		case !t.output:
			t.start = now
		default:
			ev = t.end(Completed)
			t.begin(now)
		}
	case protocol.SpeechEnd:
		start := t.now().Add(-t.silence)
		switch {
		case !t.open:
			t.begin(start)
		case !t.output:
			t.start = start
		default:
			t.next = start
		}
	}
	return ev
}

func (t *Tracker) begin(start time.Time) {
	t.open, t.output, t.start, t.next = true, false, start, time.Time{}
	t.turns++
}

// doneEvent is what response.done says of how the response ended.
type doneEvent struct {
	Response struct {
		Status        string `json:"status"`
		StatusDetails *struct {
			Reason string `json:"reason"`
		} `json:"status_details"`
		Output []struct {
			Type string `json:"type"`
		} `json:"output"`
	} `json:"response"`
}

// Done is a response.done (payload p): the turn ends, unless the response
// was a tool call that produced no output (the turn goes on to the
// response after the tool's result).
func (t *Tracker) Done(p []byte) (ev Event) {
	if !t.open {
		return ev
	}
	var d doneEvent
	_ = json.Unmarshal(p, &d) // unreadable: a completed turn
	r := d.Response
	outcome := Completed
	switch r.Status {
	case "cancelled":
		outcome = Interrupted
	case "failed":
		outcome = Failed
	case "incomplete":
		outcome = Incomplete
	default:
		if !t.output && toolCall(r.Output) {
			return ev
		}
	}
	return t.end(outcome)
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

func (t *Tracker) end(outcome string) Event {
	t.open = false
	ev := Event{Outcome: outcome, Duration: max(t.now().Sub(t.start), 0)}
	if !t.next.IsZero() { // the user spoke again while this turn spoke
		t.begin(t.next)
	}
	return ev
}

// configEvent is where a session's configuration keeps its VAD window: GA
// (audio.input.turn_detection) or beta (turn_detection).
type configEvent struct {
	Session struct {
		Audio struct {
			Input struct {
				TurnDetection *vad `json:"turn_detection"`
			} `json:"input"`
		} `json:"audio"`
		TurnDetection *vad `json:"turn_detection"`
	} `json:"session"`
}

type vad struct {
	Type              string `json:"type"`
	SilenceDurationMS int64  `json:"silence_duration_ms"`
}

// Config reads the VAD silence window from a session.created or
// session.updated (payload p). Semantic VAD has no fixed window: 0.
func (t *Tracker) Config(p []byte) {
	var c configEvent
	if json.Unmarshal(p, &c) != nil {
		return
	}
	v := c.Session.Audio.Input.TurnDetection
	if v == nil {
		v = c.Session.TurnDetection
	}
	t.silence = 0
	if v != nil && v.Type == "server_vad" && v.SilenceDurationMS > 0 {
		t.silence = time.Duration(v.SilenceDurationMS) * time.Millisecond
	}
}

// Close ends the session: a turn still open is unfinished (Outcome empty
// when none was).
func (t *Tracker) Close() Event {
	if !t.open {
		return Event{}
	}
	t.next = time.Time{}
	if t.bySpeech && t.output {
		return t.end(Completed) // a GPT-Live turn that spoke ends with the session
	}
	return t.end(Unfinished)
}

// Summary is the session's turns and their time to first audio's p50 and
// p95, for its usage record.
func (t *Tracker) Summary() (turns int, p50, p95 time.Duration) {
	if t.firstAudio == nil {
		return t.turns, 0, 0
	}
	return t.turns, t.firstAudio.Quantile(0.5), t.firstAudio.Quantile(0.95)
}
