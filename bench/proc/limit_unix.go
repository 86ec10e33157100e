//go:build unix

package proc

import "syscall"

// FileLimit is the hard open-file limit every child here runs under (capped
// at 2^20): what a proxy may raise its own limit to.
func FileLimit() (int, error) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 0, err
	}
	return int(min(lim.Max, 1<<20)), nil
}
