package upstream

import (
	"context"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/gobwas/ws"
	"github.com/prometheus/client_golang/prometheus"

	"rtgate/poller"
)

// The warm pool keeps upstream sockets that are connected, upgraded, and past
// session.created, so that a client connect skips the expensive part of a
// realtime connect (TCP + TLS + upgrade + the wait for session.created).
//
// A warm socket has read exactly one frame, the upstream's session.created,
// and holds it. Nothing is sent on it and nothing else is read, so the session
// it carries is at the upstream's defaults exactly as a fresh one would be; at
// handoff the held frame goes to the client first, then the socket is spliced
// like a freshly dialed one. The pool can only make a connect faster: a miss,
// or a warm socket that died, falls back to the ordinary dial.

// PoolConfig sizes the pool.
type PoolConfig struct {
	// Size is the fixed number of warm sockets kept per key; ignored when
	// Auto. Size 0 without Auto turns the pool off.
	Size int
	// Auto sizes each key from its observed demand, between Min and Max.
	Auto     bool
	Min, Max int
	// MaxIdle is how long a warm socket may wait before it is replaced; each
	// socket gets between 75% and 100% of it, so that a pool warmed at once
	// does not expire at once.
	MaxIdle time.Duration
	// MaxTotal caps warm and warming sockets across all keys.
	MaxTotal int
	// MaxInflight is the ceiling on concurrent warm-up dials per key. The
	// working number is sized from demand (see inflightLimit); this only
	// bounds it. 0 means 1024.
	MaxInflight int
	// PingInterval is how long a ready socket may sit idle before the pool
	// checks it with a WebSocket ping; 0 means 5 s, negative turns the
	// checks off. See checkLiveness.
	PingInterval time.Duration
	// PongTimeout is how long a pinged socket has to answer before it is
	// retired and replaced; 0 means 2 s.
	PongTimeout time.Duration
	// Clock drives sizing, backoff, expiry and the liveness checks; nil is
	// the wall clock. Tests inject a manual one. Dial and handshake timeouts
	// always run on the wall clock: they wait on a real network.
	Clock Clock
	// Spare, if set, reports how many more sockets the process may open
	// for the pool (the gateway subtracts its sessions' sockets from the
	// open-file limit), so that warm sockets never take the descriptors
	// client sessions need.
	Spare func() int
	// Memory, if set, remembers each key's peak demand across restarts
	// (DemandMemory): the pool loads it when made, writes it every few
	// seconds and when it closes.
	Memory DemandMemory
	// WarmupBound bounds how long a pool with remembered demand reports
	// Warming; 0 means 10 s.
	WarmupBound time.Duration
	// Unstarted pools sockets whose upstream sends nothing before the
	// client's first event (GPT-Live: no session exists until
	// session.start): a socket is ready once upgraded, holds no frame, and
	// any frame but a pong makes it unusable. See NewLivePool.
	Unstarted bool
}

// Enabled reports whether the pool dials anything ahead.
func (c PoolConfig) Enabled() bool { return c.Auto || c.Size > 0 }

// Clock is the pool's source of time and timers.
type Clock interface {
	Now() time.Time
	AfterFunc(d time.Duration, f func()) Timer
}

// Timer is a pending AfterFunc.
type Timer interface{ Stop() bool }

// wallClock is the real clock.
type wallClock struct{}

func (wallClock) Now() time.Time                            { return time.Now() }
func (wallClock) AfterFunc(d time.Duration, f func()) Timer { return time.AfterFunc(d, f) }

// Backoff bounds for a key whose dials fail.
const (
	backoffMin = 500 * time.Millisecond
	backoffMax = 30 * time.Second
)

