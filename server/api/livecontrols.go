package api

// GPT-Live beyond the WebSocket session: WebRTC sessions, SIP call
// controls, HTTP forks and recordings, relayed to the deployment that owns
// each session (the sidebands and WebSocket forks, which are WebSocket
// sessions, are the server's: resolveLiveAttach, startLiveAttach).
//
//	POST /v1/live/sessions                 WebRTC: {session, transport: {type: webrtc, sdp}}, routed
//	                                       by session.model (a Live group), session.model rewritten
//	                                       to the deployment's; 201 {session: {id}, transport: {sdp}}
//	                                       unchanged. The owner (key, deployment) is remembered and the
//	                                       session metered from a sideband (Admission.MeterLive), its
//	                                       15 s floor booked against the key's budget at once.
//	POST /v1/live/sessions/{id}/accept     SIP call controls, owner-checked, to the owning deployment;
//	     …/reject, …/refer, …/hangup       an accept of a session the gateway never saw (an inbound
//	                                       SIP call announced to the app by live.transport.incoming)
//	                                       is routed by its session.model and remembered from then on
//	POST /v1/live/sessions/{id}/fork       a stored session continued over WebRTC: a new session,
//	                                       remembered and metered as a create's
//	GET  /v1/live/sessions/{id}/content    the recording, streamed through (never held whole)
//
// Owners are kept with the Realtime call owners (Deps.Owners: this process
// and, with REDIS_URL, Redis): the key and the deployment. The owner check is
// the sideband's (SidebandAccess): the key that made the session (or a
// client of it: none, as GPT-Live has no client secrets), else the master
// key or a key with `sideband: any` for sessions the gateway did not make.
// A lookup Redis cannot answer refuses the fork or control with 503
// owner_unavailable. A create, an HTTP fork and the accept of a session the
// gateway never saw are admitted as sessions (Deps.Admit): the session
// counts against its key and holds its deployment's slot until it ends.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"

	"rtgate/server/admission"
	"rtgate/server/apps"
	"rtgate/server/frontdoor"
	"rtgate/server/protocol"
	"rtgate/server/routes"
)

// maxLiveBody bounds the body of a Live API request: a WebRTC create
// carries an SDP offer and a whole session config (16k tokens of
// instructions, 8k of input), past the 64 KiB of the other API requests.
const maxLiveBody = 1 << 20

// liveEndpoint is the API endpoint of a Live HTTP request ("" for none: a
// Live WebSocket, or not Live at all).
func liveEndpoint(req *http.Request) string {
	if strings.EqualFold(req.Header.Get("Upgrade"), "websocket") {
		return ""
	}
	if protocol.IsLivePath(req.URL.Path) && (req.Method == http.MethodPost || req.Method == http.MethodOptions) {
		return "live_create"
	}
	if _, op, ok := protocol.LiveSubPath(req.URL.Path); ok && op != "attach" {
		return "live_" + op
	}
	return ""
}

// answerLive answers a whole Live API request (not content, which streams).
func (e *Endpoints) answerLive(req *http.Request, endpoint string, body []byte) Answer {
	if req.Method != http.MethodPost {
		return postOnly()
	}
	table := e.deps.Routes()
	key, herr := liveKey(table, req)
	if herr != nil {
		return refusedAnswer(herr)
	}
	id, op, _ := protocol.LiveSubPath(req.URL.Path)
	if endpoint == "live_create" || op == "fork" || op == "accept" {
		// The key's models apply to the backend the session delegates to,
		// as at a WebSocket session.start; a later session.update is
		// answered on the metering sideband (liveState.refuseBackend).
		if herr := admission.BackendNotAllowed(key, protocol.BodyBackendModel(body)); herr != nil {
			return refusedAnswer(herr)
		}
	}
	if endpoint == "live_create" {
		return e.createLive(req.Context(), table, key, body)
	}
	owner, d, herr := e.owned(table, key, id, op, body)
	if herr != nil {
		return refusedAnswer(herr)
	}
	// A fork, and the accept of a session the gateway never saw, make a
	// session here: admitted as one. A key at its budget starts no session
	// (it may still end one).
	var adm Admission
	switch {
	case op == "fork" || (op == "accept" && owner.Key == ""):
		if adm, herr = e.deps.Admit(key, table, d.Group, []*routes.Deployment{d}); herr != nil {
			return refusedAnswer(herr)
		}
	case op == "accept":
		if herr := e.deps.CheckBudget(key); herr != nil {
			return refusedAnswer(herr)
		}
	}
	if op == "accept" {
		body = withModel(body, d.Model)
	}
	ans, status, err := e.forwardLive(req.Context(), d, http.MethodPost, "/"+id+"/"+op, body)
	if err != nil {
		release(adm)
		e.deps.Log.Warn("Live request failed", "op", op, "session", id, "deployment", d.Name, "err", err)
		return errorAnswer(http.StatusBadGateway, "server_error", "upstream_unavailable",
			"The deployment that serves this session could not be reached; the gateway's log says why.")
	}
	switch {
	case op == "accept" && status == http.StatusOK && adm != nil:
		// An inbound SIP session the gateway never saw: it is this key's
		// from now on, and metered as a session made here.
		e.rememberLive(key.Name, d, id, table, adm)
		adm = nil
	case op == "fork" && status == http.StatusCreated:
		if newID := protocol.LiveSessionID(ans.Body); newID != "" {
			e.rememberLive(key.Name, d, newID, table, adm)
			adm = nil
		}
	case (op == "hangup" || op == "reject") && status == http.StatusOK:
		e.deps.LiveEnded(id) // its end is known even if no sideband attached in time
	}
	release(adm) // no session made
	return ans
}

