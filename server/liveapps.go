package server

// GPT-Live beyond the WebSocket session: WebRTC sessions, sidebands, SIP
// call controls, forks and recordings, relayed to the deployment that owns
// each session.
//
//	POST /v1/live/sessions                 WebRTC: {session, transport: {type: webrtc, sdp}}, routed
//	                                       by session.model (a Live group), session.model rewritten
//	                                       to the deployment's; 201 {session: {id}, transport: {sdp}}
//	                                       unchanged. The owner (key, deployment) is remembered and the
//	                                       session metered from a sideband (liveMetering), its 15 s floor
//	                                       booked against the key's budget at once.
//	WS   /v1/live/sessions/{id}/attach     a sideband: owner-checked, relayed to the owning
//	                                       deployment (graceful_close passed through), never pooled;
//	                                       it meters the session when the gateway's own cannot
//	WS   /v1/live/sessions/{id}/fork       a stored session continued over WebSocket: owner-checked
//	                                       as a sideband, relayed to the owning deployment, never
//	                                       pooled; a Live session of its own, metered as one (newLiveFork)
//	POST /v1/live/sessions/{id}/accept     SIP call controls, owner-checked, to the owning deployment;
//	     …/reject, …/refer, …/hangup       an accept of a session the gateway never saw (an inbound
//	                                       SIP call announced to the app by live.transport.incoming)
//	                                       is routed by its session.model and remembered from then on
//	POST /v1/live/sessions/{id}/fork       a stored session continued over WebRTC: a new session,
//	                                       remembered and metered as a create's
//	GET  /v1/live/sessions/{id}/content    the recording, streamed through (never held whole)
//
// Owners are kept with the Realtime call owners (apps.Calls: this process
// and, with REDIS_URL, Redis): the key and the deployment. The owner check is
// the sideband's: the key that made the session (or a client of it: none, as
// GPT-Live has no client secrets), else the master key or a key with
// `sideband: any` for sessions the gateway did not make. A lookup Redis
// cannot answer refuses the attach, fork or control with 503
// owner_unavailable. A create, an HTTP fork and the accept of a session the
// gateway never saw are admitted as sessions (admitEntry): the session
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

	"rtgate/server/apps"
	"rtgate/server/balance"
	"rtgate/server/frontdoor"
	"rtgate/server/protocol"
	"rtgate/server/routes"
)

// maxLiveBody bounds the body of a Live API request: a WebRTC create
// carries an SDP offer and a whole session config (16k tokens of
// instructions, 8k of input), past the 64 KiB of the other API requests.
const maxLiveBody = 1 << 20

// liveOps are the operations under /v1/live/sessions/{id}/, and whether
// each is a POST with a body (else a GET: content; attach and a fork's
// WebSocket are upgrades).
var liveOps = map[string]bool{"accept": true, "reject": true, "refer": true, "hangup": true, "fork": true, "content": false,
	"attach": false}

// liveSubPath splits /v1/live/sessions/{id}/{op} (and the Azure and
// unversioned forms) into the session id and the operation.
func liveSubPath(p string) (id, op string, ok bool) {
	for _, base := range livePaths {
		rest, found := strings.CutPrefix(p, base+"/")
		if !found {
			continue
		}
		id, op, found = strings.Cut(rest, "/")
		if _, known := liveOps[op]; !found || !known || !validLiveID(id) {
			return "", "", false
		}
		return id, op, true
	}
	return "", "", false
}

// validLiveID accepts OpenAI's ids (live_…): letters, digits, _ and -.
func validLiveID(id string) bool {
	if id == "" || len(id) > 128 {
		return false
	}
	for _, r := range id {
		if !(r == '_' || r == '-' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z') {
			return false
		}
	}
	return true
}

// liveEndpoint is the API endpoint of a Live HTTP request ("" for none: a
// Live WebSocket, or not Live at all).
func liveEndpoint(req *http.Request) string {
	if isUpgrade(req) {
		return ""
	}
	for _, p := range livePaths {
		if req.URL.Path == p && (req.Method == http.MethodPost || req.Method == http.MethodOptions) {
			return "live_create"
		}
	}
	if _, op, ok := liveSubPath(req.URL.Path); ok && op != "attach" {
		return "live_" + op
	}
	return ""
}

