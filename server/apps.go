package server

// Browser and phone apps: what the server holds for client secrets, WebRTC
// calls and sidebands, and how their WebSocket sessions start.

import (
	"crypto/tls"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"

	"rtgate/poller"
	"rtgate/server/apps"
	"rtgate/server/cluster"
	"rtgate/server/routes"
	"rtgate/server/usage"
)

// appState is the Server's state for them.
type appState struct {
	secrets    *apps.Secrets
	calls      *apps.Calls
	httpClient *http.Client // the upstream calls endpoints
	meters     *callMeters  // the gateway's own metering sidebands (calls.go)
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
	group, table, q, h := info.group, u.table, u.q, u.req.Header
	switch {
	case u.liveAttach:
		go startLiveAttach(s, sess, info, u) // a GPT-Live sideband (liveapps.go)
		return true
	case u.translation:
		// Never pooled, never redialed: billed by the minute (apps.go).
		info.redial = nil
		if info.grant != nil {
			go s.primeSession(sess, info, cands, q, h)
		} else {
			go s.connectUpstream(sess, info, cands, q, h)
		}
		return true
	case u.callID != "":
		info.redial = nil // a sideband holds no session of its own to redo
		if u.made {
			sess.InspectUpstream(unmetered{}) // its usage is the metering sideband's (calls.go)
		}
		go s.connectUpstream(sess, info, cands, q, h)
		return true
	case info.grant != nil:
		if info.grant.Claims.Type == "transcription" {
			q.Set("intent", "transcription")
		} else if !isTranscription(q) {
			q.Set("model", group)
		}
		info.redial = func() { s.primeSession(sess, info, s.balancer.Rank(table.Groups[group]), q, h) }
		if info.resume != nil {
			info.resume.rawQuery = q.Encode() // the group the secret was minted for
		}
		go s.primeSession(sess, info, cands, q, h)
		return true
	case isTranscription(q):
		info.redial = func() { s.connectUpstream(sess, info, s.balancer.Rank(table.Groups[group]), q, h) }
		go s.connectUpstream(sess, info, cands, q, h)
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

// checkSideband refuses a sideband the key may not open, given the key
// that made its call (made: the gateway made it).
func checkSideband(u *upgrade, owner string, made bool) *refusal {
	key := u.key
	forbidden := func(msg string) *refusal {
		return &refusal{status: http.StatusForbidden, errType: "invalid_request_error", code: "call_not_allowed", message: msg}
	}
	if u.made = made; made {
		if parseLiveOwner(owner).key == key.Name { // a Live owner is "key\ndeployment"
			return resolveLiveAttach(u, owner, made)
		}
		return forbidden("This call was made with another key.")
	}
	if key.Name == routes.MasterKeyName || key.Sideband == routes.SidebandAny {
		return resolveLiveAttach(u, owner, made)
	}
	return forbidden("This key may attach only to calls it made through the gateway (give it `sideband: any` for others).")
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
