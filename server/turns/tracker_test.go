package turns

import (
	"strings"
	"testing"
	"time"

	"github.com/gobwas/ws"

	"rtgate/frames"
	"rtgate/server/protocol"
	"rtgate/server/usage"
)

// step is one upstream event at a time (ms since the test's epoch).
type step struct {
	at    int // ms
	event string
}

const (
	vadSession  = `{"type":"session.created","session":{"type":"realtime","audio":{"input":{"turn_detection":{"type":"server_vad","silence_duration_ms":300}}}}}`
	noVAD       = `{"type":"session.updated","session":{"type":"realtime","audio":{"input":{"turn_detection":null}}}}`
	created     = `{"type":"response.created","response":{"id":"resp_1"}}`
	audioDelta  = `{"type":"response.output_audio.delta","response_id":"resp_1","delta":"AAAA"}`
	textDelta   = `{"type":"response.output_text.delta","response_id":"resp_1","delta":"Hi"}`
	transcript  = `{"type":"response.output_audio_transcript.delta","delta":"Hi"}`
	stopped     = `{"type":"input_audio_buffer.speech_stopped","audio_end_ms":1500}`
	doneOK      = `{"type":"response.done","response":{"status":"completed","output":[{"type":"message"}]}}`
	doneTool    = `{"type":"response.done","response":{"status":"completed","output":[{"type":"function_call","name":"f"}]}}`
	doneCut     = `{"type":"response.done","response":{"status":"cancelled","status_details":{"type":"cancelled","reason":"turn_detected"}}}`
	doneClient  = `{"type":"response.done","response":{"status":"cancelled","status_details":{"reason":"client_cancelled"}}}`
	doneFailed  = `{"type":"response.done","response":{"status":"failed"}}`
	betaSession = `{"type":"session.created","session":{"turn_detection":{"type":"server_vad","silence_duration_ms":500}}}`
)

// run feeds steps through a Watch the way the session's inspector does
// and returns every event it measured.
func run(t *testing.T, steps []step) ([]Event, *Watch) {
	t.Helper()
	return runProto(t, protocol.Realtime{}, steps)
}

// runProto is run for the protocol p's marks.
func runProto(t *testing.T, p protocol.Protocol, steps []step) ([]Event, *Watch) {
	t.Helper()
	epoch := time.Unix(1000, 0)
	var now time.Time
	w := &Watch{Tracker: Tracker{Now: func() time.Time { return now }}}
	var out []Event
	for _, s := range steps {
		now = epoch.Add(time.Duration(s.at) * time.Millisecond)
		typ, ok := usage.EventType([]byte(s.event))
		if !ok {
			t.Fatalf("no type in %s", s.event)
		}
		ev, whole := w.See(p.Turn(typ))
		if whole {
			ev = w.Inspect([]byte(s.event))
		}
		if ev != (Event{}) {
			out = append(out, ev)
		}
	}
	if ev := w.Close(); ev != (Event{}) {
		out = append(out, ev)
	}
	return out, w
}

func first(ms int) Event { return Event{FirstAudio: ms2d(ms), HasFirstAudio: true} }
func ended(outcome string, ms int) Event {
	return Event{Outcome: outcome, Duration: ms2d(ms)}
}
func ms2d(ms int) time.Duration { return time.Duration(ms) * time.Millisecond }

