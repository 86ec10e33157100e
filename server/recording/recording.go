package recording

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
)

// The object names of a recording under <prefix><session_id>/.
const (
	AudioObject  = "audio.wav"
	EventsObject = "events.jsonl"
	MetaObject   = "meta.json"
)

// Recording is one finished session's recording: the three objects as
// they are stored.
type Recording struct {
	SessionID      string
	Started, Ended time.Time
	WAV            []byte // audio.wav
	Events         []byte // events.jsonl
	Meta           []byte // meta.json
}

// Size is the bytes the recording takes in a store.
func (r *Recording) Size() int { return len(r.WAV) + len(r.Events) + len(r.Meta) }

// Event is one line of events.jsonl.
type Event struct {
	TMs  float64         `json:"t_ms"`
	From string          `json:"from"` // "client" or "upstream"
	Raw  json.RawMessage `json:"event,omitempty"`
	// Text is a text frame that was not JSON, as it came (then Raw is nil).
	Text  string    `json:"text,omitempty"`
	Audio *AudioRef `json:"audio,omitempty"`
}

// Type is the event's type, "" when it has none.
func (e Event) Type() string {
	var t struct {
		Type string `json:"type"`
	}
	_ = json.Unmarshal(e.Raw, &t)
	return t.Type
}

// AudioRef says where an event's audio payload is in the WAV.
type AudioRef struct {
	Channel int `json:"channel"` // 0 the user, 1 the assistant
	Offset  int `json:"offset"`  // the first sample's index in the channel
	Samples int `json:"samples"` // the payload's length in samples (24 kHz)
	// Cut is how many of the last samples are not in the WAV: silenced by
	// an interruption (the caller never heard them) or past MaxAudio.
	Cut int `json:"cut,omitempty"`
	// NotRecorded names the audio format when it was not recorded.
	NotRecorded string `json:"not_recorded,omitempty"`
}

// MetaInfo is meta.json.
type MetaInfo struct {
	SessionID  string        `json:"session_id"`
	Started    time.Time     `json:"started"`
	Ended      time.Time     `json:"ended"`
	DurationMs float64       `json:"duration_ms"`
	SampleRate int           `json:"sample_rate"`
	Channels   []ChannelInfo `json:"channels"`
	Events     int           `json:"events"`                    // lines in events.jsonl
	Dropped    int           `json:"events_not_kept,omitempty"` // past MaxEventBytes
	Resampling string        `json:"resampling,omitempty"`
	// Notes say, in words, what was cut or not recorded and why.
	Notes []string `json:"notes,omitempty"`
}

// ChannelInfo describes one WAV channel.
type ChannelInfo struct {
	Index   int      `json:"index"`
	Source  string   `json:"source"`            // "user" or "assistant"
	Formats []string `json:"formats,omitempty"` // as the session sent them, before conversion
	Samples int      `json:"samples"`           // the channel's length
	// CutSamples were past MaxAudio; Silenced were cut by interruptions.
	CutSamples int            `json:"cut_samples,omitempty"`
	Silenced   int            `json:"silenced_samples,omitempty"`
	NotRecord  map[string]int `json:"events_not_recorded,omitempty"` // by format
	Undecoded  int            `json:"events_undecodable,omitempty"`
}

