package turns

import (
	"bytes"
	"time"

	"rtgate/internal/jsonscan"
)

// What the gateway forwarded upstream of the client's events, read by the
// client side's inspector after each frame went: the response.create
// (queued per conversation, with its event_id's hash), the commit of the
// audio buffer, and, while server VAD is on, each append's audio length and
// the moment it went (audioClock), so that speech_stopped's audio_end_ms
// finds when the upstream had that audio. Nothing is rewritten, and nothing
// allocates: the fields are found by a hand scan of the unmasked copy the
// scanner offers.

// clientMark is what a client event is to the tracker.
type clientMark uint8

const (
	notClient clientMark = iota
	clientCreate
	clientCommit
	clientAppend
)

// ClientWants reports whether the tracker reads the client's event of type
// typ whole (Client): response.create and input_audio_buffer.commit
// always, input_audio_buffer.append while server VAD makes responses (its
// audio is timed).
func (w *Watch) ClientWants(typ []byte) bool {
	w.client = notClient
	if w.Off {
		return false
	}
	switch string(typ) {
	case "input_audio_buffer.append":
		if w.timed.Load() {
			w.client = clientAppend
		}
	case "response.create":
		w.client = clientCreate
	case "input_audio_buffer.commit":
		w.client = clientCommit
	}
	return w.client != notClient
}

// Client reads a client event ClientWants asked for, once the gateway has
// forwarded it; queued: it went to the queue of an upstream still to come
// (connecting, or a resume under way), which it reaches at Attached.
func (w *Watch) Client(p []byte, queued bool) {
	m := w.client
	w.client = notClient
	t := &w.Tracker
	at := func() time.Time {
		if queued {
			return time.Time{} // stamped at Attached
		}
		return t.now()
	}
	switch m {
	case clientAppend:
		v, ok := jsonscan.String(p, `"audio"`)
		if !ok {
			return
		}
		n := len(v) - bytes.Count(v, []byte{'\\'}) // base64's "/" may come escaped
		t.mu.Lock()
		t.state().audio.add(at(), n, t.perMS)
		t.mu.Unlock()
	case clientCreate:
		conv := auto
		if v, ok := jsonscan.String(p, `"conversation"`); ok && string(v) == "none" {
			conv = none
		}
		id, _ := jsonscan.String(p, `"event_id"`)
		t.mu.Lock()
		st := t.state()
		st.creates[conv].push(pending{at: at(), id: hash(id)})
		if conv == auto {
			st.commit = time.Time{} // the response answers the create
		}
		t.mu.Unlock()
	case clientCommit:
		t.mu.Lock()
		if t.createResponse && !queued { // a queued commit is not timed
			t.state().commit = t.now()
		}
		t.mu.Unlock()
	}
}

// Attached is the session's upstream attached: the client's events queued
// for it go now, and are timed from now.
func (t *Tracker) Attached() {
	t.mu.Lock()
	defer t.mu.Unlock()
	st := t.turnState
	if st == nil {
		return
	}
	now := t.now()
	for c := range st.creates {
		for i := range st.creates[c].q {
			if p := &st.creates[c].q[i]; p.at.IsZero() {
				p.at = now
			}
		}
	}
	st.audio.attached(now)
}

// The conversations a create goes to.
const (
	auto = 0
	none = 1
)

// pending is a forwarded response.create not answered yet.
type pending struct {
	at time.Time // zero while queued for an upstream still to come
	id uint64    // hash of its event_id; 0 without one
}

// maxPending bounds the creates kept per conversation: a client that sends
// creates the upstream never answers keeps only its latest.
const maxPending = 16

// queue is a conversation's pending creates, oldest first.
type queue struct{ q []pending }

func (q *queue) push(p pending) {
	if len(q.q) == maxPending {
		q.q = append(q.q[:0], q.q[1:]...)
	}
	q.q = append(q.q, p)
}

func (q *queue) front() (pending, bool) {
	if len(q.q) == 0 {
		return pending{}, false
	}
	return q.q[0], true
}