func TestTracker(t *testing.T) {
	for _, tc := range []struct {
		name  string
		steps []step
		want  []Event
		turns int
	}{
		{"manual turn", []step{{0, noVAD}, {100, created}, {350, audioDelta}, {400, audioDelta}, {900, doneOK}},
			[]Event{first(250), ended(Completed, 800)}, 1},
		{"text only: the first text delta", []step{{0, created}, {5, transcript}, {120, textDelta}, {130, textDelta}, {200, doneOK}},
			[]Event{first(120), ended(Completed, 200)}, 1},
		{"server VAD adds the silence window", []step{{0, vadSession}, {1000, stopped}, {1010, created}, {1200, audioDelta}, {2000, doneOK}},
			[]Event{first(500), ended(Completed, 1300)}, 1},
		{"beta VAD config", []step{{0, betaSession}, {1000, stopped}, {1010, created}, {1100, audioDelta}, {1200, doneOK}},
			[]Event{first(600), ended(Completed, 700)}, 1},
		{"VAD turned off by session.updated", []step{{0, vadSession}, {1, noVAD}, {1000, stopped}, {1100, audioDelta}, {1200, doneOK}},
			[]Event{first(100), ended(Completed, 200)}, 1},
		{"tool-call chain is one turn", []step{{0, created}, {200, doneTool}, {400, created}, {700, audioDelta}, {1000, doneOK}},
			[]Event{first(700), ended(Completed, 1000)}, 1},
		{"interrupted by speech", []step{{0, vadSession}, {1000, stopped}, {1050, created}, {1300, audioDelta}, {1400, doneCut},
			{2000, stopped}, {2020, created}, {2100, audioDelta}, {2500, doneOK}},
			[]Event{first(600), ended(Interrupted, 700), first(400), ended(Completed, 800)}, 2},
		{"cancelled by the client before audio", []step{{0, created}, {50, doneClient}},
			[]Event{ended(Interrupted, 50)}, 1},
		{"failed", []step{{0, created}, {50, doneFailed}}, []Event{ended(Failed, 50)}, 1},
		{"session ends mid-turn", []step{{0, created}, {100, audioDelta}}, []Event{first(100), ended(Unfinished, 100)}, 1},
		{"session ends during a tool call", []step{{0, created}, {100, doneTool}}, []Event{ended(Unfinished, 100)}, 1},
		{"deltas without a turn", []step{{0, audioDelta}, {10, doneOK}}, nil, 0},
		{"speech while the answer speaks starts the next turn", []step{{0, vadSession}, {1000, stopped}, {1100, created},
			{1200, audioDelta}, {1500, stopped}, {1700, doneOK}, {1710, created}, {1900, audioDelta}, {2000, doneOK}},
			[]Event{first(500), ended(Completed, 1000), first(700), ended(Completed, 800)}, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, w := run(t, tc.steps)
			if len(got) != len(tc.want) {
				t.Fatalf("events %+v, want %+v", got, tc.want)
			}
			for i := range got {
				if got[i] != tc.want[i] {
					t.Errorf("event %d: %+v, want %+v", i, got[i], tc.want[i])
				}
			}
			if n, _, _ := w.Summary(); n != tc.turns {
				t.Errorf("turns %d, want %d", n, tc.turns)
			}
		})
	}
}

func TestSummaryPercentiles(t *testing.T) {
	var steps []step
	at := 0
	for i := 1; i <= 20; i++ { // first audio 100, 200, ..., 2000 ms
		steps = append(steps, step{at, created}, step{at + 100*i, audioDelta}, step{at + 100*i + 1, doneOK})
		at += 10_000
	}
	_, w := run(t, steps)
	n, p50, p95 := w.Summary()
	if n != 20 {
		t.Fatalf("turns %d", n)
	}
	// True p50 is 1000 ms, p95 1900 ms; the sketch is within 9 %.
	for _, c := range []struct {
		got, want time.Duration
	}{{p50, time.Second}, {p95, 1900 * time.Millisecond}} {
		if r := float64(c.got) / float64(c.want); r < 0.91 || r > 1.09 {
			t.Errorf("percentile %v, want %v within 9%%", c.got, c.want)
		}
	}
}

func TestSketch(t *testing.T) {
	var s Sketch
	if s.Quantile(0.5) != 0 {
		t.Fatal("empty sketch has a median")
	}
	s.Add(437 * time.Millisecond)
	if s.Quantile(0.5) != 437*time.Millisecond || s.Quantile(0.95) != 437*time.Millisecond {
		t.Fatalf("one value: p50 %v p95 %v, want it exactly", s.Quantile(0.5), s.Quantile(0.95))
	}
	var o Sketch
	for range 99 {
		o.Add(50 * time.Millisecond)
	}
	o.Add(time.Hour) // beyond the last bucket: counted there
	s.Merge(&o)
	if s.Count() != 101 || s.Quantile(0.5) < 45*time.Millisecond || s.Quantile(0.5) > 55*time.Millisecond {
		t.Fatalf("merged: n %d p50 %v", s.Count(), s.Quantile(0.5))
	}
	if s.Quantile(1) != time.Hour {
		t.Fatalf("max %v", s.Quantile(1))
	}
}

