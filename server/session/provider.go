package session

// Providers other than OpenAI behind the OpenAI Realtime API. OpenAI's and
// Azure's events reach the client byte for byte; another provider's pass
// through translators (frames.Translator):
//
//	provider (routes.Kind)  upstream → client                client → upstream
//	openai, azure           verbatim                         verbatim
//	xai                     xai.Normalizer: xAI's dialect    verbatim (xAI reads
//	                        repaired (session.created,       OpenAI's events)
//	                        pings, missing fields)
//	gemini, vertex_ai       gemini.Session: Gemini Live's    gemini.Session: OpenAI's
//	                        messages as OpenAI's events      events as Gemini's messages
//
// Everything the gateway reads of a session (usage, turns, budgets) reads
// the client's side of the translation, so it works the same whatever the
// provider. The upstream-only normaliser is set when a deployment is
// attached, so a group mixing xAI with OpenAI fails over between them at
// connect. A Gemini session translates the client's events from its first
// one, before any upstream is attached (they are queued translated), so its
// connect is decided by its first-choice deployment: it fails over only to
// the group's deployments of the same provider and model, and a session
// whose first choice is not Gemini never goes to one. Its socket is never
// warmed (Gemini's setup carries the client's configuration). With
// continuity on it moves to a new connection after Gemini's goAway, and
// when its connection is lost, through the same resume as a Realtime
// session's, but Gemini's own resumption handle carries the conversation
// instead of a replay (keepGemini, rollOverGemini; gemini.Session's
// resume.go).

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"time"

	"github.com/gobwas/ws"

	"rtgate/frames"
	"rtgate/poller"
	"rtgate/server/continuity"
	"rtgate/server/providers/gemini"
	"rtgate/server/providers/xai"
	"rtgate/server/routes"
)

// providerTranslator is what deployment d's upstream events pass through on
// their way to the client when only that direction needs it (xAI): nil for
// OpenAI and Azure, and for Gemini, whose translation is the session's
// (sessionInfo.gemini). A fresh one per upstream socket: a resumed or
// redialed session's new upstream starts its protocol afresh.
func providerTranslator(d *routes.Deployment) frames.Translator {
	if d.Kind == routes.KindXAI {
		return xai.NewNormalizer(d.Model)
	}
	return nil
}

// translate starts the translation of a Realtime conversation whose
// first-choice deployment d speaks another protocol (d.Translated), before
// its relay starts.
func (i *sessionInfo) translate(sess *poller.Session, d *routes.Deployment) {
	if !d.Translated() {
		return
	}
	gs := gemini.New(d.UpstreamModel(), d.Model)
	gs.OnGoAway = func(left time.Duration) {
		// Under the translation's lock, on the upstream's read: armed from
		// a goroutine of its own.
		go i.rollOverGemini(sess, left)
	}
	gs.OnHeld = func() { time.AfterFunc(gemini.AutoAnswerWait, func() { i.askHeld(sess, heldRetries) }) }
	i.gemini = gs
	sess.TranslateClient(gs.FromClient())
}

// heldRetries bounds how often a held response.create is tried again while
// the session is between connections (every heldRetryEvery: 5 s, past any
// move's dial and setup).
const (
	heldRetries    = 20
	heldRetryEvery = 250 * time.Millisecond
)

// askHeld asks Gemini for the answer a held response.create waits for
// (gemini.Session.Recheck), unless Gemini began one meanwhile. A session
// between connections (a move under way) cannot send it: it is held again
// and tried once the move is likely done, so the client's response.create
// is answered either way.
func (i *sessionInfo) askHeld(sess *poller.Session, tries int) {
	ask := i.gemini.Recheck()
	if ask == nil || sess.SendUpstreamRaw(frames.AppendFrame(nil, ws.OpText, ask, true)) || i.left() || tries <= 0 {
		return
	}
	i.gemini.HoldAgain()
	time.AfterFunc(heldRetryEvery, func() { i.askHeld(sess, tries-1) })
}

