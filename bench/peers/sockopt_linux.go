//go:build linux

package peers

import "syscall"

// ipBindAddressNoPort is IP_BIND_ADDRESS_NO_PORT: binding a source address without
// reserving a port lets the kernel pick the port at connect and share ports across
// destinations.
const ipBindAddressNoPort = 24

func bindNoPort(_, _ string, c syscall.RawConn) error {
	return c.Control(func(fd uintptr) {
		// Best effort: without the option each socket just reserves its own port.
		_ = syscall.SetsockoptInt(int(fd), syscall.IPPROTO_IP, ipBindAddressNoPort, 1)
	})
}

// childAttr makes the kernel send sig to a started process if the benchmark dies
// without cleaning up (SIGKILL, crash), so no proxy outlives it.
func childAttr(sig syscall.Signal) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: sig}
}

// fileLimit is the hard open-file limit every process here runs under.
func fileLimit() (int, error) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 0, err
	}
	return int(min(lim.Max, 1<<20)), nil
}

// selfCPU is the CPU this process has used, user and system, in seconds.
func selfCPU() float64 {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}
