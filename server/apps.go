package server

// Browser and phone apps: what the server holds for client secrets, WebRTC
// calls and sidebands, and how their WebSocket sessions start.

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"mime/multipart"
	"net/http"
	"net/url"
	"path"
	"strings"
	"sync"
	"time"

	"github.com/gobwas/ws"

	"rtgate/frames"
	"rtgate/poller"
	"rtgate/server/apps"
	"rtgate/server/balance"
	"rtgate/server/cluster"
	"rtgate/server/routes"
	"rtgate/server/usage"
	"rtgate/upstream"
)

// appState is the Server's state for them.
type appState struct {
	secrets    *apps.Secrets
	calls      *apps.Calls
	httpClient *http.Client // the upstream calls endpoints
	meters     *callMeters  // the gateway's own metering sidebands (apps.go)
}

// newAppState is made in New once the cluster store is known.
func newAppState(cfg Settings, store *cluster.Store, upTLS *tls.Config, meters *callMeters, log *slog.Logger) appState {
	return appState{
		secrets: apps.NewSecrets(cfg.ClientSecretKeys, store, log),
		calls:   apps.NewCalls(store),
		httpClient: &http.Client{
			Transport: &http.Transport{TLSClientConfig: upTLS, MaxIdleConnsPerHost: 4, IdleConnTimeout: time.Minute,
				ForceAttemptHTTP2: false},
			// Location and the status are the client's to see: never follow.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
		meters: meters,
	}
}

// startApp starts the sessions that do not take the plain path: a client
// secret's (configured before the client sees anything), a sideband's and a
// transcription session's (never from the warm pool). cands are the
// deployments the connect was routed to, in order, the one whose slot it
// holds (or the probe) first: the first attempt dials them as they are, as
// a plain connect does. It reports false for a plain connect.
func (s *Server) startApp(sess *poller.Session, info *sessionInfo, u *upgrade, cands []*routes.Deployment) bool {
	group, q, h := info.group, u.q, u.req.Header
	// A redial goes to the deployments in force then: never one a reload
	// removed.
	current := func() []*routes.Deployment { return s.balancer.Rank(s.routes.Load().Groups[group]) }
	switch {
	case u.liveAttach:
		if !u.liveFork { // its frames meter the session only if the gateway's own sideband cannot (watch.go)
			info.sideband = s.meters.sidebandOf(u.callID, u.made)
			sess.InspectUpstream(info.sideband.inspector())
		}
		go startLiveAttach(s, sess, info, u) // a GPT-Live sideband or WebSocket fork (liveapps.go)
		return true
	case u.translation:
		// Never pooled, never redialed: billed by the minute (apps.go).
		info.redial = nil
		if info.grant != nil {
			go s.primeSession(sess, info, cands, q, h)
		} else {
			go s.connectUpstream(sess, info, cands, q, h, nil)
		}
		return true
	case u.callID != "":
		info.redial = nil // a sideband holds no session of its own to redo
		if u.made {
			sess.InspectUpstream(unmetered{}) // its usage is the metering sideband's (apps.go)
		}
		go s.connectUpstream(sess, info, cands, q, h, nil)
		return true
	case info.grant != nil:
		if info.grant.Claims.Type == "transcription" {
			q.Set("intent", "transcription")
		} else if !isTranscription(q) {
			q.Set("model", group)
		}
		info.redial = func() { s.primeSession(sess, info, current(), q, h) }
		if info.resume != nil {
			info.resume.rawQuery = q.Encode() // the group the secret was minted for
		}
		go s.primeSession(sess, info, cands, q, h)
		return true
	case isTranscription(q):
		info.redial = func() { s.connectUpstream(sess, info, current(), q, h, nil) }
		go s.connectUpstream(sess, info, cands, q, h, nil)
		return true
	}
	return false
}

// betaShutDown is the close reason OpenAI gives a client of the retired beta
// interface.
const betaShutDown = "invalid_request_error.beta_api_shape_disabled"

// explainBeta says what a beta_api_shape_disabled close means. The gateway
// keeps forwarding what the client sent (OpenAI-Beta: realtime=v1, the
// openai-beta.realtime-v1 subprotocol): it is the client that must change.
func explainBeta(log *slog.Logger, rec usage.Record) {
	if rec.CloseCode != 4000 || !strings.HasSuffix(rec.CloseReason, "beta_api_shape_disabled") {
		return
	}
	log.Warn("upstream refused the retired Realtime beta interface (beta_api_shape_disabled): the client sent "+
		"OpenAI-Beta: realtime=v1 or the openai-beta.realtime-v1 subprotocol, which OpenAI shut down in May 2026; "+
		"drop them and use the GA interface (session.update needs session.type; GA event names such as "+
		"response.output_audio.delta)", "key", rec.KeyName, "model_group", rec.ModelGroup)
}

// unmetered is the inspector of a sideband to a call the gateway made: the
// gateway's own metering sideband counts that call's usage, so the client's
// must not count it again.
type unmetered struct{}

func (unmetered) Wants([]byte) bool { return false }
func (unmetered) Inspect([]byte)    {}

// checkSideband refuses a sideband the connect may not open, given its
// call's owner (made: the gateway made the call), and routes the one it may
// open to the deployment that serves its call.
func checkSideband(u *upgrade, owner apps.Owner, made bool) *refusal {
	u.made = made
	if herr := sidebandAccess(u.key, u.grant, owner, made); herr != nil {
		return herr
	}
	if u.liveAttach {
		return resolveLiveAttach(u, owner, made)
	}
	if !made || owner.Deployment == "" {
		return nil // a call made elsewhere (or remembered by an older gateway): the query's group
	}
	d := u.table.Named(owner.Deployment)
	if d == nil {
		return &refusal{status: http.StatusNotFound, errType: "invalid_request_error", code: "call_not_found",
			message: "The deployment that serves this call is no longer configured."}
	}
	u.group, u.attachTo = d.Group, d
	return nil
}

// sidebandAccess is the owner check of a sideband, a call control or a
// fork: the key that made the call (and, when a client secret made it,
// only that secret); a call the gateway did not make, the master key or a
// key with `sideband: any` (never a client secret, whatever its minting
// key may do).
func sidebandAccess(key *routes.ClientKey, grant *apps.Grant, owner apps.Owner, made bool) *refusal {
	forbidden := func(msg string) *refusal {
		return &refusal{status: http.StatusForbidden, errType: "invalid_request_error", code: "call_not_allowed", message: msg}
	}
	switch {
	case made && owner.Key != key.Name:
		return forbidden("This call was made with another key.")
	case grant != nil && (!made || owner.Secret != grant.Claims.ID):
		return forbidden("A client secret may attach only to the calls made with it.")
	case made:
		return nil
	case key.Name == routes.MasterKeyName || key.Sideband == routes.SidebandAny:
		return nil
	}
	return forbidden("This key may attach only to calls it made through the gateway (give it `sideband: any` for others).")
}

// ownerUnavailable refuses an attach, fork or control whose call's owner
// could not be looked up (Redis down or slow): the gateway does not know
// whether the caller may, so it does not guess.
func ownerUnavailable() *refusal {
	return &refusal{status: http.StatusServiceUnavailable, errType: "server_error", code: "owner_unavailable",
		message: "The gateway could not look up who owns this call just now; try again shortly.",
		header:  http.Header{"Retry-After": {"1"}}}
}

// Transcription sessions (?intent=transcription) carry no model in the URL,
// and their transcription model only arrives later in a session.update, so
// the gateway routes them at connect time: by a model query when there is
// one, else by the secret's session config when the client came with a
// client secret, else by TRANSCRIPTION_MODEL (a model group), else the
// default group. They are metered from the usage on
// conversation.item.input_audio_transcription.completed events, since they
// have no response.done.

// isTranscription reports whether a connect is a transcription session.
func isTranscription(q url.Values) bool { return q.Get("intent") == "transcription" }

// transcriptionGroup picks the model group of a transcription session whose
// transcription model is model ("" when unknown): that model when it is a
// group, else configured (TRANSCRIPTION_MODEL), else the default group.
func transcriptionGroup(table *routes.Table, configured, model string) string {
	if _, ok := table.Groups[model]; ok && model != "" {
		return model
	}
	if configured != "" {
		return configured
	}
	return table.Default
}

// transcriptionModelOf reads session.audio.input.transcription.model.
func transcriptionModelOf(session map[string]any) string {
	audio, _ := session["audio"].(map[string]any)
	input, _ := audio["input"].(map[string]any)
	tr, _ := input["transcription"].(map[string]any)
	m, _ := tr["model"].(string)
	return m
}

// Realtime translation sessions (/v1/realtime/translations?model=…): the
// client names a translation model group (gpt-realtime-translate), the
// gateway routes it as a Realtime connect (the key's models, limits,
// budget, the group's deployments, hedged dials) to the deployment's
// /realtime/translations, and relays both ways. What differs from Realtime:
//
//   - the route and the group must agree (pickGroup's protocol): a
//     translation group (routes.ProtocolTranslation) only on the
//     translation route, any other group only on its own route (OpenAI
//     rejects a mismatch too, after the upgrade; the gateway says so before
//     it, with a 400 invalid_model naming the right route);
//   - never from the warm pool: a translation session is billed by the
//     minute of session, so a socket opened ahead would cost money idle;
//   - metered by wall clock (its events carry no usage): the record has
//     protocol "translation" and seconds the session's duration, priced at
//     the deployment's input_cost_per_second ($0.034 a minute built in);
//   - client secrets (POST /v1/realtime/translations/client_secrets, session
//     type "translation") connect only here, and are applied as a
//     session.update of the secret's audio settings.

// secretTypeTranslation is the Claims.Type of a translation client secret.
const secretTypeTranslation = "translation"

// isTranslationPath reports whether a WebSocket connect asks for a
// translation session.
func isTranslationPath(path string) bool {
	return path == "/v1/realtime/translations" || path == "/realtime/translations"
}

// translationAsk is what a translation connect must name: a model, unless a
// translation client secret names its group.
func translationAsk(q url.Values, grant *apps.Grant) *refusal {
	if grant == nil && q.Get("model") == "" {
		return &refusal{status: http.StatusBadRequest, errType: "invalid_request_error", code: "missing_required_parameter",
			message: "Missing required parameter: 'model' (a Realtime translation model, such as " + routes.TranslationModel + ").",
			param:   "model"}
	}
	return nil
}

// WebRTC calls: POST /v1/realtime/calls with an SDP offer, as raw
// application/sdp or OpenAI's multipart form with sdp and session parts. The
// gateway authenticates the caller (a gateway key or a client secret), picks
// the model group (the session part's model, else a model query, else the
// secret's group, else the default), and forwards the offer to the chosen
// deployment's calls endpoint (<base>/realtime/calls; Azure GA
// /openai/v1/realtime/calls) with the deployment's key, always as the
// multipart form with a session part naming the deployment's model (a
// secret's session config when the caller sent none). The SDP answer, the
// status come back unchanged, the Location header as the gateway's own path
// (/v1/realtime/calls/{id}).
//
// Media never flows through the gateway: the browser and OpenAI exchange it
// directly. A call is admitted as a session (admission.go): the key's
// models, budget, max_sessions and connect_rate and the deployment's slot,
// held while the call is live. To meter the call the gateway opens its own
// sideband connection (?call_id=) to the deployment and books response.done
// usage against the key (its token metrics and its budget: over budget, the
// call is hung up), as for WebSocket sessions; the call ends, and its
// admission is given back, when that sideband closes. It remembers who made
// the call (the key, the deployment, the client secret) for sideband access
// (apps/calls.go).

// callOffer is what a calls request carried.
type callOffer struct {
	sdp     []byte
	session map[string]any // nil when none was sent
}

// parseCallOffer reads raw application/sdp or the multipart form.
func parseCallOffer(req *http.Request, body []byte) (*callOffer, *apiAnswer) {
	mt, params, err := mime.ParseMediaType(req.Header.Get("Content-Type"))
	bad := func(msg string) (*callOffer, *apiAnswer) {
		a := errorAnswer(http.StatusBadRequest, "invalid_request_error", "invalid_value", msg)
		return nil, &a
	}
	switch {
	case err == nil && mt == "application/sdp":
		return &callOffer{sdp: body}, nil
	case err == nil && mt == "multipart/form-data":
		mr := multipart.NewReader(bytes.NewReader(body), params["boundary"])
		o := &callOffer{}
		for {
			p, err := mr.NextPart()
			if err == io.EOF {
				break
			}
			if err != nil {
				return bad("malformed multipart body: " + err.Error())
			}
			b, _ := io.ReadAll(io.LimitReader(p, maxAPIBody))
			switch p.FormName() {
			case "sdp":
				o.sdp = b
			case "session":
				if err := json.Unmarshal(b, &o.session); err != nil || o.session == nil {
					return bad("Invalid 'session': expected a JSON object.")
				}
			}
		}
		if len(o.sdp) == 0 {
			return bad("Missing required parameter: 'sdp'.")
		}
		return o, nil
	}
	a := errorAnswer(http.StatusUnsupportedMediaType, "invalid_request_error", "unsupported_media_type",
		"Send the SDP offer as application/sdp, or multipart/form-data with sdp and session parts.")
	return nil, &a
}

// createCall answers POST /v1/realtime/calls; it runs in the request's own
// goroutine.
func (s *Server) createCall(req *http.Request, body []byte) apiAnswer {
	table := s.routes.Load()
	key, grant, herr := s.authenticateConnect(table, credentials(req.Header).key)
	if herr != nil {
		return herr.answer()
	}
	offer, bad := parseCallOffer(req, body)
	if bad != nil {
		return *bad
	}
	ask := groupAsk{grant: grant, model: req.URL.Query().Get("model")}
	if grant != nil {
		if offer.session == nil {
			if err := s.secrets.LoadConfig(req.Context(), grant); err != nil {
				return errorAnswer(http.StatusUnauthorized, "invalid_request_error", "invalid_api_key", apps.ErrSecretConfig.Error())
			}
			_ = json.Unmarshal(grant.Config, &offer.session)
		}
	} else if offer.session != nil && offer.session["model"] != nil {
		ask.model, _ = offer.session["model"].(string) // the session part's model wins over the query's
	}
	group, herr := s.pickGroup(table, key, ask)
	if herr != nil {
		return herr.answer()
	}
	if offer.session == nil {
		offer.session = map[string]any{"type": "realtime"}
	}
	adm, herr := s.admitEntry(entryCall, key, table, group, nil)
	if herr != nil {
		return herr.answer()
	}
	tried := 0
	for i, d := range adm.plan.Cands {
		if i == balance.MaxAttempts {
			break
		}
		tried++
		a, callID, err := forwardCall(req.Context(), s.httpClient, s.cfg.DialTimeout, d, offer)
		if err != nil {
			s.balancer.Failed(d, "calls request failed")
			s.log.Warn("upstream calls request failed", "deployment", d.Name, "err", err)
			continue
		}
		s.balancer.Succeeded(d)
		if callID == "" {
			adm.release() // refused upstream: no call to count
			return a
		}
		owner := apps.Owner{Key: key.Name, Deployment: d.Name}
		if grant != nil {
			owner.Secret = grant.Claims.ID
		}
		if err := s.calls.Remember(context.Background(), callID, owner); err != nil {
			s.log.Warn("call owner not stored in Redis; only this instance knows it", "call_id", callID, "err", err)
		}
		s.log.Info("call created", "key", key.Name, "model_group", group, "deployment", d.Name, "call_id", callID)
		go s.meters.start(key, group, d, callID, adm)
		return a
	}
	adm.release()
	return upstreamUnreachable(group, tried)
}

// upstreamUnreachable is the answer to an API request no deployment of
// group answered, in the gateway's words: which deployments and why are
// the log's (they name upstream hosts).
func upstreamUnreachable(group string, tried int) apiAnswer {
	return errorAnswer(http.StatusBadGateway, "server_error", "upstream_unavailable",
		fmt.Sprintf("No deployment of model group '%s' could be reached (%d tried); the gateway's log says why.", group, tried))
}

// hangUpCall ends call id on d (a call over its key's budget, or of a
// revoked key).
func (s *Server) hangUpCall(d *routes.Deployment, id string) {
	u, h := callsURL(d)
	u.Path = path.Join(u.Path, id, "hangup")
	ctx, cancel := context.WithTimeout(s.ctx, max(s.cfg.DialTimeout, time.Second))
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u.String(), nil)
	if err != nil {
		return
	}
	for k, v := range h {
		req.Header[k] = v
	}
	resp, err := s.httpClient.Do(req)
	if err != nil {
		s.log.Warn("call not hung up", "call_id", id, "deployment", d.Name, "err", err)
		return
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxAPIBody))
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		s.log.Warn("call not hung up", "call_id", id, "deployment", d.Name, "status", resp.StatusCode)
	}
}

