package cluster

import (
	"context"
	"errors"
	"fmt"
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
// locally, so a lost or repeated write is corrected by the next one. Each
// write carries the key's next sequence number on this instance, taken
// with the count (clusterKey.stamp), kept beside it (field "<instance>#"),
// and Redis takes only a write newer than the last it took: concurrent
// connects, background syncs and pooled connections reach Redis out of
// order, and a call that timed out may still land later, but an older,
// lower count never overwrites a newer one (the others would then see too
// few sessions and admit past the limit).
//
// Leases. The sorted set <prefix>instances scores each instance by the
// Redis-clock time its lease ends. Instances refresh it every lease/5 (at
// most every second); an instance that stops (SIGKILL, partition) stops
// refreshing and its fields stop counting once its lease has run out, so a
// dead instance's sessions count for at most ClusterLease after its last
// refresh. Times come from Redis's TIME, so instance clocks do not matter.
// Each refresh (sync) also stamps <prefix>synced with the time it read the
// lease set, and brings back the live instances: this instance's view
// (view) of who shares the limits, its rank among them and when each
// last looked.
//
// Admission is one Lua script (one round trip): sum the live instances'
// counts, check max_sessions, take a token from the key's bucket, write
// this instance's new count. It runs in its own goroutine with a budget of
// RedisTimeout, never on netpoll's handler (Waits says when).
//
// Outages. A failed or late call leaves this instance alone: it decides by
// its share (Share, RateShare) of each key's limits, taken from the view it last
// learned, so that the instances together stay within the limit: its
// sessions already open count against it, and an instance that has no view
// yet, or that not every other instance has seen yet (it joined since their
// last sync), has no share and admits none of a limited key's sessions
// (rtgate_cluster_no_share_refusals_total, and the refusal says why).
//
// An instance alone cannot tell whether the others are alone too (Redis
// down or frozen for all) or still decide in Redis (only its own calls
// were late, as on a busy host). So it takes its share only once the
// others would count it so: in the scripts, another instance counts one
// whose last sync is older than stale at no less than ceil(limit ÷ live
// instances), the most any share is; and an instance alone admits none of
// a limited key's new sessions until grace (stale, plus a sync's budget and
// some slack: about 2.6 s with the default lease) has passed since it last
// tried to sync. A sync carries a deadline by Redis's clock and does
// nothing if it lands past it, so a late sync never makes the others count
// it low again. Until then the others count it at its field, which holds
// at least every session it admitted through Redis and still holds
// (fencing). The exception is a refused connection: Redis is gone for
// every instance, nobody decides there, and the share is taken at once
// (and until this instance is back on Redis: a Redis restarted holds no
// count of it for the others to go by).
// The trade-off: a short outage of one instance refuses its new sessions
// of limited keys (429, Retry-After) until its probe brings Redis back
// (probeEvery), and one of every instance does so for the grace; and an
// instance whose syncs run late by more than stale on a loaded host is
// counted at its share meanwhile, so the others may admit fewer. Never
// more than the limit, rather than a few over it.
//
// A probe every probeEvery brings Redis back: every key's count is written
// again and Redis decides again, but still within this instance's share
// (recovering) until every instance of its view has synced since, or its
// lease has run out: until then another may still be alone, deciding by its
// share, with a count in Redis that is out of date. Each outage is logged
// once and counted in rtgate_cluster_redis_outages_total.
//
// What this does not cover. An instance cut off for longer than its lease
// stops being counted by the others while its sessions stay open, as
// before; so does one whose path to Redis stalls so often that for a whole
// lease none of its probes (every probeEvery) lands in a gap, and it goes
// on admitting its share uncounted. Refusing once its lease may have run
// out would close that gap, but would also refuse every limited key
// everywhere once a Redis frozen or cut off for all has been gone a lease. The others count a stale instance at the share over the live
// instances they see, so an instance that joined during another's outage
// lowers what they count for it (the instance alone took its share over
// the fewer it knew). And a Redis restarted empty within one refresh,
// unnoticed by an instance, holds no count of an instance alone.
type Limiter struct {
	st    *Store
	log   *slog.Logger
	lease time.Duration
	floor int // CLUSTER_INSTANCES: a share is never more than over this many
	// stale is how long after its last sync the others count an instance
	// at no less than its share (it may be deciding alone); grace is how
	// long an instance alone waits, from the start of its last sync
	// attempt, before it takes its share: until the others count it so.
	stale, grace time.Duration
	born         time.Time    // the local clock below counts from it
	lastStamp    atomic.Int64 // start of the last sync attempt, ms since born
	offset       atomic.Int64 // Redis's clock less the local one, at most (ms)
	offsetKnown  atomic.Bool
	downForAll   atomic.Bool // Redis refuses connections: no instance reaches it
	probeEvery   time.Duration

	// askMu serialises askDown: a refusal that arrives while another asks
	// Redis's address waits for that answer instead of reading the one
	// before it. downAskedAt is when the last ask ended.
	askMu       sync.Mutex
	downAskedAt time.Time

	mu   sync.Mutex
	keys map[string]*clusterKey

	mode     atomic.Int32         // onRedis, recovering or alone
	view     atomic.Pointer[view] // the last view learned from Redis
	frozen   atomic.Pointer[view] // the view the current outage decides with
	share    atomic.Pointer[outageShare]
	joinedAt atomic.Int64  // Redis ms of the first sync (or of the recovery)
	seen     atomic.Bool   // every other instance has seen this one
	syncs    atomic.Uint64 // completed syncs
	fallback limit.Uses    // connect rate while alone (buckets only)
	wake     chan struct{}
	done     chan struct{}
	stopped  chan struct{}
	closing  sync.Once

	mUp       prometheus.Gauge
	mOutages  prometheus.Counter
	mFallback prometheus.Counter
	mNoShare  prometheus.Counter
	mCall     prometheus.Histogram
}

// mode is how this instance decides a limited key's connect.
type mode = int32

const (
	onRedis    mode = iota // Redis decides
	recovering             // Redis decides, within this instance's outage share, until every instance is back
	alone                  // Redis does not answer in time: this instance decides by its share
)

// clusterKey is one client key's state on this instance. Writes of its
// count are not serialised, but fenced: each takes the key's next sequence
// number together with the count it writes (under mu), and Redis keeps
// only a write newer than the last it took, so whatever order the calls
// land in, the count there only ever moves to a later one. Whoever writes
// a count checks, once Redis has it, that it is still the local count, and
// schedules another write if not.
type clusterKey struct {
	name  string
	local atomic.Int64 // sessions open here
	dirty atomic.Bool  // local may differ from what Redis holds
	maxs  atomic.Int64 // its max_sessions as last asked (for the totals a sync brings back)
	mu    sync.Mutex
	seq   int64 // last sequence number taken
	// last is what Redis last said of the key on the connect path, before
	// any outage: this instance's sessions then (high half, plus 1; 0: never)
	// and the key's sessions cluster-wide (low half).
	last atomic.Uint64
}

// stamp takes the next sequence number with the count it writes: the
// local count, after adding add.
func (k *clusterKey) stamp(add int64) (count, seq int64) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.seq++
	return k.local.Add(add), k.seq
}