func (q *queue) pop() (time.Time, bool) {
	p, ok := q.front()
	if ok {
		q.q = append(q.q[:0], q.q[1:]...)
	}
	return p.at, ok
}

// remove takes the create with event id off the queue.
func (q *queue) remove(id string) bool {
	h := hash([]byte(id))
	for i, p := range q.q {
		if p.id == h {
			q.q = append(q.q[:i], q.q[i+1:]...)
			return true
		}
	}
	return false
}

func (q *queue) reset() { q.q = q.q[:0] }

// hash is FNV-1a of an event id (0 for none).
func hash(b []byte) uint64 {
	if len(b) == 0 {
		return 0
	}
	h := uint64(14695981039346656037)
	for _, c := range b {
		h = (h ^ uint64(c)) * 1099511628211
	}
	return h | 1
}

// audioClock times the audio forwarded upstream: the session's audio so far
// (in milliseconds, as audio_end_ms counts it: all audio written during the
// session) and, for the latest appends, how much audio each ended at and
// when it went. Its marks are made at the first timed append, 16 bytes
// each.
type audioClock struct {
	ms    float64
	base  time.Time // the marks' times are since base
	marks []audioMark
	next  int
	full  bool
}

type audioMark struct {
	endMS float64
	at    time.Duration // since base, plus 1; 0 while queued for an upstream still to come
}

// audioMarks is how many appends the clock keeps: at 20 to 100 ms per
// append, 2.5 to 13 s of audio, far more than speech_stopped lags the
// audio it points at.
const audioMarks = 128

// add is an append of b64 base64 characters forwarded at now (zero while
// queued), of audio of perMS bytes a millisecond (0: PCM16 at 24 kHz).
func (c *audioClock) add(now time.Time, b64 int, perMS float64) {
	if c.marks == nil {
		c.marks = make([]audioMark, audioMarks)
	}
	if perMS == 0 {
		perMS = 48
	}
	c.ms += float64(b64/4*3+(b64%4)*3/4) / perMS
	c.marks[c.next] = audioMark{endMS: c.ms, at: c.since(now)}
	c.next++
	if c.next == len(c.marks) {
		c.next, c.full = 0, true
	}
}

// since is now as a mark holds it (0: zero, queued).
func (c *audioClock) since(now time.Time) time.Duration {
	if now.IsZero() {
		return 0
	}
	if c.base.IsZero() {
		c.base = now
	}
	return now.Sub(c.base) + 1
}

// attached stamps the marks of appends that were queued with now.
func (c *audioClock) attached(now time.Time) {
	for i := range c.marks {
		if m := &c.marks[i]; m.at == 0 && m.endMS > 0 {
			m.at = c.since(now)
		}
	}
}

// at is when the append that brought the audio up to ms went; false when
// that append is not among those kept (or the audio never came).
func (c *audioClock) at(ms int64) (time.Time, bool) {
	n := c.next
	if c.full {
		n = len(c.marks)
	}
	target := float64(ms) - 0.5 // audio_end_ms is rounded
	for i := range n {
		m := c.marks[(c.next-n+i+len(c.marks))%len(c.marks)]
		if m.endMS >= target {
			if (i == 0 && c.full) || m.at == 0 { // not kept, or still queued
				return time.Time{}, false
			}
			return c.base.Add(m.at - 1), true
		}
	}
	return time.Time{}, false
}

// reset starts counting from zero (a fresh upstream).
func (c *audioClock) reset() { c.ms, c.next, c.full = 0, 0, false }

// bytesPerMS is the bytes per millisecond of an input audio format: GA's
// audio.input.format (type, rate) or beta's input_audio_format; was for
// one it does not know.
func bytesPerMS(typ string, rate int, was float64) float64 {
	switch typ {
	case "audio/pcmu", "audio/pcma", "g711_ulaw", "g711_alaw":
		return 8
	case "audio/pcm":
		if rate <= 0 {
			rate = 24000
		}
		return float64(rate) * 2 / 1000
	case "pcm16":
		return 48
	}
	return was
}
