package recording_test

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"rtgate/server/recording"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func ms(v float64) time.Time { return t0.Add(time.Duration(v * float64(time.Millisecond))) }

// pcm is n samples of value v, PCM16 LE.
func pcm(n int, v int16) []byte {
	b := make([]byte, n*2)
	for i := range n {
		binary.LittleEndian.PutUint16(b[i*2:], uint16(v))
	}
	return b
}

func appendEv(b []byte) string {
	return `{"type":"input_audio_buffer.append","audio":"` + base64.StdEncoding.EncodeToString(b) + `"}`
}

func deltaEv(resp, item string, b []byte) string {
	return fmt.Sprintf(`{"type":"response.output_audio.delta","event_id":"e","response_id":%q,"item_id":%q,"output_index":0,"content_index":0,"delta":%q}`,
		resp, item, base64.StdEncoding.EncodeToString(b))
}

// step is one event fed to a recorder.
type step struct {
	at     float64 // ms since the start
	client bool
	ev     string
}

func c(at float64, ev string) step { return step{at, true, ev} }
func u(at float64, ev string) step { return step{at, false, ev} }

// span: channel ch holds value v over samples [from, to).
type span struct {
	ch, from, to int
	v            int16
}

func record(lim recording.Limits, steps []step, end float64) *recording.Recording {
	r := recording.NewRecorder("sess_1", t0, lim)
	for _, s := range steps {
		if s.client {
			r.Client(ms(s.at), []byte(s.ev))
		} else {
			r.Upstream(ms(s.at), []byte(s.ev))
		}
	}
	return r.Finish(ms(end))
}

// channels decodes the WAV back into its two channels.
func channels(t *testing.T, rec *recording.Recording) [2][]int16 {
	t.Helper()
	w, err := recording.ParseWAV(rec.WAV)
	if err != nil {
		t.Fatal(err)
	}
	var out [2][]int16
	for i := 0; i+3 < len(w.Data); i += 4 {
		out[0] = append(out[0], int16(binary.LittleEndian.Uint16(w.Data[i:])))
		out[1] = append(out[1], int16(binary.LittleEndian.Uint16(w.Data[i+2:])))
	}
	return out
}

