package server

// The gateway's few plain HTTP endpoints (client secrets, WebRTC calls) on
// the same port as the WebSocket upgrades.
//
// They arrive the way every request does, through netpoll's OnRequest (see
// Server.onRequest), so the WebSocket path pays nothing for them: no second server,
// no sniffing, one switch on the path once the head is whole. A request body
// is collected the way the head is: each OnRequest appends what the socket
// has and returns, so no poller or handler goroutine ever waits for a slow
// client; the head's deadline (HANDSHAKE_TIMEOUT_SECS) bounds the whole
// request, and the body is bounded at maxAPIBody (413 beyond, decided from
// Content-Length before reading when it is given). Once the body is whole the
// request is answered from a goroutine of its own, since answering may wait
// on Redis or on the upstream (calls), then the connection closes.
//
//	state  event                         next
//	http   head of an API request        body (or answered when bodiless)
//	body   bytes; body still short       body
//	body   body whole                    done (answer goroutine started)
//	body   body over maxAPIBody          done (413)

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"

	"github.com/valyala/bytebufferpool"

	"rtgate/frames"
	"rtgate/server/apps"
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

// apiRequest is an API request whose body is being collected.
type apiRequest struct {
	req      *http.Request
	endpoint string
	body     *bytebufferpool.ByteBuffer // raw body bytes as sent (chunked included)
	limit    int                        // the body's bound: maxAPIBody, or a Live request's maxLiveBody
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
	return (&refusal{status: status, errType: errType, code: code, message: msg}).answer()
}

// render writes the response; the connection closes after it.
func (a apiAnswer) render(extra http.Header) []byte {
	body, contentType, own := a.body, a.contentType, http.Header(nil)
	if a.refused != nil {
		body, contentType, own = a.refused.body(), "application/json", a.refused.header
	}
	var buf bytes.Buffer
	buf.WriteString("HTTP/1.1 " + strconv.Itoa(a.status) + " " + http.StatusText(a.status) + "\r\n")
	if contentType != "" && len(body) > 0 {
		buf.WriteString("Content-Type: " + contentType + "\r\n")
	}
	buf.WriteString("Content-Length: " + strconv.Itoa(len(body)) + "\r\nConnection: close\r\n")
	for _, h := range []http.Header{own, a.header, extra} {
		for k, vs := range h {
			for _, v := range vs {
				buf.WriteString(k + ": " + v + "\r\n")
			}
		}
	}
	buf.WriteString("\r\n")
	buf.Write(body)
	return buf.Bytes()
}

// startAPI takes over a request for one of apiPaths; it reports false for
// any other path (the WebSocket path carries on).
func (s *Server) startAPI(c *clientConn, req *http.Request, rest []byte) bool {
	endpoint, ok := apiPaths[req.URL.Path]
	limit := maxAPIBody
	if !ok {
		if endpoint = liveEndpoint(req); endpoint == "" {
			return false
		}
		limit = maxLiveBody // SDP plus a whole session config (liveAPI.create)
	}
	c.setPhase(phaseBody)
	c.api = &apiRequest{req: req, endpoint: endpoint, body: bytebufferpool.Get(), limit: limit}
	c.api.body.B = append(c.api.body.B[:0], rest...)
	bytebufferpool.Put(c.head)
	c.head = nil
	switch {
	case req.ContentLength > int64(limit):
		c.answerEarly(errorAnswer(http.StatusRequestEntityTooLarge, "invalid_request_error", "request_too_large",
			"The request body is larger than "+strconv.Itoa(limit)+" bytes."))
		return true
	case req.ContentLength < 0 && !isChunked(req):
		if req.Method == http.MethodPost {
			c.answerNow(errorAnswer(http.StatusLengthRequired, "invalid_request_error", "length_required",
				"Send Content-Length or a chunked body."))
			return true
		}
	}
	if strings.EqualFold(req.Header.Get("Expect"), "100-continue") {
		_ = c.ep.Send([]byte("HTTP/1.1 100 Continue\r\n\r\n"))
	}
	c.bodyProgress()
	return true
}

