package upstream

import (
	"sync"
	"time"
)

// manualClock is a Clock that moves only when the test says so. Timers due
// in an Advance run in due order, synchronously, each with the clock set to
// its due time, so a pool's sizing, backoff, expiry and liveness can be
// asserted at exact instants. Timers their callbacks arm within the same
// Advance run in it too.
type manualClock struct {
	mu     sync.Mutex
	now    time.Time
	timers []*manualTimer
}

type manualTimer struct {
	c    *manualClock
	at   time.Time
	f    func()
	done bool // fired or stopped
}

func newManualClock() *manualClock {
	return &manualClock{now: time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)}
}

func (c *manualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *manualClock) AfterFunc(d time.Duration, f func()) Timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &manualTimer{c: c, at: c.now.Add(d), f: f}
	c.timers = append(c.timers, t)
	return t
}

func (t *manualTimer) Stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	was := !t.done
	t.done = true
	return was
}

// Advance moves the clock forward by d, running every timer that falls due.
func (c *manualClock) Advance(d time.Duration) {
	c.mu.Lock()
	end := c.now.Add(d)
	c.mu.Unlock()
	for {
		c.mu.Lock()
		var next *manualTimer
		live := c.timers[:0]
		for _, t := range c.timers {
			if t.done {
				continue
			}
			live = append(live, t)
			if !t.at.After(end) && (next == nil || t.at.Before(next.at)) {
				next = t
			}
		}
		clear(c.timers[len(live):])
		c.timers = live
		if next == nil {
			c.now = end
			c.mu.Unlock()
			return
		}
		next.done = true
		if next.at.After(c.now) {
			c.now = next.at
		}
		c.mu.Unlock()
		next.f()
	}
}
