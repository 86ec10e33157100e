package balance

import (
	"time"

	"rtgate/server/routes"
	"rtgate/server/turns"
)

// firstAudioSpan is how far back the status page's first-audio percentiles
// look.
const firstAudioSpan = 5 * time.Minute

// firstAudioWindow is a deployment's times to first audio over the last
// firstAudioSpan: one fixed-size sketch per minute, in a ring, so its memory
// does not grow with traffic.
type firstAudioWindow struct {
	minutes [int(firstAudioSpan/time.Minute) + 1]struct {
		minute int64 // Unix minute the sketch counts; stale when older than the span
		sketch turns.Sketch
	}
}

func (w *firstAudioWindow) add(now time.Time, d time.Duration) {
	m := now.Unix() / 60
	slot := &w.minutes[m%int64(len(w.minutes))]
	if slot.minute != m {
		slot.minute, slot.sketch = m, turns.Sketch{}
	}
	slot.sketch.Add(d)
}

// recent merges the minutes within the span (the current one included).
func (w *firstAudioWindow) recent(now time.Time) turns.Sketch {
	var all turns.Sketch
	m := now.Unix() / 60
	for i := range w.minutes {
		if slot := &w.minutes[i]; m-slot.minute < int64(len(w.minutes)) {
			all.Merge(&slot.sketch)
		}
	}
	return all
}

// ObserveFirstAudio records a turn on d that waited took for its first
// audio: latency-based routing ranks by it, the status page shows it.
func (b *Balancer) ObserveFirstAudio(d *routes.Deployment, took time.Duration) {
	now := b.now()
	b.mu.Lock()
	defer b.mu.Unlock()
	h := b.host(d)
	h.latency.add(now, took.Seconds())
	h.firstAudio.add(now, took)
}
