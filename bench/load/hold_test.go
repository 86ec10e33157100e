package load

import (
	"context"
	"runtime"
	"testing"
	"time"

	"rtgate/bench/benchtest"
	"rtgate/mockai"
)

func TestHold(t *testing.T) {
	tests := []struct {
		name                        string
		mock                        mockai.Config
		wantEstablished, wantHeld   int
		wantFailed, wantClosedClean int
		wantLost                    string
	}{
		{"all held and closed", mockai.Config{}, 12, 12, 0, 12, ""},
		{"closed by server while idle", mockai.Config{CloseAfterFrames: 1}, 12, 0, 0, 0, "unexpected_close_1011"},
		{"dropped while idle", mockai.Config{DropAfterFrames: 1}, 12, 0, 0, 0, "unexpected_close_1006"},
		{"refused", mockai.Config{StatusCode: 429}, 0, 0, 12, 0, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := runtime.NumGoroutine()
			srv := benchtest.Mockai(t, tc.mock)
			c := newTestClient(t, Config{URL: realtimeURL(srv.BaseURL()), BufferSize: 1024})
			var p Progress
			res, err := Hold(context.Background(), c, HoldOptions{N: 12, Concurrency: 4, HoldFor: 300 * time.Millisecond,
				CloseWait: 2 * time.Second, Progress: &p})
			if err != nil {
				t.Fatal(err)
			}
			if res.Established != tc.wantEstablished || res.Held != tc.wantHeld || res.Failed != tc.wantFailed ||
				res.ClosedClean != tc.wantClosedClean {
				t.Fatalf("established %d held %d failed %d clean %d lost %v; want %d %d %d %d",
					res.Established, res.Held, res.Failed, res.ClosedClean, res.Lost,
					tc.wantEstablished, tc.wantHeld, tc.wantFailed, tc.wantClosedClean)
			}
			if tc.wantLost != "" && res.Lost[tc.wantLost] != tc.wantEstablished {
				t.Errorf("lost %v, want %d x %s", res.Lost, tc.wantEstablished, tc.wantLost)
			}
			if len(res.Opening) != 12 || p.Done.Load() != 12 {
				t.Errorf("%d opening samples, progress %d", len(res.Opening), p.Done.Load())
			}
			if (res.Established > 0) != (res.MemPerSession > 0) {
				t.Errorf("memory per session %d with %d established", res.MemPerSession, res.Established)
			}
			if res.Holding < 300*time.Millisecond {
				t.Errorf("held for %v, want at least 300ms", res.Holding)
			}
			if tc.wantHeld > 0 && srv.Stats().Active != 0 {
				// Every socket is closed once Hold returns; give the
				// server a moment to notice.
				deadline := time.Now().Add(2 * time.Second)
				for srv.Stats().Active != 0 && time.Now().Before(deadline) {
					time.Sleep(10 * time.Millisecond)
				}
				if a := srv.Stats().Active; a != 0 {
					t.Errorf("%d sessions still open on the server after Hold", a)
				}
			}
			_ = srv.Close()
			checkNoLeak(t, before)
		})
	}
}

func TestHoldInterrupted(t *testing.T) {
	srv := benchtest.Mockai(t, mockai.Config{})
	c := newTestClient(t, Config{URL: realtimeURL(srv.BaseURL())})
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(300*time.Millisecond, cancel)
	start := time.Now()
	res, err := Hold(ctx, c, HoldOptions{N: 3, Concurrency: 3, HoldFor: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if time.Since(start) > 20*time.Second {
		t.Errorf("interrupt did not end the hold")
	}
	if res.Established != 3 || res.ClosedClean != 3 {
		t.Errorf("established %d, closed clean %d; want 3, 3", res.Established, res.ClosedClean)
	}
}
