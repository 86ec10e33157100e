// Package benchtest holds what the bench packages' and wsbench's tests share:
// an in-process mockai for one test, an address that refuses dials, and the
// module's commands built as binaries.
package benchtest

import (
	"os/exec"
	"path/filepath"
	"runtime"
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

// Build builds the module's commands (rtgate/cmd/<name>) into dir, without
// -race even under go test -race (a race-built gateway hits a rare netpoll
// dial failure often enough to make the harness tests flaky), and returns
// their paths in the order of names.
func Build(t testing.TB, dir string, names ...string) []string {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		goBin = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	var paths []string
	for _, name := range names {
		bin := filepath.Join(dir, name)
		if b, err := exec.Command(goBin, "build", "-o", bin, "rtgate/cmd/"+name).CombinedOutput(); err != nil {
			t.Fatalf("go build rtgate/cmd/%s: %v\n%s", name, err, b)
		}
		paths = append(paths, bin)
	}
	return paths
}
