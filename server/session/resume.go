package session

// Session continuity, the sessions' part (the relay's is poller.Session's resume,
// what is kept is server/continuity): when a session's upstream is lost in
// a way a fresh upstream can repair, the session goes on over a new
// upstream session of the same model group, with its configuration and its
// conversation replayed, and the client's socket never closes.
//
//	loss (poller.Loss)                      cause             resumed?
//	connection ended, no close frame        upstream_lost     yes
//	close 1011, 1012, 1013                  upstream_closed   yes
//	error session_expired, then close 1001  session_expired   yes
//	GPT-Live: session.closed expired, close session_expired   yes (liveHoldText)
//	the gateway before the cap (rollover)   rollover          yes
//	Gemini's goAway (rollOverGemini)        rollover          yes, with its handle
//	a frame to the client half sent         mid_frame         no: ends as before
//	close 1000, 1008, 4xxx, other 1001      -                 no: passes to the client
//	a sideband, transcription, continuity   -                 no
//	off, more than maxResumes in resumeWindow
//
// The resume: the in-flight response ends for the client as a
// response.done with status "failed" (status_details.error says the
// upstream was lost); a deployment whose connection failed is reported to
// the balancer (its health rules apply) and the others are tried first; a
// slot is reserved like a connect's; the warm pool may serve the socket;
// a primer (newPrimer) owns it while the kept configuration
// (session.update) and items (conversation.item.create, their original
// ids) are replayed and every reply is consumed; then the client gets
// EventResumed and the socket, its queued frames going up first.

import (
	"encoding/json"
	"net/http"
	"net/url"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gobwas/ws"

	"rtgate/frames"
	"rtgate/poller"
	"rtgate/server/balance"
	"rtgate/server/continuity"
	"rtgate/server/eventtype"
	"rtgate/server/protocol"
	"rtgate/server/routes"
	"rtgate/server/transcript"
	"rtgate/server/usage"
)

// EventResumed is the gateway's own event that tells a client its session
// continued on a fresh upstream session. Both official SDKs pass unknown
// server event types through to the application.
const EventResumed = "rtgate.session.resumed"

// A session resumes at most maxResumes times within resumeWindow: an
// upstream that keeps dying is not retried forever.
const (
	maxResumes   = 3
	resumeWindow = time.Minute
)

// Close codes gobwas/ws does not name (RFC 6455's registry).
const (
	statusServiceRestart ws.StatusCode = 1012
	statusTryAgainLater  ws.StatusCode = 1013
)

// Resume causes (the cause label and the usage record's Resume.Cause).
const (
	causeLost     = "upstream_lost"
	causeClosed   = "upstream_closed"
	causeExpired  = "session_expired"
	causeRollover = "rollover"
	causeMidFrame = "mid_frame"
)

// resumeArgs is what a resume needs of the connect, kept while the session
// lives when continuity is on for it: the query and the headers that go
// upstream. (The deployments a resume may go to are the routes table's in
// force then, not the connect's: a reload's removed deployment is never
// resumed onto.)
type resumeArgs struct {
	rawQuery string
	header   http.Header
	lim      continuity.Limits
	expired  atomic.Bool // the upstream sent session_expired: its 1001 is a cap
	// heldExpired is that session_expired event (a text frame for the
	// client), held back: the client gets it if the session is not
	// resumed after all (too many resumes), before the upstream's 1001.
	heldExpired atomic.Pointer[[]byte]
	// resuming counts resumes started and not yet in the record: the
	// fresh upstream can be lost again before the record says ok.
	resuming atomic.Int32

	// The rollover before the upstream's cap (armRollover). rollMu is
	// taken under the relay's client lock (the watch's armCap) and is a
	// leaf: its timer's check lets it go before sess.Rollover.
	rollMu    sync.Mutex
	rollTimer *time.Timer
	rollGen   int  // which upstream session the timer is for
	stopped   bool // the session ended
}

// continuityOn says whether a session of key resumes.
func continuityOn(cfg Config, key *routes.ClientKey) bool {
	return cfg.Continuity && (key == nil || key.Continuity == nil || *key.Continuity)
}

// keepAudio says whether a session of key keeps the user's audio itself
// (CONTINUITY_KEEP_AUDIO; a key's continuity_keep_audio overrides it).
func keepAudio(cfg Config, key *routes.ClientKey) bool {
	if key != nil && key.ContinuityKeepAudio != nil {
		return *key.ContinuityKeepAudio
	}
	return cfg.ContinuityKeepAudio
}