// callsURL is the deployment's calls endpoint.
func callsURL(d *routes.Deployment) (*url.URL, http.Header) {
	t := d.Target(url.Values{"call_id": {"x"}}) // no model in the query
	u := *t.URL
	switch u.Scheme {
	case "wss":
		u.Scheme = "https"
	case "ws":
		u.Scheme = "http"
	}
	u.Path = path.Join(u.Path, "calls")
	q := u.Query()
	q.Del("call_id")
	u.RawQuery = q.Encode()
	return &u, t.Header
}

// forwardCall sends the offer to d and returns its answer unchanged; err is
// set only when d could not be reached (or answered 5xx), so the next
// deployment is tried.
func forwardCall(ctx context.Context, client *http.Client, timeout time.Duration, d *routes.Deployment, offer *callOffer) (apiAnswer, string, error) {
	session := map[string]any{}
	for k, v := range offer.session {
		session[k] = v
	}
	session["model"] = d.Model
	if session["type"] == nil {
		session["type"] = "realtime"
	}
	sj, _ := json.Marshal(session)
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	_ = mw.WriteField("sdp", string(offer.sdp))
	_ = mw.WriteField("session", string(sj))
	_ = mw.Close()

	u, h := callsURL(d)
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u.String(), &buf)
	if err != nil {
		return apiAnswer{}, "", err
	}
	for k, v := range h {
		req.Header[k] = v
	}
	req.Header.Set("Content-Type", mw.FormDataContentType())
	resp, err := client.Do(req)
	if err != nil {
		return apiAnswer{}, "", fmt.Errorf("POST %s: %w", redactedURL(u), err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxAPIBody))
	if err != nil {
		return apiAnswer{}, "", fmt.Errorf("reading the answer: %w", err)
	}
	if resp.StatusCode >= 500 {
		return apiAnswer{}, "", fmt.Errorf("HTTP %d", resp.StatusCode)
	}
	a := apiAnswer{status: resp.StatusCode, contentType: resp.Header.Get("Content-Type"), body: body, header: http.Header{}}
	// The client sees the gateway's own path for the call, never the
	// upstream's host (an absolute Location, an Azure api-version query).
	callID := callIDOf(resp.Header.Get("Location"))
	if callID != "" {
		a.header.Set("Location", "/v1/realtime/calls/"+callID)
	}
	if resp.StatusCode != http.StatusCreated {
		callID = ""
	}
	return a, callID, nil
}

