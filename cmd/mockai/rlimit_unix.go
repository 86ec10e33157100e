//go:build unix

package main

import (
	"fmt"
	"syscall"
)

// raiseFileLimit lifts the soft open-file limit to the hard one: a load run holds
// one descriptor per session, far above the usual soft limit of 1024. (Go's os package
// already does this at start-up on Linux; doing it here makes it explicit and portable.)
func raiseFileLimit() error {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return fmt.Errorf("get RLIMIT_NOFILE: %w", err)
	}
	if lim.Cur >= lim.Max {
		return nil
	}
	lim.Cur = lim.Max
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return fmt.Errorf("set RLIMIT_NOFILE to %d: %w", lim.Max, err)
	}
	return nil
}