// keepContinuity turns continuity on for a session: the client's
// configuration events and the upstream's items are read, and the
// upstream's session_expired and resumable closes are held back.
func (c *clientConn) keepContinuity(sess *poller.Session, args *resumeArgs) {
	c.info.resume = args
	c.watchClient(sess, args)
	sess.HoldUpstream(&c.watch)
}

// watchClient makes clientWatch the session's inspector on the client's
// frames: for the turns' clock (unless TURN_METRICS=0) and, with args,
// continuity.
func (c *clientConn) watchClient(sess *poller.Session, args *resumeArgs) {
	c.cwatch = clientWatch{info: &c.info, sess: sess, turns: !c.info.turns.Off}
	if args != nil {
		c.cwatch.keep, c.cwatch.lim = true, args.lim
	}
	sess.InspectClient(&c.cwatch)
}

// keepBase seeds the kept configuration (a client secret's).
func (i *sessionInfo) keepBase(config []byte) {
	if i.resume != nil {
		i.keep.SetBase(config, i.resume.lim)
	}
}

// clientWatch is the session's frames.Inspector on the client's frames,
// by the type scan: what the turns' clock reads of the events forwarded
// upstream (turns.Watch.ClientWants: creates, commits, and the appends
// while server VAD makes responses) and, with continuity (keep), the
// configuration events.
type clientWatch struct {
	info                                   *sessionInfo
	lim                                    continuity.Limits
	sess                                   *poller.Session
	turns, keep                            bool
	wantTurns, wantKeep, wantConv, wantRec bool // what the frame Inspect gets is for
}

// Wants implements frames.Inspector.
func (w *clientWatch) Wants(prefix []byte) bool {
	t, ok := eventtype.Of(prefix)
	if !ok {
		return false
	}
	w.wantTurns = w.turns && w.info.turns.ClientWants(t)
	w.wantKeep = w.keep && (continuity.ClientWants(t) || (w.lim.KeepAudio && continuity.AudioClientWants(t)))
	w.wantConv = w.info.conv != nil && (w.info.live == nil && transcript.WantsClient(t) || w.info.live != nil && transcript.LiveWantsClient(t))
	w.wantRec = w.info.rec != nil
	return w.wantTurns || w.wantKeep || w.wantConv || w.wantRec
}

// Inspect implements frames.Inspector.
func (w *clientWatch) Inspect(p []byte) {
	if w.wantTurns {
		w.info.turns.Client(p, w.sess.ClientQueued())
	}
	if w.wantKeep {
		w.info.keep.Client(p, w.lim, w.sess.ClientQueued())
	}
	if w.wantRec {
		w.info.rec.Client(time.Now(), p)
	}
	if w.wantConv {
		if w.info.live != nil {
			_ = w.info.conv.LiveClient(p) // an event it cannot read changes nothing
		} else {
			_ = w.info.conv.Client(p)
		}
	}
}

// HoldText implements frames.Holder: an error answering the gateway's own
// event is held back for good (holdGatewayAnswer); with continuity, OpenAI's
// session_expired error is held back (the session goes on), and makes the
// 1001 that follows a cap.
func (w *setupWatch) HoldText(p []byte) bool {
	if w.live != nil {
		return liveHoldText(p, w.resume) // GPT-Live's cap
	}
	if t, ok := eventtype.Of(p); !ok || string(t) != "error" {
		return false
	}
	if w.holdGatewayAnswer(p) {
		return true
	}
	if w.resume == nil || !continuity.IsSessionExpired(p) {
		return false
	}
	w.resume.expired.Store(true)
	held := frames.AppendFrame(nil, ws.OpText, p, false)
	w.resume.heldExpired.Store(&held)
	return true
}

// HoldClose implements frames.Holder: with continuity, the closes a fresh
// upstream repairs.
func (w *setupWatch) HoldClose(c frames.Close) bool {
	if w.resume == nil {
		return false // only filtering (holdGatewayAnswer)
	}
	if w.live != nil {
		return w.live.holdClose(c, w.resume)
	}
	if w.gemini != nil && !w.gemini.Resumable() {
		return false // nothing to resume from: the close and its explanation pass
	}
	switch c.Code {
	case ws.StatusInternalServerError, statusServiceRestart, statusTryAgainLater:
		return true
	case ws.StatusGoingAway:
		return w.resume.expired.Load()
	}
	return false
}

