// Package api answers the gateway's plain HTTP endpoints, which share the
// WebSocket port: OpenAI's client secrets (POST /v1/realtime/client_secrets,
// and the translation route's), Realtime WebRTC calls (POST
// /v1/realtime/calls), and GPT-Live's WebRTC create, call controls
// (accept, reject, refer, hangup), HTTP forks and recordings under
// /v1/live/sessions. Its one job: an API request in, its answer out, with
// whatever it takes upstream (a deployment's calls or sessions endpoint)
// in between.
//
// The seam: the front door (server/frontdoor) reads a request and asks its
// Handler (the server) to Route it; the server forwards Route and HandleAPI
// to Endpoints. What an endpoint needs of the session side (the routes table
// in force, the choice of a model group, admission and its hand-over to a
// call's meter, the key's budget, the balancer, the call owners, the client
// secrets, the upstream HTTP client) comes in one Deps, built by the server
// in New: this package never imports package server. The other way, the
// server calls what both sides need and is the API's to say: Authenticate (a
// key or a client secret, for a WebSocket connect too), HangUpCall and
// HangUpLive (a call or Live session over its budget, or of a revoked key),
// MintSecretFor (the admin playground), CORSHeaders (ALLOWED_ORIGINS'
// answer headers), and the owner and GPT-Live refusals a sideband shares
// with the controls (SidebandAccess, OwnerUnavailable, RefuseLiveSecret).
//
// Every endpoint is admitted as a session where it makes one (Deps.Admit:
// a call, a Live create, an HTTP fork, the accept of a call the gateway
// never saw); the admission is handed to the session's meter once the
// upstream has made it (Admission.MeterCall, MeterLive), else given back.
package api
