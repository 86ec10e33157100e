package api

// The endpoints arrive the way every request does, through the front door
// (Route names them), so the WebSocket path pays nothing for them: no
// second server, no sniffing, one switch on the path once the head is
// whole. The front door collects the body (bounded at MaxBody, or
// maxLiveBody) and hands the whole request to HandleAPI, in a goroutine of
// its own, since answering may wait on Redis or on the upstream.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"rtgate/server/admission"
	"rtgate/server/apps"
	"rtgate/server/balance"
	"rtgate/server/frontdoor"
	"rtgate/server/routes"
)

// MaxBody bounds an API request's body (a GPT-Live one's: maxLiveBody).
const MaxBody = apps.MaxBody

// apiPaths are the endpoints served here besides GPT-Live's (liveEndpoint),
// with and without the /v1 prefix (as /realtime is).
var apiPaths = map[string]string{
	"/v1/realtime/client_secrets": "client_secrets", "/realtime/client_secrets": "client_secrets",
	"/v1/realtime/calls": "calls", "/realtime/calls": "calls",
	"/v1/realtime/translations/client_secrets": "translation_secrets", "/realtime/translations/client_secrets": "translation_secrets",
}

// Config is the API's share of the settings.
type Config struct {
	// DialTimeout (DIAL_TIMEOUT_SECS) bounds each request to a deployment
	// (a recording's transfer excepted: Deps.Context bounds it).
	DialTimeout time.Duration
}

// Deps is what the endpoints need of the rest of the gateway, built by the
// server in New.
type Deps struct {
	// Context ends when the server shuts down: hang-ups and recordings'
	// transfers end with it.
	Context context.Context
	Log     *slog.Logger
	// Routes is the routes table in force (replaced whole on a reload).
	Routes func() *routes.Table
	// OriginAllowed is ALLOWED_ORIGINS: whether a browser origin may call.
	OriginAllowed func(origin string) bool
	// PickGroup chooses the model group a request asks for, as for a
	// WebSocket connect, or refuses it.
	PickGroup func(table *routes.Table, key *routes.ClientKey, ask admission.GroupAsk) (string, *frontdoor.Refusal)
	// Admit admits key to a session of group on deployments ds (nil: the
	// group's), as every way in is admitted, or refuses it.
	Admit func(key *routes.ClientKey, table *routes.Table, group string, ds []*routes.Deployment) (Admission, *frontdoor.Refusal)
	// CheckBudget refuses a key at its spend budget (nil: within it).
	CheckBudget func(key *routes.ClientKey) *frontdoor.Refusal
	// LiveEnded notes that the app ended GPT-Live session id through the
	// gateway (a hangup or reject), so that its meter knows its end.
	LiveEnded func(id string)
	Balancer  Balancer
	Owners    Owners
	Secrets   Secrets
	// HTTPClient sends the requests to the deployments; it never follows
	// a redirect (Location and the status are the client's to see).
	HTTPClient *http.Client
}

// Admission is what a request that makes a session holds once admitted:
// where it may go, and what it counts (its key's session, its deployment's
// slot) until the session ends. It is given back once: by Release when no
// session was made, else by the meter it is handed to.
type Admission interface {
	// Candidates are the deployments to try, in order.
	Candidates() []*routes.Deployment
	// Release gives back what it counts; later calls do nothing.
	Release()
	// MeterCall hands it to the metering of Realtime call callID, made
	// on d for key's group: its usage is booked against key until the
	// call ends, which gives it back.
	MeterCall(key *routes.ClientKey, group string, d *routes.Deployment, callID string)
	// MeterLive hands it to the metering of GPT-Live session id, made on
	// d for key.
	MeterLive(key *routes.ClientKey, d *routes.Deployment, id string)
}

// release gives back adm, if any.
func release(adm Admission) {
	if adm != nil {
		adm.Release()
	}
}

// Balancer is the balancer's share in the API: the order of a group's
// deployments, and what their answers say of their health.
type Balancer interface {
	Rank(ds []*routes.Deployment) []*routes.Deployment
	Succeeded(d *routes.Deployment)
	Failed(d *routes.Deployment, why string)
}

// Owners are who made each call and GPT-Live session (apps.Calls).
type Owners interface {
	Remember(ctx context.Context, id string, o apps.Owner) error
	Lookup(id string) (apps.Owner, bool, error)
}

// Secrets sign, verify and keep client secrets (apps.Secrets).
type Secrets interface {
	Sign(c apps.Claims) string
	Verify(token string, now time.Time) (*apps.Grant, error)
	Keep(ctx context.Context, id string, cfg []byte, ttl time.Duration) (string, error)
	LoadConfig(ctx context.Context, g *apps.Grant) error
}

// Endpoints answers the API requests.
type Endpoints struct {
	cfg  Config
	deps Deps
}

// New makes the endpoints.
func New(cfg Config, deps Deps) *Endpoints { return &Endpoints{cfg: cfg, deps: deps} }

