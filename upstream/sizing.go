package upstream

import (
	"math"
	"slices"
	"time"
)

// Adaptive sizing measures demand in windows of rateWindow and sizes by the
// busiest window of the last burstMemory.
const (
	rateWindow  = 250 * time.Millisecond
	burstMemory = 10 * time.Second
	numWindows  = int(burstMemory / rateWindow)
)

// noteTake counts a connect toward the demand estimate.
func (kp *keyPool) noteTake(now time.Time) {
	kp.roll(now)
	kp.windows[kp.cur]++
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

// burst is the most connects seen in one window within burstMemory.
func (kp *keyPool) burst() int {
	return slices.Max(kp.windows[:])
}

// updateSizeLocked recomputes an auto-sized key's target:
//
//	target = Min + ceil(2 × B × max(1, handshake / 250 ms)), clamped to [Min, Max]
//
// where B is the most connects seen in one 250 ms window in the last 10 s
// and handshake the smoothed time from dial to session.created. Sockets
// taken in a burst are replaced within one handshake, so the pool must hold
// a whole burst when handshakes are short, and a handshake's worth of
// connects at the burst's rate when they are long (Little's law); the 2x
// covers a burst that straddles two windows, and refills that lag. Sizing by the recent peak rather than the mean is what
// serves real traffic, whose calls start and end in waves: a wave's sockets
// must be back before the next wave, not on average. The target rises
// within one window of a new peak and falls back to Min 10 s after the last
// busy window.
func (p *Pool) updateSizeLocked(kp *keyPool, now time.Time) {
	kp.roll(now)
	floor := p.cfg.Min
	if !kp.primed {
		floor = 0
	}
	switch {
	case !kp.primed && now.Sub(kp.lastTake) > p.idleKeyAfter():
		kp.size = 0 // an unusual query nobody has repeated lately
	case !p.cfg.Auto:
		kp.size = p.cfg.Size
	default:
		hs := kp.handshake
		if hs == 0 {
			hs = 0.2 // no measurement yet: assume a typical remote handshake
		}
		n := floor + int(math.Ceil(2*float64(kp.burst())*max(1, hs/rateWindow.Seconds())))
		kp.size = max(floor, min(n, p.cfg.Max))
	}
	if m := p.metrics; m != nil {
		m.Target.WithLabelValues(kp.model, kp.id).Set(float64(kp.size))
	}
}

// idleKeyAfter is how long an unprimed key keeps sockets after its last
// connect.
func (p *Pool) idleKeyAfter() time.Duration {
	return max(p.cfg.MaxIdle, burstMemory)
}
