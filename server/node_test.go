package server

import (
	"context"
	"crypto/x509"
	"os"
	"os/exec"
	"testing"
	"time"
)

// runNode runs script from server/testdata/node with env added to the
// test's environment (the official SDK installed there first) and returns
// what it printed; a failure to run fails the test.
func runNode(t *testing.T, script string, env ...string) []byte {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatal("node is not installed (apt-get install -y nodejs npm)")
	}
	dir := ensureNodeModules(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, script)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("node %s: %v", script, err)
	}
	return out
}

// mockaiOver starts mockai as a process serving scheme ("ws" or "wss")
// with flags args, and the roots that trust it (nil over ws).
func mockaiOver(t *testing.T, scheme string, args ...string) (*mockaiProcess, *x509.CertPool) {
	t.Helper()
	if scheme == "wss" {
		return tlsMockaiProcess(t, args...)
	}
	return startMockaiProcess(t, args...), nil
}
