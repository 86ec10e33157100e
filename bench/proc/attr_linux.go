package proc

import "syscall"

// childAttr makes the kernel kill a child when the benchmark dies, however
// it dies, so no mockai or gateway is left behind.
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