func (k *clusterKey) remember(own, total int64) {
	k.last.Store(uint64(max(own, 0)+1)<<32 | uint64(uint32(max(total, 0))))
}

func (k *clusterKey) lastWord() (own, total int64, known bool) {
	v := k.last.Load()
	if v == 0 {
		return 0, 0, false
	}
	return int64(v>>32) - 1, int64(uint32(v)), true
}

const (
	defaultProbeEvery = 500 * time.Millisecond
	flushTimeout      = 100 * time.Millisecond // background writes, off the connect path
	// askDownEvery bounds how often refused connects ask Redis's address
	// whether it is gone (askDown): a local dial, at most one per interval.
	askDownEvery = 50 * time.Millisecond
)

// refreshEvery is how often an instance renews its lease and syncs: lease/5,
// at most a second (the grace of an instance alone is about two of these).
func refreshEvery(lease time.Duration) time.Duration {
	return min(max(lease/5, 100*time.Millisecond), time.Second)
}

// NewLimiter starts the limits shared through st and registers their
// metrics; Close stops them. floor (CLUSTER_INSTANCES, at least 1) is the
// fewest instances an outage share is ever computed over.
func NewLimiter(st *Store, lease time.Duration, floor int, log *slog.Logger, reg prometheus.Registerer) *Limiter {
	return newLimiter(st, lease, floor, log, reg, defaultProbeEvery)
}

