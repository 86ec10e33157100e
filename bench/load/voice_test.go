package load

import (
	"context"
	"strings"
	"testing"
	"time"

	"rtgate/bench/benchtest"
	"rtgate/mockai"
)

// A voice run against mockai's stream mode: every session sends its appends
// on schedule and receives deltas at the same pace; mockai reads them all,
// the warm-up's too, while only the window's are counted.
func TestVoice(t *testing.T) {
	srv := benchtest.Mockai(t, mockai.Config{Stream: mockai.StreamConfig{Interval: 20 * time.Millisecond}})
	c, err := NewClient(Config{URL: srv.BaseURL() + "/realtime?model=gpt-realtime", Timeout: 10 * time.Second, BufferSize: 2048})
	if err != nil {
		t.Fatal(err)
	}
	var edges []string
	res, err := Voice(context.Background(), c, VoiceOptions{N: 8, Concurrency: 4, Duration: 500 * time.Millisecond,
		Warmup: 200 * time.Millisecond, AtStart: func() { edges = append(edges, "start") }, AtEnd: func() { edges = append(edges, "end") }})
	if err != nil {
		t.Fatal(err)
	}
	if res.Opened != 8 || len(res.Failures) != 0 || len(res.Lost) != 0 {
		t.Fatalf("opened %d, failures %v, lost %v; want 8 and none", res.Opened, res.Failures, res.Lost)
	}
	if res.Window != 500*time.Millisecond || res.Warmup != 200*time.Millisecond || res.SentExpected != 8*25 || res.Sent != res.SentExpected || res.RecvExpected != 8*25 {
		t.Errorf("window %v, sent %d of %d, expected to receive %d; want 500ms, all 200 sent, 200",
			res.Window, res.Sent, res.SentExpected, res.RecvExpected)
	}
	// Deltas start with each session's first append, one per interval after it
	// (how many arrive in the window depends on the machine's load; never more
	// than the schedule).
	if res.Received < 8 || res.Received > res.RecvExpected+8 {
		t.Errorf("received %d deltas, want some and at most %d", res.Received, res.RecvExpected+8)
	}
	if strings.Join(edges, ",") != "start,end" {
		t.Errorf("window callbacks %v", edges)
	}
	if res.LateSends < 0 || res.LateSends > res.Sent || res.MaxLate < 0 {
		t.Errorf("late %d of %d, max %v", res.LateSends, res.Sent, res.MaxLate)
	}
	const warmupSends = 8 * 10 // 200 ms of 20 ms slots per session, not counted
	deadline := time.Now().Add(5 * time.Second)
	for srv.Stats().FramesIn < res.Sent+warmupSends && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if st := srv.Stats(); st.FramesIn != res.Sent+warmupSends {
		t.Errorf("mockai read %d appends, wsbench sent %d in the window and %d in the warm-up", st.FramesIn, res.Sent, warmupSends)
	}
}

func TestVoiceFailures(t *testing.T) {
	if _, err := Voice(context.Background(), nil, VoiceOptions{N: 1, Concurrency: 1}); err == nil {
		t.Error("zero duration accepted")
	}
	// An upstream that refuses every upgrade: nothing opens, nothing streams.
	srv := benchtest.Mockai(t, mockai.Config{StatusCode: 429})
	c, err := NewClient(Config{URL: srv.BaseURL() + "/realtime?model=gpt-realtime", Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	res, err := Voice(context.Background(), c, VoiceOptions{N: 3, Concurrency: 3, Duration: time.Second})
	if err != nil || res.Opened != 0 || res.Failures["handshake_429"] != 3 || res.Sent != 0 {
		t.Errorf("result %+v, %v; want 3 x handshake_429 and nothing sent", res, err)
	}
	// A session the upstream drops mid-stream is lost, not counted as received.
	drop := benchtest.Mockai(t, mockai.Config{Stream: mockai.StreamConfig{Interval: 20 * time.Millisecond}, DropAfterFrames: 5})
	c, err = NewClient(Config{URL: drop.BaseURL() + "/realtime?model=gpt-realtime", Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	res, err = Voice(context.Background(), c, VoiceOptions{N: 2, Concurrency: 2, Duration: 400 * time.Millisecond})
	if err != nil || res.Lost["unexpected_close_1006"] != 2 || res.Received >= res.RecvExpected {
		t.Errorf("dropped sessions: lost %v, received %d of %d, %v", res.Lost, res.Received, res.RecvExpected, err)
	}
}