// callIDOf is the call id a Location header names (its path's last
// segment: never its query), "" when there is none that is an id.
func callIDOf(loc string) string {
	u, err := url.Parse(loc)
	if err != nil || u.Path == "" {
		return ""
	}
	id := path.Base(u.Path)
	if !validLiveID(id) {
		return ""
	}
	return id
}

// callMeters are the gateway's own sidebands to the calls it forwarded,
// which meter each call's usage against the key that made it.
type callMeters struct {
	ctx     context.Context // the server's: a sideband's dial ends with it
	timeout time.Duration   // the dial timeout
	dialer  *upstream.Dialer
	log     *slog.Logger
	metrics *metrics
	records *records
	live    sync.Map // *callMeter → struct{}
	// sessions are the GPT-Live WebRTC sessions being metered, by id
	// (*liveMetering, watch.go).
	sessions sync.Map
	// A GPT-Live WebRTC session's budget (liveapps.go): the ledger, and how
	// a session over budget is ended (its call hung up upstream).
	budgets *budgets
	hangUp  func(d *routes.Deployment, id string)
	// hangUpCall ends a Realtime call (over its key's budget, or of a
	// revoked key).
	hangUpCall func(d *routes.Deployment, id string)
}

// start holds the gateway's own sideband to a call and books its usage
// against key (its metrics and its budget: over it, the call is hung up)
// until the call ends; adm, the call's admission, is given back then (or
// at once when the sideband cannot connect: the gateway cannot know when
// such a call ends).
func (cm *callMeters) start(key *routes.ClientKey, group string, d *routes.Deployment, callID string, adm *admission) {
	ctx, cancel := context.WithTimeout(cm.ctx, cm.timeout)
	defer cancel()
	conn, err := cm.dialer.Dial(ctx, d.Target(url.Values{"call_id": {callID}}))
	if err != nil {
		adm.release()
		cm.log.Warn("call not metered: its sideband did not connect", "call_id", callID, "deployment", d.Name, "err", err)
		cm.metrics.dialFailures.WithLabelValues(group).Inc()
		return
	}
	info := &sessionInfo{id: usage.NewSessionID(), key: key, group: group, deployment: d, start: time.Now()}
	cm.budgets.meter(info, func(string) { cm.hangUpCall(d, callID) })
	m := cm.watch(info, callID, conn, nil)
	m.adm = adm
	m.start(conn.Preface)
}

