package session

// GPT-Live sessions (WebSocket /v1/live/sessions, Azure's
// /openai/v1/live/sessions). The key is checked, and refused, before the
// upgrade as for Realtime; but the model is in the client's first event,
// session.start, so the session is opened (the 101 sent) with no model
// group and no deployment, and the reactor holds the client's first message
// for the gateway (poller's HoldFirst) instead of queuing it for an upstream
// that does not exist yet. Then, in a goroutine of its own:
//
//	state     event                                next
//	waiting   first message: session.start         starting (group, deployment, dial; the
//	          naming a model                       rewritten session.start goes first)
//	waiting   first message: anything else         done (error session_not_started, close 4000)
//	waiting   no first message in LiveStartTimeout done (error session_start_timeout, close 4000)
//	waiting   client closes or leaves              done (no upstream ever)
//	starting  unknown model, model not allowed,    done (error event with the HTTP refusal's
//	          no deployment with room              code, close 1008)
//
// Once started the session relays like any other; its end goes through
// GPT-Live's own (poller's SetFarewell): a client leaving, a budget running
// out or a shutdown sends the upstream session.close, and the close follows
// session.closed (which carries the final usage) or liveCloseWait.

import (
	"bytes"
	"encoding/json"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gobwas/ws"

	"rtgate/frames"
	"rtgate/poller"
	"rtgate/server/admission"
	"rtgate/server/apps"
	"rtgate/server/balance"
	"rtgate/server/continuity"
	"rtgate/server/eventtype"
	"rtgate/server/guarded"
	"rtgate/server/protocol"
	"rtgate/server/routes"
	"rtgate/server/usage"
)

// liveCloseWait bounds the wait for session.closed after session.close.
const liveCloseWait = 5 * time.Second

// Live start states.
const (
	liveWaiting int32 = iota
	liveStarting
	liveDone
)

// liveState is what a GPT-Live session adds to its sessionInfo.
type liveState struct {
	mgr     *Manager
	sess    *poller.Session
	info    *sessionInfo
	table   *routes.Table
	hdr     http.Header // the client headers that go upstream
	state   atomic.Int32
	timer   *time.Timer
	startAt time.Time // when the session.start arrived (before the dial)

	// Written on the upstream's read path (the meter's callbacks), read
	// once the session has ended.
	meter      usage.LiveMeter
	backendUSD float64 // delegated responses' tokens, priced per backend model
	// floor is the session time billed ahead, at creation (a WebRTC
	// session's 15 s; 0 for a WebSocket session): booked against the
	// budget then, and only the seconds beyond it as they are reported.
	floor float64
	// backendRefused: a delegation to a backend the key may not use ended
	// the session (refuseBackend; the read path's).
	backendRefused bool
	// hangUp ends a WebRTC session (no sess: its events pass the gateway
	// by): its call hung up upstream through the control API (liveMetering).
	hangUp func()
	// refused is the code of a refusal after the upgrade ("" for none).
	mu      sync.Mutex
	refused string
	// guard holds and checks the session's events for its guardrails
	// (liveguard.go); nil for a session without any.
	guard *guarded.Live
}

// newLiveState prepares an opened Live session, before its relay starts:
// the farewell, the hold on the first message and its deadline, and the
// meter.
func newLiveState(m *Manager, sess *poller.Session, info *sessionInfo, u *upgrade) *liveState {
	ls := relayedLive(m, sess, info)
	ls.table, ls.hdr = u.table, passThrough(u.req.Header)
	sess.HoldFirst(ls.take)
	ls.timer = time.AfterFunc(m.cfg.LiveStartTimeout, ls.timeout)
	return ls
}

// relayedLive is the state of a Live session whose events the gateway
// relays: its farewell (session.close, then wait for session.closed), its
// meter, and its budget.
func relayedLive(m *Manager, sess *poller.Session, info *sessionInfo) *liveState {
	ls := &liveState{mgr: m, sess: sess, info: info}
	sess.SetFarewell(protocol.Live{}.End(), liveCloseWait)
	ls.meter.OnClosed = sess.Farewelled
	ls.meter.OnTokens = ls.bookBackend
	ls.meter.OnDelegation = ls.refuseBackend
	ls.meter.OnStarted = func(id string) { go rememberLiveOwner(m, info, id) }
	m.budgets.meterLive(info, ls, func(message string) {
		terminate(info.proto(), sess, ws.StatusPolicyViolation, "budget exceeded", "budget_exceeded", message)
	})
	return ls
}

