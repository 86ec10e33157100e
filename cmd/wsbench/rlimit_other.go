//go:build !unix

package main

func raiseFileLimit() error { return nil }

func fileLimit() uint64 { return 0 }