// Route names a request's endpoint (one of apiPaths, or a GPT-Live
// control: liveEndpoint) with its body's bound; "" for any other request
// (frontdoor.Handler.Route).
func (e *Endpoints) Route(req *http.Request) (endpoint string, bodyLimit int) {
	if endpoint, ok := apiPaths[req.URL.Path]; ok {
		return endpoint, MaxBody
	}
	if endpoint = liveEndpoint(req); endpoint != "" {
		return endpoint, maxLiveBody // SDP plus a whole session config (createLive)
	}
	return "", 0
}

// HandleAPI answers a whole API request, in its own goroutine
// (frontdoor.Handler.HandleAPI).
func (e *Endpoints) HandleAPI(c *frontdoor.Conn, req *http.Request, endpoint string, body []byte) {
	if endpoint == "live_content" && req.Method != http.MethodOptions {
		e.streamContent(c, req) // streamed, never held whole
		return
	}
	e.send(c, req, e.answer(req, endpoint, body))
}

// send sends an API request's answer, with the headers every answer to an
// allowed origin carries, and closes the connection.
func (e *Endpoints) send(c *frontdoor.Conn, req *http.Request, a Answer) {
	c.AnswerNow(a.render(e.CORSHeaders(req)))
}

func (e *Endpoints) answer(req *http.Request, endpoint string, body []byte) Answer {
	origin := req.Header.Get("Origin")
	if req.Method == http.MethodOptions {
		return e.preflight(req)
	}
	if !e.deps.OriginAllowed(origin) {
		return errorAnswer(http.StatusForbidden, "invalid_request_error", "origin_not_allowed", "this Origin may not call the gateway")
	}
	if strings.HasPrefix(endpoint, "live_") {
		return e.answerLive(req, endpoint, body)
	}
	if req.Method != http.MethodPost {
		return postOnly()
	}
	switch endpoint {
	case "client_secrets", "translation_secrets":
		return e.mintClientSecret(req, body)
	case "calls":
		return e.createCall(req, body)
	}
	return errorAnswer(http.StatusNotFound, "invalid_request_error", "not_found", "no such endpoint: "+req.URL.Path)
}

// preflight answers a CORS preflight per ALLOWED_ORIGINS (any origin when
// it is empty, as for WebSocket connects).
func (e *Endpoints) preflight(req *http.Request) Answer {
	origin := req.Header.Get("Origin")
	if origin == "" || !e.deps.OriginAllowed(origin) {
		return errorAnswer(http.StatusForbidden, "invalid_request_error", "origin_not_allowed", "this Origin may not call the gateway")
	}
	h := http.Header{
		"Access-Control-Allow-Methods": {"POST, OPTIONS"},
		"Access-Control-Max-Age":       {"600"},
	}
	if rh := req.Header.Get("Access-Control-Request-Headers"); rh != "" {
		h.Set("Access-Control-Allow-Headers", rh) // the SDK sends several x-stainless-* headers
	} else {
		h.Set("Access-Control-Allow-Headers", "Authorization, Content-Type")
	}
	return Answer{Status: http.StatusNoContent, Header: h}
}

// CORSHeaders are the headers every answer to an allowed browser origin
// carries: the API's, and the front door's refusals of any request
// (frontdoor.Handler.CORSHeaders).
func (e *Endpoints) CORSHeaders(req *http.Request) http.Header {
	origin := req.Header.Get("Origin")
	if origin == "" || !e.deps.OriginAllowed(origin) {
		return nil
	}
	return http.Header{
		"Access-Control-Allow-Origin":   {origin},
		"Access-Control-Expose-Headers": {"Location"},
		"Vary":                          {"Origin"},
	}
}

// firstToAnswer asks adm's deployments in turn (at most
// balance.MaxAttempts) until one answers: ask returns nil for an answer,
// refusals included, and an error when d could not be reached or failed
// (5xx), so the next is tried. Each outcome is the balancer's to know. It
// returns the deployment that answered (nil: none did) and how many were
// tried.
func (e *Endpoints) firstToAnswer(adm Admission, what string, ask func(d *routes.Deployment) error) (*routes.Deployment, int) {
	tried := 0
	for _, d := range adm.Candidates() {
		if tried == balance.MaxAttempts {
			break
		}
		if err := ask(d); errors.Is(err, errCannotServe) {
			continue // not this deployment's kind of request: neither tried nor failed
		} else if tried++; err != nil {
			e.deps.Balancer.Failed(d, what+" failed")
			e.deps.Log.Warn("upstream "+what+" failed", "deployment", d.Name, "err", err)
			continue
		}
		e.deps.Balancer.Succeeded(d)
		return d, tried
	}
	return nil, tried
}

// errCannotServe is an ask's answer for a deployment that cannot serve the
// request at all (a WebRTC call to a provider without WebRTC): the next one
// is asked, and the deployment's health is not touched.
var errCannotServe = errors.New("the deployment cannot serve this request")

// upstreamUnreachable is the answer to an API request no deployment of
// group answered, in the gateway's words: which deployments and why are
// the log's (they name upstream hosts).
func upstreamUnreachable(group string, tried int) Answer {
	return errorAnswer(http.StatusBadGateway, "server_error", "upstream_unavailable",
		fmt.Sprintf("No deployment of model group '%s' could be reached (%d tried); the gateway's log says why.", group, tried))
}
