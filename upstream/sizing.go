package upstream

import (
	"math"
	"slices"
	"time"
)

// Sizing: how many warm sockets a key holds (its target) and how many dials
// may run for it at once (its in-flight limit). Both come from two
// measurements per key, kept here: the demand (connects per rateWindow, the
// busiest window of the last burstMemory) and the refill time (dial start to
// session.created, smoothed). The arithmetic itself is in the pure functions
// targetSize and inflightLimit, so that it can be tested as a table.

// Adaptive sizing measures demand in windows of rateWindow and sizes by the
// busiest window of the last burstMemory.
const (
	rateWindow  = 250 * time.Millisecond
	burstMemory = 10 * time.Second
	numWindows  = int(burstMemory / rateWindow)
)

const (
	// assumedRefill stands in for the refill time until one is measured: a
	// typical remote handshake.
	assumedRefill = 200 * time.Millisecond
	// minInflight is the in-flight limit with no demand seen: enough to
	// fill a fresh pool in a few handshakes without a burst of hundreds
	// of dials at start-up.
	minInflight = 64
	// defaultMaxInflight is the ceiling on a key's in-flight limit.
	defaultMaxInflight = 1024
	// headroom multiplies Little's law for both the target and the
	// in-flight limit: a burst can straddle two windows, and refills lag
	// when dials queue for CPU.
	headroom = 2
)

// demand is what a key's sizing depends on.
type demand struct {
	// burst is the most connects seen in one rateWindow within burstMemory.
	burst int
	// refill is the smoothed time from dial start to session.created; 0
	// when none was measured yet.
	refill time.Duration
	// primed keys (configured deployments) keep their floor; idle is true
	// for a key no longer configured that nobody connected to for
	// idleKeyAfter.
	primed, idle bool
}

// rate is the peak connect rate, per second.
func (d demand) rate() float64 { return float64(d.burst) / rateWindow.Seconds() }

// refillOrAssumed is the measured refill time, or assumedRefill.
func (d demand) refillOrAssumed() time.Duration {
	if d.refill <= 0 {
		return assumedRefill
	}
	return d.refill
}

// targetSize is a key's target number of warm sockets:
//
//	fixed:  Size
//	auto:   Min + ceil(2 × B × max(1, refill / 250 ms)), clamped to [Min, Max]
//
// where B is the most connects seen in one 250 ms window in the last 10 s
// and refill the smoothed time from dial to session.created. Sockets taken
// in a burst are replaced within one refill, so the pool must hold a whole
// burst when refills are short, and a refill's worth of connects at the
// burst's rate when they are long (Little's law); the 2x covers a burst
// that straddles two windows, and refills that lag. Sizing by the recent
// peak rather than the mean is what serves real traffic, whose calls start
// and end in waves: a wave's sockets must be back before the next wave, not
// on average. The target rises within one window of a new peak and falls
// back to Min 10 s after the last busy window. A key no longer configured
// (Retain let it go) has no floor, and targets nothing once idle.
func targetSize(cfg PoolConfig, d demand) int {
	if !d.primed && d.idle {
		return 0
	}
	if !cfg.Auto {
		return cfg.Size
	}
	floor := cfg.Min
	if !d.primed {
		floor = 0
	}
	perRefill := max(1, d.refillOrAssumed().Seconds()/rateWindow.Seconds())
	n := floor + int(math.Ceil(headroom*float64(d.burst)*perRefill))
	return max(floor, min(n, max(cfg.Max, floor)))
}

// inflightLimit is how many dials may run for a key at once. By Little's
// law a pool that is to keep up with connects arriving at rate λ, each
// replaced after the refill time W, has λ × W dials in flight on average;
// the limit is twice that (the same headroom as the target), at least
// minInflight so a fresh or quiet key still fills quickly, and at most the
// configured ceiling. A fixed limit below λ × W is what made the pool fall
// behind at high connect rates: it cannot refill as fast as it is taken
// from, however large its target.
func inflightLimit(cfg PoolConfig, d demand) int {
	ceiling := cfg.MaxInflight
	if ceiling <= 0 {
		ceiling = defaultMaxInflight
	}
	little := int(math.Ceil(headroom * d.rate() * d.refillOrAssumed().Seconds()))
	return min(max(little, minInflight), ceiling)
}

// noteTake counts a connect toward the demand estimate.
func (kp *keyPool) noteTake(now time.Time) {
	kp.roll(now)
	kp.windows[kp.cur]++
}

// noteRefill folds one successful dial's time into the smoothed refill time.
func (kp *keyPool) noteRefill(took time.Duration) {
	if kp.refillTime == 0 {
		kp.refillTime = took
		return
	}
	kp.refillTime += (took - kp.refillTime) / 5
}

// roll moves the open window up to now, emptying the windows it passes over.
func (kp *keyPool) roll(now time.Time) {
	n := int(now.Sub(kp.windowStart) / rateWindow)
	if n <= 0 {
		return
	}
	for i := range min(n, numWindows) {
		kp.windows[(kp.cur+1+i)%numWindows] = 0
	}
	kp.cur = (kp.cur + n) % numWindows
	kp.windowStart = kp.windowStart.Add(time.Duration(n) * rateWindow)
}

// demandLocked is kp's demand as of now. Callers hold Pool.mu.
func (p *Pool) demandLocked(kp *keyPool, now time.Time) demand {
	kp.roll(now)
	burst, refill := slices.Max(kp.windows[:]), kp.refillTime
	// The long memory that is written for the next start (DemandMemory).
	if r := float64(burst) / rateWindow.Seconds(); r > 0 && r >= kp.peak.RateAt(now) {
		kp.peak = Remembered{Rate: r, At: now}
	}
	if kp.seeded && !kp.seedUntil.IsZero() && now.After(kp.seedUntil) {
		kp.seeded = false // it has seen burstMemory of its own traffic
	}
	if kp.seeded {
		burst = max(burst, int(math.Ceil(kp.seed.RateAt(now)*rateWindow.Seconds())))
		if refill == 0 {
			refill = kp.seed.refill()
		}
	}
	return demand{
		burst:  burst,
		refill: refill,
		primed: kp.primed,
		idle:   !kp.seeded && now.Sub(kp.lastTake) > p.idleKeyAfter(),
	}
}

// updateSizeLocked recomputes kp's target and in-flight limit. Callers hold
// Pool.mu.
func (p *Pool) updateSizeLocked(kp *keyPool, now time.Time) {
	d := p.demandLocked(kp, now)
	kp.size = targetSize(p.cfg, d)
	kp.inflight = inflightLimit(p.cfg, d)
	if m := p.metrics; m != nil {
		m.Target.WithLabelValues(kp.model, kp.id).Set(float64(kp.size))
		m.Inflight.WithLabelValues(kp.model, kp.id).Set(float64(kp.inflight))
	}
}

// idleKeyAfter is how long an unprimed key keeps sockets after its last
// connect.
func (p *Pool) idleKeyAfter() time.Duration {
	return max(p.cfg.MaxIdle, burstMemory)
}