func isChunked(req *http.Request) bool {
	for _, te := range req.TransferEncoding {
		if strings.EqualFold(te, "chunked") {
			return true
		}
	}
	return false
}

// readBody is phaseBody's OnRequest: append what arrived and see whether
// the body is whole.
func (c *clientConn) readBody() error {
	err := c.ep.Read(func(src frames.Source) error {
		p, err := src.Next(src.Len())
		c.api.body.B = append(c.api.body.B, p...)
		return err
	})
	if err != nil && !errors.Is(err, net.ErrClosed) {
		return c.conn.Close()
	}
	c.bodyProgress()
	return nil
}

// bodyProgress answers once the body is whole, or refuses one too large.
func (c *clientConn) bodyProgress() {
	a := c.api
	var body []byte
	switch {
	case isChunked(a.req):
		if len(a.body.B) > 2*a.limit {
			c.answerNow(errorAnswer(http.StatusRequestEntityTooLarge, "invalid_request_error", "request_too_large",
				"The request body is larger than "+strconv.Itoa(a.limit)+" bytes."))
			return
		}
		b, err := io.ReadAll(io.LimitReader(httputil.NewChunkedReader(bytes.NewReader(a.body.B)), int64(a.limit)+1))
		if errors.Is(err, io.ErrUnexpectedEOF) || (err == nil && !chunkedEnded(a.body.B)) {
			return // more to come
		}
		if err != nil {
			c.answerNow(errorAnswer(http.StatusBadRequest, "invalid_request_error", "bad_request", "malformed chunked body"))
			return
		}
		if len(b) > a.limit {
			c.answerNow(errorAnswer(http.StatusRequestEntityTooLarge, "invalid_request_error", "request_too_large",
				"The request body is larger than "+strconv.Itoa(a.limit)+" bytes."))
			return
		}
		body = b
	default:
		n := max(a.req.ContentLength, 0)
		if int64(len(a.body.B)) < n {
			return
		}
		body = append([]byte(nil), a.body.B[:n]...)
	}
	c.setPhase(phaseDone)
	c.answered()
	bytebufferpool.Put(a.body)
	a.body = nil
	go c.srv.serveAPI(c, a.req, a.endpoint, body)
}

// chunkedEnded reports whether raw holds the last chunk's terminator.
func chunkedEnded(raw []byte) bool { return bytes.Contains(raw, []byte("0\r\n\r\n")) }

// answerEarly refuses a request before its body is read: the answer goes
// at once, but the socket stays open (discarding input) until the client,
// told Connection: close, closes it or the request deadline does, so a
// client still sending reads the answer rather than a reset.
func (c *clientConn) answerEarly(a apiAnswer) {
	c.setPhase(phaseDone)
	if c.api.body != nil {
		bytebufferpool.Put(c.api.body)
		c.api.body = nil
	}
	_ = c.ep.Send(a.render(c.srv.origins.corsHeaders(c.api.req)))
}

// answerNow sends a and closes the connection.
func (c *clientConn) answerNow(a apiAnswer) {
	c.setPhase(phaseDone)
	if c.api != nil && c.api.body != nil {
		bytebufferpool.Put(c.api.body)
		c.api.body = nil
	}
	var extra http.Header
	if c.api != nil {
		extra = c.srv.origins.corsHeaders(c.api.req)
	}
	_ = c.ep.Send(a.render(extra))
	c.ep.Close()
}

// serveAPI answers a whole API request; it runs in its own goroutine.
func (s *Server) serveAPI(c *clientConn, req *http.Request, endpoint string, body []byte) {
	if endpoint == "live_content" && req.Method != http.MethodOptions {
		liveAPI{s}.streamContent(c, req) // streamed, never held whole
		return
	}
	c.answerNow(s.apiAnswer(req, endpoint, body))
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
