package proc

import "syscall"

// childAttr makes the kernel send sig to a child when the benchmark dies,
// however it dies, so no mockai, gateway or proxy is left behind.
func childAttr(sig syscall.Signal) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: sig}
}