// newLimiter is NewLimiter probing every probeEvery while alone (tests
// stretch it, to see what connects learn without the probe).
func newLimiter(st *Store, lease time.Duration, floor int, log *slog.Logger, reg prometheus.Registerer, probeEvery time.Duration) *Limiter {
	refresh, syncTimeout := refreshEvery(lease), max(flushTimeout, st.Timeout)
	// A live instance syncs every refresh: two missed, each sync's whole
	// budget, and slack for a busy host's scheduler. A sync lands within
	// its budget or not at all (syncScript's deadline), so once grace has
	// passed since an instance last tried, every other counts it stale.
	stale := 2*refresh + 2*syncTimeout + 200*time.Millisecond
	l := &Limiter{
		st: st, log: log, lease: lease, floor: max(floor, 1),
		stale: stale, grace: stale + syncTimeout + 100*time.Millisecond, born: time.Now(), probeEvery: probeEvery,
		keys: map[string]*clusterKey{},
		wake: make(chan struct{}, 1), done: make(chan struct{}), stopped: make(chan struct{}),
		mUp: prometheus.NewGauge(prometheus.GaugeOpts{Name: "rtgate_cluster_redis_up",
			Help: "1 while per-key limits are decided in Redis, 0 while this instance decides alone by its share, or in Redis but within its share until every instance is back."}),
		mOutages: prometheus.NewCounter(prometheus.CounterOpts{Name: "rtgate_cluster_redis_outages_total",
			Help: "Times Redis became unreachable or too slow and limits fell back to this instance's share."}),
		mFallback: prometheus.NewCounter(prometheus.CounterOpts{Name: "rtgate_cluster_fallback_admissions_total",
			Help: "Connects whose per-key limits were decided by this instance alone because Redis was down."}),
		mNoShare: prometheus.NewCounter(prometheus.CounterOpts{Name: "rtgate_cluster_no_share_refusals_total",
			Help: "Connects refused while Redis was down because this instance's share of the key's limit was 0, or unknown (no count of the instances learned yet), or not yet usable (the others may still decide in Redis)."}),
		mCall: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "rtgate_cluster_admit_seconds",
			Help:    "Time of the Redis admission call on the connect path.",
			Buckets: []float64{0.0001, 0.00025, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1}}),
	}
	l.mUp.Set(1)
	l.share.Store(&outageShare{})
	reg.MustRegister(l.mUp, l.mOutages, l.mFallback, l.mNoShare, l.mCall)
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
func (l *Limiter) syncedKey() string              { return l.st.Key("synced") }

// luaCounts is what the admission and sync scripts share.
//
// liveSet is the live instances (lease not run out) and a set of them.
//
// others is what the other live instances hold of a key (hash h), each at
// its field, or at no less than ceil(maxs / live instances) (the largest
// share any of them can take, Share) when its last sync (set s) is older
// than stale ms: it may be deciding alone, by its share, and it waits until
// it is that stale before it takes any (Limiter). Fields of instances no
// longer live are dropped.
//
// write stores this instance's count n of a key with the write's sequence
// number ("<instance>#" beside the count), unless a write of this instance
// with a later number came first: calls of one instance reach Redis out of
// order (concurrent connects, pooled connections, a call that timed out
// landing late), and an older, lower count must never overwrite a newer one.
const luaCounts = `
local function liveSet(ikey, now)
  local live = redis.call('ZRANGEBYSCORE', ikey, '(' .. now, '+inf')
  local isLive = {}
  for _, id in ipairs(live) do isLive[id] = true end
  return live, isLive
end
local function others(h, s, inst, live, isLive, now, maxs, stale)
  local sum = 0
  for _, id in ipairs(live) do
    if id ~= inst then
      local v = tonumber(redis.call('HGET', h, id) or 0)
      if maxs > 0 and now - tonumber(redis.call('ZSCORE', s, id) or 0) > stale then
        v = math.max(v, math.ceil(maxs / #live))
      end
      sum = sum + v
    end
  end
  for _, f in ipairs(redis.call('HKEYS', h)) do
    local id = f
    if string.sub(f, -1) == '#' then id = string.sub(f, 1, -2) end
    if not isLive[id] then redis.call('HDEL', h, f) end
  end
  return sum
end
local function write(h, inst, n, seq, lease)
  if seq <= tonumber(redis.call('HGET', h, inst .. '#') or 0) then
    return
  end
  if n > 0 then
    redis.call('HSET', h, inst, n, inst .. '#', seq)
  else
    redis.call('HDEL', h, inst)
    redis.call('HSET', h, inst .. '#', seq)
  end
  redis.call('PEXPIRE', h, lease * 2)
end
`

