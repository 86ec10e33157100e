//go:build unix

package fdlimit

import (
	"fmt"
	"syscall"
)

// Raise lifts this process's soft open-file limit to the hard one. Go's os
// package already does this at start-up on Linux; doing it here makes it
// explicit, portable to the other Unixes, and makes the limit that Soft
// reports, and wsbench checks -hold against, certain.
func Raise() error {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return fmt.Errorf("read open-file limit: %w", err)
	}
	if lim.Cur >= lim.Max {
		return nil
	}
	lim.Cur = lim.Max
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return fmt.Errorf("raise open-file limit to %d: %w", lim.Max, err)
	}
	return nil
}

// Soft is this process's current soft open-file limit (0 if unknown).
func Soft() uint64 {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 0
	}
	return lim.Cur
}