// rememberLiveOwner records that the session's key and deployment own Live
// session id (named by its session.started), as a WebRTC create's are: its
// owner may then attach a sideband to it, or fork it once it is stored and
// closed. It runs in a goroutine of its own (Redis may be asked).
func rememberLiveOwner(m *Manager, info *sessionInfo, id string) {
	d := info.currentDeployment()
	if d == nil || !protocol.ValidID(id) {
		return
	}
	if err := m.calls.Remember(m.ctx, id, apps.Owner{Key: info.key.Name, Deployment: d.Name}); err != nil {
		m.log.Warn("Live session owner not stored in Redis; only this instance knows it", "session", id, "err", err)
	}
}

// newLiveFork prepares a WebSocket fork (WS /v1/live/sessions/{id}/fork;
// the HTTP fork is server/api's): a new Live session, relayed to the
// deployment that served the stored one, whose own session.start (which names no model: the fork
// continues the stored session's) is relayed as the client sent it. Its
// upstream is dialed at once, so nothing of the first message is held; it
// is metered, budgeted and ended as any Live WebSocket session.
func newLiveFork(m *Manager, sess *poller.Session, info *sessionInfo) *liveState {
	ls := relayedLive(m, sess, info)
	ls.state.Store(liveDone) // no first message to wait for
	ls.startAt = time.Now()
	return ls
}

// take is the hold's: the client's first message (nil: it closed first).
func (ls *liveState) take(msg []byte) {
	if !ls.state.CompareAndSwap(liveWaiting, liveStarting) {
		return
	}
	ls.timer.Stop()
	ls.startAt = time.Now()
	if msg == nil {
		ls.state.Store(liveDone)
		ls.sess.Terminate(ws.StatusNormalClosure, "no session was started", nil)
		ls.sess.Cancel()
		return
	}
	go ls.start(msg)
}

// timeout ends a session whose client sent nothing in time.
func (ls *liveState) timeout() {
	if ls.state.CompareAndSwap(liveWaiting, liveDone) {
		ls.end(protocol.ErrorEvent("invalid_request_error", "session_start_timeout",
			"No session.start within "+ls.mgr.cfg.LiveStartTimeout.String()+": the first client event must be session.start.", ""),
			4000, "invalid_request_error.session_start_timeout", "session_start_timeout")
	}
}

// clientLeft is the client socket closing: before the first message, the
// session ends here (no upstream will ever be dialed).
func (ls *liveState) clientLeft() {
	if ls.state.CompareAndSwap(liveWaiting, liveDone) {
		ls.timer.Stop()
		ls.sess.Cancel()
	}
}

// end refuses the session after its upgrade: notice, close code and
// reason to the client; no upstream.
func (ls *liveState) end(notice []byte, code ws.StatusCode, reason, refused string) {
	ls.state.Store(liveDone)
	ls.mu.Lock()
	ls.refused = refused
	ls.mu.Unlock()
	ls.sess.Terminate(code, reason, notice)
	ls.sess.Cancel()
}