// admitScript returns {verdict, total, retry_ms}: verdict 0 admitted (total
// = sessions of the key cluster-wide, this one included), 1 over
// max_sessions, 2 over the connect rate. KEYS: sessions hash, instances,
// rate hash, synced; ARGV: instance, its count with this session, max
// sessions, rate, lease ms, stale ms, the write's sequence number. An
// admission whose write was overtaken by a later one still stands: the
// later count was taken after this session was reserved.
var admitScript = redis.NewScript(luaCounts + `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local inst, mine = ARGV[1], tonumber(ARGV[2])
local maxs, rate, lease = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local stale, seq = tonumber(ARGV[6]), tonumber(ARGV[7])
redis.call('ZADD', KEYS[2], now + lease, inst)
local live, isLive = liveSet(KEYS[2], now)
local total = mine + others(KEYS[1], KEYS[4], inst, live, isLive, now, maxs, stale)
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
write(KEYS[1], inst, mine, seq, lease)
return {0, total, 0}
`)

// syncScript renews the lease, stamps this instance's sync, writes its
// counts and brings back the view: KEYS[1] the instances set, KEYS[2] the
// synced set, KEYS[3..] sessions hashes; ARGV[1] instance, ARGV[2] lease
// ms, ARGV[3] stale ms, ARGV[4] the deadline (Redis ms, 0 none), then per
// hash the count, the key's max_sessions and the write's sequence number.
// Returns {now, the key's sessions cluster-wide for each hash (others as
// they count), then id, lease end, synced for every live instance}, or
// {-1, now} when it ran past its deadline and did nothing: a sync that
// timed out never stamps late (Limiter's grace counts on it).
var syncScript = redis.NewScript(luaCounts + `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local inst, lease, stale, deadline = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
if deadline > 0 and now > deadline then
  return {-1, now}
end
redis.call('ZADD', KEYS[1], now + lease, inst)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
redis.call('ZADD', KEYS[2], now, inst)
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now - 2 * lease)
local live, isLive = liveSet(KEYS[1], now)
local out = {now}
for i = 3, #KEYS do
  local j = 5 + (i - 3) * 3
  local n, maxs, seq = tonumber(ARGV[j]), tonumber(ARGV[j + 1]), tonumber(ARGV[j + 2])
  write(KEYS[i], inst, n, seq, lease)
  out[#out + 1] = n + others(KEYS[i], KEYS[2], inst, live, isLive, now, maxs, stale)
end
for _, id in ipairs(live) do
  out[#out + 1] = id
  out[#out + 1] = math.floor(tonumber(redis.call('ZSCORE', KEYS[1], id)))
  out[#out + 1] = math.floor(tonumber(redis.call('ZSCORE', KEYS[2], id) or 0))
end
return out
`)

// leaveScript removes this instance: KEYS[1] the instances set, KEYS[2] the
// synced set, KEYS[3..] sessions hashes, ARGV[1] the instance.
var leaveScript = redis.NewScript(`
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('ZREM', KEYS[2], ARGV[1])
for i = 3, #KEYS do redis.call('HDEL', KEYS[i], ARGV[1], ARGV[1] .. '#') end
return 0
`)

