package cluster

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"rtgate/server/limit"
)

// Limiter holds each key's max_sessions and connect_rate across every
// instance that shares one Redis.
//
// Counting. Every instance writes, per key, how many sessions it has open:
// hash <prefix>sessions:<key>, field = instance, value = count. Only the
// owning instance writes its field, and always the absolute count it holds
// locally, so a lost or repeated write is corrected by the next one.
//
// Leases. The sorted set <prefix>instances scores each instance by the
// Redis-clock time its lease ends. Instances refresh it every lease/5; an
// instance that stops (SIGKILL, partition) stops refreshing and its fields
// stop counting once its lease has run out, so a dead instance's sessions
// count for at most ClusterLease after its last refresh. Times come from
// Redis's TIME, so instance clocks do not matter.
//
// Admission is one Lua script (one round trip): sum the live instances'
// counts, check max_sessions, take a token from the key's bucket, write
// this instance's new count. It runs in its own goroutine with a budget of
// RedisTimeout, never on netpoll's handler (Waits says when).
//
// Outages. A failed or late call marks Redis down: connects are decided by
// per-instance limits (the key's limit divided by ClusterInstances, at least
// 1) until a probe every probeEvery succeeds; then every key's count is
// written again and Redis decides again. Each outage is logged once and
// counted in rtgate_cluster_redis_outages_total.
type Limiter struct {
	st        *Store
	log       *slog.Logger
	lease     time.Duration
	instances int

	mu   sync.Mutex
	keys map[string]*clusterKey

	down     atomic.Bool
	fallback limit.Uses // connect rate while Redis is down (buckets only)
	wake     chan struct{}
	done     chan struct{}
	stopped  chan struct{}
	closing  sync.Once

	mUp       prometheus.Gauge
	mOutages  prometheus.Counter
	mFallback prometheus.Counter
	mCall     prometheus.Histogram
}

// clusterKey is one client key's state on this instance. Writes of its
// count are not serialised: whoever writes a count checks, once Redis has
// it, that it is still the local count, and schedules another write if not,
// so the last write to land is always followed by a correct one.
type clusterKey struct {
	name  string
	local atomic.Int64 // sessions open here
	dirty atomic.Bool  // local may differ from what Redis holds
}

const (
	probeEvery   = 500 * time.Millisecond
	flushTimeout = 100 * time.Millisecond // background writes, off the connect path
)

// NewLimiter starts the limits shared through st and registers their
// metrics; Close stops them.
func NewLimiter(st *Store, lease time.Duration, instances int, log *slog.Logger, reg prometheus.Registerer) *Limiter {
	l := &Limiter{
		st: st, log: log, lease: lease, instances: max(instances, 1),
		keys: map[string]*clusterKey{},
		wake: make(chan struct{}, 1), done: make(chan struct{}), stopped: make(chan struct{}),
		mUp: prometheus.NewGauge(prometheus.GaugeOpts{Name: "rtgate_cluster_redis_up",
			Help: "1 while per-key limits are decided in Redis, 0 while they fall back to per-instance limits."}),
		mOutages: prometheus.NewCounter(prometheus.CounterOpts{Name: "rtgate_cluster_redis_outages_total",
			Help: "Times Redis became unreachable or too slow and limits fell back to per-instance ones."}),
		mFallback: prometheus.NewCounter(prometheus.CounterOpts{Name: "rtgate_cluster_fallback_admissions_total",
			Help: "Connects whose per-key limits were decided by this instance alone because Redis was down."}),
		mCall: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "rtgate_cluster_admit_seconds",
			Help:    "Time of the Redis admission call on the connect path.",
			Buckets: []float64{0.0001, 0.00025, 0.0005, 0.001, 0.002, 0.005, 0.01}}),
	}
	l.mUp.Set(1)
	reg.MustRegister(l.mUp, l.mOutages, l.mFallback, l.mCall)
	go l.run()
	return l
}

func (l *Limiter) key(name string) *clusterKey {
	l.mu.Lock()
	defer l.mu.Unlock()
	k := l.keys[name]
	if k == nil {
		k = &clusterKey{name: name}
		l.keys[name] = k
	}
	return k
}

func (l *Limiter) sessionsKey(name string) string { return l.st.Key("sessions", name) }
func (l *Limiter) rateKey(name string) string     { return l.st.Key("rate", name) }
func (l *Limiter) instancesKey() string           { return l.st.InstancesKey() }