// start reads the first message, routes the session by its model and dials.
func (ls *liveState) start(msg []byte) {
	m, info := ls.mgr, ls.info
	payload, text := unmaskMessage(msg)
	st, err := protocol.ReadStart(payload, text)
	switch err {
	case nil:
	case protocol.ErrMissingModel:
		ls.end(protocol.ErrorEvent("invalid_request_error", err.Error(),
			"Missing required parameter: 'session.model'.", st.EventID),
			4000, "invalid_request_error."+err.Error(), err.Error())
		return
	default:
		ls.end(protocol.ErrorEvent("invalid_request_error", err.Error(),
			"The session has not started: the first client event must be session.start (a JSON text frame).", st.EventID),
			4000, "invalid_request_error."+err.Error(), err.Error())
		return
	}
	if info.resume != nil { // continuity keeps the configuration and the client's history
		config, input := st.Kept()
		info.keep.StartLive(config, input, info.resume.lim, continuity.LiveCaps{})
	}
	group, herr := m.gate.PickGroup(ls.table, info.key, admission.GroupAsk{Model: st.Model, Protocol: routes.ProtocolLive})
	var plan balance.Plan
	if herr == nil {
		plan, herr = m.gate.AdmitLiveStart(info.key, ls.table, group, st.BackendModel())
	}
	if herr != nil {
		ls.refuse(herr, st.EventID)
		return
	}
	// The session's group and slot are published under the registry's
	// lock: a session that ended meanwhile gives the slot back here.
	m.sessMu.Lock()
	registered := m.sessions[ls.sess] == info
	if registered {
		info.group, info.reserved = group, plan.Reserved
	}
	m.sessMu.Unlock()
	info.trace.Grouped(group)
	if !registered {
		m.balancer.Release(plan.Reserved)
		return
	}
	info.keptByDeployment(plan.Cands[0]) // before its upstream's first frame
	if ls.fromPool(plan.Cands[0], group, st) {
		return // a warm unstarted socket of its first-choice deployment (liveState.fromPool)
	}
	ctx, cancel := info.attemptContext(m.ctx, m.cfg.DialTimeout)
	defer cancel()
	conn, d := m.dialFor(ctx, ls.sess, info, plan.Cands, nil, ls.hdr)
	if conn == nil {
		return
	}
	// session.start first, with the deployment's name for the model; the
	// client's frames queued meanwhile follow (AttachUpstream).
	if err := conn.Endpoint.Send(st.For(d.Model)); err != nil {
		conn.Endpoint.Drop()
		dialFailed(info.proto(), ls.sess, 0)
		return
	}
	info.attached(m.balancer, ls.sess, d)
	ls.sess.AttachUpstream(poller.NewHandle(conn.Endpoint), conn.Preface)
}

// refuse ends the session with the error event of an HTTP refusal (its
// type, code and message) and close 1008.
func (ls *liveState) refuse(herr *refusal, clientEventID string) {
	ls.end(protocol.ErrorEvent(herr.Type, herr.Code, herr.Message, clientEventID),
		ws.StatusPolicyViolation, herr.Code, herr.Code)
}

// unmaskMessage joins the payloads of a client message's data frames
// (masked, as they came; control frames among them are skipped) and says
// whether it is text.
func unmaskMessage(msg []byte) (payload []byte, text bool) {
	first := true
	for len(msg) > 0 {
		h, hlen, ok, err := frames.ParseHeader(msg)
		if !ok || err != nil || int64(len(msg)-hlen) < h.Length {
			break
		}
		p := append([]byte(nil), msg[hlen:hlen+int(h.Length)]...)
		msg = msg[hlen+int(h.Length):]
		if h.OpCode.IsControl() {
			continue
		}
		if first {
			text, first = h.OpCode == ws.OpText, false
		}
		if h.Masked {
			ws.Cipher(p, h.Mask, 0)
		}
		payload = append(payload, p...)
	}
	return payload, text
}

// bookBackend prices a delegated response's backend tokens at their model's
// prices (backendPrices); a model nothing prices is noted
// unpriced. A backend the key may not use ends the session once its tokens
// are booked (refuseBackend).
func (ls *liveState) bookBackend(model string, add usage.Usage) {
	if p, ok := backendPrices(ls.info.currentDeployment(), model); ok {
		ls.backendUSD += p.Cost(add)
	} else {
		ls.info.noteUnpriced(model)
	}
	ls.refuseBackend(model)
}

// refuseBackend ends the session, once, when it delegates to a backend the
// key may not use: the key's models list applies to delegated backends
// after session.start (checked there, or in a WebRTC create's body) as
// well. It runs on the read path, for the session.updated that follows a
// client's session.update (the meter's OnDelegation: before a response
// spends on the backend) and for each response's tokens (a backend no
// session.updated named). A WebSocket session gets an error event
// model_not_allowed and close 1008; a WebRTC session, whose client the
// gateway cannot write to, has its call hung up upstream. Either way its
// record's outcome is "refused", with the usage it had.
func (ls *liveState) refuseBackend(model string) {
	herr := admission.BackendNotAllowed(ls.info.key, model)
	if herr == nil || ls.backendRefused {
		return
	}
	ls.backendRefused = true
	ls.mu.Lock()
	ls.refused = herr.Code
	ls.mu.Unlock()
	switch {
	case ls.sess != nil:
		go ls.sess.Terminate(ws.StatusPolicyViolation, herr.Code,
			protocol.ErrorEvent(herr.Type, herr.Code, herr.Message, ""))
	case ls.hangUp != nil:
		go ls.hangUp()
	}
}