// Pool is the warm pool for every key. It is safe for concurrent use.
type Pool struct {
	dialer  *Dialer
	cfg     PoolConfig
	log     *slog.Logger
	metrics *PoolMetrics

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	clock Clock

	mu      sync.Mutex
	keys    map[string]*keyPool
	total   int // warm plus warming sockets, all keys
	closed  bool
	live    wheel // liveness checks of ready sockets
	janitor Timer // the next janitor turn
	swept   time.Time

	// The yield rule (growRoomLocked): client dials in flight; when their burst
	// began and how long its window is; when the latest client dial
	// started and the last one ended; warm-up dials in flight across keys.
	clientDials   int
	burstFrom     time.Time
	window        time.Duration
	lastDialStart time.Time
	lastDialEnd   time.Time
	warmDials     int
	yielded       bool // growth was held back in the current burst
	pace          pace // the refill after a burst

	// Dialing ahead (Expect): connections accepted and not yet
	// decided, and the key the next connect most likely wants.
	expected int
	likely   *keyPool

	// Remembered demand (DemandMemory): what was loaded, by key digest, the
	// next write, and until when the pool may report Warming.
	remembered  map[string]Remembered
	saver       Timer
	saveFailing bool      // the last write failed (logged once)
	warmUntil   time.Time // zero: not warming
}

// now is the pool's clock.
func (p *Pool) now() time.Time { return p.clock.Now() }

// NewPool returns a pool that dials with d. metrics may be nil.
func NewPool(d *Dialer, cfg PoolConfig, log *slog.Logger, metrics *PoolMetrics) *Pool {
	if cfg.MaxInflight <= 0 {
		cfg.MaxInflight = defaultMaxInflight
	}
	if cfg.MaxTotal <= 0 {
		cfg.MaxTotal = 2048
	}
	if cfg.Max < cfg.Min {
		cfg.Max = cfg.Min
	}
	if cfg.PingInterval == 0 {
		cfg.PingInterval = defaultPingInterval
	}
	if cfg.PongTimeout <= 0 {
		cfg.PongTimeout = defaultPongTimeout
	}
	if cfg.Clock == nil {
		cfg.Clock = wallClock{}
	}
	p := &Pool{dialer: d, cfg: cfg, log: log, metrics: metrics, keys: map[string]*keyPool{}, clock: cfg.Clock}
	p.ctx, p.cancel = context.WithCancel(context.Background())
	p.live.init(janitorTick(cfg), p.now())
	if cfg.Enabled() {
		p.restore()
		p.mu.Lock()
		p.swept = p.now()
		p.janitor = p.clock.AfterFunc(p.live.tick, p.janitorTurn)
		if cfg.Memory != nil && cfg.Auto { // only auto learns demand
			p.saver = p.clock.AfterFunc(stateEvery, p.saveTurn)
		}
		p.mu.Unlock()
	}
	return p
}

// keyPool is the pool for one key: one upstream URL, model and credential
// set. Its fields are guarded by Pool.mu.
type keyPool struct {
	key    string
	id     string // short hash of the key, for metrics and logs
	model  string
	target Target
	// primed keys (the configured deployments' targets) keep their floor;
	// only Prime makes keys, and a key Retain let go holds sockets only
	// while it is used, and is forgotten when idle.
	primed   bool
	lastTake time.Time

	warm    []*warmConn // ready, oldest first
	warming int
	// owed counts sockets clients took that no dial has replaced yet: a
	// replacement is never held back (growRoomLocked).
	owed    int
	waiters []*Miss // misses waiting for a socket, oldest first
	claimed int     // waiting misses that wait on a dial in flight, not their own (claimLocked)
	// lastLanded is when a socket of the key last landed ready: a claim
	// lapses only after a while without one (claimWait).
	lastLanded time.Time

	// backoff after failed dials
	backoff    time.Duration
	retryAt    time.Time
	retryTimer Timer

	// demand and sizing (targetSize, inflightLimit)
	windows     [numWindows]int // connects per window, a ring; windows[cur] is open
	cur         int
	windowStart time.Time     // of the open window
	refillTime  time.Duration // from dial start to session.created, smoothed; 0 until measured
	size        int           // the current target
	inflight    int           // the current limit on concurrent dials

	// remembered demand (DemandMemory): the seed this key started from, used
	// until seedUntil (burstMemory after its first connect), and the
	// long-memory peak that is written for the next start.
	seed      Remembered
	seeded    bool
	seedUntil time.Time
	peak      Remembered
}

// keyLocked returns t's key pool, making it if needed (nil once the pool is
// closed). A new key starts from its remembered demand, if any. Callers
// hold Pool.mu.
func (p *Pool) keyLocked(k string, t Target, model string, now time.Time) *keyPool {
	if kp := p.keys[k]; kp != nil || p.closed {
		return kp
	}
	kp := &keyPool{key: k, id: k[:8], model: model, target: t, windowStart: now}
	if r, ok := p.remembered[k]; ok && r.RateAt(now) > 0 {
		kp.seed, kp.seeded, kp.peak = r, true, r
	}
	p.keys[k] = kp
	return kp
}