// isUpgrade reports whether req asks for a WebSocket.
func isUpgrade(req *http.Request) bool {
	return strings.EqualFold(req.Header.Get("Upgrade"), "websocket")
}

// liveAPI answers the Live HTTP requests for its server.
type liveAPI struct{ s *Server }

// answer answers a whole Live API request (not content, which streams).
func (a liveAPI) answer(req *http.Request, endpoint string, body []byte) apiAnswer {
	if req.Method != http.MethodPost {
		ans := errorAnswer(http.StatusMethodNotAllowed, "invalid_request_error", "method_not_allowed", "use POST")
		ans.header = http.Header{"Allow": {"POST, OPTIONS"}}
		return ans
	}
	table := a.s.routes.Load()
	key, herr := a.key(table, req)
	if herr != nil {
		return refusedAnswer(herr)
	}
	id, op, _ := liveSubPath(req.URL.Path)
	if endpoint == "live_create" || op == "fork" || op == "accept" {
		// The key's models apply to the backend the session delegates to,
		// as at a WebSocket session.start; a later session.update is
		// answered on the metering sideband (liveState.refuseBackend).
		if herr := backendNotAllowed(key, protocol.BodyBackendModel(body)); herr != nil {
			return refusedAnswer(herr)
		}
	}
	if endpoint == "live_create" {
		return a.create(req.Context(), table, key, body)
	}
	owner, d, herr := a.owned(table, key, id, op, body)
	if herr != nil {
		return refusedAnswer(herr)
	}
	// A fork, and the accept of a session the gateway never saw, make a
	// session here: admitted as one. A key at its budget starts no session
	// (it may still end one).
	var adm *admission
	switch {
	case op == "fork" || (op == "accept" && owner.Key == ""):
		if adm, herr = a.s.admitEntry(entryCall, key, table, d.Group, []*routes.Deployment{d}); herr != nil {
			return refusedAnswer(herr)
		}
	case op == "accept":
		if herr := a.s.budgets.check(key); herr != nil {
			return refusedAnswer(herr)
		}
	}
	if op == "accept" {
		body = withModel(body, d.Model)
	}
	ans, status, err := a.forward(req.Context(), d, http.MethodPost, "/"+id+"/"+op, body)
	if err != nil {
		adm.release()
		a.s.log.Warn("Live request failed", "op", op, "session", id, "deployment", d.Name, "err", err)
		return errorAnswer(http.StatusBadGateway, "server_error", "upstream_unavailable",
			"The deployment that serves this session could not be reached; the gateway's log says why.")
	}
	switch {
	case op == "accept" && status == http.StatusOK && adm != nil:
		// An inbound SIP session the gateway never saw: it is this key's
		// from now on, and metered as a session made here.
		a.remember(key.Name, d, id, table, adm)
		adm = nil
	case op == "fork" && status == http.StatusCreated:
		if newID := sessionIDOf(ans.body); newID != "" {
			a.remember(key.Name, d, newID, table, adm)
			adm = nil
		}
	case (op == "hangup" || op == "reject") && status == http.StatusOK:
		a.s.meters.endedByRequest(id) // its end is known even if no sideband attached in time
	}
	adm.release() // no session made
	return ans
}

// hangUp ends session id on d (a WebRTC session over its key's budget).
func (a liveAPI) hangUp(d *routes.Deployment, id string) {
	if _, status, err := a.forward(a.s.ctx, d, http.MethodPost, "/"+id+"/hangup", nil); err != nil || status != http.StatusOK {
		a.s.log.Warn("Live session over budget not hung up", "session", id, "deployment", d.Name, "status", status, "err", err)
	}
}

// key authenticates a Live API request: a gateway key (GPT-Live has no
// client secrets).
func (a liveAPI) key(table *routes.Table, req *http.Request) (*routes.ClientKey, *refusal) {
	presented := frontdoor.ReadCredentials(req.Header).Key
	if isLiveSecret(table, presented) {
		return nil, refuseLiveSecret()
	}
	key, ok := table.Authenticate(presented)
	if !ok {
		return nil, &refusal{Status: http.StatusUnauthorized, Type: "invalid_request_error", Code: "invalid_api_key",
			Message: "Incorrect or missing API key. Send a gateway key as Authorization: Bearer."}
	}
	return key, nil
}

