package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"rtgate/bench/benchtest"
	"rtgate/mockai"
)

// The wrong scheme is named in one line, with the flag that fixes it.
func TestRunBenchHintsAtTheScheme(t *testing.T) {
	for _, tc := range []struct {
		name     string
		mock     mockai.Config
		args     []string
		wantHint string
	}{
		{"wss:// against plain ws://", mockai.Config{}, nil, "hint: the server answered the TLS handshake in plain text: it serves plain ws:// there; add -insecure"},
		{"ws:// against TLS", mockai.Config{TLS: true}, []string{"-insecure"}, "drop -insecure"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addr := benchtest.Mockai(t, tc.mock).Addr()
			var stdout, stderr bytes.Buffer
			args := append([]string{"-host", addr, "-n", "2", "-c", "1", "-t", "5", "-quiet"}, tc.args...)
			if code := run(context.Background(), args, &stdout, &stderr); code != 1 {
				t.Fatalf("exit %d, want 1\nstderr:\n%s", code, stderr.String())
			}
			if !strings.Contains(stderr.String(), "(2 calls), first: ") || !strings.Contains(stderr.String(), tc.wantHint) {
				t.Fatalf("stderr lacks the first error and %q:\n%s", tc.wantHint, stderr.String())
			}
		})
	}
}
