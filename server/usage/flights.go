package usage

import (
	"encoding/json"
	"slices"
	"sync"

	"rtgate/server/eventtype"
)

// Responses in flight: usage a client cannot walk away from.
//
// The Realtime API reports a response's usage only in its response.done, and
// has no farewell: a session whose upstream is closed while a response is in
// progress never reports it. So a Realtime session's Flights follow its
// responses (response.created opens one, response.done closes it) and, when
// the session ends with responses in flight, the gateway asks the upstream to
// cancel each (Farewell: one response.cancel per response id) and waits,
// bounded, for the cancelled response.done, which carries the usage of what
// was produced (poller.Session.SetFarewell; session.Manager.sessionEnded). A response whose
// response.done never comes (the wait ran out, the upstream closed itself as
// at its cap, a resume let go of it) is billed an estimate, flagged
// unconfirmed (Estimate):
//
//	output audio tokens  the bytes relayed to the client since its
//	                     response.created, as seconds of audio (AudioBytesPerSecond),
//	                     times the session's measured output rate: output audio
//	                     tokens ÷ audio seconds over its confirmed responses
//	                     (DefaultOutputAudioRate before any)
//	input tokens         the last confirmed response's input, by kind and cached
//	                     part, plus its output (the conversation grew by it), plus
//	                     what the client sent since as audio input
//	                     (DefaultInputAudioRate per second of AudioBytesPerSecond);
//	                     before any confirmed response, what the client sent
//
// Only response.created and response.done are read here (once per response);
// the byte counts are the relay's own counters, read at those events and at
// the end: nothing is added to the relay's per-frame path.

const (
	// AudioBytesPerSecond is a second of 24 kHz PCM16 as the Realtime API
	// carries it in JSON: 48,000 bytes as 64,000 base64 characters.
	AudioBytesPerSecond = 64000
	// DefaultOutputAudioRate is the output audio tokens per second assumed
	// before a session's confirmed responses measured its own: OpenAI bills
	// a second of assistant audio as about 20 tokens (one per 50 ms).
	DefaultOutputAudioRate = 20.0
	// DefaultInputAudioRate is the input audio tokens per second of the
	// user's audio: one per 100 ms.
	DefaultInputAudioRate = 10.0
)

// Flights follows a Realtime session's responses in progress. The relay's
// read path drives it (Inspect), the session's end reads it from another
// goroutine (Farewell, Open, Estimate): it has a lock, taken once per
// response.
type Flights struct {
	// Relayed returns the bytes relayed to the client so far; FromClient
	// the bytes the client sent so far. Both are read on the read path at
	// response.created and response.done, and at the end.
	Relayed    func() uint64
	FromClient func() uint64
	// OnSettled, if set, is called (on the read path) when the last
	// response in flight ends after Farewell asked them to: the session
	// may close now.
	OnSettled func()
	// Cancel is the frame (a masked client event) that asks the upstream
	// to cancel response id: the protocol's (protocol.Realtime.Cancel).
	Cancel func(id string) []byte

	// mu is a leaf: taken on the upstream's read path under the relay's
	// client lock, and by the farewell under its upstream lock; FromClient
	// (which takes the latter) is called before it, never under it.
	mu     sync.Mutex
	open   []flight
	ending bool // Farewell asked for cancels
	// What the confirmed responses measured: output audio tokens over the
	// bytes relayed during those responses; the last one's usage, and the
	// client's bytes when it ended.
	audioTokens int64
	audioBytes  uint64
	last        Usage
	lastSeen    bool
	clientAt    uint64
}

// flight is a response in progress and the relayed bytes at its start.
type flight struct {
	id      string
	relayed uint64
}

// WantsType reports whether Flights reads an event of type t.
func WantsType(t []byte) bool {
	return string(t) == "response.created" || string(t) == eventtype.ResponseDone
}

// flightEvent is what Flights reads of response.created and response.done.
type flightEvent struct {
	Type     string `json:"type"`
	Response struct {
		ID    string      `json:"id"`
		Usage *tokenUsage `json:"usage"`
	} `json:"response"`
}

