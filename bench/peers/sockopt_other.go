//go:build !linux

package peers

import "syscall"

// The peer comparison reads /proc and so only measures on Linux; these keep the
// package building elsewhere.

func bindNoPort(_, _ string, _ syscall.RawConn) error { return nil }

func childAttr(syscall.Signal) *syscall.SysProcAttr { return nil }

func fileLimit() (int, error) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 0, err
	}
	return int(min(lim.Max, 1<<20)), nil
}

func selfCPU() float64 {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}
