//go:build unix

package proc

import (
	"fmt"
	"syscall"
)

// FileLimit is the hard open-file limit every child here runs under (capped
// at 2^20): what a proxy may raise its own limit to.
func FileLimit() (int, error) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 0, err
	}
	return int(min(lim.Max, 1<<20)), nil
}

// RaiseFileLimit lifts this process's soft open-file limit to the hard one:
// a load run or a mock upstream holds one descriptor per session, far above
// the usual soft limit of 1024. Go's os package already does this at start-up
// on Linux; doing it here makes it explicit, portable to the other Unixes, and
// makes the limit that SoftFileLimit reports, and wsbench checks -hold
// against, certain. (cmd/wsbench and cmd/mockai both call it.)
func RaiseFileLimit() error {
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

// SoftFileLimit is this process's current soft open-file limit (0 if unknown).
func SoftFileLimit() uint64 {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 0
	}
	return lim.Cur
}