// BenchmarkUpstreamDeltas forwards a voice answer's upstream frames (audio
// deltas, a response.created and response.done now and then) through a
// scanner whose inspector reads usage and turns as the session's does: a
// delta costs no allocation (run with -benchmem: 0 allocs/op).
func BenchmarkUpstreamDeltas(b *testing.B) {
	frame := func(s string) []byte { return frames.AppendFrame(nil, ws.OpText, []byte(s), false) }
	delta := frame(`{"type":"response.output_audio.delta","response_id":"resp_1","item_id":"item_1","output_index":0,"content_index":0,"delta":"` + strings.Repeat("A", 6400) + `"}`)
	start, done := frame(created), frame(`{"type":"response.done","response":{"status":"completed","usage":{"total_tokens":70,"input_tokens":60,"output_tokens":10}}}`)
	in := &benchInspector{}
	s := frames.NewScanner(frames.FromServer, 0)
	s.SetInspector(in)
	src := frames.NewByteSource(nil)
	b.ReportAllocs()
	b.SetBytes(int64(len(delta)))
	for i := 0; b.Loop(); i++ {
		f := delta
		switch i % 1000 {
		case 0:
			f = start
		case 999:
			f = done
		}
		src.Reset(f)
		if _, err := s.Forward(src, nil); err != nil {
			b.Fatal(err)
		}
	}
	if n, _, _ := in.turns.Summary(); n == 0 || in.meter.Usage.Responses == 0 {
		b.Fatal("no turn or usage seen")
	}
}

// benchInspector is the session's inspector (server's setupWatch) without
// its server: the type read once, usage and turns from it.
type benchInspector struct {
	meter     usage.Meter
	turns     Watch
	wantUsage bool
}

func (in *benchInspector) Wants(prefix []byte) bool {
	typ, ok := usage.EventType(prefix)
	if !ok {
		return false
	}
	in.wantUsage = in.meter.WantsType(typ)
	_, whole := in.turns.See(protocol.Realtime{}.Turn(typ))
	return whole || in.wantUsage
}

func (in *benchInspector) Inspect(p []byte) {
	if in.wantUsage {
		in.meter.Inspect(p)
	}
	in.turns.Inspect(p)
}

// TestDeltaAllocatesNothing: once a turn has its first audio, a delta
// through the session's inspector allocates nothing.
func TestDeltaAllocatesNothing(t *testing.T) {
	in := &benchInspector{}
	s := frames.NewScanner(frames.FromServer, 0)
	s.SetInspector(in)
	src := frames.NewByteSource(nil)
	forward := func(f []byte) {
		src.Reset(f)
		if _, err := s.Forward(src, nil); err != nil {
			t.Fatal(err)
		}
	}
	delta := frames.AppendFrame(nil, ws.OpText, []byte(audioDelta), false)
	forward(frames.AppendFrame(nil, ws.OpText, []byte(created), false))
	forward(delta) // the first: the clock is read, the sketch made
	if allocs := testing.AllocsPerRun(1000, func() { forward(delta) }); allocs != 0 {
		t.Fatalf("%v allocations per delta", allocs)
	}
}

// TestLiveTurns: GPT-Live's turns, from input transcript and output audio
// deltas (the table in the package doc).
func TestLiveTurns(t *testing.T) {
	const (
		heard  = `{"type":"session.input_transcript.delta","delta":"hi","start_ms":0,"end_ms":100}`
		spoken = `{"type":"session.output_audio.delta","delta":"AAAA"}`
		usageU = `{"type":"session.usage.updated","usage":{"seconds":1}}`
	)
	for _, tc := range []struct {
		name  string
		steps []step
		want  []Event
	}{
		{"one answer, ended with the session", []step{{0, heard}, {100, heard}, {350, spoken}, {400, spoken}, {900, usageU}},
			[]Event{first(250), ended(Completed, 800)}}, // timed from the last speech heard
		{"the next speech ends the turn that spoke", []step{{0, heard}, {200, spoken}, {1000, heard}, {1300, spoken}},
			[]Event{first(200), ended(Completed, 1000), first(300), ended(Completed, 300)}},
		{"speech never answered is unfinished", []step{{0, heard}, {500, heard}},
			[]Event{ended(Unfinished, 0)}}, // the clock moved with the speech
		{"output with no speech heard is no turn", []step{{0, spoken}, {40, spoken}}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, w := runProto(t, protocol.Live{}, tc.steps)
			if len(got) != len(tc.want) {
				t.Fatalf("events %+v, want %+v", got, tc.want)
			}
			for i := range got {
				if got[i] != tc.want[i] {
					t.Fatalf("event %d: %+v, want %+v (all: %+v)", i, got[i], tc.want[i], got)
				}
			}
			if n, _, _ := w.Summary(); n != countStarts(tc.want) {
				t.Fatalf("%d turns counted, want %d", n, countStarts(tc.want))
			}
		})
	}
}

// countStarts is how many turns the events say were begun.
func countStarts(evs []Event) int {
	n := 0
	for _, e := range evs {
		if e.Outcome != "" {
			n++
		}
	}
	return n
}
