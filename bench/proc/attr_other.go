//go:build !linux

package proc

import "syscall"

func childAttr(syscall.Signal) *syscall.SysProcAttr { return nil }
