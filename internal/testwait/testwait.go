// Package testwait waits in tests for something another goroutine or process
// makes true: a pool filling, a mock seeing a request, a counter moving.
//
// It is its own package because test helpers cannot be shared from _test.go
// files, and the tests that poll sit in several layers (upstream, server):
// the existing helper packages each serve one thing (bench/benchtest the
// bench tests, server/redistest and server/spenddb/pgtest a real server), and
// upstream's tests should not import bench or server code to get a loop.
package testwait

import (
	"testing"
	"time"
)

// Timeout is how long For waits: long enough for a loaded 2-core CI machine
// under -race, short enough that a condition that never holds fails the test
// rather than hangs it.
const Timeout = 10 * time.Second

// pollEvery is how often For checks the condition.
const pollEvery = 5 * time.Millisecond

// For checks cond every few milliseconds until it holds, and fails the test
// with "timed out waiting for <what>" if it has not within Timeout. Call it
// from the test's goroutine (it may call t.Fatalf).
func For(t testing.TB, what string, cond func() bool) {
	t.Helper()
	until(t, what, cond, Timeout)
}

func until(t testing.TB, what string, cond func() bool, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(pollEvery)
	}
}