// Take hands out a warm socket for t, making owner its owner in the same
// step, or returns nil on a miss. Either way the key's pool is refilled
// behind it. Only Prime makes a pool: a target with none, or one a warm
// socket cannot serve (Poolable), is a miss counted by its reason (model
// labels it when there is no pool), and creates and sizes nothing.
func (p *Pool) Take(t Target, model string, owner poller.Owner) (*poller.Handle, []byte) {
	h, held, _ := p.take(t, model, owner, false)
	return h, held
}

// TakeOrDial is Take for a client that dials fresh on a miss: a miss is
// counted as a client dial before the refill it starts, so that refill
// already yields to it (ClientDialing), and returned as a Miss, which may still
// take a warm socket that lands before the client's own dial completes
// (Miss.Take); its Done, called once the client no longer waits, lets the
// pool grow again. A miss that claimed one of the pool's dials in flight
// starts its own dial only when Miss.DialNow says so. On a hit, or a target the pool does not serve, miss is
// nil (its methods do nothing).
func (p *Pool) TakeOrDial(t Target, model string, owner poller.Owner) (h *poller.Handle, held []byte, miss *Miss) {
	return p.take(t, model, owner, true)
}

// take is Take; with client set, a miss counts as a client dial and is
// returned as a waiting Miss.
func (p *Pool) take(t Target, model string, owner poller.Owner, client bool) (_ *poller.Handle, _ []byte, miss *Miss) {
	if !p.cfg.Enabled() {
		return nil, nil, nil
	}
	reason := unpooled(t)
	if reason == sideband {
		return nil, nil, nil
	}
	k := Key(t)
	now := p.now()
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil, nil, nil
	}
	kp := p.keys[k] // only Prime makes pools: a client's connect never does
	if kp == nil || reason != "" {
		p.mu.Unlock()
		if reason == "" {
			reason = MissNoPool
		}
		p.countUnpooled(kp, model, reason)
		return nil, nil, nil
	}
	kp.noteTake(now)
	if kp.seeded && kp.seedUntil.IsZero() {
		kp.seedUntil = now.Add(burstMemory) // then auto sizes from what it measured
	}
	kp.lastTake = now
	p.likely = kp
	got, dead := p.takeReadyLocked(kp, owner)
	p.updateSizeLocked(kp, now)
	warm := len(kp.warm)
	p.releaseClaimsLocked(kp) // what it took (or found dead) may have been for a waiting miss
	if got != nil {
		kp.owed++ // its replacement never yields
	}
	if got == nil && client {
		p.clientDialStartLocked() // before the refill below, whose growth yields to it
		miss = p.newMissLocked(kp)
		p.claimLocked(kp, miss)
	}
	p.mu.Unlock()

	if m := p.metrics; m != nil {
		m.DeadOnTake.WithLabelValues(kp.model, kp.id).Add(float64(dead))
		m.Warm.WithLabelValues(kp.model, kp.id).Set(float64(warm))
		if got != nil {
			m.Hits.WithLabelValues(kp.model, kp.id).Inc()
			m.WarmAge.WithLabelValues(kp.model).Observe(now.Sub(got.born).Seconds())
		} else {
			m.Misses.WithLabelValues(kp.model, kp.id, MissEmpty).Inc()
		}
	}
	p.refill(kp)
	if got == nil {
		return nil, nil, miss
	}
	return got.h, got.held, nil
}

// countUnpooled counts a connect the pool could not serve as asked, for
// reason, on its shape's pool kp (nil: there is none, key "none"), or on
// model when there is none. It is not demand: it sizes nothing.
func (p *Pool) countUnpooled(kp *keyPool, model, reason string) {
	m := p.metrics
	if m == nil {
		return
	}
	id := "none"
	if kp != nil {
		model, id = kp.model, kp.id
	}
	m.Misses.WithLabelValues(model, id, reason).Inc()
}