// resumeCause names a loss.
func resumeCause(loss poller.Loss, args *resumeArgs) string {
	switch {
	case loss.Rollover:
		return causeRollover
	case loss.Close == nil:
		return causeLost
	case args.expired.Load(): // Realtime's 1001, GPT-Live's close after session.closed
		return causeExpired
	}
	return causeClosed
}

// resume is SessionConfig.Resume.
func (m *Manager) resume(sess *poller.Session, loss poller.Loss) bool {
	m.sessMu.Lock()
	info := m.sessions[sess]
	m.sessMu.Unlock()
	if info == nil || info.resume == nil {
		return false
	}
	args := info.resume
	cause := resumeCause(loss, args)
	args.expired.Store(false)
	held := args.heldExpired.Swap(nil)
	at := time.Now()
	if info.gemini != nil && !info.gemini.Resumable() {
		// No handle to carry the conversation on: HoldClose lets such a
		// close through, with its explanation.
		geminiClosed(sess, info, loss)
		return false
	}
	if !info.mayResume(at) {
		m.log.Warn("session not resumed: too many resumes", "session", info.id, "key", info.key.Name, "cause", cause)
		m.metrics.resumes.WithLabelValues(cause, "refused").Inc()
		info.noteResume(usage.Resume{Cause: cause, At: at.UTC(), Outcome: "refused"})
		if held != nil && cause == causeExpired {
			// The session ends as without continuity: the upstream's
			// own session_expired (GPT-Live: session.closed), then its
			// close (lostForGood).
			sess.SendClient(*held)
		}
		geminiClosed(sess, info, loss)
		return false
	}
	snap := info.keep.Snapshot()
	m.estimateFlights(info) // the responses in flight on the upstream let go of
	if info.live != nil {
		info.live.resuming(sess, snap) // GPT-Live's meter and failed response
	} else if info.gemini != nil {
		ended, lost := info.gemini.Lost()
		if ended != nil {
			sess.SendClient(ended) // its response ends failed
		}
		snap.Response = lost // named in rtgate.session.resumed
	} else {
		for _, id := range snap.Responses {
			sess.SendClient(failedResponse(id))
		}
	}
	if loss.ClientCut {
		sess.SendClient(info.proto().Refusal("client_event_lost",
			"the upstream was lost while a client event was on its way to it; that event was not delivered: send it again", 0))
	}
	info.turns.Resumed()  // the lost upstream's responses end; the fresh one counts its audio anew
	args.disarmRollover() // the lost upstream's; the fresh one arms its own
	args.resuming.Add(1)
	old := info.uncount(m.balancer, true)
	if old != nil && (cause == causeLost || cause == causeClosed) {
		m.balancer.Failed(old, "the upstream was lost mid-session ("+cause+")")
	} else {
		old = nil // not the deployment's fault: it may serve again
	}
	go m.resumeUpstream(sess, info, snap, cause, old, at)
	return true
}

// reserve plans a resume's connect as Reserve plans a connect (the slot on
// the first candidate), on a deployment other than failed (the loss looks
// like its fault) when one has room, failed last for failover; failed first
// only when no other has room. (Moving failed last after Reserve chose it
// sent sessions past a full deployment's max_parallel_requests.)
func (m *Manager) reserveResume(group []*routes.Deployment, failed *routes.Deployment) (balance.Plan, *balance.Busy) {
	// group is the routes table's now: failed is found by name (a reload
	// makes new deployments), and is not there at all when it was removed.
	if i := slices.IndexFunc(group, func(d *routes.Deployment) bool { return failed != nil && d.Name == failed.Name }); i >= 0 && len(group) > 1 {
		others := slices.Delete(slices.Clone(group), i, i+1)
		if plan, busy := m.balancer.Reserve(others); busy == nil {
			plan.Cands = append(plan.Cands, group[i])
			return plan, nil
		}
	}
	return m.balancer.Reserve(group)
}

