package load

import (
	"context"
	"encoding/json"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"rtgate/bench/benchtest"
	"rtgate/mockai"
)

func TestRunClosedLoop(t *testing.T) {
	before := runtime.NumGoroutine()
	srv := benchtest.Mockai(t, mockai.Config{AudioDeltas: 2})
	c := newTestClient(t, Config{URL: realtimeURL(srv.BaseURL())})
	var p Progress
	calls := 0
	res, err := Run(context.Background(), c, Options{N: 30, Concurrency: 7, Progress: &p,
		OnCall: func(int, Sample) {}})
	if err != nil {
		t.Fatal(err)
	}
	calls = len(res.Samples)
	sum := res.Summary()
	if calls != 30 || sum.OK != 30 || sum.SuccessRate != 1 || len(sum.Failures) != 0 {
		t.Fatalf("got %d samples, summary %+v", calls, sum)
	}
	if p.Done.Load() != 30 || p.Failed.Load() != 0 {
		t.Errorf("progress %d done %d failed", p.Done.Load(), p.Failed.Load())
	}
	if sum.Dial.N != 30 || sum.Total.N != 30 || sum.Total.P50 <= 0 || sum.Total.Max < sum.Total.P99 {
		t.Errorf("bad phase summary %+v", sum.Total)
	}
	if got := srv.Stats().Sessions; got != 30 {
		t.Errorf("mock saw %d sessions, want 30", got)
	}
	_ = srv.Close()
	checkNoLeak(t, before)
}

func TestRunOpenLoopSchedule(t *testing.T) {
	srv := benchtest.Mockai(t, mockai.Config{AudioDeltas: 1})
	c := newTestClient(t, Config{URL: realtimeURL(srv.BaseURL())})
	const rate = 200.0 // one arrival every 5 ms
	res, err := Run(context.Background(), c, Options{N: 20, Concurrency: 5, Rate: rate, Spacing: SpacingEven})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Samples) != 20 {
		t.Fatalf("%d samples, want 20", len(res.Samples))
	}
	for i, s := range res.Samples {
		if !s.OK() {
			t.Errorf("call %d failed: %s %s", i, s.Failure, s.Detail)
		}
		// Starts are the schedule, not when a goroutine happened to run.
		want := res.Samples[0].Offset + time.Duration(float64(i)/rate*float64(time.Second))
		if d := s.Offset - want; d < -time.Microsecond || d > time.Microsecond {
			t.Errorf("call %d starts at %v, want %v", i, s.Offset, want)
		}
	}
}

func TestRunCancelledStopsEarly(t *testing.T) {
	srv := benchtest.Mockai(t, mockai.Config{FirstAudioDelay: 300 * time.Millisecond})
	c := newTestClient(t, Config{URL: realtimeURL(srv.BaseURL())})
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel)
	res, err := Run(ctx, c, Options{N: 1000, Concurrency: 2})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(res.Samples); n == 0 || n >= 1000 {
		t.Fatalf("%d samples after cancel, want a few", n)
	}
	if f := res.Summary().Failures["cancelled"]; f == 0 {
		t.Errorf("in-flight calls should be cancelled, got %v", res.Summary().Failures)
	}
}

func TestRunRejectsBadOptions(t *testing.T) {
	c := newTestClient(t, Config{URL: "ws://127.0.0.1:1/"})
	for _, o := range []Options{{N: 0, Concurrency: 1}, {N: 1, Concurrency: 0}, {N: 1, Concurrency: 1, Rate: -1}} {
		if _, err := Run(context.Background(), c, o); err == nil {
			t.Errorf("Run(%+v) accepted bad options", o)
		}
	}
}

func TestSummarize(t *testing.T) {
	ms := time.Millisecond
	samples := []Sample{
		{Reached: PhaseDone, Dial: 10 * ms, Session: 1 * ms, FirstAudio: 100 * ms, Total: 300 * ms},
		{Reached: PhaseDone, Dial: 20 * ms, Session: 2 * ms, FirstAudio: 200 * ms, Total: 400 * ms},
		{Reached: PhaseSession, Dial: 30 * ms, Session: 3 * ms, Failure: "timeout_first_audio"},
		{Reached: PhaseNone, Failure: "handshake_429"},
		{Reached: PhaseNone, Failure: "handshake_429"},
		{Reached: PhaseDial, Dial: 40 * ms, Failure: "unexpected_close_1006"},
	}
	s := Summarize(samples, 2*time.Second, 30*ms)
	if s.Calls != 6 || s.OK != 2 || s.SuccessRate != 2.0/6 {
		t.Errorf("counts %+v", s)
	}
	if s.Dial.N != 4 || s.Dial.P50 != 20*ms || s.Dial.Max != 40*ms {
		t.Errorf("dial %+v", s.Dial)
	}
	if s.Session.N != 3 || s.FirstAudio.N != 2 || s.Total.N != 2 || s.Total.P99 != 400*ms {
		t.Errorf("phases %+v %+v %+v", s.Session, s.FirstAudio, s.Total)
	}
	if s.CPUPer1000 != 5*time.Second || s.Throughput != 3 {
		t.Errorf("cpu per 1000 %v, throughput %v", s.CPUPer1000, s.Throughput)
	}
	got := strings.Join(FailureClasses(s.Failures), ",")
	if got != "handshake_429,timeout_first_audio,unexpected_close_1006" {
		t.Errorf("failure order %q", got)
	}
}

func TestSampleJSON(t *testing.T) {
	s := Sample{Offset: 1500 * time.Microsecond, Reached: PhaseSession, Dial: 2 * time.Millisecond,
		Session: 500 * time.Microsecond, Failure: "timeout_first_audio", Detail: "i/o timeout"}
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"start_ms":1.5,"dial_ms":2,"session_ms":0.5,"first_audio_ms":null,"total_ms":null,"ok":false,"failure":"timeout_first_audio","detail":"i/o timeout"}`
	if string(b) != want {
		t.Errorf("got  %s\nwant %s", b, want)
	}
}

func TestForEach(t *testing.T) {
	var mu sync.Mutex
	seen := map[int]int{}
	inFlight, most := 0, 0
	ForEach(context.Background(), 50, 4, func(i int) {
		mu.Lock()
		seen[i]++
		inFlight++
		most = max(most, inFlight)
		mu.Unlock()
		time.Sleep(time.Millisecond)
		mu.Lock()
		inFlight--
		mu.Unlock()
	})
	if len(seen) != 50 || most > 4 || most < 2 {
		t.Errorf("ran %d indexes, at most %d at once; want 50, 2 to 4", len(seen), most)
	}
	for i, n := range seen {
		if n != 1 || i < 0 || i >= 50 {
			t.Errorf("index %d ran %d times", i, n)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	calls := 0
	ForEach(ctx, 10, 2, func(int) { calls++ })
	if calls != 0 {
		t.Errorf("cancelled: %d calls", calls)
	}
}
