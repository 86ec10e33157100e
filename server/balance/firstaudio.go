package balance

import (
	"time"

	"rtgate/internal/sketch"
	"rtgate/server/routes"
)

// firstAudioSpan is how far back the status page's first-audio percentiles
// look.
const firstAudioSpan = 5 * time.Minute

// firstAudioWindow is a deployment's times to first audio over the last
// firstAudioSpan: one fixed-size sketch per minute, in a ring, so its memory
// does not grow with traffic.
type firstAudioWindow struct {
	minutes [int(firstAudioSpan/time.Minute) + 1]minuteSlot
}

// minuteSlot is one minute of a firstAudioWindow.
type minuteSlot struct {
	minute   int64 // Unix minute the sketch counts; stale when older than the span
	sketch   sketch.Durations
	failures int // turns the upstream failed (penalty samples)
}

// slot is the current minute's, cleared when it held an older minute.
func (w *firstAudioWindow) slot(now time.Time) *minuteSlot {
	m := now.Unix() / 60
	slot := &w.minutes[m%int64(len(w.minutes))]
	if slot.minute != m {
		*slot = minuteSlot{minute: m}
	}
	return slot
}

func (w *firstAudioWindow) add(now time.Time, d time.Duration) { w.slot(now).sketch.Add(d) }

func (w *firstAudioWindow) fail(now time.Time) { w.slot(now).failures++ }

// recent merges the minutes within the span (the current one included).
func (w *firstAudioWindow) recent(now time.Time) (all sketch.Durations, failures int) {
	m := now.Unix() / 60
	for i := range w.minutes {
		if slot := &w.minutes[i]; m-slot.minute < int64(len(w.minutes)) {
			all.Merge(&slot.sketch)
			failures += slot.failures
		}
	}
	return all, failures
}

// ObserveFirstAudio records a voice turn on d that waited took for its
// first audio: latency-based routing ranks by it, the status page shows it.
func (b *Balancer) ObserveFirstAudio(d *routes.Deployment, took time.Duration) {
	b.ObserveFirstOutput(d, took, false)
}

// ObserveFirstOutput records a turn on d that waited took for its first
// output: a voice turn's first audio (text false), or a text-only
// session's first text, which routing ranks by only where no deployment
// of the group has voice samples. The status page shows the voice turns'.
func (b *Balancer) ObserveFirstOutput(d *routes.Deployment, took time.Duration, text bool) {
	now := b.now()
	b.mu.Lock()
	defer b.mu.Unlock()
	h := b.host(d)
	if text {
		h.textLatency.add(now, took.Seconds())
		return
	}
	h.latency.add(now, took.Seconds())
	h.firstAudio.add(now, took)
}

// Penalty is the value of a penalty sample (ObservePenalty): a turn the
// upstream failed weighs in a deployment's mean first audio as a turn that
// waited this long (as long as turns.FirstOutputBound lets a turn wait for
// its first output before it counts as failed). It ages out like every
// sample.
const Penalty = 10 * time.Second

// ObservePenalty records a turn on d that the upstream failed (a failed
// response, a server_error or rate limit, no first output within
// turns.FirstOutputBound): a sample of Penalty in the list routing
// ranks by, which ages out like the others, so that a deployment that
// accepts sessions and fails their turns stops attracting connects. The
// status page counts it.
func (b *Balancer) ObservePenalty(d *routes.Deployment, text bool) {
	now := b.now()
	b.mu.Lock()
	defer b.mu.Unlock()
	h := b.host(d)
	if text {
		h.textLatency.add(now, Penalty.Seconds())
		return
	}
	h.latency.add(now, Penalty.Seconds())
	h.firstAudio.fail(now)
}