// upstream finds the session a fresh upstream and replays it there; it
// runs in its own goroutine.
func (m *Manager) resumeUpstream(sess *poller.Session, info *sessionInfo, snap continuity.Snapshot, cause string,
	failed *routes.Deployment, at time.Time) {
	defer m.pool.ClientDialing()() // a client waits on this dial
	args := info.resume
	outcome := "failed"
	defer func() {
		took := time.Since(at)
		m.metrics.resumes.WithLabelValues(cause, outcome).Inc()
		if outcome == "ok" {
			m.metrics.resumeSeconds.Observe(took.Seconds())
		}
		info.noteResume(usage.Resume{Cause: cause, At: at.UTC(), DurationMS: took.Milliseconds(), Outcome: outcome})
		args.resuming.Add(-1)
	}()
	ctx, cancel := info.attemptContext(m.ctx, m.cfg.DialTimeout)
	defer cancel()
	plan, busy := m.reserveResume(info.servable(m.routes().Groups[info.group]), failed)
	if busy != nil {
		m.log.Warn("session not resumed: every deployment is busy", "session", info.id, "cause", cause)
		sess.ResumeFailed(info.proto().Refusal("upstream_unavailable", "the upstream was lost and no deployment has room to resume the session", 0))
		return
	}
	info.depMu.Lock()
	prev, ended := info.reserved, info.ended
	if !ended {
		info.reserved = plan.Reserved
	}
	info.depMu.Unlock()
	if ended { // the client left meanwhile: sessionEnded gave back the old slot
		m.balancer.Release(plan.Reserved)
		return
	}
	m.balancer.Release(prev)
	cands := plan.Cands

	sendFor, acks := liveReplay(snap), 0 // GPT-Live: one session.start
	if info.gemini != nil {
		// Gemini: its own resumption handle carries the conversation; the
		// setup's setupComplete is the one reply (resumeGemini).
		setup := frames.AppendFrame(nil, ws.OpText, info.gemini.ResumeSetup(), true)
		sendFor = func(*routes.Deployment) []byte { return setup }
	} else if info.live == nil {
		send, n := realtimeReplay(info.proto(), snap)
		sendFor, acks = func(*routes.Deployment) []byte { return send }, n
	}
	q, _ := url.ParseQuery(args.rawQuery)
	p, d := m.primed(ctx, sess, info, cands, q, args.header, sendFor, acks)
	if p == nil {
		return // the session was told (dialFor)
	}
	state, why, _ := p.await(ctx)
	if state != primeDone {
		p.h.Endpoint().Drop()
		if info.left() {
			sess.Cancel()
			return
		}
		m.log.Warn("session not resumed", "session", info.id, "deployment", d.Name, "cause", cause, "why", why)
		sess.ResumeFailed(info.proto().Refusal("upstream_unavailable", "the upstream was lost and the session could not be resumed: "+why, 0))
		return
	}
	if p.replayErrors > 0 {
		m.log.Warn("resumed session: the upstream refused part of the replay", "session", info.id, "errors", p.replayErrors)
	}
	created := upstreamCreated(m.cfg, p.warm)
	sess.SendClient(resumedEvent(cause, len(snap.Items), snap.Dropped+p.replayErrors, snap.Response, sess.Resumes()))
	if !adoptPrimed(m.balancer, sess, info, p, d, sess.AdoptResumed) {
		sess.ResumeFailed(info.proto().Refusal("upstream_unavailable", "the fresh upstream closed right after the replay", 0))
		return
	}
	outcome = "ok"
	if info.live != nil {
		info.live.resumed(p.created)
	}
	if capAt, ok := upstreamCap(p.created, created, d); ok {
		armRollover(sess, info, created, capAt)
	}
	m.log.Info("session resumed", "session", info.id, "key", info.key.Name, "deployment", d.Name, "cause", cause,
		"items", len(snap.Items), "took", time.Since(at))
}

// realtimeReplay is what a fresh Realtime upstream is sent (the kept
// configuration, the items, the unanswered response.create) and how many
// acknowledgements of it to hold back from the client.
func realtimeReplay(p protocol.Protocol, snap continuity.Snapshot) (send []byte, acks int) {
	replay := p.Rebuild(snap.Config, snap.Items)
	if snap.Config == nil {
		replay = replay[1:] // nothing to configure
	}
	for _, f := range replay {
		send = append(send, f...)
	}
	if snap.Asked != nil {
		// The client's response.create the lost upstream never answered:
		// asked again after the replay, not counted among its replies
		// (the upstream answers in order), so the response reaches the
		// client.
		send = frames.AppendFrame(send, ws.OpText, snap.Asked, true)
	}
	return send, len(replay)
}

// midFrameLost is SessionConfig.MidFrameLost.
func (m *Manager) midFrameLost(*poller.Session) {
	m.metrics.resumes.WithLabelValues(causeMidFrame, "failed").Inc()
}

// mayResume reports whether the session may resume once more at t; a
// resume still being recorded counts.
func (i *sessionInfo) mayResume(t time.Time) bool {
	i.depMu.Lock()
	defer i.depMu.Unlock()
	n := 0
	if i.resume != nil {
		n = int(i.resume.resuming.Load())
	}
	for _, r := range i.resumes {
		if r.Outcome == "ok" && t.Sub(r.At) < resumeWindow {
			n++
		}
	}
	return n < maxResumes
}