// cost is the session's cost: its seconds at the deployment's price per
// second, and its backend tokens.
func (ls *liveState) cost() float64 {
	var perSecond float64
	if d := ls.info.currentDeployment(); d != nil {
		perSecond = d.SecondPrice
	}
	return ls.meter.Seconds*perSecond + ls.backendUSD
}

// fill completes an ended Live session's record: protocol, seconds,
// backend tokens, whether the final usage was confirmed, and a refusal's
// outcome.
func (ls *liveState) fill(rec *usage.Record) {
	rec.Protocol = routes.ProtocolLive
	rec.Seconds = ls.meter.Seconds
	rec.Usage = ls.meter.Usage
	rec.Unconfirmed = rec.Deployment != "" && !ls.meter.Closed
	ls.mu.Lock()
	if ls.refused != "" {
		rec.Outcome = "refused"
	}
	ls.mu.Unlock()
}

// GPT-Live's warm pool on the session path (LIVE_POOL_SIZE, off by
// default). The pool itself (upstream.NewLivePool) holds upgraded,
// unstarted sockets per upstream URL and header set; here the gateway
// fills it for every Live deployment, and a Live session whose
// session.start has named its model takes one for its first-choice
// deployment instead of dialing: session.start is written on it first
// (Pool.TakeLive), and a socket found dead before that write is replaced by
// the next one, or by the ordinary dial, without the client seeing it.
//
// Off by default because two things cannot be measured offline: how long
// OpenAI keeps an upgraded socket on which no session.start came (not
// documented; LIVE_POOL_MAX_IDLE_SECS should stay below it), and whether
// unstarted sockets count against the per-model concurrent-session cap.

// liveTakeTries bounds the pooled sockets a session tries before it dials.
const liveTakeTries = 3

// PrimePools warms what table t configures: the Realtime pool for every
// Realtime deployment and the Live pool for every Live one (either pool nil:
// off), with the targets the sessions will ask for; a reload's removed
// deployments lose their pools.
func (m *Manager) PrimePools(t *routes.Table) {
	primePool(m.pool, t, routes.ProtocolRealtime)
	primePool(m.livePool, t, routes.ProtocolLive)
}

// fromPool starts the session on a pooled socket of deployment d, writing
// st (rewritten for d) first; it reports false when the pool is off or
// gave nothing, and the caller dials.
func (ls *liveState) fromPool(d *routes.Deployment, group string, st protocol.Start) bool {
	m, info := ls.mgr, ls.info
	if m.livePool == nil {
		return false
	}
	hold, err := m.livePool.TakeLive(target(d, nil, ls.hdr), group, st.For(d.Model), liveTakeTries)
	if err != nil {
		return false
	}
	adopted := ls.sess.AdoptWarm(func(o poller.Owner) (*poller.Handle, []byte) {
		h, held := hold.Adopt(o)
		if h != nil {
			info.poolHit = true
			info.attached(m.balancer, ls.sess, d) // before its first frame reaches the client
		}
		return h, held
	})
	if !adopted {
		// It died after session.start went, before the session owned
		// it: nothing reached the client, so the ordinary dial (and a
		// fresh session.start) follows.
		hold.Handle().Endpoint().Drop()
		return false
	}
	m.balancer.Succeeded(d)
	return true
}

// GPT-Live's session continuity (Manager.resume has the common path; what is kept
// is server/continuity's liveConv). A Live session resumes on the same losses
// as a Realtime one (its connection ends without a close frame; close 1011,
// 1012 or 1013) and at its cap, which GPT-Live says with session.closed,
// reason "expired", then a close (1000): both are held back from the client.
// The fresh upstream session starts with a session.start of the gateway's
// (protocol.Restart) carrying the kept configuration, with the deployment's
// name for the model, and the kept conversation as its input; the primer
// consumes its session.started. The relay's farewell and the meter carry
// over: the meter adds the new session's seconds to the old ones'
// (usage.LiveMeter.NextSession). Not resumed: forks (their session.start
// continues a stored session), WebRTC sessions and sidebands (their media
// does not pass through the gateway).

// keepLive turns continuity on for a Live session, as keepContinuity does
// for a Realtime one; its configuration is kept when session.start comes.
func keepLive(c *clientConn, m *Manager, sess *poller.Session, u *upgrade) {
	c.keepContinuity(sess, &resumeArgs{header: passThrough(u.req.Header),
		lim: continuity.Limits{MaxBytes: m.cfg.ContinuityMaxBytes, Global: m.contGlobal}})
}

