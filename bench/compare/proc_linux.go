package compare

import "syscall"

// childAttr makes the kernel kill a child if wsbench dies without cleaning
// up (SIGKILL, crash), so no mockai or gateway outlives the benchmark.
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
