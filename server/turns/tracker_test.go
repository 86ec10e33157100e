package turns

import (
	"strings"
	"testing"
	"time"

	"github.com/gobwas/ws"

	"rtgate/frames"
	"rtgate/server/eventtype"
	"rtgate/server/protocol"
	"rtgate/server/usage"
)

// step is one event at a time (ms since the test's epoch): the upstream's,
// or, with client, one the gateway forwarded upstream.
type step struct {
	at     int // ms
	event  string
	client bool
}

// c is a client event the gateway forwarded at ms.
func c(at int, event string) step { return step{at, event, true} }

const (
	vadSession   = `{"type":"session.created","session":{"type":"realtime","audio":{"input":{"turn_detection":{"type":"server_vad","silence_duration_ms":300}}}}}`
	noVAD        = `{"type":"session.updated","session":{"type":"realtime","audio":{"input":{"turn_detection":null}}}}`
	textOnly     = `{"type":"session.updated","session":{"type":"realtime","output_modalities":["text"],"audio":{"input":{"turn_detection":null}}}}`
	create       = `{"type":"response.create"}`
	createOOB    = `{"type":"response.create","response":{"conversation":"none","output_modalities":["text"],"instructions":"say \"conversation\": no"}}`
	createID     = `{"type":"response.create","event_id":"evt_9"}`
	commit       = `{"type":"input_audio_buffer.commit"}`
	created      = `{"type":"response.created","response":{"id":"resp_1","conversation_id":"conv_1","output_modalities":["audio"]}}`
	created2     = `{"type":"response.created","response":{"id":"resp_2","conversation_id":"conv_1","output_modalities":["audio"]}}`
	createdOOB   = `{"type":"response.created","response":{"id":"resp_o","conversation_id":null,"output_modalities":["text"]}}`
	createdText  = `{"type":"response.created","response":{"id":"resp_1","conversation_id":"conv_1","output_modalities":["text"]}}`
	audioDelta   = `{"type":"response.output_audio.delta","response_id":"resp_1","delta":"AAAA"}`
	audioDelta2  = `{"type":"response.output_audio.delta","response_id":"resp_2","delta":"AAAA"}`
	textDelta    = `{"type":"response.output_text.delta","response_id":"resp_1","delta":"Hi"}`
	textDeltaO   = `{"type":"response.output_text.delta","response_id":"resp_o","delta":"Hi"}`
	transcript   = `{"type":"response.output_audio_transcript.delta","delta":"Hi"}`
	stopped      = `{"type":"input_audio_buffer.speech_stopped","audio_end_ms":1000}`
	doneOK       = `{"type":"response.done","response":{"id":"resp_1","status":"completed","output":[{"type":"message"}]}}`
	doneOK2      = `{"type":"response.done","response":{"id":"resp_2","status":"completed","output":[{"type":"message"}]}}`
	doneOOB      = `{"type":"response.done","response":{"id":"resp_o","status":"completed","output":[{"type":"message"}]}}`
	doneTool     = `{"type":"response.done","response":{"id":"resp_1","status":"completed","output":[{"type":"function_call","name":"f"}]}}`
	doneCut      = `{"type":"response.done","response":{"id":"resp_1","status":"cancelled","status_details":{"type":"cancelled","reason":"turn_detected"}}}`
	doneClient   = `{"type":"response.done","response":{"id":"resp_1","status":"cancelled","status_details":{"reason":"client_cancelled"}}}`
	doneFailed   = `{"type":"response.done","response":{"id":"resp_1","status":"failed","status_details":{"type":"failed","error":{"type":"server_error"}}}}`
	doneBadReq   = `{"type":"response.done","response":{"id":"resp_1","status":"failed","status_details":{"type":"failed","error":{"type":"invalid_request_error"}}}}`
	refused      = `{"type":"error","error":{"type":"invalid_request_error","code":"conversation_already_has_active_response","event_id":"evt_9"}}`
	rateLimited  = `{"type":"error","error":{"type":"rate_limit_exceeded","code":"rate_limit_exceeded"}}`
	transcribing = `{"type":"session.created","session":{"type":"transcription","audio":{"input":{"turn_detection":{"type":"server_vad","silence_duration_ms":300}}}}}`
	betaSession  = `{"type":"session.created","session":{"turn_detection":{"type":"server_vad","silence_duration_ms":500}}}`
)

// appendMS is a client append of ms of 24 kHz PCM16 (the "/" escaped
// once, as some encoders write it).
func appendMS(at, ms int) step {
	b64 := strings.Repeat("A", ms*64-1)
	return c(at, `{"type":"input_audio_buffer.append","audio":"\/`+b64[1:]+`A"}`)
}