// create answers POST /v1/live/sessions: the offer goes to the group's
// deployments in the balancer's order until one answers (below 500).
func (a liveAPI) create(ctx context.Context, table *routes.Table, key *routes.ClientKey, body []byte) apiAnswer {
	var req struct {
		Session   map[string]any  `json:"session"`
		Transport json.RawMessage `json:"transport"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		return errorAnswer(http.StatusBadRequest, "invalid_request_error", "invalid_json", "The body is not a valid JSON object.")
	}
	model, _ := req.Session["model"].(string)
	if model == "" {
		return refusedAnswer(&refusal{Status: http.StatusBadRequest, Type: "invalid_request_error", Code: "missing_required_parameter",
			Message: "Missing required parameter: 'session.model'.", Param: "session.model"})
	}
	s := a.s
	group, herr := s.pickGroup(table, key, groupAsk{model: model, protocol: routes.ProtocolLive})
	if herr != nil {
		return refusedAnswer(herr)
	}
	adm, herr := s.admitEntry(entryCall, key, table, group, nil)
	if herr != nil {
		return refusedAnswer(herr)
	}
	tried := 0
	for i, d := range adm.plan.Cands {
		if i == balance.MaxAttempts {
			break
		}
		tried++
		ans, status, err := a.forward(ctx, d, http.MethodPost, "", withModel(body, d.Model))
		if err != nil || status >= 500 {
			s.log.Warn("upstream Live create failed", "deployment", d.Name, "status", status, "err", err)
			s.balancer.Failed(d, "live create failed")
			continue
		}
		s.balancer.Succeeded(d)
		if id := sessionIDOf(ans.body); status == http.StatusCreated && id != "" {
			a.remember(key.Name, d, id, table, adm)
		} else {
			adm.release() // refused upstream: no session to count
		}
		return ans
	}
	adm.release()
	return upstreamUnreachable(group, tried)
}

// remember records the owner of a new session made through the gateway and
// starts its metering sideband, which gives adm (its admission) back when
// the session ends.
func (a liveAPI) remember(keyName string, d *routes.Deployment, id string, table *routes.Table, adm *admission) {
	s := a.s
	if err := s.calls.Remember(context.Background(), id, apps.Owner{Key: keyName, Deployment: d.Name}); err != nil {
		s.log.Warn("Live session owner not stored in Redis; only this instance knows it", "session", id, "err", err)
	}
	key := keyNamed(table, keyName)
	if key == nil {
		adm.release()
		return
	}
	s.log.Info("Live WebRTC session created", "key", keyName, "model_group", d.Group, "deployment", d.Name, "session", id)
	s.meters.startLive(key, d, id, adm) // the floor booked now, its sideband attached in the background
}

// owned finds the deployment that serves session id for key, with the
// sideband's owner check. A session the gateway does not know is routed by
// the model of an accept's body (an inbound SIP call), else refused 404.
func (a liveAPI) owned(table *routes.Table, key *routes.ClientKey, id, op string, body []byte) (apps.Owner, *routes.Deployment, *refusal) {
	s := a.s
	owner, known, err := s.calls.Lookup(id)
	if err != nil {
		s.log.Warn("Live request refused: its session's owner could not be looked up", "session", id, "op", op, "err", err)
		return owner, nil, ownerUnavailable()
	}
	if herr := sidebandAccess(key, nil, owner, known); herr != nil {
		return owner, nil, herr
	}
	if known {
		if d := table.Named(owner.Deployment); d != nil {
			return owner, d, nil
		}
		return owner, nil, &refusal{Status: http.StatusNotFound, Type: "invalid_request_error", Code: "session_not_found",
			Message: "The deployment that served this session is no longer configured."}
	}
	if op != "accept" {
		return owner, nil, &refusal{Status: http.StatusNotFound, Type: "invalid_request_error", Code: "session_not_found",
			Message: "The gateway does not know this Live session: create it, or accept its call, through the gateway."}
	}
	var acc struct {
		Session struct {
			Model string `json:"model"`
		} `json:"session"`
	}
	_ = json.Unmarshal(body, &acc)
	if acc.Session.Model == "" {
		return owner, nil, &refusal{Status: http.StatusBadRequest, Type: "invalid_request_error", Code: "missing_required_parameter",
			Message: "Missing required parameter: 'session.model' (it routes a call the gateway did not see).", Param: "session.model"}
	}
	group, herr := s.pickGroup(table, key, groupAsk{model: acc.Session.Model, protocol: routes.ProtocolLive})
	if herr != nil {
		return owner, nil, herr
	}
	return owner, s.balancer.Rank(table.Groups[group])[0], nil
}

// forward sends one request to deployment d's Live endpoint (suffix under
// its sessions path) and returns the answer as the upstream gave it.
func (a liveAPI) forward(ctx context.Context, d *routes.Deployment, method, suffix string, body []byte) (apiAnswer, int, error) {
	resp, err := a.do(ctx, d, method, suffix, body)
	if err != nil {
		return apiAnswer{}, 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxLiveBody))
	if err != nil {
		return apiAnswer{}, 0, fmt.Errorf("reading the answer: %w", err)
	}
	return apiAnswer{status: resp.StatusCode, contentType: resp.Header.Get("Content-Type"), body: b}, resp.StatusCode, nil
}

// do sends the request; the caller closes the response's body.
func (a liveAPI) do(ctx context.Context, d *routes.Deployment, method, suffix string, body []byte) (*http.Response, error) {
	ws, h := d.LiveAddress(suffix, nil)
	u := routes.HTTPURL(ws)
	ctx, cancel := context.WithTimeout(ctx, a.s.cfg.DialTimeout)
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
	resp, err := a.s.httpClient.Do(req)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("%s %s: %w", method, redactedURL(u), err)
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
func (a liveAPI) streamContent(c *clientConn, req *http.Request) {
	if req.Method != http.MethodGet {
		ans := errorAnswer(http.StatusMethodNotAllowed, "invalid_request_error", "method_not_allowed", "use GET")
		ans.header = http.Header{"Allow": {"GET"}}
		a.s.answerAPI(c, req, ans)
		return
	}
	table := a.s.routes.Load()
	key, herr := a.key(table, req)
	if herr != nil {
		a.s.answerAPI(c, req, refusedAnswer(herr))
		return
	}
	id, op, _ := liveSubPath(req.URL.Path)
	_, d, herr := a.owned(table, key, id, op, nil)
	if herr != nil {
		a.s.answerAPI(c, req, refusedAnswer(herr))
		return
	}
	// The whole transfer may take longer than a dial: bounded by the
	// server's life, not the dial timeout.
	resp, err := a.doStream(d, "/"+id+"/content")
	if err != nil {
		a.s.log.Warn("Live recording not fetched", "session", id, "deployment", d.Name, "err", err)
		a.s.answerAPI(c, req, errorAnswer(http.StatusBadGateway, "server_error", "upstream_unavailable",
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
	for k, vs := range a.s.origins.corsHeaders(req) {
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

// doStream is do for a GET whose body may take long: bounded by the
// server's context and the HTTP client's timeouts, not the dial timeout.
func (a liveAPI) doStream(d *routes.Deployment, suffix string) (*http.Response, error) {
	ws, h := d.LiveAddress(suffix, nil)
	u := routes.HTTPURL(ws)
	req, err := http.NewRequestWithContext(a.s.ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, err
	}
	for k, v := range h {
		req.Header[k] = v
	}
	resp, err := a.s.httpClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", redactedURL(u), err)
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

// sessionIDOf reads session.id from a create's (or fork's) answer.
func sessionIDOf(body []byte) string {
	var ans struct {
		Session struct {
			ID string `json:"id"`
		} `json:"session"`
	}
	if json.Unmarshal(body, &ans) != nil || !validLiveID(ans.Session.ID) {
		return ""
	}
	return ans.Session.ID
}