// noteResume adds a resume to the session's record.
func (i *sessionInfo) noteResume(r usage.Resume) {
	i.depMu.Lock()
	i.resumes = append(i.resumes, r)
	i.depMu.Unlock()
}

// failedResponse is the response.done that ends, for the client, a
// response the lost upstream was producing: OpenAI's own shape, status
// "failed", with status_details.error saying why.
func failedResponse(id string) []byte {
	body, _ := json.Marshal(map[string]any{
		"type":     "response.done",
		"event_id": protocol.NewEventID(),
		"response": map[string]any{
			"object": "realtime.response",
			"id":     id,
			"status": "failed",
			"status_details": map[string]any{
				"type": "failed",
				"error": map[string]any{"type": "server_error", "code": "upstream_lost",
					"message": "The upstream was lost during this response; the session continues on a fresh upstream session."},
			},
			"output": []any{},
			"usage":  nil,
		},
	})
	return frames.AppendFrame(nil, ws.OpText, body, false)
}

// resumedEvent is EventResumed.
func resumedEvent(cause string, items, dropped int, lostResponse string, resumes int) []byte {
	ev := map[string]any{
		"type":           EventResumed,
		"event_id":       protocol.NewEventID(),
		"cause":          cause,
		"resumes":        resumes,
		"replayed_items": items,
		"dropped_items":  dropped,
	}
	if lostResponse != "" {
		ev["lost_response_id"] = lostResponse
	}
	body, _ := json.Marshal(ev)
	return frames.AppendFrame(nil, ws.OpText, body, false)
}

// resumeRecord fills the session record's continuity fields.
func (i *sessionInfo) resumeRecord(rec *usage.Record) {
	i.depMu.Lock()
	defer i.depMu.Unlock()
	if len(i.resumes) == 0 {
		return
	}
	rec.Resumes = i.resumes
	rec.UpstreamSessions = 1
	for _, r := range i.resumes {
		if r.Outcome == "ok" {
			rec.UpstreamSessions++
		}
	}
}

// Rollover: a session nearing its upstream session's cap (OpenAI ends a
// session after 60 minutes, Azure after 30) moves to a fresh upstream
// session before the cap, at a quiet moment, through the same resume as a
// loss (Manager.resume), so that a two-hour call runs through.
//
// The cap is the upstream session.created's expires_at when it has one,
// else the upstream session's creation plus 60 minutes (30 on Azure); for
// GPT-Live, session.started's expires_at, else no rollover (its length is
// not published: the session resumes at the cap instead); a
// warm pool socket's session may be older than its hand-over, by at most
// the pool's POOL_MAX_IDLE, so that much is taken off. From rolloverLead
// before the cap the session rolls over at the first quiet moment (no
// response in progress, no speech started and not stopped: the kept
// conversation's events say; for GPT-Live, no delegated response and no
// transcript delta for a second); from rolloverDeadline before it, it rolls
// over whatever is in progress (an in-flight response is lost as in a
// failure). One timer per continuity session, armed when the upstream's
// session.created is seen.

// Upstream session lifetimes when session.created names no expires_at.
const (
	openAISessionLife = 60 * time.Minute
	azureSessionLife  = 30 * time.Minute
	// xAISessionLife is xAI's "max session duration" (docs.x.ai, Voice
	// Agent API rate limits, read 2026-12-05).
	xAISessionLife = 30 * time.Minute
)

// rolloverLead and rolloverDeadline, as parts of the upstream session's
// life (at most 5 minutes and 30 seconds before the cap): 6 s and 1.5 s
// for a one-minute cap.
func rolloverLead(life time.Duration) time.Duration { return min(life/10, 5*time.Minute) }
func rolloverDeadline(life time.Duration) time.Duration {
	return min(life/40, 30*time.Second)
}

// rolloverPoll is how often a session past its lead looks for a quiet
// moment.
const rolloverPoll = 50 * time.Millisecond

