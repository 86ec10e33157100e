package apps

// Sideband connections: GET /v1/realtime?call_id=... attaches a WebSocket to
// a live WebRTC or SIP call. The gateway remembers which key made each call
// it forwarded (server/apps.go), in this process and, with REDIS_URL, in Redis so
// that every instance knows; a sideband for such a call is relayed only for
// that key (a client secret stands for the key that minted it). Calls the
// gateway did not make (SIP calls accepted through OpenAI's webhook) are
// relayed for the master key and for keys with `sideband: any`. A sideband
// is never served from, or counted in, the warm pool.

import (
	"context"
	"sync"
	"time"

	"rtgate/server/cluster"
)

// CallTTL is how long a call's owner is remembered: a session lasts at most
// 60 minutes, so twice that.
const CallTTL = 2 * time.Hour

// Calls maps call ids to the name of the key that made the call.
type Calls struct {
	store *cluster.Store // nil without REDIS_URL

	mu sync.Mutex
	m  map[string]callOwner
}

type callOwner struct {
	key     string
	expires time.Time
}

func NewCalls(store *cluster.Store) *Calls {
	return &Calls{store: store, m: map[string]callOwner{}}
}

// Remember records that key made call id. A Redis failure is logged by the
// caller; the local record still holds.
func (r *Calls) Remember(ctx context.Context, id, key string) error {
	now := time.Now()
	r.mu.Lock()
	for k, o := range r.m {
		if now.After(o.expires) {
			delete(r.m, k)
		}
	}
	r.m[id] = callOwner{key: key, expires: now.Add(CallTTL)}
	r.mu.Unlock()
	if r.store == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, max(time.Second, 20*r.store.Timeout))
	defer cancel()
	return r.store.Client.Set(ctx, r.store.Key("call", id), key, CallTTL).Err()
}

// Known returns the key that made call id, if this process knows the
// gateway made it; it never waits.
func (r *Calls) Known(id string) (string, bool) {
	r.mu.Lock()
	o, ok := r.m[id]
	r.mu.Unlock()
	if ok && time.Now().Before(o.expires) {
		return o.key, true
	}
	return "", false
}

// Remote reports whether other instances may know calls this one does not
// (REDIS_URL): a call owner unknown here is then looked up.
func (r *Calls) Remote() bool { return r.store != nil }

// Lookup returns the key that made call id, if the gateway made it. Redis is
// asked only when this process does not know the call, within the store's
// connect-path budget: never call it on netpoll's handler.
func (r *Calls) Lookup(id string) (string, bool) {
	if k, ok := r.Known(id); ok || r.store == nil {
		return k, ok
	}
	ctx, cancel := context.WithTimeout(context.Background(), r.store.Timeout)
	defer cancel()
	k, err := r.store.Client.Get(ctx, r.store.Key("call", id)).Result()
	if err != nil {
		return "", false
	}
	ttl := CallTTL
	if d, err := r.store.Client.PTTL(ctx, r.store.Key("call", id)).Result(); err == nil && d > 0 {
		ttl = d
	}
	r.mu.Lock()
	r.m[id] = callOwner{key: k, expires: time.Now().Add(ttl)} // asked once per instance
	r.mu.Unlock()
	return k, true
}