// run feeds steps through a Watch the way the session's inspectors do
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
	var out []Event
	w := &Watch{Tracker: Tracker{Now: func() time.Time { return now }, Observe: func(ev Event) { out = append(out, ev) }}}
	for _, s := range steps {
		now = epoch.Add(time.Duration(s.at) * time.Millisecond)
		typ, ok := eventtype.Of([]byte(s.event))
		if !ok {
			t.Fatalf("no type in %s", s.event)
		}
		if s.client {
			if w.ClientWants(typ) {
				w.Client([]byte(s.event), false)
			}
			continue
		}
		if w.See(p.Turn(typ), []byte(s.event)) {
			w.Inspect([]byte(s.event))
		}
	}
	w.Close()
	return out, w
}

func first(ms int) Event { return Event{Routes: true, FirstAudio: ms2d(ms), HasFirstAudio: true} }
func ended(outcome string, ms int) Event {
	return Event{Routes: true, Outcome: outcome, Duration: ms2d(ms)}
}
func ms2d(ms int) time.Duration { return time.Duration(ms) * time.Millisecond }

func TestTracker(t *testing.T) {
	penalty := Event{Routes: true, Penalty: true}
	for _, tc := range []struct {
		name  string
		steps []step
		want  []Event
		turns int
	}{
		{"manual turn: from the forwarded create", []step{{0, noVAD, false}, c(100, create), {300, created, false},
			{350, audioDelta, false}, {400, audioDelta, false}, {900, doneOK, false}},
			[]Event{first(250), ended(Completed, 800)}, 1},
		{"response.created late, with the first audio", []step{{0, noVAD, false}, c(100, create), {600, created, false},
			{600, audioDelta, false}, {900, doneOK, false}},
			[]Event{first(500), ended(Completed, 800)}, 1},
		{"no create seen: from response.created", []step{{0, created, false}, {5, transcript, false}, {120, audioDelta, false},
			{200, doneOK, false}},
			[]Event{first(120), ended(Completed, 200)}, 1},
		{"server VAD: from the forwarded audio at audio_end_ms", []step{{0, vadSession, false}, appendMS(100, 500),
			appendMS(600, 500), appendMS(1100, 500), {1400, stopped, false}, {1410, created, false}, {1700, audioDelta, false},
			{2000, doneOK, false}},
			[]Event{first(1100), ended(Completed, 1400)}, 1}, // audio_end_ms 1000 went at 600 ms
		{"server VAD without the audio: its arrival less the window", []step{{0, vadSession, false}, {1000, stopped, false},
			{1010, created, false}, {1200, audioDelta, false}, {2000, doneOK, false}},
			[]Event{first(500), ended(Completed, 1300)}, 1},
		{"a transcription session's VAD makes no response", []step{{0, transcribing, false}, {1000, stopped, false},
			c(1050, create), {1100, created, false}, {1150, audioDelta, false}, {1200, doneOK, false}},
			[]Event{first(100), ended(Completed, 150)}, 1},
		{"beta VAD config", []step{{0, betaSession, false}, {1000, stopped, false}, {1010, created, false},
			{1100, audioDelta, false}, {1200, doneOK, false}},
			[]Event{first(600), ended(Completed, 700)}, 1},
		{"VAD off: speech_stopped starts nothing", []step{{0, vadSession, false}, {1, noVAD, false}, {1000, stopped, false},
			c(1050, create), {1100, created, false}, {1150, audioDelta, false}, {1200, doneOK, false}},
			[]Event{first(100), ended(Completed, 150)}, 1},
		{"a commit with VAD answers the next response", []step{{0, vadSession, false}, c(100, commit), {400, created, false},
			{500, audioDelta, false}, {600, doneOK, false}},
			[]Event{first(400), ended(Completed, 500)}, 1},
		{"tool chain: the clock restarts at the client's create", []step{{0, noVAD, false}, c(0, create), {10, created, false},
			{200, doneTool, false}, c(5200, create), {5210, created2, false}, {5500, audioDelta2, false}, {6000, doneOK2, false}},
			[]Event{{Routes: true, Tool: ms2d(5000), HasTool: true}, first(300), ended(Completed, 6000)}, 1},
		{"interrupted by speech", []step{{0, vadSession, false}, {1000, stopped, false}, {1050, created, false},
			{1300, audioDelta, false}, {1400, doneCut, false}, {2000, stopped, false}, {2020, created2, false},
			{2100, audioDelta2, false}, {2500, doneOK2, false}},
			[]Event{first(600), ended(Interrupted, 700), first(400), ended(Completed, 800)}, 2},
		{"cancelled by the client before audio", []step{c(0, create), {10, created, false}, {50, doneClient, false}},
			[]Event{ended(Interrupted, 50)}, 1},
		{"failed by the upstream: a penalty", []step{c(0, create), {10, created, false}, {50, doneFailed, false}},
			[]Event{penalty, ended(Failed, 50)}, 1},
		{"the client's bad request: no penalty", []step{c(0, create), {10, created, false}, {50, doneBadReq, false}},
			[]Event{ended(Failed, 50)}, 1},
		{"a rate limit error: a penalty", []step{c(0, create), {10, rateLimited, false}}, []Event{penalty}, 0},
		{"no output within the bound: a penalty", []step{c(0, create), {10, created, false}, {11_000, doneOK, false}},
			[]Event{penalty, ended(Completed, 11_000)}, 1},
		{"a create never answered: a penalty at the end", []step{c(0, create), {11_000, transcript, false}},
			[]Event{penalty}, 0},
		{"a refused create leaves the queue", []step{{0, noVAD, false}, c(0, create), {10, created, false}, c(100, createID),
			{110, refused, false}, {200, audioDelta, false}, {300, doneOK, false}, c(1000, create), {1400, created2, false},
			{1500, audioDelta2, false}, {1600, doneOK2, false}},
			[]Event{first(200), ended(Completed, 300), first(500), ended(Completed, 600)}, 2},
		{"out of band beside a voice turn", []step{{0, noVAD, false}, c(0, createOOB), c(50, create), {150, createdOOB, false},
			{150, textDeltaO, false}, {160, doneOOB, false}, {200, created, false}, {200, audioDelta, false}, {300, doneOK, false}},
			[]Event{{Kind: OutOfBand, FirstAudio: ms2d(150), HasFirstAudio: true}, first(150), ended(Completed, 250)}, 1},
		{"a voice session's text response: apart, no turn", []step{{0, noVAD, false}, c(0, create), {10, createdText, false},
			{100, textDelta, false}, {200, doneOK, false}},
			[]Event{{Kind: Text, FirstAudio: ms2d(100), HasFirstAudio: true}}, 0},
		{"a text-only session's turn routes", []step{{0, textOnly, false}, c(0, create), {10, createdText, false},
			{100, textDelta, false}, {200, doneOK, false}},
			[]Event{{Kind: Text, Routes: true, FirstAudio: ms2d(100), HasFirstAudio: true},
				{Kind: Text, Routes: true, Outcome: Completed, Duration: ms2d(200)}}, 1},
		{"session ends mid-turn", []step{c(0, create), {0, created, false}, {100, audioDelta, false}},
			[]Event{first(100), ended(Unfinished, 100)}, 1},
		{"session ends during a tool call", []step{c(0, create), {0, created, false}, {100, doneTool, false}},
			[]Event{ended(Unfinished, 100)}, 1},
		{"deltas without a turn", []step{{0, audioDelta, false}, {10, doneOK, false}}, nil, 0},
		{"speech while the answer speaks starts the next turn", []step{{0, vadSession, false}, {1000, stopped, false},
			{1100, created, false}, {1200, audioDelta, false}, {1500, stopped, false}, {1700, doneOK, false},
			{1710, created2, false}, {1900, audioDelta2, false}, {2000, doneOK2, false}},
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
		steps = append(steps, c(at, create), step{at, created, false}, step{at + 100*i, audioDelta, false}, step{at + 100*i + 1, doneOK, false})
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

// BenchmarkUpstreamDeltas forwards a voice answer's upstream frames (audio
// deltas, a response.created and response.done now and then) through a
// scanner whose inspector reads usage and turns as the session's does: a
// delta costs no allocation (run with -benchmem: 0 allocs/op).
func BenchmarkUpstreamDeltas(b *testing.B) {
	frame := func(s string) []byte { return frames.AppendFrame(nil, ws.OpText, []byte(s), false) }
	delta := frame(`{"type":"response.output_audio.delta","response_id":"resp_1","item_id":"item_1","output_index":0,"content_index":0,"delta":"` + strings.Repeat("A", 6400) + `"}`)
	start, done := frame(created), frame(`{"type":"response.done","response":{"status":"completed","usage":{"total_tokens":70,"input_tokens":60,"output_tokens":10}}}`)
	in := &benchInspector{}
	s := frames.NewScanner(frames.UpstreamSide, 0)
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

// benchInspector is the session's inspector (server/session's setupWatch) without
// its server: the type read once, usage and turns from it.
type benchInspector struct {
	meter     usage.Meter
	turns     Watch
	wantUsage bool
}

func (in *benchInspector) Wants(prefix []byte) bool {
	typ, ok := eventtype.Of(prefix)
	if !ok {
		return false
	}
	in.wantUsage = in.meter.WantsType(typ)
	whole := in.turns.See(protocol.Realtime{}.Turn(typ), prefix)
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
	s := frames.NewScanner(frames.UpstreamSide, 0)
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
		{"one answer, ended with the session", []step{{0, heard, false}, {100, heard, false}, {350, spoken, false},
			{400, spoken, false}, {900, usageU, false}},
			[]Event{first(250), ended(Completed, 800)}}, // timed from the last speech heard
		{"the next speech ends the turn that spoke", []step{{0, heard, false}, {200, spoken, false}, {1000, heard, false},
			{1300, spoken, false}},
			[]Event{first(200), ended(Completed, 1000), first(300), ended(Completed, 300)}},
		{"speech never answered is unfinished", []step{{0, heard, false}, {500, heard, false}},
			[]Event{ended(Unfinished, 0)}}, // the clock moved with the speech
		{"output with no speech heard is no turn", []step{{0, spoken, false}, {40, spoken, false}}, nil},
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

// clientInspector is the session's inspector on the client's frames
// (server/session's clientWatch) without its Manager: the type read once, the turns'
// clock from it.
type clientInspector struct{ turns *Watch }

func (in clientInspector) Wants(prefix []byte) bool {
	typ, ok := eventtype.Of(prefix)
	return ok && in.turns.ClientWants(typ)
}

func (in clientInspector) Inspect(p []byte) { in.turns.Client(p, false) }

// appendFrame is a client's 20 ms append of 24 kHz PCM16, masked.
var appendFrame = frames.AppendFrame(nil, ws.OpText,
	[]byte(`{"type":"input_audio_buffer.append","event_id":"event_1","audio":"`+strings.Repeat("A", 1280)+`"}`), true)

// vadWatch is a Watch whose session has server VAD making responses: its
// appends are timed.
func vadWatch() *Watch {
	w := &Watch{}
	if w.See(protocol.Realtime{}.Turn([]byte("session.created")), nil) {
		w.Inspect([]byte(vadSession))
	}
	return w
}

// TestClientAppendAllocatesNothing: with server VAD on, each append the
// gateway forwards is timed (its audio counted, the moment kept) and
// allocates nothing once the clock's marks are made.
func TestClientAppendAllocatesNothing(t *testing.T) {
	w := vadWatch()
	s := frames.NewScanner(frames.ClientSide, 0)
	s.SetInspector(clientInspector{w})
	src := frames.NewByteSource(nil)
	forward := func() {
		src.Reset(appendFrame)
		if _, err := s.Forward(src, nil); err != nil {
			t.Fatal(err)
		}
	}
	forward()
	if allocs := testing.AllocsPerRun(1000, forward); allocs != 0 {
		t.Fatalf("%v allocations per append", allocs)
	}
	if got := w.audio.ms; got != 1002*20 { // AllocsPerRun runs once more to warm up
		t.Fatalf("audio clock at %v ms, want %d", got, 1002*20)
	}
}

// BenchmarkClientAppend is what the turn clock adds to a client's append
// (see continuity's BenchmarkRelayCost for the relay's own): off, VAD off
// (the type scan only), on (the unmasked copy and the timing).
func BenchmarkClientAppend(b *testing.B) {
	for _, mode := range []string{"none", "vad-off", "vad-on"} {
		b.Run(mode, func(b *testing.B) {
			s := frames.NewScanner(frames.ClientSide, 0)
			switch mode {
			case "vad-off":
				s.SetInspector(clientInspector{&Watch{}})
			case "vad-on":
				s.SetInspector(clientInspector{vadWatch()})
			}
			src := frames.NewByteSource(nil)
			b.ReportAllocs()
			b.SetBytes(int64(len(appendFrame)))
			for b.Loop() {
				src.Reset(appendFrame)
				if _, err := s.Forward(src, nil); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestQueuedCreate: a create the client sent before its upstream existed
// (queued by the session) is timed from the upstream's attach, when it
// went, not from when it was queued.
func TestQueuedCreate(t *testing.T) {
	epoch := time.Unix(1000, 0)
	now := epoch
	var got []Event
	w := &Watch{Tracker: Tracker{Now: func() time.Time { return now }, Observe: func(ev Event) { got = append(got, ev) }}}
	if w.ClientWants([]byte("response.create")) {
		w.Client([]byte(create), true)
	}
	now = epoch.Add(300 * time.Millisecond)
	w.Attached()
	now = epoch.Add(350 * time.Millisecond)
	if w.See(protocol.Realtime{}.Turn([]byte("response.created")), nil) {
		w.Inspect([]byte(created))
	}
	now = epoch.Add(400 * time.Millisecond)
	w.See(protocol.FirstOutput, []byte(audioDelta))
	if len(got) != 1 || got[0] != first(100) {
		t.Fatalf("events %+v, want the first audio 100 ms after the attach", got)
	}
}
