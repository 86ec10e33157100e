package routes

import (
	"net/url"

	"rtgate/upstream"
)

// LiveTarget is a GPT-Live deployment's upstream for a request under its
// sessions path: suffix is appended to it ("" for the WebRTC create,
// "/{id}/attach" for a sideband, "/{id}/accept" for a call control, ...),
// q is the query to send (graceful_close, say). The returned Target is
// fresh; its URL keeps the ws:// or wss:// scheme (HTTPURL turns it into
// http:// or https:// for the HTTP routes).
func (d *Deployment) LiveTarget(suffix string, q url.Values) upstream.Target {
	t := d.Target(nil)
	t.URL.Path += suffix
	t.URL.RawQuery = q.Encode()
	return t
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