// Admit reserves a session for the key cluster-wide, or returns the
// refusal (limit.Admitter). With limits it may block for up to the store's
// Timeout: never call it on netpoll's handler then. maxSessions or rate 0
// means no such limit; a key without limits is only counted locally
// (written in the background).
func (l *Limiter) Admit(name string, maxSessions int, rate float64) *limit.Refusal {
	k := l.key(name)
	k.maxs.Store(int64(max(maxSessions, 0)))
	if maxSessions <= 0 && rate <= 0 {
		k.local.Add(1)
		l.markDirty(k)
		return nil
	}
	switch l.mode.Load() {
	case onRedis:
		r, err := l.admitRedis(k, maxSessions, rate, 1)
		if err == nil {
			return r
		}
		l.checkDown()
		l.outage(err)
	case recovering:
		if _, r := l.reserveShare(k, maxSessions, false); r != nil {
			return r
		}
		r, err := l.admitRedis(k, maxSessions, rate, 0)
		if err == nil {
			return r
		}
		l.checkDown()
		l.outage(err)
	}
	return l.admitAlone(k, maxSessions, rate)
}

// Waits implements limit.Admitter: a key with limits asks Redis.
func (l *Limiter) Waits(maxSessions int, rate float64) bool { return maxSessions > 0 || rate > 0 }

// admitRedis asks Redis. add is 1 to reserve the session here, 0 when it
// is already reserved (recovering).
func (l *Limiter) admitRedis(k *clusterKey, maxSessions int, rate float64, add int64) (*limit.Refusal, error) {
	ctx, cancel := context.WithTimeout(context.Background(), l.st.Timeout)
	defer cancel()
	before := l.mode.Load()
	mine, seq := k.stamp(add)
	start := time.Now()
	res, err := admitScript.Run(ctx, l.st.Client,
		[]string{l.sessionsKey(k.name), l.instancesKey(), l.rateKey(k.name), l.syncedKey()},
		l.st.Instance, mine, maxSessions, rate, l.lease.Milliseconds(), l.stale.Milliseconds(), seq).Int64Slice()
	l.mCall.Observe(time.Since(start).Seconds())
	if err == nil && len(res) != 3 {
		err = errors.New("admission script returned " + strconv.Itoa(len(res)) + " values")
	}
	if err != nil {
		k.local.Add(-1)
		// The script may have run even though the answer came late (or
		// may yet run): the next write of this key's count, fenced by a
		// later sequence number, puts it right.
		k.dirty.Store(true)
		return nil, err
	}
	if res[0] == 0 {
		if before == onRedis {
			k.remember(mine, res[1])
		}
		if k.local.Load() != mine {
			l.markDirty(k) // another admit or a release overtook this write
		}
		return nil, nil
	}
	// Refused: nothing written, but an admit that counted this reservation
	// may have written it.
	if before == onRedis {
		k.remember(mine-1, res[1])
	}
	k.local.Add(-1)
	l.markDirty(k)
	if res[0] == 1 {
		return &limit.Refusal{Verdict: limit.Full, Limit: maxSessions, RetryAfter: 1}, nil
	}
	return &limit.Refusal{Verdict: limit.Throttled, RetryAfter: max(int(res[2]+999)/1000, 1)}, nil
}

// reserveShare reserves a session within this instance's outage share of
// maxSessions (none when 0): the new local count, or the refusal.
func (l *Limiter) reserveShare(k *clusterKey, maxSessions int, alone bool) (int64, *limit.Refusal) {
	if maxSessions <= 0 {
		return k.local.Add(1), nil
	}
	sh := l.share.Load()
	if alone && sh.ok {
		if r := l.waitForShare(*sh, limit.Full, maxSessions, "limit"); r != nil {
			return 0, r
		}
	}
	own, total, known := k.lastWord()
	c := sh.sessionsCap(maxSessions, own, total, known)
	n := k.local.Add(1)
	if n <= int64(c) {
		return n, nil
	}
	k.local.Add(-1)
	if c == 0 {
		l.mNoShare.Inc()
	}
	return 0, &limit.Refusal{Verdict: limit.Full, Limit: maxSessions, RetryAfter: 1, Note: shareNote(sh, c)}
}

