package frontdoor

// An API request's body, collected the way the head is: each OnRequest
// appends what the socket has and returns, so no poller or handler
// goroutine ever waits for a slow client; the head's deadline
// (HANDSHAKE_TIMEOUT_SECS) bounds the whole request, and the body is
// bounded by the limit the Handler's Route gave (413 beyond, decided from
// Content-Length before reading when it is given). Once the body is whole
// the request goes to Handler.HandleAPI in a goroutine of its own, since
// answering may wait on Redis or on the upstream, then the connection
// closes.
//
//	state  event                         next
//	http   head of an API request        body (or answered when bodiless)
//	body   bytes; body still short       body
//	body   body whole                    done (HandleAPI's goroutine started)
//	body   body over its limit           done (413)

import (
	"bytes"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"strconv"
	"strings"

	"github.com/valyala/bytebufferpool"

	"rtgate/frames"
)

// apiRequest is an API request whose body is being collected.
type apiRequest struct {
	req      *http.Request
	endpoint string
	body     *bytebufferpool.ByteBuffer // raw body bytes as sent (chunked included)
	limit    int                        // the body's bound (Handler.Route)
}

// startBody begins collecting the body of an API request (Handler.Route
// named its endpoint and limit); rest is what came behind the head.
func (c *Conn) startBody(req *http.Request, endpoint string, limit int, rest []byte) {
	c.setPhase(phaseBody)
	c.api = &apiRequest{req: req, endpoint: endpoint, body: bytebufferpool.Get(), limit: limit}
	c.api.body.B = append(c.api.body.B[:0], rest...)
	bytebufferpool.Put(c.head)
	c.head = nil
	switch {
	case req.ContentLength > int64(limit):
		c.answerEarly(bodyTooLarge(limit))
		return
	case req.ContentLength < 0 && !isChunked(req):
		if req.Method == http.MethodPost {
			c.refuseBody(&Refusal{Status: http.StatusLengthRequired, Type: "invalid_request_error", Code: "length_required",
				Message: "Send Content-Length or a chunked body."})
			return
		}
	}
	if strings.EqualFold(req.Header.Get("Expect"), "100-continue") {
		_ = c.ep.Send([]byte("HTTP/1.1 100 Continue\r\n\r\n"))
	}
	c.bodyProgress()
}

// bodyTooLarge refuses a body over limit.
func bodyTooLarge(limit int) *Refusal {
	return &Refusal{Status: http.StatusRequestEntityTooLarge, Type: "invalid_request_error", Code: "request_too_large",
		Message: "The request body is larger than " + strconv.Itoa(limit) + " bytes."}
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
func (c *Conn) readBody() error {
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
func (c *Conn) bodyProgress() {
	a := c.api
	var body []byte
	switch {
	case isChunked(a.req):
		if len(a.body.B) > 2*a.limit {
			c.refuseBody(bodyTooLarge(a.limit))
			return
		}
		b, err := io.ReadAll(io.LimitReader(httputil.NewChunkedReader(bytes.NewReader(a.body.B)), int64(a.limit)+1))
		if errors.Is(err, io.ErrUnexpectedEOF) || (err == nil && !chunkedEnded(a.body.B)) {
			return // more to come
		}
		if err != nil {
			c.refuseBody(&Refusal{Status: http.StatusBadRequest, Type: "invalid_request_error", Code: "bad_request",
				Message: "malformed chunked body"})
			return
		}
		if len(b) > a.limit {
			c.refuseBody(bodyTooLarge(a.limit))
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
	c.Answered()
	bytebufferpool.Put(a.body)
	a.body = nil
	go c.door.h.HandleAPI(c, a.req, a.endpoint, body)
}

// chunkedEnded reports whether raw holds the last chunk's terminator.
func chunkedEnded(raw []byte) bool { return bytes.Contains(raw, []byte("0\r\n\r\n")) }

// answerEarly refuses a request before its body is read: the answer goes
// at once, but the socket stays open (discarding input) until the client,
// told Connection: close, closes it or the request deadline does, so a
// client still sending reads the answer rather than a reset.
func (c *Conn) answerEarly(r *Refusal) {
	c.setPhase(phaseDone)
	if c.api.body != nil {
		bytebufferpool.Put(c.api.body)
		c.api.body = nil
	}
	_ = c.ep.Send(r.render(c.door.h.CORSHeaders(c.api.req)))
}

// refuseBody refuses an API request, with the headers every answer to it
// carries, and closes the connection.
func (c *Conn) refuseBody(r *Refusal) {
	c.AnswerNow(r.render(c.door.h.CORSHeaders(c.api.req)))
}

// AnswerNow sends response, a whole HTTP response, and closes the
// connection.
func (c *Conn) AnswerNow(response []byte) {
	c.setPhase(phaseDone)
	if c.api != nil && c.api.body != nil {
		bytebufferpool.Put(c.api.body)
		c.api.body = nil
	}
	_ = c.ep.Send(response)
	c.ep.Close()
}
