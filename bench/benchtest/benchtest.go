// Package benchtest holds what the bench packages' and wsbench's tests share:
// an in-process mockai for one test.
package benchtest

import (
	"testing"

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
