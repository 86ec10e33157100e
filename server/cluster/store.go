// Package cluster is what the gateway instances sharing one Redis
// (REDIS_URL) hold in common: the Redis client and every key name written
// under its prefix (Store), and the per-key limits counted across the
// instances (Limiter, a limit.Admitter). Client secrets' configs, call
// owners and spend share the Store's client and keys.
package cluster

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// Store is this instance's handle on the Redis that every gateway
// instance of one deployment shares (REDIS_URL). The per-key limits use it
// (Limiter); other cluster-wide state (budgets) can share the
// client and the instance identity.
//
// The client is set up for calls on the connect path: no retries (a retry
// would spend the budget twice), a short dial timeout, and deadlines taken
// from each call's context, so a caller's few-millisecond budget holds even
// when Redis is down or slow.
type Store struct {
	Client *redis.Client
	// Instance names this process in Redis: host, PID and a random suffix,
	// so a restarted process never inherits the leases of its predecessor.
	Instance string
	// Prefix starts every key this gateway writes ("rtgate:").
	Prefix string
	// Timeout is the budget of one call on the connect path.
	Timeout time.Duration

	// part is how many instances an outage's share is taken over, as the
	// Limiter last learned from Redis (0: not known yet); budgets read it.
	part atomic.Int64
}

// setPart records the instances a share is taken over (Limiter).
func (st *Store) setPart(n int) { st.part.Store(int64(n)) }

// Part is this instance's fraction of what the instances share (1 ÷ the
// live instances it last learned from Redis, or CLUSTER_INSTANCES if more),
// and false when it has learned no count yet or not every other instance
// has seen it: then it may take nothing alone.
func (st *Store) Part() (float64, bool) {
	n := st.part.Load()
	if n <= 0 {
		return 0, false
	}
	return 1 / float64(n), true
}

// PoolSize is how many connections to Redis an instance opens at most (10
// a CPU, go-redis's default), and keeps once opened: a burst of connects
// needs them all, and a pool that closed each connection as it came back
// (a cap of 4 idle ones) dialed again on nearly every admission of a
// burst: at 200 admissions in flight the call's p50 was 50 ms instead of
// 10 ms (make redis-latency -c 200, 2026-12-04, 2-core box). The soak's
// descriptor check allows them.
func PoolSize() int { return 10 * runtime.GOMAXPROCS(0) }

// NewStore connects lazily to redisURL (redis://[user:pass@]host:port/db
// or rediss:// for TLS); it does not fail when Redis is down, since the
// gateway runs on without it.
func NewStore(redisURL string, timeout time.Duration) (*Store, error) {
	opt, err := redis.ParseURL(redisURL)
	if err != nil {
		return nil, fmt.Errorf("REDIS_URL %s: %w", RedactURL(redisURL), err)
	}
	if timeout <= 0 {
		timeout = 100 * time.Millisecond // REDIS_TIMEOUT_MS's default
	}
	opt.MaxRetries = -1 // no retries
	opt.DialTimeout = max(100*time.Millisecond, 20*timeout)
	opt.ReadTimeout = max(50*time.Millisecond, 10*timeout)
	opt.WriteTimeout = opt.ReadTimeout
	opt.ContextTimeoutEnabled = true
	opt.DisableIdentity = true // no CLIENT SETINFO round trips on each new connection
	opt.Protocol = 2           // no HELLO round trip either
	if opt.PoolSize == 0 {     // unless the URL says (pool_size)
		opt.PoolSize = PoolSize()
	}
	quietRedisLog.Do(func() { redis.SetLogger(discardLogger{}) })
	return &Store{
		Client:   redis.NewClient(opt),
		Instance: instanceID(),
		Prefix:   "rtgate:",
		Timeout:  timeout,
	}, nil
}

// Close closes the client's connections.
func (st *Store) Close() error { return st.Client.Close() }

// Key is the Redis key for the parts given, under Prefix.
func (st *Store) Key(parts ...string) string {
	k := st.Prefix
	for i, p := range parts {
		if i > 0 {
			k += ":"
		}
		k += p
	}
	return k
}

// InstancesKey is the sorted set of the instances' leases (see Limiter),
// which others sharing the store (the pool's remembered demand) read too.
func (st *Store) InstancesKey() string { return st.Key("instances") }

// Ping checks Redis within d.
func (st *Store) Ping(d time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	return st.Client.Ping(ctx).Err()
}

// Refused reports whether Redis's address refuses connections, within d:
// the process is gone, for every instance and not just this one. A frozen
// or merely slow Redis still accepts them (its kernel does).
//
// A process being killed may still accept one for a moment (its
// connections are reset before its listener closes, and the call that saw
// the reset asks at once), so a connection accepted is asked an inline
// PING: a dying Redis resets or closes it, a frozen one says nothing until
// d, a live one answers (+PONG, or an error such as NOAUTH: alive all the
// same). Over TLS (rediss://) a PING in clear would be dropped by a live
// server too, so there only the connect decides.
func (st *Store) Refused(d time.Duration) bool {
	o := st.Client.Options()
	network := o.Network
	if network == "" {
		network = "tcp"
	}
	c, err := net.DialTimeout(network, o.Addr, d)
	if err != nil {
		return errors.Is(err, syscall.ECONNREFUSED)
	}
	defer c.Close()
	if o.TLSConfig != nil {
		return false
	}
	_ = c.SetDeadline(time.Now().Add(d))
	if _, err = c.Write([]byte("PING\r\n")); err == nil {
		_, err = c.Read(make([]byte, 1))
	}
	return errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// go-redis logs every failed background dial through a logger of its own;
// the gateway reports outages itself (once each), so that one is silenced.
var quietRedisLog sync.Once

type discardLogger struct{}

func (discardLogger) Printf(context.Context, string, ...any) {}

func instanceID() string {
	host, _ := os.Hostname()
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return fmt.Sprintf("%s-%d-%s", host, os.Getpid(), hex.EncodeToString(b))
}

// RedactURL drops the password from a Redis URL, for errors and logs.
func RedactURL(v string) string {
	u, err := url.Parse(v)
	if err != nil {
		return "(unparseable URL)"
	}
	if u.User != nil {
		u.User = url.User(u.User.Username())
	}
	return u.String()
}