// liveHoldText holds back the upstream's session.closed at its cap (reason
// "expired"): the session goes on; the close that follows is the cap's.
// The meter still reads it (its final seconds).
func liveHoldText(p []byte, args *resumeArgs) bool {
	if t, ok := eventtype.Of(p); !ok || string(t) != eventtype.LiveClosed || !bytes.Contains(p, []byte(`"expired"`)) {
		return false
	}
	var ev struct {
		Reason string `json:"reason"`
	}
	if json.Unmarshal(p, &ev) != nil || ev.Reason != "expired" {
		return false
	}
	args.expired.Store(true)
	// Kept for a resume that is refused: the session then ends as without
	// continuity, this event first (Manager.resume).
	held := frames.AppendFrame(nil, ws.OpText, p, false)
	args.heldExpired.Store(&held)
	return true
}

// liveHoldClose holds back the closes a fresh upstream repairs: 1011, 1012,
// 1013, and any close after the cap's session.closed. That event is held
// only when it is small (frames.MaxHold: its session object carries the
// instructions); a larger one reaches the client, and the meter, which
// reads every session.closed whole, says it was the cap's all the same.
func (ls *liveState) holdClose(c frames.Close, args *resumeArgs) bool {
	switch c.Code {
	case ws.StatusInternalServerError, statusServiceRestart, statusTryAgainLater:
		return true
	}
	if ls.meter.Closed && ls.meter.Reason == "expired" {
		args.expired.Store(true)
	}
	return args.expired.Load()
}

// liveResuming is the Live part of a resume's start: the meter counts the
// fresh upstream session's seconds on top, and a delegated response that
// was in progress ends for the client as the Responses API's own
// response.failed, wrapped in response.event as GPT-Live wraps every
// Responses event (GPT-Live's voice turns have no done or failed event: a
// turn in progress just stops; what the client already got of its
// transcript is kept).
func (ls *liveState) resuming(sess *poller.Session, snap continuity.Snapshot) {
	ls.meter.NextSession()
	if snap.Response == "" {
		return
	}
	body, _ := json.Marshal(map[string]any{
		"type":          eventtype.LiveResponse,
		"event_id":      protocol.NewEventID(),
		"delegation_id": snap.Delegation,
		"event": map[string]any{
			"type": "response.failed",
			"response": map[string]any{
				"id": snap.Response, "object": "response", "status": "failed", "output": []any{},
				"error": map[string]any{"code": "server_error",
					"message": "The upstream was lost during this response; the session continues on a fresh upstream session."},
			},
		},
	})
	sess.SendClient(frames.AppendFrame(nil, ws.OpText, body, false))
}

// liveReplay is what a resume sends a Live deployment d: the session.start
// of the kept configuration and conversation, with d's name for the model.
func liveReplay(snap continuity.Snapshot) func(*routes.Deployment) []byte {
	st := protocol.Restart(snap.Config, snap.Items)
	return func(d *routes.Deployment) []byte { return st.For(d.Model) }
}

// liveResumed is the fresh upstream session in place: its id (from the
// session.started the primer consumed) is remembered as the key's, as the
// first one's was.
func (ls *liveState) resumed(started []byte) {
	var ev struct {
		Session struct {
			ID string `json:"id"`
		} `json:"session"`
	}
	if json.Unmarshal(started, &ev) == nil && ev.Session.ID != "" {
		go rememberLiveOwner(ls.mgr, ls.info, ev.Session.ID)
	}
}

// livePrimed is a resume's warm Live socket of d, with first (its
// session.start) written on it and owned by a primer; nil when the Live
// pool is off or has none (the resume dials).
func (m *Manager) livePrimed(d *routes.Deployment, info *sessionInfo, h http.Header, first []byte, acks int) *primer {
	if m.livePool == nil {
		return nil
	}
	hold, err := m.livePool.TakeLive(target(d, nil, h), info.group, first, liveTakeTries)
	if err != nil {
		return nil
	}
	p := newPrimer(primeAwaitCreated, acks)
	hd, held := hold.Adopt(p)
	if hd == nil {
		hold.Handle().Endpoint().Drop()
		return nil
	}
	p.h, p.warm = hd, true
	p.feed(held)
	hd.FinishHandOver()
	m.balancer.Succeeded(d)
	return p
}
