package session

// A complete request head becomes a session here, in three steps:
//
//  1. decide (on the connection's handler, no I/O): the path, the method,
//     the Origin, the credentials, the upgrade headers, the model group, the
//     sideband's call owner when this process knows it, then admit
//     (draining, MAX_CONNECTIONS, then admission.Gate.Admit: the key's
//     models, budget and limits, the deployment's slot). The outcome is an
//     upgrade or one refusal.
//  2. the off-loop step, only when the decision needs I/O: the call owner
//     from Redis, the key's limits from Redis. It runs in a goroutine of its
//     own, never on netpoll's handler; bytes the client sends meanwhile are
//     collected behind the head (frontdoor.Conn.OffLoopStep). It ends in a
//     refusal or in open, exactly as the handler would have.
//  3. open: with the admission's deployments (its slot reserved by
//     admission.Gate.Admit), the 101 sent, and the session's upstream
//     attached (warm socket, dial, or an app's own start).
//
// The request is decided once: a reload (SIGHUP) during the off-loop step
// does not re-evaluate it.

import (
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/gobwas/ws"

	"rtgate/server/admission"
	"rtgate/server/api"
	"rtgate/server/apps"
	"rtgate/server/continuity"
	"rtgate/server/frontdoor"
	"rtgate/server/guardrail"
	"rtgate/server/protocol"
	"rtgate/server/routes"
	"rtgate/server/usage"
)

// upgrade is a WebSocket connect as decided: who connects, to which model
// group, and what the off-loop step must still do.
type upgrade struct {
	req      *http.Request
	table    *routes.Table // the configuration it was decided by
	key      *routes.ClientKey
	grant    *apps.Grant // the client secret it connected with; nil for a key
	accept   string      // Sec-WebSocket-Accept
	protocol string      // the subprotocol answered ("" for none)
	q        url.Values
	group    string
	kind     sessionKind // decided here, read by every phase after (sessionKind.traits)

	// A sideband's call (?call_id=): lookup is set when its owner must be
	// asked of Redis; made once known that the gateway made the call;
	// attachTo is the deployment that serves the call (nil for a call the
	// gateway did not make: the group's, in the balancer's order).
	callID string
	lookup bool
	made   bool

	// A GPT-Live sideband (/v1/live/sessions/{id}/attach, resolveLiveAttach):
	// callID is the session's id, attachTo the deployment that serves it.
	// A WebSocket fork (…/{id}/fork) is decided as one, but is a Live
	// session of its own. A GPT-Live session has no group until its
	// session.start (keepLive).
	attachTo *routes.Deployment

	adm     *admission.Admission // admit's (admission.Gate.Admit); nil until admitted
	arrived time.Time            // when its head was read: the connect span's start
	guards  guardrail.Set        // a Realtime conversation's guardrails (decideGuardrails)
}

// HandleRequest implements Handler: it acts on a request that is not an
// API request (health, the WebSocket connects); rest holds bytes the client
// sent behind its head (frames, for a client that did not wait for the
// 101).
func (m *Manager) HandleRequest(dc *frontdoor.Conn, req *http.Request, rest []byte) {
	c := dc.Owner().(*clientConn)
	live := false // a GPT-Live route
	switch req.URL.Path {
	case "/health", "/health/liveliness", "/health/readiness":
		if m.draining.Load() {
			c.AnswerNow(api.JSONResponse(http.StatusServiceUnavailable, http.Header{"Retry-After": {"5"}},
				map[string]any{"status": "draining"}))
		} else if req.URL.Path != "/health/liveliness" && m.pool.Warming() {
			// Not ready until the pool holds its remembered demand
			// (upstream.Pool.Warming); alive all the same.
			c.AnswerNow(api.JSONResponse(http.StatusServiceUnavailable, http.Header{"Retry-After": {"1"}},
				map[string]any{"status": "warming"}))
		} else {
			c.AnswerNow(api.JSONResponse(http.StatusOK, nil, map[string]any{"status": "ok"}))
		}
		return
	case "/v1/realtime", "/realtime", "/v1/realtime/translations", "/realtime/translations":
	default:
		if protocol.IsLivePath(req.URL.Path) {
			live = true
			break
		}
		if _, op, ok := protocol.LiveSubPath(req.URL.Path); ok && (op == "attach" || op == "fork") {
			break // a GPT-Live sideband or WebSocket fork (resolveLiveAttach)
		}
		c.Refuse(&refusal{Status: http.StatusNotFound, Type: "invalid_request_error", Code: "not_found",
			Message: "no such endpoint: " + req.URL.Path})
		return
	}
	if req.Method != http.MethodGet {
		c.Refuse(&refusal{Status: http.StatusMethodNotAllowed, Type: "invalid_request_error", Code: "method_not_allowed",
			Message: "use GET with a WebSocket upgrade", Header: http.Header{"Allow": {"GET"}}})
		return
	}
	u, herr := m.decide(req, live)
	if herr == nil && !u.waits(m) {
		herr = m.admit(u)
	}
	if herr != nil {
		c.Refuse(herr)
		return
	}
	if u.waits(m) {
		m.decideOffLoop(c, u)
		return
	}
	m.open(c, u, rest)
}

