// Package benchtest holds what the bench packages' and wsbench's tests share:
// an in-process mockai for one test, and an address that refuses dials.
package benchtest

import (
	"strconv"
	"testing"

	"rtgate/bench/proc"
	"rtgate/mockai"
)

// Mockai runs an in-process mockai on a free loopback port for one test; it
// is closed when the test ends.
func Mockai(t testing.TB, cfg mockai.Config) *mockai.Server {
	t.Helper()
	srv, err := mockai.Start(cfg, "127.0.0.1:0")
	if err != nil {
		t.Fatalf("mockai.Start: %v", err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	return srv
}

// RefusedAddr is a loopback address nothing listens on: a port the kernel
// handed out and that was closed at once, so a dial to it is refused.
func RefusedAddr(t testing.TB) string {
	t.Helper()
	port, err := proc.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	return "127.0.0.1:" + strconv.Itoa(port)
}
