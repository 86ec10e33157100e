package api

import (
	"encoding/json"
	"net/http"

	"rtgate/server/frontdoor"
)

// Answer is a response to an API request: a body, or a refusal.
type Answer struct {
	Status      int
	Header      http.Header
	ContentType string
	Body        []byte
	Refused     *frontdoor.Refusal // renders as its JSON error body; nil for a body
}

func jsonAnswer(status int, v any) Answer {
	b, _ := json.Marshal(v)
	return Answer{Status: status, ContentType: "application/json", Body: b}
}

// errorAnswer is an OpenAI-shaped error.
func errorAnswer(status int, errType, code, msg string) Answer {
	return refusedAnswer(&frontdoor.Refusal{Status: status, Type: errType, Code: code, Message: msg})
}

// postOnly refuses a method other than POST (and OPTIONS, a preflight).
func postOnly() Answer {
	a := errorAnswer(http.StatusMethodNotAllowed, "invalid_request_error", "method_not_allowed", "use POST")
	a.Header = http.Header{"Allow": {"POST, OPTIONS"}}
	return a
}

// render writes the response with extra headers after its own; the
// connection closes after it.
func (a Answer) render(extra http.Header) []byte {
	if a.Refused != nil {
		return frontdoor.Response(a.Status, "application/json", a.Refused.Body(), a.Refused.Header, a.Header, extra)
	}
	return frontdoor.Response(a.Status, a.ContentType, a.Body, a.Header, extra)
}

// refusedAnswer is a refusal as an API answer.
func refusedAnswer(e *frontdoor.Refusal) Answer { return Answer{Status: e.Status, Refused: e} }

// JSONResponse renders body as a JSON answer with headers h (the server's
// health answers): it shares the API's renderer so that every response the
// gateway writes by hand has one format.
func JSONResponse(status int, h http.Header, body any) []byte {
	return jsonAnswer(status, body).render(h)
}
