package routes

import (
	"net/http"
	"net/url"
)

// LiveAddress is a GPT-Live deployment's address for a request under its
// sessions path: suffix is appended to it ("" for the WebRTC create,
// "/{id}/attach" for a sideband, "/{id}/accept" for a call control, ...),
// q is the query to send (graceful_close, say). Both are fresh; the URL
// keeps the ws:// or wss:// scheme (HTTPURL turns it into
// http:// or https:// for the HTTP routes).
func (d *Deployment) LiveAddress(suffix string, q url.Values) (*url.URL, http.Header) {
	u, h := d.Address(nil)
	u.Path += suffix
	u.RawQuery = q.Encode()
	return u, h
}

// HTTPURL is u with its WebSocket scheme turned into the HTTP one.
func HTTPURL(u *url.URL) *url.URL {
	h := *u
	switch h.Scheme {
	case "wss":
		h.Scheme = "https"
	case "ws":
		h.Scheme = "http"
	}
	return &h
}

// RedactedURL is u fit for logs: no user info, no query (which may carry
// identifiers).
func RedactedURL(u *url.URL) string {
	r := *u
	r.User = nil
	r.RawQuery = ""
	return r.String()
}

// Named finds a deployment by its Name across every group (nil if none).
func (t *Table) Named(name string) *Deployment {
	for _, ds := range t.Groups {
		for _, d := range ds {
			if d.Name == name {
				return d
			}
		}
	}
	return nil
}