// watch makes conn, the gateway's own sideband to call (or Live session, lm
// not nil) callID, meter it for info until it ends.
func (cm *callMeters) watch(info *sessionInfo, callID string, conn *upstream.Upgraded, lm *liveMetering) *callMeter {
	m := &callMeter{meters: cm, info: info, callID: callID, h: poller.NewHandle(conn.Endpoint), lm: lm, gone: make(chan struct{})}
	m.sc.Init(frames.FromServer, 0)
	m.sc.SetInspector(m)
	cm.live.Store(m, struct{}{})
	return m
}

// start starts reading the sideband, preface (what came with the upgrade's
// answer) first.
func (m *callMeter) start(preface []byte) {
	m.h.Start(m, func() {
		if len(preface) > 0 {
			m.scan(frames.NewByteSource(preface))
		}
	})
}

// callMeter is the poller.Owner of a call's metering sideband: it reads the
// call's events (nothing is forwarded) and records the usage when the
// sideband ends.
type callMeter struct {
	meters *callMeters
	info   *sessionInfo
	callID string
	h      *poller.Handle
	sc     frames.Scanner // under the Handle's read lock
	once   sync.Once
	lm     *liveMetering // a GPT-Live session's (watch.go); nil for a Realtime call
	gone   chan struct{} // closed once it has ended
	adm    *admission    // a Realtime call's admission, given back when it ends
}

