// Package admission is the one way into the gateway. Every entry point that starts or
// joins a session — a WebSocket connect (Realtime, GPT-Live, translation,
// transcription), a WebRTC call or GPT-Live WebRTC session created (create,
// an HTTP fork, the accept of an inbound SIP call), a sideband, a WebSocket
// fork — holds an admission before it opens anything upstream, and only
// Gate.Admit makes one: the key's models, its budget, its max_sessions and
// connect_rate, and the deployment's slots (max_parallel_requests, rpm) are
// decided here, the same way for all of them, from the routes table in
// force. What each entry point counts:
//
//	entry point                      models, budget  key session (max_sessions, connect_rate)  deployment slot
//	WebSocket connect (Realtime,     checked         counts until the session ends              held until it ends (GPT-Live:
//	  translation, transcription,                                                               from its session.start, which
//	  GPT-Live)                                                                                 names the model: AdmitLiveStart)
//	WebRTC call, GPT-Live WebRTC     checked         counts while the call is live              held while the call is live
//	  create, HTTP fork, SIP accept                  (released when its metering sideband       (on the deployment that took it)
//	  of a call made elsewhere                       closes, or the gateway hangs it up)
//	WebSocket fork (GPT-Live)        checked         counts: a session of its own               held, on the forked session's
//	                                                                                            deployment
//	sideband (?call_id=, /attach)    checked         no: its call already counts                none: it goes to its call's
//	                                                                                            deployment
//	resume, rollover                 (not admitted again: the session's admission holds; its slot moves to the new
//	                                 upstream's deployment, of the group as the routes table has it now)
//
// A WebSocket connect also passes the instance's front door first
// (draining, MAX_CONNECTIONS: the server's admit), which counts every client
// socket, sidebands included.
//
// The rules are a table (the Entry constants and their rules), read the
// same way by the WebSocket connects (server/session) and the HTTP
// endpoints (server/api): what differs between the ways in is a row, not a
// branch.
package admission

import (
	"sync/atomic"

	"rtgate/server/balance"
	"rtgate/server/frontdoor"
	"rtgate/server/limit"
	"rtgate/server/routes"
)

// Entry is a way in: what it counts is its rule's.
type Entry uint8

const (
	Connect  Entry = iota // a WebSocket session
	Call                  // a WebRTC call or GPT-Live WebRTC session made through the gateway
	Fork                  // a GPT-Live WebSocket fork
	Sideband              // a sideband to a call or a GPT-Live session
)

// rule is what an admission of an entry counts.
type rule struct {
	session bool // against the key's max_sessions and connect_rate, until released
	slot    bool // a deployment's slot, until released
}

// rules is the table above.
var rules = [...]rule{
	Connect:  {session: true, slot: true},
	Call:     {session: true, slot: true},
	Fork:     {session: true, slot: true},
	Sideband: {},
}

// Config is the admission's share of the settings.
type Config struct {
	// MaxSessionsPerKey and ConnectRatePerKey (MAX_SESSIONS_PER_KEY,
	// CONNECT_RATE_PER_KEY) are a key's limits unless it sets its own.
	MaxSessionsPerKey int
	ConnectRatePerKey float64
	// TranscriptionModel (TRANSCRIPTION_MODEL) is the group of a
	// transcription session whose model is not a group (PickGroup).
	TranscriptionModel string
}

// Deps is what the gate counts with.
type Deps struct {
	// Limiter counts the keys' sessions and connects: limit.Local, or
	// cluster.Limiter across instances.
	Limiter limit.Admitter
	// Balancer ranks a group's deployments and holds their slots.
	Balancer *balance.Balancer
	// CheckBudget refuses a key at its spend budget (nil: within it).
	CheckBudget func(key *routes.ClientKey) *frontdoor.Refusal
}

// Gate admits every way in.
type Gate struct {
	cfg  Config
	deps Deps
}

// New makes the gate.
func New(cfg Config, deps Deps) *Gate { return &Gate{cfg: cfg, deps: deps} }

