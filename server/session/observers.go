package session

import (
	"rtgate/server/continuity"
	"rtgate/server/eventtype"
	"rtgate/server/protocol"
	"rtgate/server/transcript"
	"rtgate/server/usage"
)

// The consumers of a session's upstream events. setupWatch reads each
// event's type once (eventtype.Of) and offers it to the session's
// observers, a list chosen once when the session opens from what kind of
// session it is (chooseObservers), so the per-event path branches on no
// kind:
//
//	kind                                    observers, in the order they read an event
//	Realtime conversation                   usage, flights, turns (Realtime)
//	Realtime conversation with continuity   usage, flights, turns (Realtime), keep (Realtime)
//	Realtime translation, transcription,    usage, turns (Realtime)
//	  call, GPT-Live sideband
//	GPT-Live (WebSocket), GPT-Live fork     usage (Live), turns (Live)
//	GPT-Live with continuity                usage (Live), turns (Live), keep (Live)
//	any of them keeping transcripts         ..., then the record (Realtime or Live:
//	  (log_transcripts)                     transcript.Recorder)
//	a recorded Realtime conversation        ..., then the recording (recordWatch:
//	  (record_sessions)                     recording.Recorder)
//
// (A Gemini session keeps nothing for continuity: its own resumption handle
// carries the conversation.)
//
// The order is the accounting's: the meter books a response's usage before
// flights may see its end close the session, and the turns read an event
// before the kept conversation does.
//
// Locks. Observers run on the upstream's read path, under the upstream
// Handle's read lock and the relay's client lock (poller.Session's
// client.mu, held across the frame's forward and inspection: package
// poller's doc, Lock order). Under it they take, each briefly:
//
//	client.mu (the relay's)
//	  → up.mu (the relay's): flights, BytesFromClient at response.done,
//	    before Flights.mu, never under it
//	  → leaves, none held while another is taken:
//	    usage:   the meter takes none itself; its callbacks take
//	             sessionInfo.depMu (currentDeployment, for prices), then
//	             spend.Ledger.mu (budgets.meter), or liveState.mu (the
//	             GPT-Live meter's OnTokens, OnDelegation)
//	    flights: usage.Flights.mu
//	    turns:   turns.Tracker.mu, tracing.Session.mu; a turn that ends is
//	             emitted after Tracker.mu is let go (observeTurn):
//	             sessionInfo.depMu, then the balancer's mutex
//	             (ObserveFirstOutput, ObservePenalty)
//	    record:  transcript.Recorder.mu
//	    keep:    continuity.Keeper.mu (the global budget is atomic);
//	             armCap: sessionInfo.depMu, then resumeArgs.rollMu
//	             (armRollover; its timer runs on a goroutine of its own)
//
// None of these leaves may be held while taking client.mu or up.mu, nor
// while calling into the relay (poller.Session: SendClient, Terminate,
// Cancel, Rollover, …): an observer that must end or write to the session
// does it from a goroutine of its own (budgets.meter's end, the GPT-Live
// meter's refusal). Found so on this path: no inversion.
type observer interface {
	// wants reports whether the observer reads the whole event of type
	// typ (prefix: the frame's first bytes); it may note the type itself
	// (the turns' marks).
	wants(typ, prefix []byte) bool
	// inspect reads the whole event it wanted.
	inspect(p []byte)
}

// maxObservers bounds a session's observers (chooseObservers).
const maxObservers = 6

// The observers are views of the session's setupWatch (a pointer
// conversion, no allocation): each reads the part of the session it
// consumes.
type (
	realtimeUsage setupWatch // the Realtime usage.Meter
	liveUsage     setupWatch // the GPT-Live usage.LiveMeter
	flightsWatch  setupWatch // the responses in flight (usage.Flights)
	turnsWatch    setupWatch // the turns and spans (Realtime or GPT-Live marks: setupWatch.turnProto)
	realtimeKeep  setupWatch // the kept Realtime conversation (continuity)
	liveKeep      setupWatch // the kept GPT-Live conversation (continuity)
	realtimeConv  setupWatch // the conversation record, Realtime (transcript.Recorder)
	liveConv      setupWatch // the conversation record, GPT-Live
)

