package recording

import (
	"encoding/base64"
	"encoding/json"
	"slices"
	"strconv"
	"sync"
	"time"
)

// SampleRate is the WAV's rate: the Realtime API's PCM16 rate.
const SampleRate = 24000

// Limits bound what one recording holds in memory.
type Limits struct {
	// MaxAudio is the most audio kept per channel; past it the channel stops
	// growing (0 = 1 hour, 172.8 MB per channel).
	MaxAudio time.Duration
	// MaxEventBytes is the most events.jsonl kept; past it no further
	// event is kept (0 = 32 MiB).
	MaxEventBytes int
}

func (l Limits) maxSamples() int {
	d := l.MaxAudio
	if d <= 0 {
		d = time.Hour
	}
	return samplesAt(min(d, 24*time.Hour))
}

func (l Limits) maxEventBytes() int {
	if l.MaxEventBytes <= 0 {
		return 32 << 20
	}
	return l.MaxEventBytes
}

// samplesAt is the sample index d after the start.
func samplesAt(d time.Duration) int { return int(int64(d) * SampleRate / int64(time.Second)) }

// Recorder collects one Realtime session's recording as it runs. It is safe
// for concurrent use (the client and upstream sides call it from different
// goroutines), costs nothing until called, and copies what it keeps: the
// caller may reuse p once a call returns.
type Recorder struct {
	mu         sync.Mutex
	id         string
	start      time.Time
	maxSamples int
	maxEvents  int
	done       *Recording

	ch      [2]channel
	ev      []byte // events.jsonl less the assistant's audio refs
	refs    []aref // the assistant's audio refs, final only at Finish
	scratch []byte
	pcm     []byte

	kept, dropped int     // events kept, events not kept past maxEvents
	droppedAt     float64 // t_ms of the first event not kept

	in, out            audioFormat
	userEnd, asstEnd   int // where the next user / assistant audio may start
	items              map[string]*itemAudio
	responses          map[string]*respAudio
	truncates, cancels int
}

// channel is one side's audio: PCM16 LE mono at 24 kHz, index = sample*2.
type channel struct {
	pcm      []byte
	formats  []string       // the formats its audio came in, in order first seen
	capCut   int            // samples not kept past MaxAudio
	silenced int            // samples silenced by interruptions
	skipped  map[string]int // events in a format not recorded, by format
	bad      int            // audio events whose payload did not decode
	prev     int16          // the last 8 kHz sample, for interpolation
}

// aref is an assistant delta's ref: interruptions may cut it after its
// line was written, so the line's ref is rendered at Finish.
type aref struct {
	AudioRef
	pos       int // where its line's ref goes in ev; -1 when the line was not kept
	itemStart int // the item's sample index of the ref's first sample
	capCut    int // of its samples, how many were never written (MaxAudio)
}

type itemAudio struct {
	refs  []int
	n     int // samples so far
	cutAt int // the truncate's audio_end_ms in samples; -1 when not truncated
	cutTo int // the channel position of cutAt
	resp  *respAudio
}

type respAudio struct {
	refs        []int
	first, end  int
	placed, cut bool
}

// NewRecorder starts the recording of session sessionID, whose offsets
// count from start.
func NewRecorder(sessionID string, start time.Time, lim Limits) *Recorder {
	return &Recorder{id: sessionID, start: start, maxSamples: lim.maxSamples(), maxEvents: lim.maxEventBytes(),
		in: audioFormat{name: "pcm16"}, out: audioFormat{name: "pcm16"}}
}

// Client records one client text event (JSON) as it came.
func (r *Recorder) Client(at time.Time, p []byte) { r.event(at, true, p) }

// Upstream records one upstream text event as the client got it.
func (r *Recorder) Upstream(at time.Time, p []byte) { r.event(at, false, p) }

// fields is what the per-event path reads of an event's top level.
type fields struct {
	typ, itemID, respID []byte
	audio               member
	hasAudio            bool
}

