package load

import (
	"encoding/json"
	"time"

	"rtgate/bench/stats"
)

// Phase is how far a call got.
type Phase uint8

// Phases in the order a call passes them.
const (
	PhaseNone       Phase = iota // nothing completed
	PhaseDial                    // upgrade answered with 101
	PhaseSession                 // session.created received
	PhaseFirstAudio              // first audio delta received
	PhaseDone                    // response.done received and socket closed cleanly
)

// String names the phase that follows p, the one a call that stopped at p was in.
func (p Phase) String() string {
	switch p {
	case PhaseNone:
		return "dial"
	case PhaseDial:
		return "session"
	case PhaseSession:
		return "first_audio"
	default:
		return "done"
	}
}

// Sample is the measurement of one call. A phase's duration is meaningful
// only when Reached is at or past that phase.
type Sample struct {
	// Start is when the call was meant to start (see the package doc).
	Start time.Time
	// Offset is Start relative to the beginning of the run.
	Offset time.Duration

	Reached    Phase
	Dial       time.Duration // start -> 101
	Session    time.Duration // 101 -> session.created
	FirstAudio time.Duration // response.create sent -> first audio delta (the first turn's)
	// LaterFirstAudio holds the first-audio times of turns 2..N of a call
	// of several turns (Client.callTurns): not nil even when no later turn got that
	// far; nil for a call of one turn.
	LaterFirstAudio []time.Duration
	Total           time.Duration // start -> response.done + clean close
	// Length is the call's drawn length (0: none; see Length): its session
	// stayed open at least that long from Start, so Total includes it.
	// Held is the part of Total the call spent holding its session idle
	// for its length, after its exchange: Total - Held is the exchange.
	Length, Held time.Duration

	// Failure is the failure class ("" for a successful call).
	Failure string
	// Detail is a short human-readable reason, never containing the key.
	Detail string
}

// OK reports whether the call completed every phase.
func (s Sample) OK() bool { return s.Failure == "" && s.Reached == PhaseDone }

// MarshalJSON writes durations in milliseconds and null for phases the
// call never completed.
func (s Sample) MarshalJSON() ([]byte, error) {
	phase := func(p Phase, d time.Duration) *float64 {
		if s.Reached < p {
			return nil
		}
		v := stats.Millis(d)
		return &v
	}
	return json.Marshal(struct {
		StartMS      float64   `json:"start_ms"`
		DialMS       *float64  `json:"dial_ms"`
		SessionMS    *float64  `json:"session_ms"`
		FirstAudioMS *float64  `json:"first_audio_ms"`
		TotalMS      *float64  `json:"total_ms"`
		LaterMS      []float64 `json:"later_first_audio_ms,omitempty"`
		LengthMS     float64   `json:"length_ms,omitempty"`
		HeldMS       float64   `json:"held_ms,omitempty"`
		OK           bool      `json:"ok"`
		Failure      string    `json:"failure,omitempty"`
		Detail       string    `json:"detail,omitempty"`
	}{
		StartMS:      stats.Millis(s.Offset),
		DialMS:       phase(PhaseDial, s.Dial),
		SessionMS:    phase(PhaseSession, s.Session),
		FirstAudioMS: phase(PhaseFirstAudio, s.FirstAudio),
		TotalMS:      phase(PhaseDone, s.Total),
		LaterMS:      millis(s.LaterFirstAudio),
		LengthMS:     stats.Millis(s.Length),
		HeldMS:       stats.Millis(s.Held),
		OK:           s.OK(),
		Failure:      s.Failure,
		Detail:       s.Detail,
	})
}

// millis is ds in milliseconds (nil for none).
func millis(ds []time.Duration) []float64 {
	if len(ds) == 0 {
		return nil
	}
	out := make([]float64, len(ds))
	for i, d := range ds {
		out[i] = stats.Millis(d)
	}
	return out
}