// Admission is what an entry point holds once admitted: where it may go,
// and what it counts until released. Only Gate.Admit makes one; an entry
// point opens nothing upstream without it.
type Admission struct {
	gate  *Gate
	entry Entry
	// key is the name of the key whose session it counts ("" when it
	// counts none).
	key string
	// plan is where it goes: the deployments to try in order; Reserved
	// holds a slot (nil when it holds none).
	plan     balance.Plan
	released atomic.Bool
}

// Admit admits key through entry e to model group group ("" for a GPT-Live
// connect, whose group its session.start names), on deployments ds (nil:
// the group's, in the balancer's order), or refuses it. With a Redis
// limiter and a counted entry it may wait on Redis: never call it on
// netpoll's handler then (Waits).
func (g *Gate) Admit(e Entry, key *routes.ClientKey, table *routes.Table, group string, ds []*routes.Deployment) (*Admission, *frontdoor.Refusal) {
	r := rules[e]
	if group != "" && !key.Allows(group) {
		return nil, ModelNotAllowed(group)
	}
	if herr := g.deps.CheckBudget(key); herr != nil {
		return nil, herr
	}
	a := &Admission{gate: g, entry: e}
	if r.session {
		maxSessions, rate := g.keyLimits(key)
		if refused := g.deps.Limiter.Admit(key.Name, maxSessions, rate); refused != nil {
			return nil, keyRefused(refused)
		}
		a.key = key.Name
	}
	if group == "" {
		return a, nil
	}
	if ds == nil {
		ds = table.Groups[group]
	}
	if !r.slot {
		a.plan.Cands = g.deps.Balancer.Rank(ds)
		return a, nil
	}
	plan, busy := g.deps.Balancer.Reserve(ds)
	if busy != nil {
		a.Release()
		return nil, deploymentsBusy(busy)
	}
	a.plan = plan
	return a, nil
}

// AdmitLiveStart is the rest of a GPT-Live WebSocket connect's admission,
// made once its session.start names the model (Admit admitted the connect
// with no group; the group's own check has passed): the key's models for
// the backend it delegates to, and a slot of the group's deployments,
// taken as Admit takes one for the entry points whose group the connect
// names.
func (g *Gate) AdmitLiveStart(key *routes.ClientKey, table *routes.Table, group, backend string) (balance.Plan, *frontdoor.Refusal) {
	if herr := BackendNotAllowed(key, backend); herr != nil {
		return balance.Plan{}, herr
	}
	plan, busy := g.deps.Balancer.Reserve(table.Groups[group])
	if busy != nil {
		return balance.Plan{}, deploymentsBusy(busy)
	}
	return plan, nil
}

// Waits reports whether admitting key through e may wait on I/O (the Redis
// limiter).
func (g *Gate) Waits(e Entry, key *routes.ClientKey) bool {
	if !rules[e].session {
		return false
	}
	return g.deps.Limiter.Waits(g.keyLimits(key))
}

// keyLimits are the key's max_sessions and connect_rate in force: its own,
// else the gateway-wide defaults.
func (g *Gate) keyLimits(key *routes.ClientKey) (maxSessions int, rate float64) {
	maxSessions, rate = g.cfg.MaxSessionsPerKey, g.cfg.ConnectRatePerKey
	if key.MaxSessions > 0 {
		maxSessions = key.MaxSessions
	}
	if key.ConnectRate > 0 {
		rate = key.ConnectRate
	}
	return maxSessions, rate
}

// Candidates are the deployments to try, in order.
func (a *Admission) Candidates() []*routes.Deployment { return a.plan.Cands }

// Plan is where it goes: the candidates, and the deployment whose slot it
// holds (nil when none).
func (a *Admission) Plan() balance.Plan { return a.plan }

// Release gives back what the admission counts (the key's session, the
// deployment's slot), once; later calls do nothing.
func (a *Admission) Release() {
	if a == nil || a.released.Swap(true) {
		return
	}
	if a.key != "" {
		a.gate.deps.Limiter.Release(a.key)
	}
	a.gate.deps.Balancer.Release(a.plan.Reserved)
}

// HandOver is the admission given to a WebSocket session, which gives back
// its counts itself when it ends: the key's session (keyed), and the slot
// (reserved, which a resume moves).
func (a *Admission) HandOver() (keyed bool, reserved *routes.Deployment) {
	a.released.Store(true)
	return a.key != "", a.plan.Reserved
}