// takeReadyLocked takes kp's oldest ready socket that can be handed over
// now, making owner its owner; dead counts the dead ones it dropped on the
// way. Callers hold Pool.mu.
func (p *Pool) takeReadyLocked(kp *keyPool, owner poller.Owner) (got *warmConn, dead int) {
	for i := 0; i < len(kp.warm) && got == nil; {
		w := kp.warm[i]
		if w.awaitingPong() {
			// Its pong is still on the way and must not reach a client:
			// leave it for the read path, try the next one.
			i++
			continue
		}
		res := w.take(owner)
		if res == takeBusy {
			i++ // alive, mid-read: it stays for a later connect
			continue
		}
		if i == 0 {
			kp.warm[0] = nil
			kp.warm = kp.warm[1:] // the usual case, without moving the rest
		} else {
			kp.warm = slices.Delete(kp.warm, i, i+1)
		}
		p.total--
		if res == takeOK {
			got = w
		} else {
			dead++
		}
	}
	return got, dead
}

// Warm returns the number of ready sockets for t, for tests and the admin page.
func (p *Pool) Warm(t Target) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if kp := p.keys[Key(t)]; kp != nil {
		return len(kp.warm)
	}
	return 0
}

// Dialing returns the number of warm-up dials in flight for t, for tests and
// the admin page.
func (p *Pool) Dialing(t Target) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if kp := p.keys[Key(t)]; kp != nil {
		return kp.warming
	}
	return 0
}

// Target returns the current target size for t.
func (p *Pool) Target(t Target) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if kp := p.keys[Key(t)]; kp != nil {
		p.updateSizeLocked(kp, p.now())
		return kp.size
	}
	return 0
}

// Prime creates t's pool and starts filling it without taking a socket, so
// that the first client connects can already hit.
func (p *Pool) Prime(t Target, model string) {
	if !p.cfg.Enabled() || !Poolable(t) {
		return
	}
	k := Key(t)
	p.mu.Lock()
	kp := p.keyLocked(k, t, model, p.now())
	if kp != nil {
		kp.primed = true
		if p.likely == nil {
			p.likely = kp
		}
	}
	p.mu.Unlock()
	if kp == nil {
		return
	}
	if m := p.metrics; m != nil {
		// Create the key's series at zero, so that rates over them work
		// from the first scrape.
		m.Hits.WithLabelValues(kp.model, kp.id)
		for _, r := range []string{MissEmpty, MissSafetyIdentifier, MissQuery} {
			m.Misses.WithLabelValues(kp.model, kp.id, r)
		}
		m.DeadOnTake.WithLabelValues(kp.model, kp.id)
		m.Pings.WithLabelValues(kp.model, kp.id)
		m.Pongs.WithLabelValues(kp.model, kp.id)
		m.MissedPongs.WithLabelValues(kp.model, kp.id)
	}
	p.refill(kp)
}

