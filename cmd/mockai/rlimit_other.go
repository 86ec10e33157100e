//go:build !unix

package main

// raiseFileLimit is a no-op where there is no RLIMIT_NOFILE.
func raiseFileLimit() error { return nil }
