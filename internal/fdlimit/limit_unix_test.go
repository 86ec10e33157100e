//go:build unix

package fdlimit

import (
	"syscall"
	"testing"
)

// Raise lifts a lowered soft limit back to the hard one, and
// Soft reports what the kernel says.
func TestRaise(t *testing.T) {
	var orig syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &orig); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &orig); err != nil {
			t.Errorf("restore the open-file limit: %v", err)
		}
	})
	lowered := orig
	lowered.Cur = max(orig.Max/2, 1024)
	if lowered.Cur >= orig.Max {
		t.Fatalf("hard open-file limit %d is too low to test raising the soft one", orig.Max)
	}
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lowered); err != nil {
		t.Fatal(err)
	}
	if got := Soft(); got != lowered.Cur {
		t.Fatalf("Soft %d after lowering, want %d", got, lowered.Cur)
	}

	if err := Raise(); err != nil {
		t.Fatal(err)
	}
	if got := Soft(); got != orig.Max {
		t.Errorf("Soft %d after Raise, want the hard limit %d", got, orig.Max)
	}
	// At the hard limit already, it is a no-op.
	if err := Raise(); err != nil {
		t.Errorf("second Raise: %v", err)
	}
	if got := Soft(); got != orig.Max {
		t.Errorf("Soft %d after a second Raise, want %d", got, orig.Max)
	}
}