// decide checks an upgrade request as far as it can without I/O; what is
// left (a call owner only Redis knows) is marked for the off-loop step.
func (m *Manager) decide(req *http.Request, live bool) (*upgrade, *refusal) {
	if !m.origins.allow(req.Header.Get("Origin")) {
		return nil, &refusal{Status: http.StatusForbidden, Type: "invalid_request_error", Code: "origin_not_allowed",
			Message: "this Origin may not connect"}
	}
	u := &upgrade{req: req, table: m.routes(), arrived: time.Now()}
	if live {
		u.kind = kindLive
	}
	creds := frontdoor.ReadCredentials(req.Header)
	var herr *refusal
	if live && api.IsLiveSecret(u.table, creds.Key) {
		return nil, api.RefuseLiveSecret()
	}
	if u.key, u.grant, herr = m.authenticate(u.table, creds.Key); herr != nil {
		return nil, herr
	}
	if u.accept, herr = frontdoor.CheckUpgrade(req); herr != nil {
		return nil, herr
	}
	if creds.OfferedRealtime {
		u.protocol = frontdoor.SubprotocolRealtime
	}
	u.q = req.URL.Query()
	if id, op, ok := protocol.LiveSubPath(req.URL.Path); ok && (op == "attach" || op == "fork") {
		if u.grant != nil {
			return nil, api.RefuseLiveSecret()
		}
		u.callID, u.kind = id, kindLiveSideband
		if op == "fork" {
			u.kind = kindLiveFork
		}
		return decideSideband(m, u)
	}
	if live {
		// The model comes with session.start, after the upgrade: the
		// key's models are checked then (keepLive).
		return u, decideGuardrails(u) // GPT-Live's too (liveguard.go)
	}
	// The key's own models are checked by admit (admission.Gate.Admit), once a
	// sideband's call owner has named its group.
	u.kind = realtimeKind(req.URL.Path, u.q, u.grant)
	model, _ := u.kind.traits().proto.Model(u.q)
	ask := admission.GroupAsk{Grant: u.grant, Model: model, Transcription: isTranscription(u.q) && model == ""}
	if isTranslationPath(req.URL.Path) {
		if herr = translationAsk(u.q, u.grant); herr != nil {
			return nil, herr
		}
		ask.Protocol, ask.Transcription = routes.ProtocolTranslation, false
	}
	if u.group, herr = m.gate.PickGroup(u.table, nil, ask); herr != nil {
		return nil, herr
	}
	// The session keeps its group for its whole life; from the query it
	// would keep the whole request line it points into.
	u.group = strings.Clone(u.group)
	if u.kind == kindSideband {
		u.callID = u.q.Get("call_id")
		return decideSideband(m, u)
	}
	if u.kind.traits().conversation {
		if herr = decideGuardrails(u); herr != nil {
			return nil, herr
		}
	}
	return u, nil
}

// decideSideband decides a sideband's connect (u.callID set): its call's
// owner known here, or left to the off-loop step when only Redis knows.
func decideSideband(m *Manager, u *upgrade) (*upgrade, *refusal) {
	owner, known := m.calls.Known(u.callID)
	if !known && m.calls.Remote() {
		u.lookup = true // the rest is decided once Redis has answered
		return u, nil
	}
	if herr := checkSideband(u, owner, known); herr != nil {
		return nil, herr
	}
	return u, nil
}

// waits reports whether deciding u needs I/O: its call's owner in Redis,
// or the Redis admitter.
func (u *upgrade) waits(m *Manager) bool {
	return u.lookup || m.gate.Waits(u.kind.traits().entry, u.key)
}