// TestTimeline: where each side's audio lands in the WAV, and what
// interruptions silence.
func TestTimeline(t *testing.T) {
	const d = 2400 // 100 ms of samples
	tests := []struct {
		name  string
		lim   recording.Limits
		steps []step
		want  []span // everything else is silence
		meta  string // a note meta.json must have
	}{
		{name: "user audio at its arrival, never overlapping",
			steps: []step{c(50, appendEv(pcm(240, 100))), c(52, appendEv(pcm(240, 200))), c(200, appendEv(pcm(240, 300)))},
			want:  []span{{0, 1200, 1440, 100}, {0, 1440, 1680, 200}, {0, 4800, 5040, 300}}},
		{name: "assistant deltas back to back, the next response after it, a late one at its arrival",
			steps: []step{u(100, deltaEv("r1", "i1", pcm(d, 1))), u(101, deltaEv("r1", "i1", pcm(d, 2))), u(102, deltaEv("r1", "i1", pcm(d, 3))),
				u(150, deltaEv("r2", "i2", pcm(d, 4))), u(1000, deltaEv("r3", "i3", pcm(d, 5)))},
			want: []span{{1, 2400, 4800, 1}, {1, 4800, 7200, 2}, {1, 7200, 9600, 3}, {1, 9600, 12000, 4}, {1, 24000, 26400, 5}}},
		{name: "a truncate silences the item after audio_end_ms; the next response plays from its arrival",
			steps: []step{u(100, deltaEv("r1", "i1", pcm(d, 1))), u(101, deltaEv("r1", "i1", pcm(d, 2))), u(102, deltaEv("r1", "i1", pcm(d, 3))),
				c(260, `{"type":"conversation.item.truncate","item_id":"i1","content_index":0,"audio_end_ms":150}`),
				u(261, deltaEv("r1", "i1", pcm(d, 9))), // in flight: never heard
				u(270, deltaEv("r2", "i2", pcm(d, 4)))},
			want: []span{{1, 2400, 4800, 1}, {1, 4800, 6000, 2}, {1, 6480, 8880, 4}},
			meta: "silenced by interruptions (1 conversation.item.truncate, 0 cancelled responses)"},
		{name: "a cancelled response is cut where its response.done arrived",
			steps: []step{u(100, deltaEv("r1", "i1", pcm(d, 1))), u(101, deltaEv("r1", "i1", pcm(d, 2))), u(102, deltaEv("r1", "i1", pcm(d, 3))),
				u(200, `{"type":"response.done","response":{"id":"r1","status":"cancelled","status_details":{"reason":"turn_detected"}}}`),
				u(210, deltaEv("r2", "i2", pcm(d, 4)))},
			want: []span{{1, 2400, 4800, 1}, {1, 5040, 7440, 4}},
			meta: "(0 conversation.item.truncate, 1 cancelled responses)"},
		{name: "a completed response is not cut",
			steps: []step{u(100, deltaEv("r1", "i1", pcm(d, 1))), u(101, deltaEv("r1", "i1", pcm(d, 2))),
				u(120, `{"type":"response.done","response":{"id":"r1","status":"completed"}}`)},
			want: []span{{1, 2400, 4800, 1}, {1, 4800, 7200, 2}}},
		{name: "both channels on one timeline",
			steps: []step{c(0, appendEv(pcm(d, 7))), u(50, `{"type":"response.audio.delta","response_id":"r","item_id":"i","delta":"`+base64.StdEncoding.EncodeToString(pcm(d, 9))+`"}`)},
			want:  []span{{0, 0, 2400, 7}, {1, 1200, 3600, 9}}},
		{name: "G.711 mu-law input decoded and upsampled x3 by linear interpolation",
			steps: []step{c(0, `{"type":"session.update","session":{"type":"realtime","audio":{"input":{"format":{"type":"audio/pcmu"}}}}}`),
				c(10, appendEv(bytes.Repeat([]byte{0x80}, 80)))}, // 0x80 is +32124
			want: []span{{0, 240, 241, 10708}, {0, 241, 242, 21416}, {0, 242, 480, 32124}}},
		{name: "G.711 A-law output (beta) decoded",
			steps: []step{u(0, `{"type":"session.created","session":{"output_audio_format":"g711_alaw"}}`),
				u(10, deltaEv("r", "i", bytes.Repeat([]byte{0xD5}, 80)))}, // 0xD5 is +8
			want: []span{{1, 240, 241, 2}, {1, 241, 242, 5}, {1, 242, 480, 8}}},
		{name: "a format not recorded is said in meta",
			steps: []step{u(0, `{"type":"session.updated","session":{"audio":{"output":{"format":{"type":"audio/pcm","rate":16000}}}}}`),
				u(10, deltaEv("r", "i", pcm(d, 5))), c(20, appendEv(pcm(240, 6)))},
			want: []span{{0, 480, 720, 6}},
			meta: "channel 1 (assistant): 1 audio events in format audio/pcm@16000 not recorded"},
		{name: "MaxAudio stops a channel growing",
			lim:   recording.Limits{MaxAudio: 100 * time.Millisecond},
			steps: []step{c(0, appendEv(pcm(2000, 1))), c(1, appendEv(pcm(1000, 2))), c(500, appendEv(pcm(100, 3)))},
			want:  []span{{0, 0, 2000, 1}, {0, 2000, 2400, 2}},
			meta:  "channel 0 (user): 700 samples past MaxAudio (100ms) not recorded"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rec := record(tc.lim, tc.steps, 2000)
			got := channels(t, rec)
			var want [2][]int16
			for _, s := range tc.want {
				for len(want[s.ch]) < s.to {
					want[s.ch] = append(want[s.ch], 0)
				}
				for i := s.from; i < s.to; i++ {
					want[s.ch][i] = s.v
				}
			}
			for ch := range 2 {
				n := max(len(got[ch]), len(want[ch]))
				for i := range n {
					var g, w int16
					if i < len(got[ch]) {
						g = got[ch][i]
					}
					if i < len(want[ch]) {
						w = want[ch][i]
					}
					if g != w {
						t.Fatalf("channel %d sample %d = %d, want %d (%d samples long, want %d)", ch, i, g, w, len(got[ch]), len(want[ch]))
					}
				}
			}
			if tc.meta != "" && !strings.Contains(string(rec.Meta), tc.meta) {
				t.Errorf("meta.json lacks %q:\n%s", tc.meta, rec.Meta)
			}
		})
	}
}

