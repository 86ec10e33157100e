package apps

// Sideband connections: GET /v1/realtime?call_id=... attaches a WebSocket to
// a live WebRTC or SIP call. The gateway remembers who made each call it
// forwarded (server/api's Endpoints) — the key, the deployment that serves the call
// and, when a client secret made it, that secret's id — in this process and,
// with REDIS_URL, in Redis so that every instance knows. A sideband for such
// a call is relayed only for that key, to that deployment; a client secret
// reaches only the calls made with it. Calls the gateway did not make (SIP
// calls accepted through OpenAI's webhook) are relayed for the master key and
// for keys with `sideband: any` (never for a client secret). A sideband is
// never served from, or counted in, the warm pool.
//
// An owner lookup fails closed: when Redis cannot answer, Lookup says so
// (ErrOwnerUnavailable) and the caller refuses with 503, rather than taking
// the call for one the gateway did not make.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"rtgate/server/cluster"
)

// CallTTL is how long a call's owner is remembered: a session lasts at most
// 60 minutes, so twice that.
const CallTTL = 2 * time.Hour

// ErrOwnerUnavailable is a lookup Redis could not answer (down, or slower
// than the lookup's budget): whether the gateway made the call is unknown.
var ErrOwnerUnavailable = errors.New("the call's owner could not be looked up")

// Owner is who made a call (or a GPT-Live session) through the gateway.
type Owner struct {
	Key        string // the gateway key's name
	Deployment string // the deployment that serves it
	Secret     string // the id (jti) of the client secret that made it; "" for a key
}

// String is the owner as stored: its fields one a line.
func (o Owner) String() string { return o.Key + "\n" + o.Deployment + "\n" + o.Secret }

// ParseOwner reads an Owner as String wrote it (a bare key name, as an
// older gateway stored a Realtime call's owner, is an owner with no
// deployment).
func ParseOwner(s string) Owner {
	k, rest, _ := strings.Cut(s, "\n")
	d, sec, _ := strings.Cut(rest, "\n")
	return Owner{Key: k, Deployment: d, Secret: sec}
}

// Calls maps call ids to their owners.
type Calls struct {
	store *cluster.Store // nil without REDIS_URL

	mu sync.Mutex
	m  map[string]callOwner
}

type callOwner struct {
	Owner
	expires time.Time
}

func NewCalls(store *cluster.Store) *Calls {
	return &Calls{store: store, m: map[string]callOwner{}}
}

// Remember records that o made call id. A Redis failure is logged by the
// caller; the local record still holds.
func (r *Calls) Remember(ctx context.Context, id string, o Owner) error {
	now := time.Now()
	r.mu.Lock()
	for k, c := range r.m {
		if now.After(c.expires) {
			delete(r.m, k)
		}
	}
	r.m[id] = callOwner{Owner: o, expires: now.Add(CallTTL)}
	r.mu.Unlock()
	if r.store == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, max(time.Second, 20*r.store.Timeout))
	defer cancel()
	return r.store.Client.Set(ctx, r.store.Key("call", id), o.String(), CallTTL).Err()
}

// Known returns the owner of call id, if this process knows the gateway
// made it; it never waits.
func (r *Calls) Known(id string) (Owner, bool) {
	r.mu.Lock()
	o, ok := r.m[id]
	r.mu.Unlock()
	if ok && time.Now().Before(o.expires) {
		return o.Owner, true
	}
	return Owner{}, false
}

// Remote reports whether other instances may know calls this one does not
// (REDIS_URL): a call owner unknown here is then looked up.
func (r *Calls) Remote() bool { return r.store != nil }

// lookupBudget bounds one owner lookup in Redis: it runs off the poller (a
// goroutine of its own, or an API request's), so it may wait longer than
// the connect path's limits do.
func (r *Calls) lookupBudget() time.Duration { return max(50*time.Millisecond, 10*r.store.Timeout) }

// Lookup returns the owner of call id, if the gateway made it. Redis is
// asked only when this process does not know the call; when Redis cannot
// answer, the error wraps ErrOwnerUnavailable (never "not made here"). Never
// call it on netpoll's handler.
func (r *Calls) Lookup(id string) (Owner, bool, error) {
	if o, ok := r.Known(id); ok || r.store == nil {
		return o, ok, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), r.lookupBudget())
	defer cancel()
	raw, err := r.store.Client.Get(ctx, r.store.Key("call", id)).Result()
	if errors.Is(err, redis.Nil) {
		return Owner{}, false, nil
	}
	if err != nil {
		return Owner{}, false, fmt.Errorf("%w: %w", ErrOwnerUnavailable, err)
	}
	ttl := CallTTL
	if d, err := r.store.Client.PTTL(ctx, r.store.Key("call", id)).Result(); err == nil && d > 0 {
		ttl = d
	}
	o := ParseOwner(raw)
	r.mu.Lock()
	r.m[id] = callOwner{Owner: o, expires: time.Now().Add(ttl)} // asked once per instance
	r.mu.Unlock()
	return o, true, nil
}