func (r *Recorder) event(at time.Time, client bool, p []byte) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.done != nil {
		return
	}
	d := at.Sub(r.start)
	ms := float64(d) / float64(time.Millisecond)
	sample := max(0, samplesAt(d))

	var f fields
	audioKey := "delta"
	if client {
		audioKey = "audio"
	}
	ok := walkObject(p, func(m member) bool {
		switch string(m.key(p)) {
		case "type":
			f.typ = m.str(p)
		case audioKey:
			if p[m.valStart] == '"' {
				f.audio, f.hasAudio = m, true
			}
		case "item_id":
			f.itemID = m.str(p)
		case "response_id":
			f.respID = m.str(p)
		}
		return true
	})
	typ := string(f.typ) // small; the switch below needs it anyway
	isAudio := ok && f.hasAudio && ((client && typ == "input_audio_buffer.append") ||
		(!client && (typ == "response.output_audio.delta" || typ == "response.audio.delta")))

	if !isAudio {
		if ok {
			r.steer(client, typ, p, sample)
		}
		r.line(ms, client, p, ok && json.Valid(p), nil, false)
		return
	}
	b64 := f.audio.str(p)
	if b64 == nil { // escaped: rare, decode the JSON string properly
		var s string
		if json.Unmarshal(p[f.audio.valStart:f.audio.valEnd], &s) == nil {
			b64 = []byte(s)
		}
	}
	r.scratch = without(r.scratch[:0], p, f.audio)
	body := r.scratch
	if client {
		ref := r.user(sample, b64)
		r.line(ms, client, body, json.Valid(body), &ref, false)
		return
	}
	idx := r.assistant(sample, b64, f.itemID, f.respID)
	if idx < 0 {
		ref := AudioRef{Channel: 1, NotRecorded: r.out.name}
		r.line(ms, client, body, json.Valid(body), &ref, false)
		return
	}
	r.refs[idx].pos = r.line(ms, client, body, json.Valid(body), nil, true)
}

// line appends one events.jsonl line and returns where an assistant ref
// goes in it (pending), or -1 when the line was not kept.
func (r *Recorder) line(ms float64, client bool, body []byte, valid bool, ref *AudioRef, pending bool) int {
	if r.dropped > 0 || len(r.ev)+len(body)+160 > r.maxEvents {
		if r.dropped == 0 {
			r.droppedAt = ms
		}
		r.dropped++
		return -1
	}
	r.kept++
	r.ev = append(r.ev, `{"t_ms":`...)
	r.ev = strconv.AppendFloat(r.ev, ms, 'f', 3, 64)
	if client {
		r.ev = append(r.ev, `,"from":"client",`...)
	} else {
		r.ev = append(r.ev, `,"from":"upstream",`...)
	}
	if valid {
		r.ev = append(r.ev, `"event":`...)
		r.ev = append(r.ev, body...)
	} else {
		q, _ := json.Marshal(string(body))
		r.ev = append(r.ev, `"text":`...)
		r.ev = append(r.ev, q...)
	}
	pos := len(r.ev)
	if ref != nil {
		r.ev = ref.appendJSON(r.ev)
	}
	r.ev = append(r.ev, "}\n"...)
	return pos
}

// appendJSON appends `,"audio":{...}`.
func (a AudioRef) appendJSON(b []byte) []byte {
	b = append(b, `,"audio":{"channel":`...)
	b = strconv.AppendInt(b, int64(a.Channel), 10)
	if a.NotRecorded != "" {
		q, _ := json.Marshal(a.NotRecorded)
		b = append(b, `,"not_recorded":`...)
		b = append(b, q...)
		return append(b, '}')
	}
	b = append(b, `,"offset":`...)
	b = strconv.AppendInt(b, int64(a.Offset), 10)
	b = append(b, `,"samples":`...)
	b = strconv.AppendInt(b, int64(a.Samples), 10)
	if a.Cut > 0 {
		b = append(b, `,"cut":`...)
		b = strconv.AppendInt(b, int64(a.Cut), 10)
	}
	return append(b, '}')
}

// user places an append's audio on channel 0.
func (r *Recorder) user(sample int, b64 []byte) AudioRef {
	if r.in.kind == fmtOther {
		r.skip(0, r.in.name)
		return AudioRef{Channel: 0, NotRecorded: r.in.name}
	}
	off := max(sample, r.userEnd)
	ref, ok := r.place(0, off, b64, r.in)
	if ok {
		r.userEnd = off + ref.Samples
	}
	return ref
}