// Retain keeps the pools of keep (the configured deployments' targets, all
// of them Primed) and lets every other go: a pool that is no longer
// configured loses its floor, targets nothing once idle, and is forgotten
// with its metric series once empty, as after a configuration reload that
// removed its deployment.
func (p *Pool) Retain(keep []Target) {
	keys := make(map[string]bool, len(keep))
	for _, t := range keep {
		keys[Key(t)] = true
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for k, kp := range p.keys {
		if !keys[k] {
			kp.primed = false
			if p.likely == kp {
				p.likely = nil
			}
		}
	}
}

// Close closes every warm socket with close 1000 and stops refilling. It
// waits for dials in flight to finish.
func (p *Pool) Close() {
	p.save() // at drain: the next start begins from this
	p.mu.Lock()
	if p.saver != nil {
		p.saver.Stop()
	}
	p.closed = true
	if p.pace.timer != nil {
		p.pace.timer.Stop()
	}
	if p.janitor != nil {
		p.janitor.Stop()
	}
	var all []*warmConn
	for _, kp := range p.keys {
		all = append(all, kp.warm...)
		kp.warm = nil
		for _, m := range kp.waiters {
			p.unclaimLocked(m) // nothing more lands: they dial their own
		}
		if kp.retryTimer != nil {
			kp.retryTimer.Stop()
		}
	}
	p.total = 0
	p.mu.Unlock()
	p.cancel()
	for _, w := range all {
		w.retire(ws.StatusNormalClosure, "gateway shutting down")
	}
	p.wg.Wait()
}

// forgetIdleKeys drops unprimed keys that hold nothing and were not used for
// idleKeyAfter, with their metric series, so that one-off queries cannot
// grow the pool's bookkeeping without bound.
func (p *Pool) forgetIdleKeys(now time.Time) {
	p.mu.Lock()
	var gone []*keyPool
	for k, kp := range p.keys {
		if !kp.primed && len(kp.warm) == 0 && kp.warming == 0 && now.Sub(kp.lastTake) > p.idleKeyAfter() {
			if kp.retryTimer != nil {
				kp.retryTimer.Stop()
			}
			delete(p.keys, k)
			gone = append(gone, kp)
			if p.likely == kp {
				p.likely = nil
			}
		}
	}
	p.mu.Unlock()
	if m := p.metrics; m != nil {
		for _, kp := range gone {
			for _, v := range []interface{ DeleteLabelValues(...string) bool }{m.Warm, m.Target, m.Inflight, m.Hits, m.DeadOnTake, m.Backoff, m.Pings, m.Pongs, m.MissedPongs} {
				v.DeleteLabelValues(kp.model, kp.id)
			}
			m.Misses.DeletePartialMatch(prometheus.Labels{"model": kp.model, "key": kp.id})
			m.Dials.DeleteLabelValues(kp.model, kp.id, "ok")
			m.Dials.DeleteLabelValues(kp.model, kp.id, "failed")
		}
	}
}

// janitorTurn runs every janitor tick on the pool's clock until the pool
// closes: it moves the liveness wheel, and every janitorSweep forgets idle
// keys. One timer for the whole pool, never one per socket.
func (p *Pool) janitorTurn() {
	now := p.now()
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	sweep := now.Sub(p.swept) >= janitorSweep
	if sweep {
		p.swept = now
	}
	p.mu.Unlock()

	p.checkLiveness(now)
	if sweep {
		p.forgetIdleKeys(now)
	}

	p.mu.Lock()
	if !p.closed {
		p.janitor = p.clock.AfterFunc(p.live.tick, p.janitorTurn)
	}
	p.mu.Unlock()
}

// janitorSweep is how often idle keys are looked for.
const janitorSweep = 5 * time.Second

// refill starts the dials that bring kp up to its target, within the
// in-flight limit and the global caps, unless the key is backing off. What
// replaces sockets clients took starts at once; growth beyond that yields
// to client dials as growRoomLocked says.
func (p *Pool) refill(kp *keyPool) {
	p.mu.Lock()
	retired := p.refillLocked(kp)
	p.mu.Unlock()
	retireAll(retired, "warm pool: room for another key")
}

// refillLocked is refill; it returns the sockets it reclaimed for another
// key's share, to retire. Callers hold Pool.mu.
func (p *Pool) refillLocked(kp *keyPool) []*warmConn {
	if p.closed {
		return nil
	}
	now := p.now()
	p.updateSizeLocked(kp, now)
	if now.Before(kp.retryAt) {
		if kp.retryTimer == nil {
			kp.retryTimer = p.clock.AfterFunc(kp.retryAt.Sub(now), func() {
				p.mu.Lock()
				kp.retryTimer = nil
				p.mu.Unlock()
				p.refill(kp)
			})
		}
		return nil
	}
	deficit := kp.size - len(kp.warm) - kp.warming
	var retired []*warmConn
	if kp.backoff == 0 {
		retired = p.reclaimLocked(kp, deficit)
	}
	want := min(deficit, kp.inflight-kp.warming, p.roomLocked(kp))
	if p.cfg.Spare != nil {
		want = min(want, p.cfg.Spare()-p.total)
	}
	if kp.backoff > 0 {
		want = min(want, 1-kp.warming) // a failing key gets one probe at a time
	}
	replace := max(0, min(want, kp.owed))
	grow := p.growRoomLocked(now, want-replace)
	// What stays owed is what the caps held back, and never more than the
	// deficit left: a pool at its target owes nothing.
	kp.owed = min(kp.owed-replace, max(0, deficit-replace-max(grow, 0)))
	for range replace + max(grow, 0) {
		p.startWarmLocked(kp)
	}
	return retired
}

// roomLocked is how many more sockets kp may hold or dial within MaxTotal,
// shared fairly: every key is owed its share of the cap (MaxTotal ÷ keys)
// up to its target, and a key may use what the others are not owed. So
// one key's demand can take the room others do not need, never the room
// they do: a key over its share replaces what is taken from it only while
// the others hold what they are owed. Callers hold Pool.mu.
func (p *Pool) roomLocked(kp *keyPool) int {
	share := p.cfg.MaxTotal / max(1, len(p.keys))
	owed := 0
	for _, o := range p.keys {
		if o != kp {
			owed += max(0, min(o.size, share)-len(o.warm)-o.warming)
		}
	}
	return p.cfg.MaxTotal - p.total - owed
}

// reclaimLocked makes room, within MaxTotal, for what kp is owed of its
// share (deficit sockets short of its target) by taking the oldest ready
// sockets of keys holding more than their share; it returns them for the
// caller to retire once it no longer holds the lock. Callers hold Pool.mu.
func (p *Pool) reclaimLocked(kp *keyPool, deficit int) []*warmConn {
	share := p.cfg.MaxTotal / max(1, len(p.keys))
	need := min(deficit, share-len(kp.warm)-kp.warming) - max(0, p.roomLocked(kp))
	var out []*warmConn
	for _, o := range p.keys {
		for need > 0 && o != kp && len(o.warm) > 0 && len(o.warm)+o.warming > share {
			w := o.warm[0]
			o.warm[0] = nil
			o.warm = o.warm[1:]
			p.total--
			need--
			if w.expiry != nil {
				w.expiry.Stop()
			}
			out = append(out, w)
		}
	}
	return out
}

// retireAll closes every socket of all with 1000 and reason. Call it
// without Pool.mu.
func retireAll(all []*warmConn, reason string) {
	for _, w := range all {
		w.retire(ws.StatusNormalClosure, reason)
	}
}

// startWarmLocked starts one warm-up dial of kp. Callers hold Pool.mu.
func (p *Pool) startWarmLocked(kp *keyPool) {
	kp.warming++
	p.warmDials++
	p.total++
	p.wg.Add(1)
	go p.warmOne(kp)
}

// warmOne dials one socket and waits for its session.created. The goroutine
// lives for the dial and handshake only.
func (p *Pool) warmOne(kp *keyPool) {
	defer p.wg.Done()
	start := time.Now() // the dial runs on the wall clock, whatever the pool's clock
	w, err := p.dialWarm(kp)
	took := time.Since(start)
	p.mu.Lock()
	p.warmDials--
	p.mu.Unlock()
	p.landed(kp, w, err, took)
}

// landed files a socket that finished waiting for its session.created:
// ready (w, err nil) it joins kp's ready list and the longest-waiting miss
// hears of it; failed it counts toward kp's backoff. took is the dial's
// time, 0 for a miss's own dial given to the pool (Miss.Give), which neither
// measures the refill nor, failing, backs the key off: it was not the
// pool's dial.
func (p *Pool) landed(kp *keyPool, w *warmConn, err error, took time.Duration) {
	p.mu.Lock()
	now := p.now()
	kp.warming--
	dialed := err == nil && !p.closed
	ok := dialed && w.alive()
	switch {
	case ok:
		kp.warm = append(kp.warm, w)
		kp.lastLanded = now
		kp.backoff, kp.retryAt = 0, time.Time{}
		if took > 0 {
			kp.noteRefill(took)
		}
		w.born = now
		w.expiry = p.clock.AfterFunc(p.idleFor(), func() { p.expire(kp, w) })
		p.watchLocked(w, now)
		p.signalWaiterLocked(kp)
	case dialed:
		// The socket died between its session.created and this line (the
		// upstream hung up right behind it), and its UpstreamGone found
		// nothing in the ready list to remove. Filed now, it would sit
		// there dead, counted warm and holding a refill slot until a take
		// or its expiry: it is lost instead, as if it had died a moment
		// after landing (no backoff, as for any lost socket). Once filed,
		// a later death does find it: lost takes p.mu after w.mu is free.
		p.total--
		p.releaseClaimsLocked(kp)
	default:
		p.total--
		if !p.closed && took > 0 && !now.Before(kp.retryAt) {
			kp.backoff = nextBackoff(kp.backoff)
			kp.retryAt = now.Add(kp.backoff)
		}
		p.releaseClaimsLocked(kp) // a claimed miss may have waited on it
	}
	warm, backoff := len(kp.warm), kp.backoff
	p.mu.Unlock()

	if m := p.metrics; m != nil {
		m.Warm.WithLabelValues(kp.model, kp.id).Set(float64(warm))
		if took > 0 { // the pool's own dial
			result := "ok"
			if !dialed {
				result = "failed"
			}
			m.Dials.WithLabelValues(kp.model, kp.id, result).Inc()
			m.Backoff.WithLabelValues(kp.model, kp.id).Set(backoff.Seconds())
			if dialed {
				m.Refill.WithLabelValues(kp.model).Observe(took.Seconds())
			}
		}
	}
	if !ok {
		if w != nil {
			w.retire(ws.StatusNormalClosure, "gateway shutting down")
		}
		if err != nil {
			p.log.Debug("warm pool dial failed", "model", kp.model, "key", kp.id, "err", err, "backoff", backoff)
		}
	}
	p.refill(kp)
}

// nextBackoff doubles a failing key's backoff within [backoffMin, backoffMax].
func nextBackoff(cur time.Duration) time.Duration {
	return max(backoffMin, min(2*cur, backoffMax))
}

// dialWarm dials and waits until the socket holds session.created.
func (p *Pool) dialWarm(kp *keyPool) (*warmConn, error) {
	c, err := p.dialer.Dial(p.ctx, kp.target)
	if err != nil {
		return nil, err
	}
	return p.awaitReady(p.newWarm(kp, c))
}

// newWarm makes a dialed socket kp's warmConn, owned by the pool from now.
func (p *Pool) newWarm(kp *keyPool, c *Upgraded) *warmConn {
	w := &warmConn{h: poller.NewHandle(c.Endpoint), pool: p, kp: kp, ready: make(chan struct{})}
	if p.cfg.Unstarted {
		w.markUnstarted()
	}
	// The preface goes in before any read can append to it, then one read
	// by hand (crypto/tls may already hold session.created decrypted: 101
	// and session.created as two records in one segment, and netpoll never
	// announces bytes it does not hold itself), all before a read event
	// can run (warmConn.start).
	w.start(c.Preface)
	return w
}

// awaitReady waits until w holds session.created, or retires it.
func (p *Pool) awaitReady(w *warmConn) (*warmConn, error) {
	t := time.NewTimer(p.awaitWait())
	defer t.Stop()
	select {
	case <-w.ready:
	case <-t.C:
	case <-p.ctx.Done():
	}
	w.mu.Lock()
	state, werr := w.state, w.err
	w.mu.Unlock()
	if state != warmReady {
		if werr == nil {
			werr = errNoSessionCreated
		}
		w.retire(ws.StatusNormalClosure, "no session.created in time")
		return nil, werr
	}
	return w, nil
}

// idleFor returns a warm socket's lifetime, spread over 75-100% of MaxIdle.
func (p *Pool) idleFor() time.Duration {
	d := p.cfg.MaxIdle
	if d <= 0 {
		d = 30 * time.Second
	}
	return d - time.Duration(rand.Float64()*0.25*float64(d))
}

// expire replaces a warm socket that waited MaxIdle.
func (p *Pool) expire(kp *keyPool, w *warmConn) {
	if p.remove(kp, w) {
		w.retire(ws.StatusNormalClosure, "warm pool idle timeout")
	}
	p.refill(kp)
}

// remove takes w out of kp's ready list; false if it was not there.
func (p *Pool) remove(kp *keyPool, w *warmConn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	i := slices.Index(kp.warm, w)
	if i < 0 {
		return false
	}
	kp.warm = slices.Delete(kp.warm, i, i+1)
	p.total--
	p.releaseClaimsLocked(kp)
	if m := p.metrics; m != nil {
		m.Warm.WithLabelValues(kp.model, kp.id).Set(float64(len(kp.warm)))
	}
	return true
}

// lost is called when a ready socket died in the pool.
func (p *Pool) lost(w *warmConn) {
	p.mu.Lock()
	if w.expiry != nil {
		w.expiry.Stop()
	}
	p.mu.Unlock()
	if p.remove(w.kp, w) {
		p.refill(w.kp)
	}
}