// waitForShare refuses every new session of a limited key while this
// instance, alone, may still be counted by the others at no more than its
// field in Redis (grace, see Limiter), unless Redis refuses connections
// (then no instance reaches it, and none decides there) or sh, the view it
// decides by, counts no other instance (nobody else decides in Redis: a
// lone gateway whose Redis call ran late on a busy host keeps admitting
// within its share, the whole limit, instead of refusing for the grace).
// what names the limit ("limit", "connect rate").
func (l *Limiter) waitForShare(sh outageShare, v limit.Verdict, maxSessions int, what string) *limit.Refusal {
	left := l.grace - l.silentFor()
	if left <= 0 || sh.n <= 1 || l.downForAll.Load() || l.askDown() {
		return nil
	}
	l.mNoShare.Inc()
	return &limit.Refusal{Verdict: v, Limit: maxSessions, RetryAfter: limit.RetryAfter(left),
		Note: "this gateway instance cannot reach the shared store in time while the other instances may still decide there, " +
			"so it admits none of this key's new sessions until they count it at its share of the key's " + what}
}

// silentFor is how long since this instance last tried to sync with Redis
// (the stamp the others judge it by).
func (l *Limiter) silentFor() time.Duration {
	return time.Since(l.born) - time.Duration(l.lastStamp.Load())*time.Millisecond
}

// Sharing reports whether this instance decides alone by its share now:
// Redis is away and the others count it at its share (or Redis refuses
// connections, for every instance).
func (l *Limiter) Sharing() bool {
	return l.mode.Load() == alone && l.share.Load().ok && (l.downForAll.Load() || l.silentFor() >= l.grace)
}

// checkDown learns, after a failed call, whether Redis is down for every
// instance: its address refuses connections (the process is gone). A
// timeout says nothing (only this instance's calls may be late), and
// go-redis reports a refused dial as a timeout once its dial retries
// outlast the call's budget, so this asks the address itself.
//
// Once refused, an outage stays one of every instance until this instance
// is back on Redis (probe): the Redis that answers again was restarted and
// holds no count of this instance, so nobody counts it at a field there
// and the grace would buy nothing. (Its first answers often fail on the
// pool's connections to the old process, and a refusal then came from
// each of them for the grace: make test's TestRedisOutageFailsNoConnect.)
func (l *Limiter) checkDown() {
	down := l.st.Refused(l.st.Timeout)
	if l.mode.Load() == alone {
		down = down || l.downForAll.Load()
	}
	l.downForAll.Store(down)
}

// askDown asks Redis's address again, at most every askDownEvery, before
// a connect is refused for the grace, and reports whether Redis is gone for
// every instance. An instance that went alone on a late call while Redis
// was up thus learns that Redis has since died from its next connects, not
// only from its next probe: until then it refused every connect of a
// limited key for up to probeEvery (101 refusals in one CI run of
// TestRedisOutageFailsNoConnect). Connects refused at the same moment
// (each in its off-loop step) take turns: the first asks, the others get
// its answer, not the one from before the kill (two refusals in a busy
// make test, TestConcurrentRefusalsWaitForTheAsk).
func (l *Limiter) askDown() bool {
	l.askMu.Lock()
	defer l.askMu.Unlock()
	if time.Since(l.downAskedAt) >= askDownEvery {
		l.checkDown()
		l.downAskedAt = time.Now()
	}
	return l.downForAll.Load()
}

// shareNote says, in a refusal, why this instance admitted no more.
func shareNote(sh *outageShare, c int) string {
	if !sh.ok {
		return "the gateway instances cannot reach their shared store, and this instance has not yet learned how many instances share the key's limits, so it admits none of this key's sessions until the store answers"
	}
	return "the gateway instances cannot reach their shared store, so each admits only its share of the key's limit: this instance's is " + strconv.Itoa(c)
}