// assistant places an output delta on channel 1 and returns its ref's
// index, or -1 when its format is not recorded.
func (r *Recorder) assistant(sample int, b64, itemID, respID []byte) int {
	if r.out.kind == fmtOther {
		r.skip(1, r.out.name)
		return -1
	}
	if r.items == nil {
		r.items, r.responses = map[string]*itemAudio{}, map[string]*respAudio{}
	}
	it := r.items[string(itemID)]
	if it == nil {
		it = &itemAudio{cutAt: -1}
		r.items[string(itemID)] = it
	}
	resp := r.responses[string(respID)]
	if resp == nil {
		resp = &respAudio{}
		r.responses[string(respID)] = resp
	}
	if it.resp == nil {
		it.resp = resp
	}
	var a aref
	a.itemStart = it.n
	if it.cutAt >= 0 || resp.cut {
		// The client already stopped this item (or its response was
		// cancelled): none of it is heard.
		n := r.samplesIn(b64, r.out)
		a.AudioRef = AudioRef{Channel: 1, Offset: it.cutTo, Samples: n, Cut: n}
		if resp.cut {
			a.Offset = resp.end
		}
		a.capCut = n
	} else {
		off := resp.end
		if !resp.placed {
			off = max(sample, r.asstEnd)
			resp.first, resp.placed = off, true
		}
		ref, _ := r.place(1, off, b64, r.out)
		a.AudioRef, a.capCut = ref, ref.Cut
		resp.end = off + ref.Samples
		r.asstEnd = max(r.asstEnd, resp.end)
	}
	it.n += a.Samples
	idx := len(r.refs)
	r.refs = append(r.refs, a)
	it.refs = append(it.refs, idx)
	resp.refs = append(resp.refs, idx)
	return idx
}

// place decodes base64 audio in format f into channel c at sample off, up
// to the channel's cap. ok is false when the payload did not decode.
func (r *Recorder) place(c, off int, b64 []byte, f audioFormat) (AudioRef, bool) {
	ch := &r.ch[c]
	ch.seen(f.name)
	ref := AudioRef{Channel: c, Offset: off}
	enc := base64.StdEncoding
	if f.kind == fmtPCM16 && off*2 >= len(ch.pcm) && off < r.maxSamples {
		// The common case: at or past the end, decoded in place.
		old := len(ch.pcm)
		need := enc.DecodedLen(len(b64))
		ch.pcm = zeroTo(ch.pcm, off*2)
		ch.pcm = grow(ch.pcm, need)
		n, err := enc.Decode(ch.pcm[off*2:off*2+need], b64)
		if err != nil {
			ch.pcm = ch.pcm[:old]
			ch.bad++
			return ref, false
		}
		s := n / 2
		keep := min(s, r.maxSamples-off)
		ch.pcm = ch.pcm[:(off+keep)*2]
		ref.Samples, ref.Cut = s, s-keep
		ch.capCut += s - keep
		return ref, true
	}
	raw, err := enc.AppendDecode(r.pcm[:0], b64)
	r.pcm = raw
	if err != nil {
		ch.bad++
		return ref, false
	}
	pcm := raw
	if f.kind != fmtPCM16 {
		// G.711: 8 kHz, one byte a sample, to 24 kHz PCM16.
		r.scratchG711(c, raw, f.kind)
		pcm = r.pcm[len(raw):]
	}
	s := len(pcm) / 2
	keep := min(s, max(0, r.maxSamples-off))
	if keep > 0 {
		end := (off + keep) * 2
		if end > len(ch.pcm) {
			ch.pcm = zeroTo(ch.pcm, end)
		}
		copy(ch.pcm[off*2:end], pcm[:keep*2])
	}
	ref.Samples, ref.Cut = s, s-keep
	ch.capCut += s - keep
	return ref, true
}

// scratchG711 appends raw's G.711 samples, decoded and upsampled ×3 by
// linear interpolation, to r.pcm (after raw itself).
func (r *Recorder) scratchG711(c int, raw []byte, kind uint8) {
	ch := &r.ch[c]
	out := r.pcm
	for _, b := range raw {
		var cur int16
		if kind == fmtULaw {
			cur = ulaw(b)
		} else {
			cur = alaw(b)
		}
		p, d := int32(ch.prev), int32(cur)-int32(ch.prev)
		s1, s2 := int16(p+d/3), int16(p+2*d/3)
		out = append(out, byte(s1), byte(uint16(s1)>>8), byte(s2), byte(uint16(s2)>>8), byte(cur), byte(uint16(cur)>>8))
		ch.prev = cur
	}
	r.pcm = out
}

// samplesIn is how many samples b64 holds in format f, without decoding.
func (r *Recorder) samplesIn(b64 []byte, f audioFormat) int {
	n := len(b64) / 4 * 3
	for i := len(b64) - 1; i >= 0 && i >= len(b64)-2 && b64[i] == '='; i-- {
		n--
	}
	if f.kind == fmtPCM16 {
		return n / 2
	}
	return n * 3
}