// TestWAVHeader: the header says PCM16 LE, 24 kHz, two channels, and the
// data's length.
func TestWAVHeader(t *testing.T) {
	rec := record(recording.Limits{}, []step{c(0, appendEv(pcm(100, 1))), u(10, deltaEv("r", "i", pcm(50, 2)))}, 100)
	b := rec.WAV
	le16 := func(o int) int { return int(binary.LittleEndian.Uint16(b[o:])) }
	le32 := func(o int) int { return int(binary.LittleEndian.Uint32(b[o:])) }
	frames := 240 + 50 // the delta at 10 ms, 50 samples
	checks := []struct {
		what      string
		got, want any
	}{
		{"RIFF", string(b[0:4]), "RIFF"},
		{"RIFF size", le32(4), len(b) - 8},
		{"WAVE", string(b[8:12]), "WAVE"},
		{"fmt chunk", string(b[12:16]), "fmt "},
		{"fmt size", le32(16), 16},
		{"format (PCM)", le16(20), 1},
		{"channels", le16(22), 2},
		{"sample rate", le32(24), 24000},
		{"byte rate", le32(28), 96000},
		{"block align", le16(32), 4},
		{"bits", le16(34), 16},
		{"data chunk", string(b[36:40]), "data"},
		{"data size", le32(40), frames * 4},
		{"file size", len(b), 44 + frames*4},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s = %v, want %v", c.what, c.got, c.want)
		}
	}
}

// TestEventsPointAtTheirAudio: every line of events.jsonl is the event
// without its audio payload, and its audio ref finds in the WAV the very
// bytes the event carried.
func TestEventsPointAtTheirAudio(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	noise := func(n int) []byte {
		b := make([]byte, n*2)
		for i := range b {
			b[i] = byte(rng.UintN(256))
		}
		return b
	}
	r := recording.NewRecorder("sess_refs", t0, recording.Limits{})
	type sent struct {
		client bool
		audio  []byte
	}
	var want []sent
	r.Client(ms(0), []byte(`{"type":"session.update","session":{"type":"realtime"}}`))
	want = append(want, sent{client: true})
	for i := range 20 {
		b := noise(480 + i)
		r.Client(ms(float64(i*20)), []byte(appendEv(b)))
		want = append(want, sent{true, b})
		if i%5 == 4 {
			d := noise(1200)
			r.Upstream(ms(float64(i*20+5)), []byte(deltaEv(fmt.Sprint("r", i), "item", d)))
			want = append(want, sent{false, d})
		}
	}
	r.Client(ms(500), []byte(`not json {`))
	want = append(want, sent{client: true})
	rec := r.Finish(ms(600))
	evs, err := rec.ReadEvents()
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != len(want) {
		t.Fatalf("%d events, want %d", len(evs), len(want))
	}
	for i, e := range evs {
		w := want[i]
		if (e.From == "client") != w.client {
			t.Errorf("event %d from %q", i, e.From)
		}
		if w.audio == nil {
			if e.Audio != nil {
				t.Errorf("event %d has an audio ref %+v", i, e.Audio)
			}
			continue
		}
		if e.Audio == nil {
			t.Fatalf("event %d (%s) has no audio ref", i, e.Raw)
		}
		var m map[string]any
		if err := json.Unmarshal(e.Raw, &m); err != nil {
			t.Fatalf("event %d: %v", i, err)
		}
		if _, ok := m["audio"]; ok {
			t.Errorf("event %d still carries its audio", i)
		}
		if _, ok := m["delta"]; ok {
			t.Errorf("event %d still carries its delta", i)
		}
		if m["type"] == nil {
			t.Errorf("event %d lost its type: %s", i, e.Raw)
		}
		got, err := rec.Samples(e.Audio.Channel, e.Audio.Offset, e.Audio.Samples)
		if err != nil {
			t.Fatalf("event %d: %v", i, err)
		}
		if !bytes.Equal(got, w.audio) {
			t.Errorf("event %d: the WAV at %+v is not the audio it carried", i, *e.Audio)
		}
	}
	if last := evs[len(evs)-1]; last.Text != "not json {" || last.Raw != nil {
		t.Errorf("a non-JSON frame is kept as %+v", last)
	}
}

