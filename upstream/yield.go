package upstream

import (
	"math"
	"time"
)

// The yield rule: a miss is never slower than going direct. A client whose
// connect missed the pool dials fresh, and so does the pool behind it to
// refill; in a first burst (hundreds of clients at once against a pool at its
// floor) the pool's own warm-up dials, sized by Little's law for the burst,
// used to compete with the clients' dials for the same TLS handshakes and
// CPU, and a miss came out slower than the same connect made with no
// gateway. So while clients are dialing, warm-up dials in flight (across
// all keys) are held to a small share of the client dials in flight; as
// soon as the last client dial ends, every key refills as fast as its own
// in-flight limit allows. The clients' dials are never delayed: the rule
// only ever holds back the pool.

const (
	// yieldFloor is how many warm-up dials may always run while clients
	// dial: the pool keeps growing, slowly, under a steady stream of misses.
	yieldFloor = 2
	// yieldShare: besides the floor, one warm-up dial per yieldShare client
	// dials in flight.
	yieldShare = 8
	// refillSpread is how long the refill after a burst takes to start
	// what the burst took (the deficit less the target's headroom, see
	// sizing.go); headroomSpread how long it takes to start the rest, the
	// headroom, after that; paceTick how often the paced refill looks
	// again.
	refillSpread   = time.Second
	headroomSpread = 2 * time.Second
	paceTick       = 20 * time.Millisecond
)

// pace is the refill after a burst (guarded by Pool.mu): from, the
// deficit to start over refillSpread, and how many it has started.
type pace struct {
	from    time.Time
	deficit int
	started int
	timer   Timer
}

// paceRoom is how many warm-up dials the pace lets start at elapsed since
// the burst passed, a tick ahead, plus the yield floor (what the pool could
// dial during the burst), less what it started. Two tiers: first the
// sockets the burst took (the deficit divided by the target's headroom:
// Little's law for the burst's rate, which the next wave needs) evenly over
// refillSpread; then the headroom evenly over headroomSpread. The burst's
// own sessions are at their start (first audio, the first responses)
// while the refill runs, on the same cores: dialing the headroom later
// halves the warm-up work that competes with them, and the next wave
// still finds what the burst took. Past both spreads there is no limit.
func paceRoom(deficit, started int, elapsed time.Duration) int {
	if elapsed >= refillSpread+headroomSpread || deficit <= 0 {
		return int(^uint(0) >> 1)
	}
	first := math.Ceil(float64(deficit) / headroom)
	at := elapsed + paceTick
	due := first * min(at.Seconds()/refillSpread.Seconds(), 1)
	if at > refillSpread {
		due += (float64(deficit) - first) * min((at-refillSpread).Seconds()/headroomSpread.Seconds(), 1)
	}
	return yieldFloor + int(math.Ceil(due)) - started
}

// startPaceLocked begins the paced refill after a burst: now, over the
// deficit of every key. Callers hold Pool.mu.
func (p *Pool) startPaceLocked(now time.Time) {
	deficit := 0
	for _, kp := range p.keys {
		p.updateSizeLocked(kp, now)
		deficit += max(0, kp.size-len(kp.warm)-kp.warming)
	}
	if p.pace.timer != nil {
		p.pace.timer.Stop()
	}
	p.pace = pace{from: now, deficit: deficit}
}

// paceRoomLocked is paceRoom for the pool now; when it holds a refill
// back it makes sure a tick will look again. Callers hold Pool.mu.
func (p *Pool) paceRoomLocked(now time.Time, want int) int {
	if p.pace.from.IsZero() {
		return want
	}
	elapsed := now.Sub(p.pace.from)
	room := paceRoom(p.pace.deficit, p.pace.started, elapsed)
	if elapsed >= refillSpread+headroomSpread {
		p.pace = pace{}
		return want
	}
	if want > room && p.pace.timer == nil {
		p.pace.timer = p.clock.AfterFunc(paceTick, p.paceTurn)
	}
	return min(want, room)
}

// paceTurn refills every key as far as the pace now allows.
func (p *Pool) paceTurn() {
	p.mu.Lock()
	p.pace.timer = nil
	keys := make([]*keyPool, 0, len(p.keys))
	for _, kp := range p.keys {
		keys = append(keys, kp)
	}
	p.mu.Unlock()
	for _, kp := range keys {
		p.refill(kp)
	}
}

// yieldRoom is how many more warm-up dials the yield rule lets start now,
// or a large number when no client is dialing.
func yieldRoom(clientDials, warmDials int) int {
	if clientDials <= 0 {
		return int(^uint(0) >> 1)
	}
	return max(yieldFloor, clientDials/yieldShare) - warmDials
}

// yieldRoomLocked is yieldRoom for the pool now. Callers hold Pool.mu.
func (p *Pool) yieldRoomLocked() int { return yieldRoom(p.clientDials, p.warmDials) }

// ClientDialing tells the pool that a client is about to wait on an upstream
// dial the pool did not offer to serve (a connect it does not pool, a
// redial); the returned func, called exactly once when that dial has ended
// (whatever its outcome), says so. A miss is counted by TakeOrDial itself.
// Safe on a nil pool.
func (p *Pool) ClientDialing() (done func()) {
	if p == nil || !p.cfg.Enabled() {
		return func() {}
	}
	p.mu.Lock()
	p.clientDials++
	p.mu.Unlock()
	return p.clientDialDone
}

// clientDialDone ends one client dial; when it was the last and a refill
// held back for it, every key refills, at the pace after a burst.
func (p *Pool) clientDialDone() {
	p.mu.Lock()
	p.clientDials--
	resume := p.clientDials == 0 && p.yielded
	if resume {
		p.yielded = false
		p.startPaceLocked(p.now())
	}
	var keys []*keyPool
	if resume {
		for _, kp := range p.keys {
			keys = append(keys, kp)
		}
	}
	p.mu.Unlock()
	for _, kp := range keys {
		p.refill(kp) // the burst has passed: grow at the pace
	}
}