// zeroTo extends b with zeros to length n.
func zeroTo(b []byte, n int) []byte {
	old := len(b)
	if n <= old {
		return b
	}
	b = grow(b, n-old)[:n]
	clear(b[old:])
	return b
}

// grow makes room for n more bytes, doubling (append grows a large slice
// by a quarter, which copies an hour-long channel about four times over
// as it grows; doubling, once).
func grow(b []byte, n int) []byte {
	if cap(b)-len(b) >= n {
		return b
	}
	nb := make([]byte, len(b), max(2*cap(b), len(b)+n, 64<<10))
	copy(nb, b)
	return nb
}

func (ch *channel) seen(name string) {
	if !slices.Contains(ch.formats, name) {
		ch.formats = append(ch.formats, name)
	}
}

func (r *Recorder) skip(c int, name string) {
	ch := &r.ch[c]
	if ch.skipped == nil {
		ch.skipped = map[string]int{}
	}
	ch.skipped[name]++
}

// steer reads the few small events that change the timeline or the format.
func (r *Recorder) steer(client bool, typ string, p []byte, sample int) {
	switch {
	case client && typ == "session.update", !client && (typ == "session.created" || typ == "session.updated"):
		r.formats(p)
	case client && typ == "conversation.item.truncate":
		var e struct {
			ItemID     string   `json:"item_id"`
			AudioEndMs *float64 `json:"audio_end_ms"`
		}
		if json.Unmarshal(p, &e) == nil && e.AudioEndMs != nil {
			r.truncate(e.ItemID, int(*e.AudioEndMs*SampleRate/1000))
		}
	case !client && typ == "response.done":
		var e struct {
			Response struct {
				ID     string `json:"id"`
				Status string `json:"status"`
			} `json:"response"`
		}
		if json.Unmarshal(p, &e) == nil && e.Response.Status == "cancelled" {
			r.cancel(e.Response.ID, sample)
		}
	}
}

// cutRef silences ref idx from channel position from on.
func (r *Recorder) cutRef(idx, from int) {
	a := &r.refs[idx]
	end := a.Offset + a.Samples
	from = max(from, a.Offset)
	cut := end - from
	if cut <= a.Cut {
		return
	}
	// Zero only what was written and not already cut: what lies past
	// the old cut may hold later audio by now.
	zs, ze := from, min(end-a.Cut, end-a.capCut)
	if ze > zs {
		ch := &r.ch[1]
		ze = min(ze, len(ch.pcm)/2)
		if ze > zs {
			clear(ch.pcm[zs*2 : ze*2])
			ch.silenced += ze - zs
		}
	}
	a.Cut = cut
}

// truncate: the client stopped item itemID's audio after at samples.
func (r *Recorder) truncate(itemID string, at int) {
	it := r.items[itemID]
	if it == nil {
		return
	}
	r.truncates++
	it.cutAt, it.cutTo = at, -1
	itemEnd := 0 // where the item's audio ended on the channel
	for _, idx := range it.refs {
		a := &r.refs[idx]
		itemEnd = max(itemEnd, a.Offset+a.Samples)
		if a.itemStart+a.Samples <= at {
			continue
		}
		from := a.Offset + max(0, at-a.itemStart)
		if it.cutTo < 0 {
			it.cutTo = from
		}
		r.cutRef(idx, from)
	}
	if it.cutTo < 0 { // the cut is past all the item's audio so far
		it.cutTo = itemEnd
		return
	}
	if itemEnd >= r.asstEnd {
		r.asstEnd = it.cutTo // the player stopped there
	}
	if it.resp != nil && it.resp.end > it.cutTo {
		it.resp.end = it.cutTo
	}
}

// cancel: response id ended cancelled at sample at; what was placed after
// it was never heard.
func (r *Recorder) cancel(id string, at int) {
	resp := r.responses[id]
	if resp == nil {
		return
	}
	r.cancels++
	resp.cut = true
	endBefore := resp.end
	for _, idx := range resp.refs {
		a := &r.refs[idx]
		if a.Offset+a.Samples > at {
			r.cutRef(idx, at)
		}
	}
	if endBefore > at {
		stop := max(at, resp.first)
		if endBefore >= r.asstEnd {
			r.asstEnd = stop
		}
		resp.end = stop
	}
}