// admitScript returns {verdict, total, retry_ms}: verdict 0 admitted (total
// = sessions of the key cluster-wide, this one included), 1 over
// max_sessions, 2 over the connect rate.
var admitScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local inst, mine = ARGV[1], tonumber(ARGV[2])
local maxs, rate, lease = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
redis.call('ZADD', KEYS[2], now + lease, inst)
local total = mine
local f = redis.call('HGETALL', KEYS[1])
for i = 1, #f, 2 do
  if f[i] ~= inst then
    local exp = redis.call('ZSCORE', KEYS[2], f[i])
    if exp and tonumber(exp) > now then
      total = total + tonumber(f[i + 1])
    else
      redis.call('HDEL', KEYS[1], f[i])
    end
  end
end
if maxs > 0 and total > maxs then
  return {1, total - 1, 0}
end
if rate > 0 then
  local burst = math.max(rate, 1)
  local b = redis.call('HMGET', KEYS[3], 'tokens', 'at')
  local tokens = tonumber(b[1]) or burst
  local at = tonumber(b[2]) or now
  tokens = math.min(burst, tokens + math.max(now - at, 0) / 1000 * rate)
  if tokens < 1 then
    return {2, total - 1, math.ceil((1 - tokens) / rate * 1000)}
  end
  redis.call('HSET', KEYS[3], 'tokens', tostring(tokens - 1), 'at', now)
  redis.call('PEXPIRE', KEYS[3], math.ceil(burst / rate * 1000) + 1000)
end
redis.call('HSET', KEYS[1], inst, mine)
redis.call('PEXPIRE', KEYS[1], lease * 2)
return {0, total, 0}
`)

// syncScript renews the lease and writes this instance's counts: KEYS[1]
// the instances set, KEYS[2..] sessions hashes; ARGV[1] instance, ARGV[2]
// lease ms, ARGV[3..] the count for each hash (0 removes the field).
var syncScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local inst, lease = ARGV[1], tonumber(ARGV[2])
redis.call('ZADD', KEYS[1], now + lease, inst)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
for i = 2, #KEYS do
  local n = tonumber(ARGV[i + 1])
  if n > 0 then
    redis.call('HSET', KEYS[i], inst, n)
    redis.call('PEXPIRE', KEYS[i], lease * 2)
  else
    redis.call('HDEL', KEYS[i], inst)
  end
end
return 0
`)

// leaveScript removes this instance: KEYS[1] the instances set, KEYS[2..]
// sessions hashes, ARGV[1] the instance.
var leaveScript = redis.NewScript(`
redis.call('ZREM', KEYS[1], ARGV[1])
for i = 2, #KEYS do redis.call('HDEL', KEYS[i], ARGV[1]) end
return 0
`)

// Admit reserves a session for the key cluster-wide, or returns the
// refusal (limit.Admitter). With limits it may block for up to the store's
// Timeout: never call it on netpoll's handler then. maxSessions or rate 0
// means no such limit; a key without limits is only counted locally
// (written in the background).
func (l *Limiter) Admit(name string, maxSessions int, rate float64) *limit.Refusal {
	k := l.key(name)
	if maxSessions <= 0 && rate <= 0 {
		k.local.Add(1)
		l.markDirty(k)
		return nil
	}
	if !l.down.Load() {
		herr, err := l.admitRedis(k, maxSessions, rate)
		if err == nil {
			return herr
		}
		l.outage(err)
	}
	return l.admitLocally(k, maxSessions, rate)
}

// Waits implements limit.Admitter: a key with limits asks Redis.
func (l *Limiter) Waits(maxSessions int, rate float64) bool { return maxSessions > 0 || rate > 0 }

func (l *Limiter) admitRedis(k *clusterKey, maxSessions int, rate float64) (*limit.Refusal, error) {
	ctx, cancel := context.WithTimeout(context.Background(), l.st.Timeout)
	defer cancel()
	mine := k.local.Add(1)
	start := time.Now()
	res, err := admitScript.Run(ctx, l.st.Client,
		[]string{l.sessionsKey(k.name), l.instancesKey(), l.rateKey(k.name)},
		l.st.Instance, mine, maxSessions, rate, l.lease.Milliseconds()).Int64Slice()
	l.mCall.Observe(time.Since(start).Seconds())
	if err == nil && len(res) != 3 {
		err = errors.New("admission script returned " + strconv.Itoa(len(res)) + " values")
	}
	if err != nil {
		k.local.Add(-1)
		// The script may have run even though the answer came late: the
		// next write of this key's count puts it right.
		k.dirty.Store(true)
		return nil, err
	}
	if res[0] == 0 {
		if k.local.Load() != mine {
			l.markDirty(k) // another admit or a release overtook this write
		}
		return nil, nil
	}
	// Refused: nothing written, but an admit that counted this reservation
	// may have written it.
	k.local.Add(-1)
	l.markDirty(k)
	if res[0] == 1 {
		return &limit.Refusal{Verdict: limit.Full, Limit: maxSessions, RetryAfter: 1}, nil
	}
	return &limit.Refusal{Verdict: limit.Throttled, RetryAfter: max(int(res[2]+999)/1000, 1)}, nil
}

