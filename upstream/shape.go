package upstream

import (
	"crypto/sha256"
	"encoding/hex"
	"net/url"
	"slices"
	"strings"
)

// Shapes: which connects a warm socket may serve. A warm socket is
// interchangeable for every connect that would open the same upstream
// session, so the pool keys sockets by what shapes that session, from an
// allow-list, and never by anything a client can vary at will (a client
// whose query or headers made a key of their own used to get a pool and a
// floor of its own: 40 connects each with its own &nonce=N opened 80 extra
// upstream sessions).
//
// What shapes the session: the upstream URL without its query (scheme,
// host, path: the deployment), the query parameters the gateway sets from
// the deployment (shapeParams: its model, or Azure's deployment and
// api-version), and the headers but the per-client ones (the deployment's
// credentials, and OpenAI-Beta, which selects the beta interface).
//
// A connect the pool's sockets cannot serve as asked dials direct, and is
// not demand for the pool (it opens no pool and sizes none):
//
//   - call_id (a sideband to one live call: a socket dialed ahead would
//     attach a stranger to it) and intent=transcription (its first event
//     is not known to be session.created) are never pool connects at all;
//   - a per-client header (perClientHeaders) must reach the upstream on the
//     upgrade, where a warm socket's upgrade is long past: OpenAI takes the
//     safety identifier only there on a Realtime socket (its session
//     config has no such field), so such a connect is a miss the pool
//     could not avoid (MissSafetyIdentifier);
//   - any other query parameter (a nonce, a test upstream's fault switch,
//     an intent but transcription) is forwarded to the upstream as the
//     client sent it, which a warm socket, dialed without it, cannot do
//     (MissQuery).

// shapeParams are the query parameters that shape an upstream session, all
// set by the gateway from the deployment.
var shapeParams = []string{"model", "deployment", "api-version"}

// perClientHeaders carry one end user's value that must reach the upstream
// on the upgrade.
var perClientHeaders = []string{"OpenAI-Safety-Identifier"}

// Why a connect missed the pool: the reason label of the misses counter.
// Bounded by construction.
const (
	// MissEmpty: its shape has a pool, and it had no ready socket.
	MissEmpty = "empty"
	// MissNoPool: no pool for its shape (the pool warms only the
	// configured deployments, as configured: an OpenAI-Beta header the
	// deployment's sockets were not dialed with is another shape).
	MissNoPool = "no_pool"
	// MissSafetyIdentifier: it carries OpenAI-Safety-Identifier.
	MissSafetyIdentifier = "safety_identifier"
	// MissQuery: it carries query parameters beyond the session's shape.
	MissQuery = "query"
)

// Key identifies interchangeable upstream sockets: the upstream session's
// shape, as above. The result is a digest, so it is safe to keep and
// compare but must still never be logged whole.
func Key(t Target) string {
	u := *t.URL
	q := t.URL.Query()
	shaped := make(url.Values, len(shapeParams))
	for _, k := range shapeParams {
		if v, ok := q[k]; ok {
			shaped[k] = v
		}
	}
	u.RawQuery, u.Fragment, u.RawFragment = shaped.Encode(), "", ""
	h := sha256.New()
	h.Write([]byte(u.String()))
	names := make([]string, 0, len(t.Header))
	for k := range t.Header {
		if !perClient(k) {
			names = append(names, k)
		}
	}
	slices.Sort(names)
	for _, k := range names {
		h.Write([]byte{0})
		h.Write([]byte(strings.ToLower(k)))
		for _, v := range t.Header[k] {
			h.Write([]byte{1})
			h.Write([]byte(v))
		}
	}
	return hex.EncodeToString(h.Sum(nil))
}

// perClient reports whether header name is one of perClientHeaders.
func perClient(name string) bool {
	return slices.ContainsFunc(perClientHeaders, func(p string) bool { return strings.EqualFold(p, name) })
}

// unpooled says why a warm socket cannot serve t: "" if one can;
// sideband for a connect that is never a pool connect (call_id,
// intent=transcription), which is not even counted as a miss; else the
// reason of a miss the pool could not avoid.
func unpooled(t Target) string {
	q := t.URL.Query()
	if q.Has("call_id") || q.Get("intent") == "transcription" {
		return sideband
	}
	for k, v := range t.Header { // as set, canonical or not
		if len(v) > 0 && perClient(k) {
			return MissSafetyIdentifier
		}
	}
	for k := range q {
		if !slices.Contains(shapeParams, k) {
			return MissQuery
		}
	}
	return ""
}

// sideband is unpooled's answer for connects that are never pool connects.
const sideband = "sideband"

// Poolable reports whether a warm socket may serve t (see unpooled).
func Poolable(t Target) bool { return unpooled(t) == "" }