// TestMaxEventBytes: past the cap events stop being kept, the audio does
// not, and meta says so.
func TestMaxEventBytes(t *testing.T) {
	r := recording.NewRecorder("s", t0, recording.Limits{MaxEventBytes: 1000})
	for i := range 50 {
		r.Client(ms(float64(i*20)), []byte(appendEv(pcm(480, 1))))
	}
	rec := r.Finish(ms(1000))
	evs, err := rec.ReadEvents()
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) == 0 || len(evs) >= 50 || len(rec.Events) > 1000 {
		t.Fatalf("%d events in %d bytes kept, want some, under 1000 bytes", len(evs), len(rec.Events))
	}
	m, err := rec.ReadMeta()
	if err != nil {
		t.Fatal(err)
	}
	if m.Events != len(evs) || m.Dropped != 50-len(evs) || m.Channels[0].Samples != 50*480 {
		t.Errorf("meta: %d events, %d not kept, %d samples; want %d, %d, %d", m.Events, m.Dropped, m.Channels[0].Samples, len(evs), 50-len(evs), 50*480)
	}
	if !strings.Contains(string(rec.Meta), "past MaxEventBytes") {
		t.Errorf("meta.json does not say why events are missing:\n%s", rec.Meta)
	}
}

// TestMeta: meta.json names the session, its times and rate.
func TestMeta(t *testing.T) {
	rec := record(recording.Limits{}, []step{c(0, appendEv(pcm(10, 1)))}, 1500)
	m, err := rec.ReadMeta()
	if err != nil {
		t.Fatal(err)
	}
	if m.SessionID != "sess_1" || !m.Started.Equal(t0) || !m.Ended.Equal(ms(1500)) || m.DurationMs != 1500 || m.SampleRate != 24000 || len(m.Channels) != 2 {
		t.Errorf("meta = %+v", m)
	}
	if rec.SessionID != "sess_1" || !rec.Ended.Equal(ms(1500)) {
		t.Errorf("recording = %s %v", rec.SessionID, rec.Ended)
	}
}

func BenchmarkRecorder(b *testing.B) {
	audio := base64.StdEncoding.EncodeToString(pcm(480, 1000)) // 20 ms, as clients send
	cases := []struct {
		name   string
		client bool
		ev     []byte
	}{
		{"append", true, []byte(`{"type":"input_audio_buffer.append","event_id":"evt_123","audio":"` + audio + `"}`)},
		{"output_delta", false, []byte(`{"type":"response.output_audio.delta","event_id":"event_1","response_id":"resp_1","item_id":"item_1","output_index":0,"content_index":0,"delta":"` + audio + `"}`)},
	}
	for _, tc := range cases {
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(tc.ev)))
			// A fresh recorder per hour of audio, so the channels stay in
			// their cap and the benchmark measures the steady state.
			var r *recording.Recorder
			at := t0
			for i := 0; b.Loop(); i++ {
				if i%180000 == 0 {
					r = recording.NewRecorder("bench", at, recording.Limits{MaxEventBytes: 1 << 30})
				}
				at = at.Add(20 * time.Millisecond)
				if tc.client {
					r.Client(at, tc.ev)
				} else {
					r.Upstream(at, tc.ev)
				}
			}
		})
	}
}