// upstreamCap reads an upstream's session.created (its payload) for the
// session's cap: expires_at, else created plus the deployment's lifetime.
// ok is false when p is not a session.created.
func upstreamCap(p []byte, created time.Time, d *routes.Deployment) (capAt time.Time, ok bool) {
	t, okType := eventtype.Of(p)
	if !okType || (string(t) != "session.created" && string(t) != "session.started") {
		return time.Time{}, false
	}
	var ev struct {
		Session struct {
			ExpiresAt int64 `json:"expires_at"`
		} `json:"session"`
	}
	_ = json.Unmarshal(p, &ev)
	// An expires_at already past (whole seconds, a clock apart from the
	// gateway's) says nothing usable: the default life then.
	if exp := time.Unix(ev.Session.ExpiresAt, 0); ev.Session.ExpiresAt > 0 && exp.After(created) {
		return exp, true
	}
	if string(t) == "session.started" {
		return time.Time{}, false // GPT-Live's length is published per session only: no rollover without it
	}
	life := openAISessionLife
	switch {
	case d != nil && d.Kind == routes.KindAzure:
		life = azureSessionLife
	case d != nil && d.Kind == routes.KindXAI:
		life = xAISessionLife
	}
	return created.Add(life), true
}

// armRollover schedules the session's rollover before capAt; the upstream
// session was created at created (when the gateway saw it, less the pool's
// idle bound for a warm socket).
func armRollover(sess *poller.Session, info *sessionInfo, created, capAt time.Time) {
	life := capAt.Sub(created)
	if life <= 0 {
		life = time.Second
	}
	lead := rolloverLead(life)
	isQuiet := info.keep.Quiet
	if info.live != nil {
		// No done events: quiet is the transcripts' silence for a second
		// (less for a short life, so that the lead leaves room for it).
		isQuiet = info.keep.LiveQuiet(time.Now, min(time.Second, lead/4))
	}
	armRolloverWindow(sess, info, capAt.Add(-lead), capAt.Add(-rolloverDeadline(life)), isQuiet)
}

// armRolloverWindow schedules the session's rollover: from from, at the
// first moment isQuiet says; from deadline, whatever is in progress. It
// replaces any rollover armed before.
func armRolloverWindow(sess *poller.Session, info *sessionInfo, from, deadline time.Time, isQuiet func() bool) {
	args := info.resume
	args.rollMu.Lock()
	defer args.rollMu.Unlock()
	if args.stopped {
		return // the session ended (stopRollover): a resume finishing late arms nothing
	}
	if args.rollTimer != nil {
		args.rollTimer.Stop()
	}
	args.rollGen++
	gen := args.rollGen
	var cancelledAt time.Time // a forced rollover cancelled the responses in flight then (forcedRollover)
	var check func()
	check = func() {
		args.rollMu.Lock()
		if args.rollGen != gen || args.stopped {
			args.rollMu.Unlock()
			return // a later upstream's, or the session ended
		}
		args.rollMu.Unlock()
		now := time.Now()
		// Quiet is asked again by the relay, with the session's reads
		// held off (Rollover); past the deadline any moment will do. A
		// session out of resumes keeps its upstream until the cap.
		quiet := isQuiet
		if !now.Before(deadline) {
			quiet = info.forcedRollover(sess, now, &cancelledAt)
		}
		if (quiet == nil || quiet()) && info.mayResume(now) && sess.Rollover(quiet) {
			return
		}
		args.rollMu.Lock()
		if args.rollGen == gen && !args.stopped {
			args.rollTimer = time.AfterFunc(rolloverPoll, check)
		}
		args.rollMu.Unlock()
	}
	args.rollTimer = time.AfterFunc(time.Until(from), check)
}

// disarmRollover stops the rollover armed for the upstream a resume lets
// go of: left armed, it would move the fresh upstream (a Gemini session's
// goAway window, which nothing re-arms, forced a healthy new connection at
// its old deadline).
func (a *resumeArgs) disarmRollover() {
	a.rollMu.Lock()
	defer a.rollMu.Unlock()
	a.rollGen++
	if a.rollTimer != nil {
		a.rollTimer.Stop()
	}
}

// stopRollover disarms the session's rollover; it ended.
func (i *sessionInfo) stopRollover() {
	if i.resume == nil {
		return
	}
	a := i.resume
	a.rollMu.Lock()
	a.stopped = true
	if a.rollTimer != nil {
		a.rollTimer.Stop()
	}
	a.rollMu.Unlock()
}

// upstreamCreated is when the session's current upstream session was
// created, as far as the gateway knows: now, less the pool's idle bound
// for a warm socket (its session.created may be that old).
func upstreamCreated(cfg Config, warm bool) time.Time {
	now := time.Now()
	if warm && cfg.PoolMaxIdle > 0 {
		return now.Add(-cfg.PoolMaxIdle)
	}
	return now
}