// Finish ends the recording at end and returns it. Later calls return the
// same recording; events recorded after it are ignored.
func (r *Recorder) Finish(end time.Time) *Recording {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.done != nil {
		return r.done
	}
	rec := &Recording{SessionID: r.id, Started: r.start, Ended: end}
	rec.WAV = wav(r.ch[0].pcm, r.ch[1].pcm)
	rec.Events = r.events()
	meta := MetaInfo{SessionID: r.id, Started: r.start, Ended: end, DurationMs: float64(end.Sub(r.start)) / float64(time.Millisecond),
		SampleRate: SampleRate, Events: r.kept, Dropped: r.dropped}
	var notes []string
	for i, src := range []string{"user", "assistant"} {
		ch := &r.ch[i]
		meta.Channels = append(meta.Channels, ChannelInfo{Index: i, Source: src, Formats: ch.formats, Samples: len(ch.pcm) / 2,
			CutSamples: ch.capCut, Silenced: ch.silenced, NotRecord: ch.skipped, Undecoded: ch.bad})
		if ch.capCut > 0 {
			notes = append(notes, fmt.Sprintf("channel %d (%s): %d samples past MaxAudio (%s) not recorded", i, src, ch.capCut, time.Duration(r.maxSamples)*time.Second/SampleRate))
		}
		for _, f := range slices.Sorted(maps.Keys(ch.skipped)) {
			notes = append(notes, fmt.Sprintf("channel %d (%s): %d audio events in format %s not recorded (only PCM16 24 kHz and G.711 are)", i, src, ch.skipped[f], f))
		}
		if ch.bad > 0 {
			notes = append(notes, fmt.Sprintf("channel %d (%s): %d audio events whose base64 did not decode not recorded", i, src, ch.bad))
		}
		if slices.ContainsFunc(ch.formats, func(f string) bool { return strings.HasPrefix(f, "g711") }) {
			meta.Resampling = "G.711 decoded to PCM16 and upsampled x3 (8 to 24 kHz) by linear interpolation"
		}
	}
	if r.ch[1].silenced > 0 {
		notes = append(notes, fmt.Sprintf("channel 1 (assistant): %d samples silenced by interruptions (%d conversation.item.truncate, %d cancelled responses)", r.ch[1].silenced, r.truncates, r.cancels))
	}
	if r.dropped > 0 {
		notes = append(notes, fmt.Sprintf("events: %d events from t_ms %.3f on not kept, past MaxEventBytes (%d bytes); their audio is in the WAV", r.dropped, r.droppedAt, r.maxEvents))
	}
	meta.Notes = notes
	rec.Meta, _ = json.MarshalIndent(meta, "", "  ")
	rec.Meta = append(rec.Meta, '\n')
	r.done = rec
	r.ch, r.ev, r.refs, r.scratch, r.pcm, r.items, r.responses = [2]channel{}, nil, nil, nil, nil, nil, nil
	return rec
}

// events renders events.jsonl with the assistant's refs as they ended.
func (r *Recorder) events() []byte {
	out := make([]byte, 0, len(r.ev)+len(r.refs)*64)
	last := 0
	for _, a := range r.refs {
		if a.pos < 0 {
			continue
		}
		out = append(out, r.ev[last:a.pos]...)
		out = a.appendJSON(out)
		last = a.pos
	}
	return append(out, r.ev[last:]...)
}

// wav interleaves two mono PCM16 channels into a WAV file; the shorter is
// padded with silence.
func wav(left, right []byte) []byte {
	frames := max(len(left), len(right)) / 2
	data := frames * 4
	b := make([]byte, 44+data)
	copy(b[0:], "RIFF")
	binary.LittleEndian.PutUint32(b[4:], uint32(36+data))
	copy(b[8:], "WAVEfmt ")
	binary.LittleEndian.PutUint32(b[16:], 16)
	binary.LittleEndian.PutUint16(b[20:], 1) // PCM
	binary.LittleEndian.PutUint16(b[22:], 2)
	binary.LittleEndian.PutUint32(b[24:], SampleRate)
	binary.LittleEndian.PutUint32(b[28:], SampleRate*4)
	binary.LittleEndian.PutUint16(b[32:], 4)
	binary.LittleEndian.PutUint16(b[34:], 16)
	copy(b[36:], "data")
	binary.LittleEndian.PutUint32(b[40:], uint32(data))
	d := b[44:]
	for i := 0; i+1 < len(left); i += 2 {
		d[i*2], d[i*2+1] = left[i], left[i+1]
	}
	for i := 0; i+1 < len(right); i += 2 {
		d[i*2+2], d[i*2+3] = right[i], right[i+1]
	}
	return b
}

// WAVFormat is what a WAV header says.
type WAVFormat struct {
	Format, Channels, Bits uint16
	Rate                   uint32
	Data                   []byte // the interleaved samples
}

// ParseWAV reads a RIFF WAVE file's fmt and data chunks.
func ParseWAV(b []byte) (WAVFormat, error) {
	var w WAVFormat
	if len(b) < 12 || string(b[0:4]) != "RIFF" || string(b[8:12]) != "WAVE" {
		return w, errors.New("recording: not a RIFF WAVE file")
	}
	var gotFmt, gotData bool
	for i := 12; i+8 <= len(b); {
		id, n := string(b[i:i+4]), int(binary.LittleEndian.Uint32(b[i+4:]))
		body := i + 8
		if n < 0 || body+n > len(b) {
			return w, fmt.Errorf("recording: WAV chunk %q runs past the end", id)
		}
		switch id {
		case "fmt ":
			if n < 16 {
				return w, errors.New("recording: WAV fmt chunk too short")
			}
			w.Format = binary.LittleEndian.Uint16(b[body:])
			w.Channels = binary.LittleEndian.Uint16(b[body+2:])
			w.Rate = binary.LittleEndian.Uint32(b[body+4:])
			w.Bits = binary.LittleEndian.Uint16(b[body+14:])
			gotFmt = true
		case "data":
			w.Data = b[body : body+n]
			gotData = true
		}
		i = body + n + n%2
	}
	if !gotFmt || !gotData {
		return w, errors.New("recording: WAV without fmt or data chunk")
	}
	return w, nil
}

