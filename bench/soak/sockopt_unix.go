//go:build unix

package soak

import "syscall"

// smallRcvBuf sets SO_RCVBUF before connect, which also stops the kernel
// from growing the receive window: a client that stops reading then holds
// little, and the backlog builds up in the gateway.
func smallRcvBuf(n int) func(network, address string, c syscall.RawConn) error {
	return func(_, _ string, c syscall.RawConn) error {
		var serr error
		if err := c.Control(func(fd uintptr) {
			serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, n)
		}); err != nil {
			return err
		}
		return serr
	}
}
