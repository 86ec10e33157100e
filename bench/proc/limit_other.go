//go:build !unix

package proc

import "errors"

// FileLimit is only known on Unix.
func FileLimit() (int, error) { return 0, errors.ErrUnsupported }

// RaiseFileLimit is a no-op where there is no RLIMIT_NOFILE.
func RaiseFileLimit() error { return nil }

// SoftFileLimit is unknown (0) where there is no RLIMIT_NOFILE.
func SoftFileLimit() uint64 { return 0 }
