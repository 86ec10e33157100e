//go:build !linux

package server

// memoryAvailable is unknown here: without GOMEMLIMIT the budget is off
// unless MAX_BUFFERED_BYTES is set.
func memoryAvailable() int64 { return 0 }