// admit is the WebSocket front door (draining, MAX_CONNECTIONS: every
// client socket counts), then the admission every entry point takes
// (admission.Gate.Admit): the key's models, budget and limits, the deployment's
// slot. sessionEnded gives back what it counts. With limits in Redis it
// waits on Redis: the off-loop step's only.
func (m *Manager) admit(u *upgrade) *refusal {
	if m.stopping.Load() {
		return &refusal{Status: http.StatusServiceUnavailable, Type: "server_error", Code: "draining",
			Message: "this gateway instance is shutting down; connect again", Header: http.Header{"Retry-After": {"1"}}}
	}
	if n := m.sessionsOpen.Add(1); m.cfg.MaxConnections > 0 && n > int64(m.cfg.MaxConnections) {
		m.sessionsOpen.Add(-1)
		return frontdoor.TooManyConnections()
	}
	var ds []*routes.Deployment
	if u.attachTo != nil { // a sideband's or fork's: the deployment that serves its call
		ds = []*routes.Deployment{u.attachTo}
	}
	adm, herr := m.gate.Admit(u.kind.traits().entry, u.key, u.table, u.group, ds)
	if herr != nil {
		m.sessionsOpen.Add(-1)
		return herr
	}
	u.adm = adm
	return nil
}

// decideOffLoop finishes deciding u off netpoll's handler (the call
// owner from Redis, then the key's checks; the Redis admission), then
// refuses or opens the session (frontdoor.Conn.OffLoopStep).
func (m *Manager) decideOffLoop(c *clientConn, u *upgrade) {
	c.OffLoopStep(func() func(rest []byte) {
		var herr *refusal
		if u.lookup {
			if m.hooks != nil {
				if h := m.hooks.Load(); h != nil && h.SidebandLookup != nil {
					h.SidebandLookup()
				}
			}
			owner, known, err := m.calls.Lookup(u.callID)
			if err != nil {
				m.log.Warn("sideband refused: its call's owner could not be looked up", "call_id", u.callID, "err", err)
				herr = api.OwnerUnavailable()
			} else {
				herr = checkSideband(u, owner, known)
			}
		}
		if herr == nil {
			herr = m.admit(u)
		}
		return func(rest []byte) {
			if herr != nil {
				c.Refuse(herr)
				return
			}
			m.open(c, u, rest)
		}
	})
}