// admitAlone decides by this instance's share of the limits.
func (l *Limiter) admitAlone(k *clusterKey, maxSessions int, rate float64) *limit.Refusal {
	l.mFallback.Inc()
	if maxSessions <= 0 && rate > 0 && l.share.Load().ok {
		if r := l.waitForShare(*l.share.Load(), limit.Throttled, 0, "connect rate"); r != nil {
			return r
		}
	}
	if _, r := l.reserveShare(k, maxSessions, true); r != nil {
		return r
	}
	if rate > 0 {
		sh := l.share.Load()
		part := 0.0
		if sh.ok {
			part = sh.rate(rate)
		}
		if part <= 0 {
			k.local.Add(-1)
			l.mNoShare.Inc()
			note := shareNote(sh, 0)
			if sh.ok {
				note = "the gateway instances cannot reach their shared store, so each admits only its share of the key's connect rate: this instance's is 0"
			}
			return &limit.Refusal{Verdict: limit.Throttled, RetryAfter: 1, Note: note}
		}
		if ok, wait := l.fallback.Take(k.name, part, time.Now()); !ok {
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

// outage leaves this instance alone, with the share its last view gives
// it, once per outage.
func (l *Limiter) outage(err error) {
	for {
		m := l.mode.Load()
		if m == alone {
			return
		}
		if m == onRedis { // a recovery keeps the view its outage began with
			// Stored before the switch, so that no connect decided
			// alone reads the share of an earlier outage.
			v := l.view.Load()
			l.frozen.Store(v)
			l.share.Store(l.outageShare(v))
		}
		if !l.mode.CompareAndSwap(m, alone) {
			continue
		}
		l.mUp.Set(0)
		l.mOutages.Inc()
		sh := l.share.Load()
		if !sh.ok {
			l.log.Warn("redis unreachable or slow: per-key limits fall back to this instance's share, and it has none yet "+
				"(it has not learned from redis how many instances share them): it admits none of a limited key's sessions until redis answers",
				"err", err)
			return
		}
		l.log.Warn("redis unreachable or slow: per-key limits fall back to per-instance limits (this instance's share) until it is back",
			"err", err, "instances", sh.n, "rank", sh.rank)
		return
	}
}

// outageShare is what v gives this instance to decide alone with.
func (l *Limiter) outageShare(v *view) *outageShare {
	if v == nil || v.rank < 0 || !l.seen.Load() {
		return &outageShare{}
	}
	return &outageShare{n: max(len(v.members), l.floor), rank: v.rank, ok: true}
}

// learn takes a view brought back by a sync: it is this instance's view
// from now on; the first says when this instance joined; once every other
// instance has synced since then, they have all seen it; and a recovery
// ends once every instance of the outage's view is back or gone.
func (l *Limiter) learn(v *view) {
	l.view.Store(v)
	l.joinedAt.CompareAndSwap(0, v.now)
	if !l.seen.Load() && v.rank >= 0 && v.seenSince(l.st.Instance, l.joinedAt.Load()) {
		l.seen.Store(true)
	}
	if sh := l.outageShare(v); sh.ok && l.mode.Load() == onRedis {
		l.st.setPart(sh.n)
	}
	if l.mode.Load() == recovering && v.backSince(l.frozen.Load(), l.st.Instance, l.joinedAt.Load()) &&
		l.mode.CompareAndSwap(recovering, onRedis) {
		l.frozen.Store(nil)
		l.mUp.Set(1)
		l.log.Info("every instance is back on redis: per-key limits are cluster-wide again, without shares")
	}
}

// run writes dirty counts as they change, renews the lease every lease/5,
// and while Redis is down probes it to come back.
func (l *Limiter) run() {
	defer close(l.stopped)
	refresh := time.NewTicker(refreshEvery(l.lease))
	defer refresh.Stop()
	probe := time.NewTicker(l.probeEvery)
	defer probe.Stop()
	l.sync(true)
	for {
		select {
		case <-l.done:
			return
		case <-l.wake:
			if l.mode.Load() != alone {
				l.sync(false)
			}
		case <-refresh.C:
			if l.mode.Load() != alone {
				l.sync(true)
			}
		case <-probe.C:
			switch l.mode.Load() {
			case alone:
				l.probe()
			case recovering:
				l.sync(true) // to see the others come back
			}
		}
	}
}

// probe brings Redis back after an outage: its counts written again, this
// instance decides through Redis again, within its share until the others
// are back.
func (l *Limiter) probe() {
	if l.st.Ping(max(flushTimeout, l.st.Timeout)) != nil {
		l.checkDown()
		return
	}
	joined := l.joinedAt.Load()
	l.joinedAt.Store(0) // the recovery's sync is a new join: the others must see it
	if l.sync(true) != nil {
		l.joinedAt.CompareAndSwap(0, joined)
		return
	}
	if l.mode.CompareAndSwap(alone, recovering) {
		l.log.Info("redis reachable again: per-key limits are cluster-wide again")
		l.learn(l.view.Load())
	}
	l.downForAll.Store(false) // once no connect decides alone
}

// sync renews the lease and writes the counts of dirty keys (all keys when
// all is set), and learns the view it brings back.
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
		keys := []string{l.instancesKey(), l.syncedKey()}
		timeout := max(flushTimeout, l.st.Timeout)
		start := time.Since(l.born).Milliseconds()
		l.lastStamp.Store(start) // the stamp may land even if the call fails
		deadline := int64(0)
		if l.offsetKnown.Load() {
			deadline = start + l.offset.Load() + timeout.Milliseconds()
		}
		args := []any{l.st.Instance, l.lease.Milliseconds(), l.stale.Milliseconds(), deadline}
		written := make([]int64, len(part))
		for i, k := range part {
			k.dirty.Store(false)
			n, seq := k.stamp(0)
			written[i] = max(n, 0)
			keys = append(keys, l.sessionsKey(k.name))
			args = append(args, written[i], k.maxs.Load(), seq)
		}
		before := l.mode.Load()
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		res, err := syncScript.Run(ctx, l.st.Client, keys, args...).Slice()
		cancel()
		var v *view
		var totals []int64
		if err == nil {
			v, totals, err = l.parseSync(res, len(part))
		}
		for i, k := range part {
			if err != nil {
				k.dirty.Store(true)
				continue
			}
			if before == onRedis {
				k.remember(written[i], totals[i])
			}
			if k.local.Load() != written[i] {
				l.markDirty(k)
			}
		}
		if err != nil {
			l.checkDown()
			l.outage(err)
			return err
		}
		// Redis's clock less ours, never more than it is (its TIME was
		// read before we got the answer): deadlines are never late.
		l.offset.Store(v.now - time.Since(l.born).Milliseconds())
		l.offsetKnown.Store(true)
		l.learn(v)
	}
	l.syncs.Add(1)
	return nil
}

// parseSync reads syncScript's answer for nkeys keys: the view, and each
// key's sessions cluster-wide.
func (l *Limiter) parseSync(res []any, nkeys int) (*view, []int64, error) {
	if len(res) == 2 && res[0] == int64(-1) {
		if now, ok := res[1].(int64); ok { // our clock's offset was off: take this one
			l.offset.Store(now - time.Since(l.born).Milliseconds())
		}
		return nil, nil, errors.New("sync reached redis past its deadline and did nothing")
	}
	bad := fmt.Errorf("sync script returned %d values for %d keys", len(res), nkeys)
	if len(res) < 1+nkeys || (len(res)-1-nkeys)%3 != 0 {
		return nil, nil, bad
	}
	now, ok := res[0].(int64)
	if !ok {
		return nil, nil, bad
	}
	totals := make([]int64, nkeys)
	for i := range totals {
		if totals[i], ok = res[1+i].(int64); !ok {
			return nil, nil, bad
		}
	}
	leaseEnd, synced := map[string]int64{}, map[string]int64{}
	for i := 1 + nkeys; i < len(res); i += 3 {
		id, ok1 := res[i].(string)
		end, ok2 := res[i+1].(int64)
		at, ok3 := res[i+2].(int64)
		if !ok1 || !ok2 || !ok3 {
			return nil, nil, bad
		}
		leaseEnd[id], synced[id] = end, at
	}
	return newView(l.st.Instance, now, leaseEnd, synced), totals, nil
}

// Instances is how many instances this instance would share a key's limits
// with if Redis went away now: the live ones it last learned (at least
// CLUSTER_INSTANCES), or 0 while it has learned none or not every other
// instance has seen it yet.
func (l *Limiter) Instances() int {
	if sh := l.outageShare(l.view.Load()); sh.ok {
		return sh.n
	}
	return 0
}

// Syncs counts this instance's completed syncs with Redis (each brings back
// the view and the counts of the keys it wrote).
func (l *Limiter) Syncs() uint64 { return l.syncs.Load() }

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
	keys := []string{l.instancesKey(), l.syncedKey()}
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