// HangUpLive ends GPT-Live session id on d: a WebRTC session over its
// key's budget, or of a revoked key (the server's call meters and reload
// call it).
func (e *Endpoints) HangUpLive(d *routes.Deployment, id string) {
	if _, status, err := e.forwardLive(e.deps.Context, d, http.MethodPost, "/"+id+"/hangup", nil); err != nil || status != http.StatusOK {
		e.deps.Log.Warn("Live session over budget not hung up", "session", id, "deployment", d.Name, "status", status, "err", err)
	}
}

// liveKey authenticates a Live API request: a gateway key (GPT-Live has no
// client secrets).
func liveKey(table *routes.Table, req *http.Request) (*routes.ClientKey, *frontdoor.Refusal) {
	presented := frontdoor.ReadCredentials(req.Header).Key
	if IsLiveSecret(table, presented) {
		return nil, RefuseLiveSecret()
	}
	key, ok := table.Authenticate(presented)
	if !ok {
		return nil, &frontdoor.Refusal{Status: http.StatusUnauthorized, Type: "invalid_request_error", Code: "invalid_api_key",
			Message: "Incorrect or missing API key. Send a gateway key as Authorization: Bearer."}
	}
	return key, nil
}

// createLive answers POST /v1/live/sessions: the offer goes to the group's
// deployments in the balancer's order until one answers (below 500).
func (e *Endpoints) createLive(ctx context.Context, table *routes.Table, key *routes.ClientKey, body []byte) Answer {
	var req struct {
		Session   map[string]any  `json:"session"`
		Transport json.RawMessage `json:"transport"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		return errorAnswer(http.StatusBadRequest, "invalid_request_error", "invalid_json", "The body is not a valid JSON object.")
	}
	model, _ := req.Session["model"].(string)
	if model == "" {
		return refusedAnswer(&frontdoor.Refusal{Status: http.StatusBadRequest, Type: "invalid_request_error", Code: "missing_required_parameter",
			Message: "Missing required parameter: 'session.model'.", Param: "session.model"})
	}
	group, herr := e.deps.PickGroup(table, key, admission.GroupAsk{Model: model, Protocol: routes.ProtocolLive})
	if herr != nil {
		return refusedAnswer(herr)
	}
	adm, herr := e.deps.Admit(key, table, group, nil)
	if herr != nil {
		return refusedAnswer(herr)
	}
	var ans Answer
	var status int
	d, tried := e.firstToAnswer(adm, "live create", func(d *routes.Deployment) (err error) {
		ans, status, err = e.forwardLive(ctx, d, http.MethodPost, "", withModel(body, d.Model))
		if err == nil && status >= 500 {
			err = fmt.Errorf("HTTP %d", status)
		}
		return err
	})
	if d == nil {
		adm.Release()
		return upstreamUnreachable(group, tried)
	}
	if id := protocol.LiveSessionID(ans.Body); status == http.StatusCreated && id != "" {
		e.rememberLive(key.Name, d, id, table, adm)
	} else {
		adm.Release() // refused upstream: no session to count
	}
	return ans
}

// rememberLive records the owner of a new session made through the gateway
// and starts its metering sideband, which gives adm (its admission) back
// when the session ends.
func (e *Endpoints) rememberLive(keyName string, d *routes.Deployment, id string, table *routes.Table, adm Admission) {
	if err := e.deps.Owners.Remember(context.Background(), id, apps.Owner{Key: keyName, Deployment: d.Name}); err != nil {
		e.deps.Log.Warn("Live session owner not stored in Redis; only this instance knows it", "session", id, "err", err)
	}
	key := table.KeyNamed(keyName)
	if key == nil {
		adm.Release()
		return
	}
	e.deps.Log.Info("Live WebRTC session created", "key", keyName, "model_group", d.Group, "deployment", d.Name, "session", id)
	adm.MeterLive(key, d, id) // the floor booked now, its sideband attached in the background
}

// owned finds the deployment that serves session id for key, with the
// sideband's owner check. A session the gateway does not know is routed by
// the model of an accept's body (an inbound SIP call), else refused 404.
func (e *Endpoints) owned(table *routes.Table, key *routes.ClientKey, id, op string, body []byte) (apps.Owner, *routes.Deployment, *frontdoor.Refusal) {
	owner, known, err := e.deps.Owners.Lookup(id)
	if err != nil {
		e.deps.Log.Warn("Live request refused: its session's owner could not be looked up", "session", id, "op", op, "err", err)
		return owner, nil, OwnerUnavailable()
	}
	if herr := SidebandAccess(key, nil, owner, known); herr != nil {
		return owner, nil, herr
	}
	if known {
		if d := table.Named(owner.Deployment); d != nil {
			return owner, d, nil
		}
		return owner, nil, &frontdoor.Refusal{Status: http.StatusNotFound, Type: "invalid_request_error", Code: "session_not_found",
			Message: "The deployment that served this session is no longer configured."}
	}
	if op != "accept" {
		return owner, nil, &frontdoor.Refusal{Status: http.StatusNotFound, Type: "invalid_request_error", Code: "session_not_found",
			Message: "The gateway does not know this Live session: create it, or accept its call, through the gateway."}
	}
	var acc struct {
		Session struct {
			Model string `json:"model"`
		} `json:"session"`
	}
	_ = json.Unmarshal(body, &acc)
	if acc.Session.Model == "" {
		return owner, nil, &frontdoor.Refusal{Status: http.StatusBadRequest, Type: "invalid_request_error", Code: "missing_required_parameter",
			Message: "Missing required parameter: 'session.model' (it routes a call the gateway did not see).", Param: "session.model"}
	}
	group, herr := e.deps.PickGroup(table, key, admission.GroupAsk{Model: acc.Session.Model, Protocol: routes.ProtocolLive})
	if herr != nil {
		return owner, nil, herr
	}
	return owner, e.deps.Balancer.Rank(table.Groups[group])[0], nil
}

// forwardLive sends one request to deployment d's Live endpoint (suffix
// under its sessions path) and returns the answer as the upstream gave it.
func (e *Endpoints) forwardLive(ctx context.Context, d *routes.Deployment, method, suffix string, body []byte) (Answer, int, error) {
	resp, err := e.doLive(ctx, d, method, suffix, body)
	if err != nil {
		return Answer{}, 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxLiveBody))
	if err != nil {
		return Answer{}, 0, fmt.Errorf("reading the answer: %w", err)
	}
	return Answer{Status: resp.StatusCode, ContentType: resp.Header.Get("Content-Type"), Body: b}, resp.StatusCode, nil
}

// doLive sends the request; the caller closes the response's body.
func (e *Endpoints) doLive(ctx context.Context, d *routes.Deployment, method, suffix string, body []byte) (*http.Response, error) {
	ws, h := d.LiveAddress(suffix, nil)
	u := routes.HTTPURL(ws)
	ctx, cancel := context.WithTimeout(ctx, e.cfg.DialTimeout)
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, u.String(), rd)
	if err != nil {
		cancel()
		return nil, err
	}
	for k, v := range h {
		req.Header[k] = v
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := e.deps.HTTPClient.Do(req)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("%s %s: %w", method, routes.RedactedURL(u), err)
	}
	resp.Body = cancelOnClose{resp.Body, cancel}
	return resp, nil
}

// cancelOnClose ends a request's context when its body is closed.
type cancelOnClose struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (c cancelOnClose) Close() error { err := c.ReadCloser.Close(); c.cancel(); return err }

// streamContent answers GET …/{id}/content: the recording is copied to the
// client as it arrives (a stored session's WAV can run to hundreds of MB),
// never held whole. It runs in the request's own goroutine.
func (e *Endpoints) streamContent(c *frontdoor.Conn, req *http.Request) {
	if req.Method != http.MethodGet {
		ans := errorAnswer(http.StatusMethodNotAllowed, "invalid_request_error", "method_not_allowed", "use GET")
		ans.Header = http.Header{"Allow": {"GET"}}
		e.send(c, req, ans)
		return
	}
	table := e.deps.Routes()
	key, herr := liveKey(table, req)
	if herr != nil {
		e.send(c, req, refusedAnswer(herr))
		return
	}
	id, op, _ := protocol.LiveSubPath(req.URL.Path)
	_, d, herr := e.owned(table, key, id, op, nil)
	if herr != nil {
		e.send(c, req, refusedAnswer(herr))
		return
	}
	// The whole transfer may take longer than a dial: bounded by the
	// server's life, not the dial timeout.
	resp, err := e.doStream(d, "/"+id+"/content")
	if err != nil {
		e.deps.Log.Warn("Live recording not fetched", "session", id, "deployment", d.Name, "err", err)
		e.send(c, req, errorAnswer(http.StatusBadGateway, "server_error", "upstream_unavailable",
			"The deployment that serves this session could not be reached; the gateway's log says why."))
		return
	}
	defer resp.Body.Close()
	var head bytes.Buffer
	head.WriteString("HTTP/1.1 " + strconv.Itoa(resp.StatusCode) + " " + http.StatusText(resp.StatusCode) + "\r\n")
	for _, h := range []string{"Content-Type", "Content-Length", "Content-Disposition"} {
		if v := resp.Header.Get(h); v != "" {
			head.WriteString(h + ": " + v + "\r\n")
		}
	}
	chunked := resp.ContentLength < 0
	if chunked {
		head.WriteString("Transfer-Encoding: chunked\r\n")
	}
	for k, vs := range e.CORSHeaders(req) {
		for _, v := range vs {
			head.WriteString(k + ": " + v + "\r\n")
		}
	}
	head.WriteString("Connection: close\r\n\r\n")
	ep := c.Endpoint() // HandleAPI runs once the front door has read the request
	if err := ep.Send(head.Bytes()); err != nil {
		ep.Close()
		return
	}
	buf := make([]byte, 32<<10)
	for {
		n, rerr := resp.Body.Read(buf)
		if n > 0 {
			out := buf[:n]
			if chunked {
				out = append(append([]byte(strconv.FormatInt(int64(n), 16)+"\r\n"), out...), "\r\n"...)
			}
			if err := ep.Send(out); err != nil {
				break // the client left
			}
		}
		if rerr != nil {
			if rerr == io.EOF && chunked {
				_ = ep.Send([]byte("0\r\n\r\n"))
			}
			break
		}
	}
	ep.Close()
}

// doStream is doLive for a GET whose body may take long: bounded by the
// server's context and the HTTP client's timeouts, not the dial timeout.
func (e *Endpoints) doStream(d *routes.Deployment, suffix string) (*http.Response, error) {
	ws, h := d.LiveAddress(suffix, nil)
	u := routes.HTTPURL(ws)
	req, err := http.NewRequestWithContext(e.deps.Context, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, err
	}
	for k, v := range h {
		req.Header[k] = v
	}
	resp, err := e.deps.HTTPClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", routes.RedactedURL(u), err)
	}
	return resp, nil
}

// withModel is a JSON body whose session.model is model (the body as it
// was when it is not a JSON object with a session object).
func withModel(body []byte, model string) []byte {
	var m map[string]json.RawMessage
	if json.Unmarshal(body, &m) != nil || m == nil {
		return body
	}
	var sess map[string]json.RawMessage
	if json.Unmarshal(m["session"], &sess) != nil || sess == nil {
		return body
	}
	sess["model"], _ = json.Marshal(model)
	m["session"], _ = json.Marshal(sess)
	out, _ := json.Marshal(m)
	return out
}