// admitLocally is the outage fallback: this instance's share of the limits.
func (l *Limiter) admitLocally(k *clusterKey, maxSessions int, rate float64) *limit.Refusal {
	l.mFallback.Inc()
	if maxSessions > 0 {
		share := max(1, (maxSessions+l.instances-1)/l.instances)
		if n := k.local.Add(1); n > int64(share) {
			k.local.Add(-1)
			return &limit.Refusal{Verdict: limit.Full, Limit: share, RetryAfter: 1}
		}
	} else {
		k.local.Add(1)
	}
	if rate > 0 {
		if ok, wait := l.fallback.Take(k.name, rate/float64(l.instances), time.Now()); !ok {
			k.local.Add(-1)
			return &limit.Refusal{Verdict: limit.Throttled, RetryAfter: limit.RetryAfter(wait)}
		}
	}
	k.dirty.Store(true)
	return nil
}

// Release gives back a session; it never waits on Redis (sessions end on
// netpoll's goroutines): the new count is written in the background.
func (l *Limiter) Release(name string) {
	k := l.key(name)
	k.local.Add(-1)
	l.markDirty(k)
}

func (l *Limiter) markDirty(k *clusterKey) {
	k.dirty.Store(true)
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

// outage switches to per-instance limits, once per outage.
func (l *Limiter) outage(err error) {
	if l.down.CompareAndSwap(false, true) {
		l.mUp.Set(0)
		l.mOutages.Inc()
		l.log.Warn("redis unreachable or slow: per-key limits fall back to per-instance limits until it is back",
			"err", err, "instances", l.instances)
	}
}

// run writes dirty counts as they change, renews the lease every lease/5,
// and while Redis is down probes it to come back.
func (l *Limiter) run() {
	defer close(l.stopped)
	refresh := time.NewTicker(max(l.lease/5, 100*time.Millisecond))
	defer refresh.Stop()
	probe := time.NewTicker(probeEvery)
	defer probe.Stop()
	l.sync(true)
	for {
		select {
		case <-l.done:
			return
		case <-l.wake:
			if !l.down.Load() {
				l.sync(false)
			}
		case <-refresh.C:
			if !l.down.Load() {
				l.sync(true)
			}
		case <-probe.C:
			if l.down.Load() && l.st.Ping(max(flushTimeout, l.st.Timeout)) == nil && l.sync(true) == nil {
				l.down.Store(false)
				l.mUp.Set(1)
				l.log.Info("redis reachable again: per-key limits are cluster-wide again")
			}
		}
	}
}

// sync renews the lease and writes the counts of dirty keys (all keys when
// all is set).
func (l *Limiter) sync(all bool) error {
	l.mu.Lock()
	ks := make([]*clusterKey, 0, len(l.keys))
	for _, k := range l.keys {
		if all || k.dirty.Load() {
			ks = append(ks, k)
		}
	}
	l.mu.Unlock()
	const batch = 256
	for first := true; first || len(ks) > 0; first = false {
		part := ks[:min(batch, len(ks))]
		ks = ks[len(part):]
		keys := []string{l.instancesKey()}
		args := []any{l.st.Instance, l.lease.Milliseconds()}
		written := make([]int64, len(part))
		for i, k := range part {
			k.dirty.Store(false)
			written[i] = max(k.local.Load(), 0)
			keys = append(keys, l.sessionsKey(k.name))
			args = append(args, written[i])
		}
		ctx, cancel := context.WithTimeout(context.Background(), max(flushTimeout, l.st.Timeout))
		err := syncScript.Run(ctx, l.st.Client, keys, args...).Err()
		cancel()
		for i, k := range part {
			if err != nil {
				k.dirty.Store(true)
			} else if k.local.Load() != written[i] {
				l.markDirty(k)
			}
		}
		if err != nil {
			l.outage(err)
			return err
		}
	}
	return nil
}

// Close stops the background writer, takes this instance out of Redis (its
// remaining sessions stop counting at once) and closes the store's client
// (limit.Admitter).
func (l *Limiter) Close() {
	l.closing.Do(l.leave)
}

var _ limit.Admitter = (*Limiter)(nil)

func (l *Limiter) leave() {
	close(l.done)
	<-l.stopped
	l.mu.Lock()
	keys := []string{l.instancesKey()}
	for name := range l.keys {
		keys = append(keys, l.sessionsKey(name))
	}
	l.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := leaveScript.Run(ctx, l.st.Client, keys, l.st.Instance).Err(); err != nil {
		l.log.Warn("could not remove this instance from redis; its lease runs out by itself", "err", err)
	}
	_ = l.st.Close()
}