// Inspect reads a response.created or response.done (the whole payload).
func (f *Flights) Inspect(p []byte) {
	var ev flightEvent
	if json.Unmarshal(p, &ev) != nil || ev.Response.ID == "" {
		return
	}
	relayed := f.relayed()
	var client uint64
	if ev.Type == eventtype.ResponseDone && f.FromClient != nil {
		client = f.FromClient() // before the lock: it takes the relay's
	}
	f.mu.Lock()
	switch ev.Type {
	case "response.created":
		if !slices.ContainsFunc(f.open, func(x flight) bool { return x.id == ev.Response.ID }) {
			f.open = append(f.open, flight{ev.Response.ID, relayed})
		}
		f.mu.Unlock()
		return
	case eventtype.ResponseDone:
		i := slices.IndexFunc(f.open, func(x flight) bool { return x.id == ev.Response.ID })
		if i >= 0 {
			fl := f.open[i]
			f.open = slices.Delete(f.open, i, i+1)
			if u := ev.Response.Usage; u != nil && u.OutputTokenDetails.AudioTokens > 0 && relayed > fl.relayed {
				f.audioTokens += u.OutputTokenDetails.AudioTokens
				f.audioBytes += relayed - fl.relayed
			}
		}
		if u := ev.Response.Usage; u != nil {
			f.last, f.lastSeen, f.clientAt = u.Usage, true, client
		}
	}
	settled := f.ending && len(f.open) == 0
	f.mu.Unlock()
	if settled && f.OnSettled != nil {
		f.OnSettled()
	}
}

func (f *Flights) relayed() uint64 {
	if f.Relayed == nil {
		return 0
	}
	return f.Relayed()
}

// Farewell is the frames (masked client events) that ask the upstream to
// cancel every response in flight, one response.cancel per response id;
// nil when none is in flight (a close frame is enough). From then on the
// last response.done to come calls OnSettled.
func (f *Flights) Farewell() []byte {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.open) == 0 {
		return nil
	}
	f.ending = true
	var out []byte
	for _, fl := range f.open {
		out = append(out, f.Cancel(fl.id)...)
	}
	return out
}

// Cancels is the frames that ask the upstream to cancel every response in
// flight, as Farewell's, for a session that goes on (a rollover): nil when
// none is in flight.
func (f *Flights) Cancels() []byte {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []byte
	for _, fl := range f.open {
		out = append(out, f.Cancel(fl.id)...)
	}
	return out
}

// Open returns the ids of the responses in flight, oldest first.
func (f *Flights) Open() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	ids := make([]string, len(f.open))
	for i, fl := range f.open {
		ids[i] = fl.id
	}
	return ids
}

// Estimate forgets the responses in flight (they will never report usage:
// the session ended, or a resume let go of their upstream) and returns the
// usage they are billed, by the rule above; Responses counts them.
func (f *Flights) Estimate() Usage {
	relayed := f.relayed()
	var client uint64
	if f.FromClient != nil {
		client = f.FromClient()
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	var est Usage
	for i, fl := range f.open {
		var e Usage
		e.Responses = 1
		if relayed > fl.relayed {
			e.OutputTokenDetails.AudioTokens = int64(f.outputRate() * float64(relayed-fl.relayed) / AudioBytesPerSecond)
		}
		if i == 0 { // the conversation's input is billed once, with the oldest
			e.InputTokenDetails = f.inputEstimate(client)
		}
		in := e.InputTokenDetails
		e.InputTokens = in.TextTokens + in.AudioTokens + in.ImageTokens
		e.OutputTokens = e.OutputTokenDetails.TextTokens + e.OutputTokenDetails.AudioTokens
		e.TotalTokens = e.InputTokens + e.OutputTokens
		est.Add(e)
	}
	f.open = f.open[:0]
	f.ending = false
	return est
}

// outputRate is the session's output audio tokens per second of audio
// relayed, measured over its confirmed responses. Callers hold mu.
func (f *Flights) outputRate() float64 {
	if f.audioBytes == 0 || f.audioTokens == 0 {
		return DefaultOutputAudioRate
	}
	return float64(f.audioTokens) / (float64(f.audioBytes) / AudioBytesPerSecond)
}

// inputEstimate is the input of a response that never reported it: the
// last confirmed response's input and output, and the client's bytes since
// as audio. Callers hold mu.
func (f *Flights) inputEstimate(client uint64) InputTokenDetails {
	var in InputTokenDetails
	if f.lastSeen {
		in = f.last.InputTokenDetails
		in.TextTokens += f.last.OutputTokenDetails.TextTokens
		in.AudioTokens += f.last.OutputTokenDetails.AudioTokens
	}
	if client > f.clientAt {
		in.AudioTokens += int64(DefaultInputAudioRate * float64(client-f.clientAt) / AudioBytesPerSecond)
	}
	return in
}
