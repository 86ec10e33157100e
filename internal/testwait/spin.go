package testwait

import (
	"bytes"
	"runtime"
	"testing"
	"time"
)

// spinFrame is where a netpoll poller loops forever when a connection's
// operator is freed from inside the poller's own handling of it (package
// poller's doc, "The inline invariant").
const spinFrame = "netpoll.(*FDOperator).unused"

// PollerSpinning reports whether some goroutine is in netpoll's
// FDOperator.unused: either a poller spinning there, or (briefly, and
// legitimately) another goroutine waiting for a poller to finish with an
// operator. Callers ask it only about something that should have finished.
func PollerSpinning() bool {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			return bytes.Contains(buf[:n], []byte(spinFrame))
		}
		buf = make([]byte, 2*len(buf))
	}
}

// NoSpin is For for something a spinning poller would keep from ever
// happening: it fails at once, naming the spin, when cond has not held for
// a second and a goroutine is still in FDOperator.unused a moment later, and
// otherwise as For does.
func NoSpin(t testing.TB, what string, cond func() bool) {
	t.Helper()
	start := time.Now()
	deadline := start.Add(Timeout)
	for !cond() {
		now := time.Now()
		if now.Sub(start) > time.Second && PollerSpinning() {
			time.Sleep(50 * time.Millisecond)
			if !cond() && PollerSpinning() {
				t.Fatalf("waiting for %s: a netpoll poller spins in FDOperator.unused (a Close landed inside its own handler task)", what)
			}
		}
		if now.After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(pollEvery)
	}
}