// Wants implements frames.Inspector: the events that carry usage.
func (m *callMeter) Wants(prefix []byte) bool {
	if ls := m.info.live; ls != nil {
		return ls.meter.Wants(prefix)
	}
	return m.info.meter.Wants(prefix)
}

// Inspect implements frames.Inspector: a call can last an hour, so its usage
// reaches the metrics as each response ends, and the usage log when the call
// does.
func (m *callMeter) Inspect(p []byte) {
	if ls := m.info.live; ls != nil {
		ls.meter.Inspect(p) // GPT-Live: seconds, backend tokens (liveapps.go)
		return
	}
	if add, ok := m.info.meter.Book(p); ok {
		m.meters.metrics.countTokens(m.info.group, m.info.key.Name, add)
	}
}

// UpstreamReadable implements poller.Owner.
func (m *callMeter) UpstreamReadable() {
	if err := m.h.Endpoint().Read(func(src frames.Source) error { m.scan(src); return nil }); err != nil {
		m.h.Endpoint().Drop()
	}
}

func (m *callMeter) scan(src frames.Source) {
	for src.Len() > 0 {
		cl, err := m.sc.Forward(src, nil)
		if err != nil {
			m.h.Endpoint().Drop()
			return
		}
		if cl != nil { // the call ended: answer the close, then the socket goes
			_ = m.h.Endpoint().Send(frames.AppendClose(nil, cl.Code, "", true))
			m.h.Endpoint().Close()
			return
		}
	}
}

