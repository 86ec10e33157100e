// Package harness holds what every benchmark harness (compare, soak, peers)
// needs around the processes it runs: a results directory per run, progress
// lines, throwaway keys, a cancellable sleep, results written atomically and
// private copies of the binaries under test.
package harness

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"
)

// ResultsDir makes outDir/<kind>-<started as 20060102-150405> and returns its
// absolute path.
func ResultsDir(outDir, kind string, started time.Time) (string, error) {
	dir := filepath.Join(outDir, kind+"-"+started.Format("20060102-150405"))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("results directory: %w", err)
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", fmt.Errorf("results directory: %w", err)
	}
	return abs, nil
}

// Say prints one progress line.
type Say func(format string, args ...any)

// Sayer prints progress lines to w; a nil w drops them.
func Sayer(w io.Writer) Say {
	return func(format string, args ...any) {
		if w != nil {
			fmt.Fprintf(w, format+"\n", args...)
		}
	}
}

// RandomKey is prefix and 32 random hex digits: a key that lives for one run
// and so can never be a real one.
func RandomKey(prefix string) string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return prefix + hex.EncodeToString(b)
}

// Sleep waits d, or until ctx ends (then it returns ctx's error).
func Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// SleepUntil waits until t, or until ctx ends; it reports whether ctx is
// still live.
func SleepUntil(ctx context.Context, t time.Time) bool {
	return Sleep(ctx, time.Until(t)) == nil
}

// WriteJSON replaces path with v, indented, never leaving a half-written file.
func WriteJSON(path string, v any) error {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("encode %s: %w", filepath.Base(path), err)
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, append(data, '\n'), 0o644); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// Snapshot copies the executable src to dst and returns the start of its
// SHA-256, which identifies the build in the results. A harness runs such
// copies so that bin/ may be rebuilt while it runs.
func Snapshot(src, dst string) (string, error) {
	in, err := os.Open(src)
	if err != nil {
		return "", fmt.Errorf("binary snapshot: %w", err)
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
	if err != nil {
		return "", fmt.Errorf("binary snapshot: %w", err)
	}
	h := sha256.New()
	_, err = io.Copy(io.MultiWriter(out, h), in)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return "", fmt.Errorf("binary snapshot of %s: %w", src, err)
	}
	return hex.EncodeToString(h.Sum(nil))[:12], nil
}
