package testwait

import (
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"
)

// recorder is a testing.TB whose Fatalf records the message and ends the
// goroutine, as the real one does.
type recorder struct {
	testing.TB
	msg string
}

func (r *recorder) Helper() {}

func (r *recorder) Fatalf(format string, args ...any) {
	r.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// run calls until on a recorder in its own goroutine (Fatalf ends it) and
// returns the failure message, "" if it returned normally.
func run(cond func() bool, timeout time.Duration) string {
	r := &recorder{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		until(r, "the thing", cond, timeout)
	}()
	<-done
	return r.msg
}

func TestUntil(t *testing.T) {
	var calls atomic.Int32
	for _, tc := range []struct {
		name      string
		cond      func() bool
		wantMsg   string
		wantCalls int32 // 0: not checked
	}{
		{"holds at once", func() bool { calls.Add(1); return true }, "", 1},
		{"holds on the third look", func() bool { return calls.Add(1) == 3 }, "", 3},
		{"never holds", func() bool { calls.Add(1); return false }, "timed out waiting for the thing", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			calls.Store(0)
			if got := run(tc.cond, 100*time.Millisecond); got != tc.wantMsg {
				t.Errorf("message %q, want %q", got, tc.wantMsg)
			}
			if tc.wantCalls != 0 && calls.Load() != tc.wantCalls {
				t.Errorf("cond called %d times, want %d", calls.Load(), tc.wantCalls)
			}
			if tc.wantMsg != "" && calls.Load() < 2 {
				t.Errorf("cond called %d times before giving up: it should be polled", calls.Load())
			}
		})
	}
}

// For waits for a condition another goroutine makes true.
func TestForSeesAnotherGoroutine(t *testing.T) {
	var ready atomic.Bool
	time.AfterFunc(20*time.Millisecond, func() { ready.Store(true) })
	For(t, "ready", ready.Load)
}
