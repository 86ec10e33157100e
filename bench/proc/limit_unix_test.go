//go:build unix

package proc

import (
	"syscall"
	"testing"
)

// RaiseFileLimit lifts a lowered soft limit back to the hard one, and
// SoftFileLimit reports what the kernel says.
func TestRaiseFileLimit(t *testing.T) {
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
	if got := SoftFileLimit(); got != lowered.Cur {
		t.Fatalf("SoftFileLimit %d after lowering, want %d", got, lowered.Cur)
	}

	if err := RaiseFileLimit(); err != nil {
		t.Fatal(err)
	}
	if got := SoftFileLimit(); got != orig.Max {
		t.Errorf("SoftFileLimit %d after RaiseFileLimit, want the hard limit %d", got, orig.Max)
	}
	// At the hard limit already, it is a no-op.
	if err := RaiseFileLimit(); err != nil {
		t.Errorf("second RaiseFileLimit: %v", err)
	}
	if got := SoftFileLimit(); got != orig.Max {
		t.Errorf("SoftFileLimit %d after a second RaiseFileLimit, want %d", got, orig.Max)
	}
}