// servable is the deployments of ds the session may connect to, at its
// connect and at every redial and resume: for a translated session those
// of its provider and model (the setup names the model; a Vertex resource
// names its project and location), for any other those that are not
// translated (its client's events go upstream as they came).
func (i *sessionInfo) servable(ds []*routes.Deployment) []*routes.Deployment {
	if i.guard != nil {
		return guardable(ds) // guardrails.go
	}
	if i.gemini == nil && !slices.ContainsFunc(ds, (*routes.Deployment).Translated) {
		return ds // the common case, without a copy
	}
	out := make([]*routes.Deployment, 0, len(ds))
	for _, d := range ds {
		if i.gemini == nil && !d.Translated() || i.gemini != nil && d.Translated() && d.UpstreamModel() == i.gemini.Model() {
			out = append(out, d)
		}
	}
	return out
}

// attachTranslated readies the relay for deployment d's upstream events:
// the upstream's translator, and for Gemini the client's session.created,
// which the gateway sends (Gemini says nothing until its setup).
func (i *sessionInfo) attachTranslated(sess *poller.Session, d *routes.Deployment) {
	if i.guard != nil {
		sess.TranslateUpstream(i.guard.FromUpstream()) // only OpenAI's and Azure's (servable)
		return
	}
	if i.gemini != nil {
		sess.TranslateUpstream(i.gemini.FromUpstream())
		if created := i.gemini.Created(); created != nil {
			sess.SendClient(frames.AppendFrame(nil, ws.OpText, created, false))
		}
		return
	}
	if t := providerTranslator(d); t != nil {
		sess.TranslateUpstream(t)
	}
}

// preconfigure applies a client secret's session configuration to a
// translated session: it becomes the Gemini setup (sent with the client's
// first event), and the session.created the client gets shows it.
func (i *sessionInfo) preconfigure(config []byte) error {
	if err := i.gemini.Configure(json.RawMessage(config)); err != nil {
		return fmt.Errorf("the client secret's session: %w", err)
	}
	return nil
}

// startTranslatedSecret starts a translated session opened with a client
// secret: the secret's session configuration is the session's (it becomes
// Gemini's setup), then the upstream is dialed. It runs in its own
// goroutine: a secret's configuration may load from Redis.
func (m *Manager) startTranslatedSecret(sess *poller.Session, info *sessionInfo, cands []*routes.Deployment, q url.Values, h http.Header) {
	ctx, cancel := info.attemptContext(m.ctx, m.cfg.DialTimeout)
	err := m.secrets.LoadConfig(ctx, info.grant)
	cancel()
	if err == nil {
		err = info.preconfigure(info.grant.Config)
	}
	if err != nil {
		m.log.Warn("client secret's session config unusable", "key", info.key.Name, "secret_id", info.grant.Claims.ID, "err", err)
		sess.DialFailed(info.proto().Refusal("session_config_unavailable", err.Error(), 0))
		return
	}
	m.connectUpstream(sess, info, cands, q, h, nil)
}

// keepGemini turns continuity on for a Gemini session: its connection is
// replaced when lost or closed with 1011 (as Gemini closes at the end of a
// goAway) and, ahead of that, at a resumable moment after a goAway
// (rollOverGemini). Gemini's own resumption handle carries the
// conversation, so nothing of it is kept here (no replay, as Realtime's
// keepContinuity does).
func (c *clientConn) keepGemini(sess *poller.Session) {
	c.info.resume = &resumeArgs{lim: continuity.Limits{}}
	sess.HoldUpstream(&c.watch)
}

// rollOverGemini moves a Gemini session to a new connection after Gemini's
// goAway, left before it closes this one: at the first moment the newest
// resumption handle loses nothing (gemini.Session.Quiet), and no later
// than a third of the notice before the end, whatever is in progress then
// (a response in flight is cancelled first, as a forced Realtime rollover
// does). Without continuity the goAway's close ends the session, with an
// error event.
func (i *sessionInfo) rollOverGemini(sess *poller.Session, left time.Duration) {
	if i.resume == nil || !i.gemini.Resumable() {
		return
	}
	now := time.Now()
	armRolloverWindow(sess, i, now, now.Add(left*2/3), i.gemini.Quiet)
}

// geminiClosed explains a Gemini close the session will not resume from
// (held back by HoldClose) in an error event, as its translation does for
// a close it passes.
func geminiClosed(sess *poller.Session, info *sessionInfo, loss poller.Loss) {
	if info.gemini == nil || loss.Close == nil {
		return
	}
	if ev := info.gemini.ClosedEvent(*loss.Close); ev != nil {
		sess.SendClient(ev)
	}
}