// UpstreamGone implements poller.Owner: the call ended.
func (m *callMeter) UpstreamGone() {
	m.once.Do(func() {
		cm := m.meters
		cm.live.Delete(m)
		defer close(m.gone)
		if m.lm != nil {
			m.lm.ownGone(m) // its session's record, unless it made way for the app's sideband
			return
		}
		m.adm.release()
		cm.log.Info("call metered", "call_id", m.callID, "session_id", m.info.id)
		rec := usage.Record{SessionID: m.info.id, KeyName: m.info.key.Name, ModelGroup: m.info.group,
			Deployment: m.info.currentDeployment().Name, StartedAt: m.info.start.UTC(), EndedAt: time.Now().UTC(),
			DurationMS: time.Since(m.info.start).Milliseconds(), Outcome: "call_ended", Usage: m.info.meter.Usage,
			Protocol: "realtime"}
		cm.records.record(m.info, &rec)
	})
}

// close ends every metering sideband (shutdown).
func (cm *callMeters) close() {
	cm.live.Range(func(k, _ any) bool {
		m := k.(*callMeter)
		_ = m.h.Endpoint().Send(frames.AppendClose(nil, ws.StatusGoingAway, "gateway shutting down", true))
		m.h.Endpoint().Close()
		return true
	})
}

// countTokens adds usage to the token metrics.
func (m *metrics) countTokens(group, key string, u usage.Usage) {
	in, out := u.InputTokenDetails, u.OutputTokenDetails
	for kind, n := range map[string]int64{
		"input_text": in.TextTokens, "input_audio": in.AudioTokens, "input_image": in.ImageTokens,
		"input_cached": in.CachedTokens, "output_text": out.TextTokens, "output_audio": out.AudioTokens,
	} {
		if n > 0 {
			m.tokens.WithLabelValues(group, key, kind).Add(float64(n))
		}
	}
}
