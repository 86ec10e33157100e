package session

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"rtgate/poller"
	"rtgate/server/apps"
	"rtgate/server/balance"
	"rtgate/server/continuity"
	"rtgate/server/guarded"
	"rtgate/server/protocol"
	"rtgate/server/providers/gemini"
	"rtgate/server/recording"
	"rtgate/server/routes"
	"rtgate/server/tracing"
	"rtgate/server/transcript"
	"rtgate/server/turns"
	"rtgate/server/usage"
)

// sessionInfo is what the gateway knows of a session beyond the relay: who,
// which model group, which deployment served it, and the tokens it used.
// The meter is the session's inspector on the upstream's frames.
type sessionInfo struct {
	id    string // the gateway's session id (usage.NewSessionID)
	key   *routes.ClientKey
	group string
	// depMu guards deployment and counted: a redial (its own goroutine)
	// and the session's end may race over them. Lock order: taken under
	// the relay's client lock by the watch's observers (observer); it may
	// be held over the balancer's mutex (uncount's Detach), never over a
	// relay lock.
	depMu      sync.Mutex
	deployment *routes.Deployment // nil until an upstream is attached
	counted    bool               // deployment's live count includes this session
	ended      bool               // the session ended: a late attach (a redial's) is not counted
	poolHit    bool               // the upstream came from the warm pool
	keyCounted bool               // it counts against its key's max_sessions (admission.Gate.Admit): sessionEnded gives it back
	overBudget atomic.Bool        // ended by its key's spend budget (budgets.meter); beside the flags: one word
	timeBooked atomic.Int64       // when its connection time was last booked (timeToBook; unix ns; 0: never)
	meter      usage.Meter
	turns      turns.Watch        // the session's turns (setupWatch.seeTurn)
	trace      *tracing.Session   // its spans; nil with tracing off
	start      time.Time          // when the client's upgrade completed
	redial     func()             // dials a fresh upstream after a dead warm one
	reserved   *routes.Deployment // holds a slot of its rpm/max_parallel_requests (balance.Reserve)
	grant      *apps.Grant        // the client secret it connected with; nil for a key
	live       *liveState         // a GPT-Live session's own; nil for Realtime
	kind       sessionKind        // its upgrade's; a WebRTC session's meter (liveMetering, callMeters) says its own
	sideband   *appSideband       // a Live sideband's metering side; nil: it meters nothing
	gemini     *gemini.Session    // a session translated to Gemini Live's protocol (translate); nil for others
	// Session continuity (keepContinuity): nil when off for the session; the
	// kept conversation (a nil State until something is kept); the
	// resumes so far (under depMu).
	resume *resumeArgs
	keep   continuity.Keeper
	// conv is the conversation record (log_transcripts: keepConversation);
	// nil when the session's is not kept.
	conv *transcript.Recorder
	// guard holds and checks the session's events for its guardrails
	// (guardrails.go); nil for a session without any.
	guard *guarded.Session
	// rec records the session's audio and events (record_sessions:
	// recordings.go); nil when it is not recorded.
	rec     *recording.Recorder
	resumes []usage.Resume

	// A Realtime conversation session's responses in flight (keepFlights;
	// nil for other sessions), how long its end waits for them, and what
	// was billed of them by estimate (under estMu).
	flights    *usage.Flights
	cancelWait time.Duration
	estMu      sync.Mutex
	estimated  usage.Usage
	// unpriced names the models of usage no price was found for
	// (transcriptionCost), booked on the read path, read at the end.
	unpriced []string

	// The client leaving cancels the upstream attempt made for it.
	dialMu     sync.Mutex
	clientLeft bool
	dialGen    uint32 // which attempt cancelDial belongs to
	cancelDial context.CancelFunc
}

// left reports whether the client left (it is only asked once
// the upstream attempt is over).
func (i *sessionInfo) left() bool {
	i.dialMu.Lock()
	defer i.dialMu.Unlock()
	return i.clientLeft
}

// attached records that deployment d serves the session sess, and sets
// the translator d's provider needs (attachTranslated) before the first
// frame of d's upstream reaches the relay.
func (i *sessionInfo) attached(b *balance.Balancer, sess *poller.Session, d *routes.Deployment) {
	i.attachTranslated(sess, d)
	i.depMu.Lock()
	count := !i.ended
	i.deployment, i.counted = d, count
	i.depMu.Unlock()
	if count {
		b.Attach(d)
	}
	i.turns.Attached() // the client's events queued for it go now
	i.trace.Attached(traceWhere(d), i.poolHit)
}

// uncount takes the session out of its deployment's live count, once, and
// returns the deployment it had (nil if none); forget drops it, for a redial
// that will attach another, and otherwise the session has ended.
func (i *sessionInfo) uncount(b *balance.Balancer, forget bool) *routes.Deployment {
	i.depMu.Lock()
	d, counted := i.deployment, i.counted
	i.counted = false
	if forget {
		i.deployment = nil
	} else {
		i.ended = true
	}
	i.depMu.Unlock()
	if counted {
		b.Detach(d)
	}
	return d
}

// protocol names the protocol the session speaks, for metrics and its
// record.
func (i *sessionInfo) protocol() string { return i.kind.traits().label }

// currentDeployment is the deployment serving the session (nil if none yet).
func (i *sessionInfo) currentDeployment() *routes.Deployment {
	i.depMu.Lock()
	defer i.depMu.Unlock()
	return i.deployment
}

// sessionConfig is what every session of m shares: the limits, and the
// Manager's answers to the relay's events.
func sessionConfig(m *Manager) poller.SessionConfig {
	return poller.SessionConfig{
		MaxMessage:   m.cfg.MaxMessage,
		MaxPending:   m.cfg.MaxPending,
		CloseTimeout: m.cfg.CloseTimeout,
		OnEnd:        m.sessionEnded,
		UpstreamInvalid: func(reason string) []byte {
			return protocol.Realtime{}.Refusal("upstream_protocol_error", "the upstream sent an invalid frame: "+reason, 0)
		},
		Redial:         m.redial,
		Resume:         m.resume,
		MidFrameLost:   m.midFrameLost,
		SameFirstFrame: protocol.Realtime{}.Warm, // a redialed upstream's session.created is consumed: the client has the warm socket's
	}
}

// What the gateway tells a client, in its protocol's words (info.proto() builds
// the frames: server/protocol). The reactor (poller) relays frames and
// reports events; the gateway decides what an event means to the client, and
// keeps the per-session bookkeeping that feeds metrics (pool hit, setup
// time).
