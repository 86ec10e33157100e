package upstream

import (
	"context"
	"errors"
	"math"
	"time"
)

// Remembered demand in the pool: loading it at start, writing it as the pool
// runs, and the warming state it implies (the stores are DemandMemory's).

// restore loads remembered demand, and starts the warming period if any key
// is remembered with demand left. A missing or unreadable memory is a cold
// start, logged once.
func (p *Pool) restore() {
	if p.cfg.Memory == nil || !p.cfg.Auto {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), memoryTimeout)
	now := p.now()
	got, err := p.cfg.Memory.Load(ctx, now)
	cancel()
	live := 0
	for _, r := range got {
		if r.RateAt(now) > 0 {
			live++
		}
	}
	switch {
	case errors.Is(err, errNoState):
		p.log.Info("warm pool: no remembered demand yet; starting cold", "reason", err)
	case err != nil:
		p.log.Warn("warm pool: remembered demand unreadable; starting cold", "err", err)
	case len(got) == 0:
		p.log.Info("warm pool: no remembered demand yet; starting cold")
	case live == 0:
		p.log.Info("warm pool: remembered demand has faded; starting cold", "keys", len(got))
	default:
		bound := p.cfg.WarmupBound
		if bound <= 0 {
			bound = defaultWarmupBound
		}
		p.log.Info("warm pool: starting from remembered demand", "keys", live, "warmup_bound", bound)
		p.mu.Lock()
		p.warmUntil = now.Add(bound)
		p.mu.Unlock()
	}
	p.mu.Lock()
	p.remembered = got
	p.mu.Unlock()
}

// Warming reports whether the pool is still filling up to its remembered
// demand: true from start until every key it remembers holds most
// (warmEnough) of its target, or WarmupBound has passed. Once false it
// stays false. Without remembered demand it is never true.
func (p *Pool) Warming() bool {
	if p == nil {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.warmUntil.IsZero() {
		return false
	}
	now := p.now()
	warm := !now.Before(p.warmUntil)
	if !warm {
		warm = true
		seen := 0
		for _, kp := range p.keys {
			if !kp.seeded {
				continue
			}
			seen++
			p.updateSizeLocked(kp, now)
			if float64(len(kp.warm)) < math.Ceil(warmEnough*float64(kp.size)) {
				warm = false
			}
		}
		if seen == 0 {
			// No remembered key is in use yet (the configured keys are
			// primed when serving starts): keep waiting for one, within
			// the bound.
			warm = false
		}
	}
	if warm {
		p.warmUntil = time.Time{}
	}
	return !warm
}

// saveTurn writes the demand every stateEvery until the pool closes.
func (p *Pool) saveTurn() {
	p.save()
	p.mu.Lock()
	if !p.closed {
		p.saver = p.clock.AfterFunc(stateEvery, p.saveTurn)
	}
	p.mu.Unlock()
}

// save writes what the pool remembers now: each key's long-memory peak,
// faded to now, and remembered keys not in use in this run, so that a
// restart with a key missing does not forget it.
func (p *Pool) save() {
	if p.cfg.Memory == nil || !p.cfg.Auto {
		return
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	now := p.now()
	out := map[string]Remembered{}
	for k, r := range p.remembered {
		if v := r.RateAt(now); v > 0 {
			out[k] = Remembered{Rate: v, RefillMS: r.RefillMS, At: now}
		}
	}
	for k, kp := range p.keys {
		p.demandLocked(kp, now) // folds the open windows into the peak
		v := kp.peak.RateAt(now)
		if v <= 0 {
			delete(out, k)
			continue
		}
		refill := kp.refillTime
		if refill == 0 && kp.seeded {
			refill = kp.seed.refill()
		}
		out[k] = Remembered{Rate: v, RefillMS: float64(refill) / float64(time.Millisecond), At: now}
	}
	p.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), memoryTimeout)
	defer cancel()
	err := p.cfg.Memory.Save(ctx, out)
	// Logged once per outage, not every stateEvery.
	p.mu.Lock()
	was := p.saveFailing
	p.saveFailing = err != nil
	p.mu.Unlock()
	switch {
	case err != nil && !was:
		p.log.Warn("warm pool: could not write remembered demand; retrying every few seconds", "err", err)
	case err == nil && was:
		p.log.Info("warm pool: remembered demand written again")
	}
}
