package frontdoor

import (
	"bufio"
	"bytes"
	"crypto/sha1"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
)

// The client side of the upgrade is parsed here rather than by gobwas's
// Upgrader: that reads through its own bufio (dropping bytes the client sent
// behind the request) and has no size limit, and the gateway must answer
// refusals with JSON bodies. The reactor finds the end of the head in its own
// buffer, bounds it, and hands exactly those bytes to parseRequest.

// headEnd returns the length of the HTTP request head in b (through the blank
// line), or -1 if b does not hold a whole head yet.
func headEnd(b []byte) int {
	i := bytes.Index(b, []byte("\r\n\r\n"))
	if i < 0 {
		return -1
	}
	return i + 4
}

// refusal is every refusal the gateway answers over HTTP (an upgrade's
// before its 101, an API request's), sent as an OpenAI-shaped JSON error
// body. An API answer carries one when it is a refusal.
type Refusal struct {
	Status  int
	Type    string // the error's type: invalid_request_error, rate_limit_error, ...
	Code    string
	Message string
	Param   string // the request field at fault, "" for none
	Header  http.Header
}

func (e *Refusal) Error() string { return fmt.Sprintf("HTTP %d: %s", e.Status, e.Message) }

// Body is the refusal's JSON body.
func (e *Refusal) Body() []byte {
	var param any
	if e.Param != "" {
		param = e.Param
	}
	b, _ := json.Marshal(map[string]any{"error": map[string]any{
		"message": e.Message, "type": e.Type, "param": param, "code": e.Code}})
	return b
}

// render writes the refusal as a response with extra headers after its
// own; the connection closes after it.
func (e *Refusal) render(extra http.Header) []byte {
	return Response(e.Status, "application/json", e.Body(), e.Header, extra)
}

// response renders the refusal. The connection closes after it.
func (e *Refusal) response() []byte { return e.render(nil) }

// Response is every response the gateway writes by hand: the status
// line, the body's type and length, Connection: close, the headers in
// order, the body.
func Response(status int, contentType string, body []byte, headers ...http.Header) []byte {
	var buf bytes.Buffer
	buf.WriteString("HTTP/1.1 " + strconv.Itoa(status) + " " + http.StatusText(status) + "\r\n")
	if contentType != "" && len(body) > 0 {
		buf.WriteString("Content-Type: " + contentType + "\r\n")
	}
	buf.WriteString("Content-Length: " + strconv.Itoa(len(body)) + "\r\nConnection: close\r\n")
	for _, h := range headers {
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

func badRequest(msg string) *Refusal {
	return &Refusal{Status: http.StatusBadRequest, Type: "invalid_request_error", Code: "bad_request", Message: msg}
}

// parseRequest parses a complete request head.
func parseRequest(head []byte) (*http.Request, *Refusal) {
	req, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(head)))
	if err != nil {
		return nil, badRequest("malformed HTTP request")
	}
	return req, nil
}

// CheckUpgrade validates the WebSocket parts of an upgrade request (RFC 6455
// section 4.2.1) and returns the Sec-WebSocket-Accept value.
func CheckUpgrade(req *http.Request) (string, *Refusal) {
	if !headerHasToken(req.Header, "Connection", "upgrade") || !headerHasToken(req.Header, "Upgrade", "websocket") {
		return "", &Refusal{
			Status: http.StatusUpgradeRequired, Type: "invalid_request_error", Code: "upgrade_required",
			Message: "this endpoint speaks WebSocket: send Connection: Upgrade and Upgrade: websocket",
			Header:  http.Header{"Upgrade": {"websocket"}, "Sec-WebSocket-Version": {"13"}},
		}
	}
	if req.Header.Get("Sec-WebSocket-Version") != "13" {
		return "", &Refusal{
			Status: http.StatusUpgradeRequired, Type: "invalid_request_error", Code: "unsupported_websocket_version",
			Message: "only WebSocket version 13 is supported",
			Header:  http.Header{"Sec-WebSocket-Version": {"13"}},
		}
	}
	key := req.Header.Get("Sec-WebSocket-Key")
	if raw, err := base64.StdEncoding.DecodeString(key); err != nil || len(raw) != 16 {
		return "", badRequest("missing or invalid Sec-WebSocket-Key")
	}
	return acceptKey(key), nil
}

// acceptKey computes Sec-WebSocket-Accept for a client's key.
func acceptKey(key string) string {
	h := sha1.Sum([]byte(key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"))
	return base64.StdEncoding.EncodeToString(h[:])
}

func headerHasToken(h http.Header, name, token string) bool {
	for _, v := range h.Values(name) {
		for _, t := range strings.Split(v, ",") {
			if strings.EqualFold(strings.TrimSpace(t), token) {
				return true
			}
		}
	}
	return false
}

const (
	SubprotocolRealtime  = "realtime"
	subprotocolKeyPrefix = "openai-insecure-api-key."
)

// Credentials is what a request offered for authentication.
type Credentials struct {
	Key             string
	OfferedRealtime bool // the subprotocol realtime was offered and must be echoed
}

// credentials finds the client's key the three ways realtime clients send it:
// Authorization: Bearer, api-key (Azure style), and the browser subprotocol
// openai-insecure-api-key.<key>. Unknown subprotocols are ignored.
func ReadCredentials(h http.Header) Credentials {
	var c Credentials
	for _, v := range h.Values("Sec-WebSocket-Protocol") {
		for _, p := range strings.Split(v, ",") {
			p = strings.TrimSpace(p)
			switch {
			case p == SubprotocolRealtime:
				c.OfferedRealtime = true
			case strings.HasPrefix(p, subprotocolKeyPrefix) && c.Key == "":
				c.Key = strings.TrimPrefix(p, subprotocolKeyPrefix)
			}
		}
	}
	if auth := h.Get("Authorization"); auth != "" {
		if k, ok := cutPrefixFold(auth, "Bearer "); ok {
			c.Key = strings.TrimSpace(k)
		}
	} else if k := h.Get("Api-Key"); k != "" {
		c.Key = strings.TrimSpace(k)
	}
	return c
}

func cutPrefixFold(s, prefix string) (string, bool) {
	if len(s) >= len(prefix) && strings.EqualFold(s[:len(prefix)], prefix) {
		return s[len(prefix):], true
	}
	return s, false
}

// UpgradeResponse is the 101 answer.
func UpgradeResponse(accept string, protocol string) []byte {
	var b strings.Builder
	b.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: ")
	b.WriteString(accept)
	b.WriteString("\r\n")
	if protocol != "" {
		b.WriteString("Sec-WebSocket-Protocol: " + protocol + "\r\n")
	}
	b.WriteString("\r\n")
	return []byte(b.String())
}
