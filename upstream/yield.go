package upstream

import (
	"math"
	"time"
)

// The yield rule: a burst's misses are never slower than going direct, and
// sustained demand is never starved (the package doc has the measurements
// behind it).
//
// A refill has two parts. Replacing a socket a client took (a hit) is the
// dial that client would have made itself, made ahead: it is never held
// back (only the pool's caps bound it), so a pool that keeps up stays
// ahead whatever else happens. Growing the pool toward a raised target is
// extra work, and it is what competed with a first burst's own dials for
// the same TLS handshakes and CPU (hundreds of warm-up dials beside
// hundreds of misses made a miss slower than a direct connect). So growth
// yields, and only for as long as it helps:
//
//   - A burst begins when a client dial (a miss, a redial) starts after a
//     whole window without any; its window is four times the longest
//     refill time of any key (a burst's clients arrive within a fraction
//     of one on a quiet host, and over a few on a busy one). While the
//     burst's dials are in flight and all of them started within the
//     window, warm-up dials in flight across keys are held to max(2, client
//     dials in flight / 8), however long those dials take.
//   - A client dial that starts past the window means misses keep coming:
//     that is demand, not a burst, and the pool grows at its in-flight
//     limit whatever the client dials in flight (each of them would
//     otherwise be a miss as well). Misses with gaps shorter than a window
//     between them are the same burst.
//   - Once no client dials, after a burst that held growth back, growth is
//     paced (paceRoom) so that the burst's young sessions get their first
//     audio before the rest of the refill runs; replacement is not paced.
//
// The clients' dials are never delayed: the rule only ever holds back the
// pool's growth.

const (
	// yieldFloor is how many warm-up dials may always run beside a
	// burst's dials: the pool keeps growing, slowly.
	yieldFloor = 2
	// yieldShare: besides the floor, one warm-up dial per yieldShare client
	// dials in flight.
	yieldShare = 8
	// yieldRefills is a burst's window, in refill times.
	yieldRefills = 4
	// refillSpread is how long the refill after a burst takes to start
	// what the burst took (the deficit less the target's headroom, see
	// targetSize); headroomSpread how long it takes to start the rest, the
	// headroom, after that; paceTick how often the paced refill looks
	// again.
	refillSpread   = time.Second
	headroomSpread = 2 * time.Second
	paceTick       = 20 * time.Millisecond
)

// unlimited is a room that limits nothing.
const unlimited = int(^uint(0) >> 1)

// yieldWindow is a burst's window: yieldRefills of the refill time r
// (assumedRefill until one is measured).
func yieldWindow(r time.Duration) time.Duration {
	if r <= 0 {
		r = assumedRefill
	}
	return yieldRefills * r
}

// yieldRoom is how many more growth dials the yield rule lets start now:
// clientDials and warmDials in flight, latest how long after the burst
// began its latest client dial started, window the burst's yieldWindow. No
// limit without client dials, or once a client dial started past the
// window: misses that keep coming are demand, not a burst (the burst's own
// dials, however slow, all started within it).
func yieldRoom(clientDials, warmDials int, latest, window time.Duration) int {
	if clientDials <= 0 || latest >= window {
		return unlimited
	}
	return max(yieldFloor, clientDials/yieldShare) - warmDials
}

// pace is the refill after a burst (guarded by Pool.mu): from, the
// deficit to start over refillSpread, and how many it has started.
type pace struct {
	from    time.Time
	deficit int
	started int
	timer   Timer
}

// paceRoom is how many growth dials the pace lets start at elapsed since
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
		return unlimited
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

// paceRoomLocked is paceRoom for the pool now; when it holds growth back
// it makes sure a tick will look again. Callers hold Pool.mu.
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
	p.mu.Unlock()
	p.refillAll()
}

// growRoomLocked is how many of want growth dials the yield rule and the
// pace let start now: the yield's share while clients dial, the pace once
// none does. Callers hold Pool.mu.
func (p *Pool) growRoomLocked(now time.Time, want int) int {
	if p.clientDials > 0 {
		if room := yieldRoom(p.clientDials, p.warmDials, p.lastDialStart.Sub(p.burstFrom), p.window); want > room {
			want = room
			p.yielded = true
		}
		return want
	}
	want = p.paceRoomLocked(now, want)
	if want > 0 && !p.pace.from.IsZero() {
		p.pace.started += want
	}
	return want
}

// refillAll refills every key.
func (p *Pool) refillAll() {
	p.mu.Lock()
	keys := make([]*keyPool, 0, len(p.keys))
	for _, kp := range p.keys {
		keys = append(keys, kp)
	}
	p.mu.Unlock()
	for _, kp := range keys {
		p.refill(kp)
	}
}

// clientDialStartLocked counts a client dial. One that starts after a
// whole window without any begins a burst, whose window is yieldRefills of
// the longest refill time of any key; misses that recur with shorter gaps
// are the same burst, whose window has passed. Callers hold Pool.mu.
func (p *Pool) clientDialStartLocked() {
	now := p.now()
	if p.clientDials == 0 && now.Sub(p.lastDialEnd) >= p.window {
		var r time.Duration
		for _, kp := range p.keys {
			r = max(r, kp.refillTime)
		}
		p.burstFrom, p.window = now, yieldWindow(r)
	}
	p.clientDials++
	p.lastDialStart = now
}

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
	p.clientDialStartLocked()
	p.mu.Unlock()
	return p.clientDialDone
}

// clientDialDone ends one client dial; when it was the last and growth was
// held back in its burst, every key refills, at the pace after a burst.
func (p *Pool) clientDialDone() {
	p.mu.Lock()
	p.clientDials--
	if p.clientDials == 0 {
		p.lastDialEnd = p.now()
	}
	resume := p.clientDials == 0 && p.yielded
	if resume {
		p.yielded = false
		p.startPaceLocked(p.lastDialEnd)
	}
	p.mu.Unlock()
	if resume {
		p.refillAll() // the burst has passed: grow, at the pace
	}
}
