package soak

import (
	"context"
	"sync"
	"time"
)

// sampler scrapes the gateway's metrics at a fixed interval and keeps the
// readings and their peak.
type sampler struct {
	adm   *admin
	since time.Time

	mu       sync.Mutex
	readings []Reading
	peak     Reading
	failures int

	cancel context.CancelFunc
	done   chan struct{}
}

func startSampler(ctx context.Context, adm *admin, every time.Duration, since time.Time) *sampler {
	ctx, cancel := context.WithCancel(ctx)
	s := &sampler{adm: adm, since: since, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			rd, err := adm.read(ctx)
			if err != nil {
				if ctx.Err() != nil {
					return
				}
				s.mu.Lock()
				s.failures++
				s.mu.Unlock()
			} else {
				s.add(rd)
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return s
}

// add records a reading taken now.
func (s *sampler) add(rd Reading) {
	rd.T = time.Since(s.since).Seconds()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.readings = append(s.readings, rd)
	s.peak = peakOf(s.peak, rd)
}

// last returns the latest reading (zero before the first).
func (s *sampler) last() Reading {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.readings) == 0 {
		return Reading{}
	}
	return s.readings[len(s.readings)-1]
}

// stop ends the sampling and returns every reading, the peak of each value
// and the number of failed scrapes.
func (s *sampler) stop() ([]Reading, Reading, int) {
	s.cancel()
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.readings, s.peak, s.failures
}

// peakOf is the larger of each value (T is left zero: each value peaks at
// its own time).
func peakOf(a, b Reading) Reading {
	return Reading{
		RSS:          max(a.RSS, b.RSS),
		FDs:          max(a.FDs, b.FDs),
		Goroutines:   max(a.Goroutines, b.Goroutines),
		HeapInuse:    max(a.HeapInuse, b.HeapInuse),
		HeapAlloc:    max(a.HeapAlloc, b.HeapAlloc),
		SessionsOpen: max(a.SessionsOpen, b.SessionsOpen),
		WarmSockets:  max(a.WarmSockets, b.WarmSockets),
	}
}
