//go:build !linux

package proc

import "syscall"

func childAttr() *syscall.SysProcAttr { return nil }
