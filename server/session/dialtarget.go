package session

import (
	"net/url"

	"rtgate/server/routes"
	"rtgate/upstream"
)

// dialTarget is what a session dials for a client's query at deployment d:
// the deployment's address (routes.Deployment.Address, which keeps the
// client's other parameters and sets the model) as an upstream.Target. The
// session builds it, so the configuration stays free of the dialer's types.
func dialTarget(d *routes.Deployment, clientQuery url.Values) upstream.Target {
	u, h := d.Address(clientQuery)
	return upstream.Target{URL: u, Header: h}
}

// liveDialTarget is a GPT-Live deployment's target for a request under its
// sessions path (routes.Deployment.LiveAddress: suffix "/{id}/attach" for a
// sideband, "/{id}/fork" for a fork, ...), q the query to send.
func liveDialTarget(d *routes.Deployment, suffix string, q url.Values) upstream.Target {
	u, h := d.LiveAddress(suffix, q)
	return upstream.Target{URL: u, Header: h}
}
