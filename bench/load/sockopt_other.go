//go:build !linux

package load

import "syscall"

func bindNoPort(_, _ string, _ syscall.RawConn) error { return nil }
