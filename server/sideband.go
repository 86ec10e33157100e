package server

// Sideband connections: GET /v1/realtime?call_id=... attaches a WebSocket to
// a live WebRTC or SIP call. The gateway remembers which key made each call
// it forwarded (calls.go), in this process and, with REDIS_URL, in Redis so
// that every instance knows; a sideband for such a call is relayed only for
// that key (a client secret stands for the key that minted it). Calls the
// gateway did not make (SIP calls accepted through OpenAI's webhook) are
// relayed for the master key and for keys with `sideband: any`. A sideband
// is never served from, or counted in, the warm pool.

import (
	"context"
	"net/http"
	"sync"
	"time"

	"rtgate/server/cluster"
	"rtgate/server/routes"
)

// callTTL is how long a call's owner is remembered: a session lasts at most
// 60 minutes, so twice that.
const callTTL = 2 * time.Hour

// callRegistry maps call ids to the name of the key that made the call.
type callRegistry struct {
	store *cluster.Store // nil without REDIS_URL

	mu sync.Mutex
	m  map[string]callOwner
}

type callOwner struct {
	key     string
	expires time.Time
}

func newCallRegistry(store *cluster.Store) *callRegistry {
	return &callRegistry{store: store, m: map[string]callOwner{}}
}

// remember records that key made call id. A Redis failure is logged by the
// caller; the local record still holds.
func (r *callRegistry) remember(ctx context.Context, id, key string) error {
	now := time.Now()
	r.mu.Lock()
	for k, o := range r.m {
		if now.After(o.expires) {
			delete(r.m, k)
		}
	}
	r.m[id] = callOwner{key: key, expires: now.Add(callTTL)}
	r.mu.Unlock()
	if r.store == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, max(time.Second, 20*r.store.Timeout))
	defer cancel()
	return r.store.Client.Set(ctx, r.store.Key("call", id), key, callTTL).Err()
}

// known returns the key that made call id, if this process knows the
// gateway made it; it never waits.
func (r *callRegistry) known(id string) (string, bool) {
	r.mu.Lock()
	o, ok := r.m[id]
	r.mu.Unlock()
	if ok && time.Now().Before(o.expires) {
		return o.key, true
	}
	return "", false
}

// remote reports whether other instances may know calls this one does not
// (REDIS_URL): a call owner unknown here is then looked up.
func (r *callRegistry) remote() bool { return r.store != nil }

// lookup returns the key that made call id, if the gateway made it. Redis is
// asked only when this process does not know the call, within the store's
// connect-path budget: never call it on netpoll's handler.
func (r *callRegistry) lookup(id string) (string, bool) {
	if k, ok := r.known(id); ok || r.store == nil {
		return k, ok
	}
	ctx, cancel := context.WithTimeout(context.Background(), r.store.Timeout)
	defer cancel()
	k, err := r.store.Client.Get(ctx, r.store.Key("call", id)).Result()
	if err != nil {
		return "", false
	}
	ttl := callTTL
	if d, err := r.store.Client.PTTL(ctx, r.store.Key("call", id)).Result(); err == nil && d > 0 {
		ttl = d
	}
	r.mu.Lock()
	r.m[id] = callOwner{key: k, expires: time.Now().Add(ttl)} // asked once per instance
	r.mu.Unlock()
	return k, true
}

// unmetered is the inspector of a sideband to a call the gateway made: the
// gateway's own metering sideband counts that call's usage, so the client's
// must not count it again.
type unmetered struct{}

func (unmetered) Wants([]byte) bool { return false }
func (unmetered) Inspect([]byte)    {}

// checkSideband refuses a sideband the key may not open, given the key
// that made its call (made: the gateway made it).
func (s *Server) checkSideband(u *upgrade, owner string, made bool) *httpError {
	key := u.key
	forbidden := func(msg string) *httpError {
		return &httpError{status: http.StatusForbidden, errType: "invalid_request_error", code: "call_not_allowed", message: msg}
	}
	if u.made = made; made {
		if owner == key.Name {
			return nil
		}
		return forbidden("This call was made with another key.")
	}
	if key.Name == routes.MasterKeyName || key.Sideband == routes.SidebandAny {
		return nil
	}
	return forbidden("This key may attach only to calls it made through the gateway (give it `sideband: any` for others).")
}