// chooseObservers picks the session's observers from its kind: called once
// when it opens, after its kind's state (live, flights, resume) is set and
// before the relay starts.
func (w *setupWatch) chooseObservers() {
	w.nobs = 0
	add := func(o observer) { w.obs[w.nobs] = o; w.nobs++ }
	if w.live != nil {
		w.turnProto = protocol.Live{}
		add((*liveUsage)(w))
		add((*turnsWatch)(w))
		if w.resume != nil {
			add((*liveKeep)(w))
		}
		if w.conv != nil {
			add((*liveConv)(w))
		}
		return
	}
	w.turnProto = protocol.Realtime{} // also a GPT-Live sideband's: its frames are watched as a Realtime session's (its usage is its session's, liveMetering)
	add((*realtimeUsage)(w))
	if w.flights != nil {
		add((*flightsWatch)(w))
	}
	add((*turnsWatch)(w))
	if w.resume != nil && w.gemini == nil { // Gemini's handle carries its conversation (keepGemini)
		add((*realtimeKeep)(w))
	}
	if w.conv != nil {
		add((*realtimeConv)(w))
	}
	if w.rec != nil {
		add((*recordWatch)(w))
	}
}

// The conversation record reads what it wants of the events the others
// read; an event it cannot read changes nothing.
func (o *realtimeConv) wants(typ, _ []byte) bool  { return transcript.WantsUpstream(typ) }
func (o *realtimeConv) inspect(p []byte)          { _ = o.conv.Upstream(p) }
func (o *liveConv) wants(typ, prefix []byte) bool { return transcript.LiveWantsUpstream(typ, prefix) }
func (o *liveConv) inspect(p []byte)              { _ = o.conv.LiveUpstream(p) }

func (o *realtimeUsage) wants(typ, _ []byte) bool { return o.meter.WantsType(typ) }
func (o *realtimeUsage) inspect(p []byte)         { o.meter.Inspect(p) }

func (o *liveUsage) wants(typ, prefix []byte) bool { return o.live.meter.WantsType(typ, prefix) }
func (o *liveUsage) inspect(p []byte)              { o.live.meter.Inspect(p) }

func (o *flightsWatch) wants(typ, _ []byte) bool { return usage.WantsType(typ) }
func (o *flightsWatch) inspect(p []byte)         { o.flights.Inspect(p) }

func (o *turnsWatch) wants(typ, prefix []byte) bool { return (*setupWatch)(o).seeTurn(typ, prefix) }
func (o *turnsWatch) inspect(p []byte)              { (*setupWatch)(o).inspectTurn(p) }

// wants: the events that change the kept conversation, the first
// session.created (its cap, armCap), and with KeepAudio the audio.
func (o *realtimeKeep) wants(typ, _ []byte) bool {
	return continuity.UpstreamWants(typ) || (!o.capSeen && string(typ) == "session.created") ||
		(o.resume.lim.KeepAudio && continuity.AudioUpstreamWants(typ))
}

func (o *realtimeKeep) inspect(p []byte) {
	if !(*setupWatch)(o).armCap(p) {
		o.keep.Upstream(p, o.resume.lim)
	}
}

// wants: the events that change the kept conversation and the first
// session.started (its cap, armCap).
func (o *liveKeep) wants(typ, prefix []byte) bool {
	return continuity.LiveUpstreamWants(typ, prefix) || (!o.capSeen && string(typ) == eventtype.LiveStarted)
}

func (o *liveKeep) inspect(p []byte) {
	if !(*setupWatch)(o).armCap(p) {
		o.keep.LiveUpstream(p, o.resume.lim)
	}
}
