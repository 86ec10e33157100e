package server

// The gateway's few plain HTTP endpoints (client secrets, WebRTC calls,
// GPT-Live's controls) on the same port as the WebSocket upgrades.
//
// They arrive the way every request does, through the front door (Route
// names them), so the WebSocket path pays nothing for them: no second
// server, no sniffing, one switch on the path once the head is whole. The
// front door collects the body (bounded at maxAPIBody, or maxLiveBody) and
// hands the whole request to HandleAPI, in a goroutine of its own, since
// answering may wait on Redis or on the upstream (calls).

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strings"

	"rtgate/server/apps"
	"rtgate/server/frontdoor"
)

// maxAPIBody bounds an API request's body.
const maxAPIBody = apps.MaxBody

// apiPaths are the endpoints served here, with and without the /v1 prefix
// (as /realtime is).
var apiPaths = map[string]string{
	"/v1/realtime/client_secrets": "client_secrets", "/realtime/client_secrets": "client_secrets",
	"/v1/realtime/calls": "calls", "/realtime/calls": "calls",
	"/v1/realtime/translations/client_secrets": "translation_secrets", "/realtime/translations/client_secrets": "translation_secrets",
}

// apiAnswer is a response to an API request: a body, or a refusal.
type apiAnswer struct {
	status      int
	header      http.Header
	contentType string
	body        []byte
	refused     *refusal // renders as its JSON error body; nil for a body
}

func jsonAnswer(status int, v any) apiAnswer {
	b, _ := json.Marshal(v)
	return apiAnswer{status: status, contentType: "application/json", body: b}
}

// errorAnswer is an OpenAI-shaped error.
func errorAnswer(status int, errType, code, msg string) apiAnswer {
	return refusedAnswer(&refusal{Status: status, Type: errType, Code: code, Message: msg})
}

// render writes the response with extra headers after its own; the
// connection closes after it.
func (a apiAnswer) render(extra http.Header) []byte {
	if a.refused != nil {
		return frontdoor.Response(a.status, "application/json", a.refused.Body(), a.refused.Header, a.header, extra)
	}
	return frontdoor.Response(a.status, a.contentType, a.body, a.header, extra)
}

// refusedAnswer is a refusal as an API answer.
func refusedAnswer(e *refusal) apiAnswer { return apiAnswer{status: e.Status, refused: e} }

// httpResponse renders body as a JSON answer; it shares apiAnswer's renderer
// so that every response the gateway writes by hand has one format.
func httpResponse(status int, h http.Header, body any) []byte {
	return jsonAnswer(status, body).render(h)
}

// Route implements Handler: one of apiPaths, or a GPT-Live control
// (liveEndpoint), with its body's bound; "" for any other request (the
// WebSocket path, HandleRequest).
func (s *Server) Route(req *http.Request) (endpoint string, bodyLimit int) {
	if endpoint, ok := apiPaths[req.URL.Path]; ok {
		return endpoint, maxAPIBody
	}
	if endpoint = liveEndpoint(req); endpoint != "" {
		return endpoint, maxLiveBody // SDP plus a whole session config (liveAPI.create)
	}
	return "", 0
}

// HandleAPI implements Handler: it answers a whole API request, in its own
// goroutine.
func (s *Server) HandleAPI(dc *frontdoor.Conn, req *http.Request, endpoint string, body []byte) {
	c := dc.Owner().(*clientConn)
	if endpoint == "live_content" && req.Method != http.MethodOptions {
		liveAPI{s}.streamContent(c, req) // streamed, never held whole
		return
	}
	s.answerAPI(c, req, s.apiAnswer(req, endpoint, body))
}

// answerAPI sends an API request's answer, with the headers every answer
// to an allowed origin carries, and closes the connection.
func (s *Server) answerAPI(c *clientConn, req *http.Request, a apiAnswer) {
	c.AnswerNow(a.render(s.origins.corsHeaders(req)))
}

func (s *Server) apiAnswer(req *http.Request, endpoint string, body []byte) apiAnswer {
	origin := req.Header.Get("Origin")
	if req.Method == http.MethodOptions {
		return s.origins.preflight(req)
	}
	if !s.origins.allow(origin) {
		return errorAnswer(http.StatusForbidden, "invalid_request_error", "origin_not_allowed", "this Origin may not call the gateway")
	}
	if strings.HasPrefix(endpoint, "live_") {
		return liveAPI{s}.answer(req, endpoint, body)
	}
	if req.Method != http.MethodPost {
		a := errorAnswer(http.StatusMethodNotAllowed, "invalid_request_error", "method_not_allowed", "use POST")
		a.header = http.Header{"Allow": {"POST, OPTIONS"}}
		return a
	}
	switch endpoint {
	case "client_secrets", "translation_secrets":
		return s.mintClientSecret(req, body)
	case "calls":
		return s.createCall(req, body)
	}
	return errorAnswer(http.StatusNotFound, "invalid_request_error", "not_found", "no such endpoint: "+req.URL.Path)
}

// preflight answers a CORS preflight per ALLOWED_ORIGINS (any origin when
// it is empty, as for WebSocket connects).
func (o origins) preflight(req *http.Request) apiAnswer {
	origin := req.Header.Get("Origin")
	if origin == "" || !o.allow(origin) {
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
	return apiAnswer{status: http.StatusNoContent, header: h}
}

// corsHeaders are the headers every answer to an allowed browser origin
// carries.
func (o origins) corsHeaders(req *http.Request) http.Header {
	origin := req.Header.Get("Origin")
	if origin == "" || !o.allow(origin) {
		return nil
	}
	return http.Header{
		"Access-Control-Allow-Origin":   {origin},
		"Access-Control-Expose-Headers": {"Location"},
		"Vary":                          {"Origin"},
	}
}

// redactedURL is a URL fit for logs: no user info, no query (which may carry
// identifiers).
func redactedURL(u *url.URL) string {
	r := *u
	r.User = nil
	r.RawQuery = ""
	return r.String()
}
