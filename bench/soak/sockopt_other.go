//go:build !unix

package soak

import "syscall"

// smallRcvBuf does nothing here: the slow client then needs more responses
// before the gateway drops it.
func smallRcvBuf(int) func(network, address string, c syscall.RawConn) error { return nil }