// ReadEvents parses events.jsonl.
func (r *Recording) ReadEvents() ([]Event, error) {
	var evs []Event
	sc := bufio.NewScanner(bytes.NewReader(r.Events))
	sc.Buffer(nil, 64<<20)
	for n := 1; sc.Scan(); n++ {
		if len(bytes.TrimSpace(sc.Bytes())) == 0 {
			continue
		}
		var e Event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			return nil, fmt.Errorf("recording: events.jsonl line %d: %w", n, err)
		}
		evs = append(evs, e)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("recording: events.jsonl: %w", err)
	}
	return evs, nil
}

// ReadMeta parses meta.json.
func (r *Recording) ReadMeta() (MetaInfo, error) {
	var m MetaInfo
	if err := json.Unmarshal(r.Meta, &m); err != nil {
		return m, fmt.Errorf("recording: meta.json: %w", err)
	}
	return m, nil
}

// Samples returns n samples of one channel from offset on, as PCM16 LE
// bytes (what an append carried, for channel 0).
func (r *Recording) Samples(channel, offset, n int) ([]byte, error) {
	w, err := ParseWAV(r.WAV)
	if err != nil {
		return nil, err
	}
	if w.Format != 1 || w.Bits != 16 || w.Channels != 2 {
		return nil, fmt.Errorf("recording: WAV is format %d, %d bits, %d channels, not 16-bit PCM stereo", w.Format, w.Bits, w.Channels)
	}
	frames := len(w.Data) / 4
	if channel < 0 || channel > 1 || offset < 0 || n < 0 || offset+n > frames {
		return nil, fmt.Errorf("recording: samples %d+%d of channel %d outside the WAV's %d", offset, n, channel, frames)
	}
	out := make([]byte, n*2)
	src := w.Data[offset*4+channel*2:]
	for i := range n {
		out[i*2], out[i*2+1] = src[i*4], src[i*4+1]
	}
	return out, nil
}

// Write stores rec under its session id: audio and events first, meta.json
// last, so a recording whose meta.json is there is whole.
func Write(ctx context.Context, store Store, rec *Recording) error {
	for _, o := range []struct {
		name, ctype string
		body        []byte
	}{{AudioObject, "audio/wav", rec.WAV}, {EventsObject, "application/x-ndjson", rec.Events}, {MetaObject, "application/json", rec.Meta}} {
		if err := store.Put(ctx, rec.SessionID+"/"+o.name, o.body, o.ctype); err != nil {
			return fmt.Errorf("recording %s: %w", rec.SessionID, err)
		}
	}
	return nil
}

// Open reads session sessionID's recording from store.
func Open(ctx context.Context, store Store, sessionID string) (*Recording, error) {
	if err := checkID(sessionID); err != nil {
		return nil, err
	}
	rec := &Recording{SessionID: sessionID}
	var err error
	if rec.Meta, err = store.Get(ctx, sessionID+"/"+MetaObject); err != nil {
		return nil, fmt.Errorf("recording %s: %w", sessionID, err)
	}
	if rec.Events, err = store.Get(ctx, sessionID+"/"+EventsObject); err != nil {
		return nil, fmt.Errorf("recording %s: %w", sessionID, err)
	}
	if rec.WAV, err = store.Get(ctx, sessionID+"/"+AudioObject); err != nil {
		return nil, fmt.Errorf("recording %s: %w", sessionID, err)
	}
	m, err := rec.ReadMeta()
	if err != nil {
		return nil, err
	}
	rec.Started, rec.Ended = m.Started, m.Ended
	return rec, nil
}

// Latest is the session id of the newest whole recording in store (by
// its meta.json's time), for a replay that names none.
func Latest(ctx context.Context, store Store) (string, error) {
	objs, err := store.List(ctx, "")
	if err != nil {
		return "", err
	}
	var id string
	var at time.Time
	for _, o := range objs {
		sid, name, ok := strings.Cut(o.Key, "/")
		if ok && name == MetaObject && (id == "" || o.LastModified.After(at)) {
			id, at = sid, o.LastModified
		}
	}
	if id == "" {
		return "", errors.New("recording: the store holds no recording")
	}
	return id, nil
}

// checkID refuses a session id that would not stay one directory.
func checkID(id string) error {
	if id == "" || id == "." || id == ".." || strings.ContainsAny(id, "/\\\x00") {
		return fmt.Errorf("recording: bad session id %q", id)
	}
	return nil
}