// open makes a decided and admitted upgrade a session: it answers 101 and
// starts the upstream on the admission's deployments (a Live session
// reserves once its session.start names the model).
func (m *Manager) open(c *clientConn, u *upgrade, rest []byte) {
	plan := u.adm.Plan()
	c.Answered()
	info := &c.info
	info.keyCounted, info.reserved = u.adm.HandOver() // given back by sessionEnded
	info.id, info.key, info.group, info.start, info.grant = usage.NewSessionID(), u.key, u.group, time.Now(), u.grant
	info.trace = m.tracer.Start(u.req.Header, u.arrived, info.id, info.group) // nil: tracing off
	info.turns.Off = m.cfg.NoTurnMetrics
	info.kind = u.kind
	sess := &c.session
	sess.Init(&m.sessCfg, c.Endpoint())
	conversation := u.kind.traits().conversation
	if conversation && len(u.guards) > 0 {
		m.guard(c, u.guards) // before the relay; its deployments are OpenAI's and Azure's (servable)
	}
	translated := conversation && info.guard == nil && plan.Cands[0].Translated() // Gemini: both directions translated (provider.go)
	if translated {
		info.translate(sess, plan.Cands[0]) // before the relay: the client's first event is translated
	}
	plan.Cands = info.servable(plan.Cands) // empty: only Gemini serves the group, and not this kind of session (below)
	if conversation {
		info.keepFlights(sess, m.cfg.CloseTimeout) // before the budget's meter: it prices the split transcription
		if !translated {                           // its fix is a session.update Gemini cannot take mid-session
			m.checkTranscriptionModel(sess, info)
		}
	}
	m.budgets.meter(info, func(message string) {
		terminate(info.proto(), sess, ws.StatusPolicyViolation, "budget exceeded", "budget_exceeded", message)
	})
	if conversation || u.kind == kindLive {
		m.keepConversation(info, plan.Cands)
	}
	if conversation {
		m.recordSession(info, plan.Cands)
	}
	c.watch = setupWatch{sessionInfo: info, mgr: m, sess: sess}
	sess.InspectUpstream(&c.watch)
	info.turns.Observe = c.watch.observeTurn
	if u.kind != kindLive && !m.cfg.NoTurnMetrics || info.conv != nil || info.rec != nil {
		c.watchClient(sess, nil) // the turns' clock and the record: what the client's events the gateway forwards
	}
	if u.kind == kindLive {
		info.live = newLiveState(m, sess, info, u) // before any client frame: the first is held
		m.guardLive(c, u.guards)                   // liveguard.go
		if continuityOn(m.cfg, u.key) && info.live.guard == nil {
			keepLive(c, m, sess, u)
		}
	} else if u.kind == kindLiveFork {
		info.live = newLiveFork(m, sess, info) // metered as a Live session
	} else if translated && continuityOn(m.cfg, u.key) {
		c.keepGemini(sess)
	} else if conversation && !translated && info.guard == nil && continuityOn(m.cfg, u.key) {
		c.keepContinuity(sess, &resumeArgs{rawQuery: strings.Clone(u.req.URL.RawQuery), header: passThrough(u.req.Header),
			lim: continuity.Limits{MaxBytes: m.cfg.ContinuityMaxBytes, Global: m.contGlobal,
				KeepAudio: keepAudio(m.cfg, u.key)}})
	}
	c.watch.chooseObservers() // by the kind set above
	if conversation && info.resume == nil {
		sess.FilterUpstream(&c.watch) // the upstream's errors for the gateway's own events (holdGatewayAnswer)
	}
	c.StartRelay(sess)
	m.sessMu.Lock()
	m.sessions[sess] = info
	m.sessMu.Unlock()
	m.metrics.sessionsOpen.Inc()
	m.metrics.protocolOpen.WithLabelValues(info.protocol()).Inc()
	if err := c.Switch(frontdoor.UpgradeResponse(u.accept, u.protocol), rest); err != nil {
		sess.Cancel() // the client is gone before its 101: no upstream
		// Its close callback may have run before the session existed (the
		// TLS listener's first request is read off netpoll's handlers): end
		// the client side here; ClientGone is idempotent.
		sess.ClientGone()
		c.Endpoint().Close()
		return
	}
	if u.kind == kindLive {
		return // its session.start starts it (keepLive)
	}
	if len(plan.Cands) == 0 && info.guard != nil {
		sess.DialFailed(info.proto().Refusal("unsupported_for_provider",
			"Model group '"+info.group+"' has no OpenAI or Azure deployment, and this session's guardrails read only their events.", 0))
		return
	}
	if len(plan.Cands) == 0 {
		sess.DialFailed(info.proto().Refusal("unsupported_for_provider",
			"Model group '"+info.group+"' is served by Gemini Live, which takes Realtime conversations only (/v1/realtime?model=...).", 0))
		return
	}
	if m.startApp(sess, info, u, plan.Cands) {
		return // a client secret's, a sideband's or a transcription session's own start (startApp)
	}
	// Only the headers that go upstream outlive the handshake: the redial
	// closure lives as long as the session, and the whole parsed header
	// (about 1 KB) would too. Likewise the query is kept as its string and
	// parsed again for a redial, which is rare: the parsed url.Values (a
	// map, ~420 B) and the request line it points into would stay too.
	upHeader := passThrough(u.req.Header)
	rawQuery := strings.Clone(u.req.URL.RawQuery)
	group := u.group
	info.redial = func() {
		defer m.pool.ClientDialing()()   // a client waits on this dial too
		q, _ := url.ParseQuery(rawQuery) // it parsed once already, through req.URL.Query
		// The deployments in force now: never one a reload removed.
		m.connectUpstream(sess, info, info.servable(m.balancer.Rank(m.routes().Groups[group])), q, upHeader, nil)
	}
	cands, q := plan.Cands, u.q
	if translated {
		info.redial = nil // never warm: nothing to redial
		go m.connectUpstream(sess, info, cands, q, upHeader, nil)
		return
	}
	hit, miss := m.tryWarm(sess, info, cands[0], target(cands[0], q, upHeader))
	if hit {
		return
	}
	// Only a warm socket is ever redialed (poller's Session.redial): a
	// fresh dial's session drops the closure, and with it the query and
	// headers it keeps (~120 B per plain idle session, MemProfileRate=1
	// heap profile). Nothing else reads it yet: no warm socket, no close
	// callback asking. A miss may still take a warm socket (the hedge):
	// connectUpstream drops it once its own dial wins.
	if miss == nil {
		info.redial = nil
	}
	go m.connectUpstream(sess, info, cands, q, upHeader, miss) // the pool's refill yields until it is Done
}

// origins is ALLOWED_ORIGINS: which browser origins may connect and call
// the API (any when empty; the admin port's own pages always, so that the
// playground can connect).
type origins struct {
	allowed []string
	admin   func(origin string) bool // the admin page's own origin
}

func (o origins) allow(origin string) bool {
	if origin == "" || len(o.allowed) == 0 || (o.admin != nil && o.admin(origin)) {
		return true
	}
	for _, a := range o.allowed {
		if strings.EqualFold(a, origin) {
			return true
		}
	}
	return false
}

// The per-key limits (max_sessions, connect_rate): which Admitter decides
// them (this instance, or Redis with REDIS_URL), and how their refusals read.
