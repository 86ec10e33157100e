//go:build unix

package main

import (
	"fmt"
	"syscall"
)

// raiseFileLimit lifts the soft open-file limit to the hard limit: hold
// mode keeps one socket per session open. (Go does this at start-up too;
// doing it explicitly makes the limit we check against certain.)
func raiseFileLimit() error {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return fmt.Errorf("read open-file limit: %w", err)
	}
	if lim.Cur < lim.Max {
		lim.Cur = lim.Max
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
			return fmt.Errorf("raise open-file limit: %w", err)
		}
	}
	return nil
}

// fileLimit is the current soft open-file limit (0 if unknown).
func fileLimit() uint64 {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 0
	}
	return lim.Cur
}
