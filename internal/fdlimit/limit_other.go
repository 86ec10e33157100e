//go:build !unix

package fdlimit

// Raise is a no-op where there is no RLIMIT_NOFILE.
func Raise() error { return nil }

// Soft is unknown (0) where there is no RLIMIT_NOFILE.
func Soft() uint64 { return 0 }
