package usage

import (
	"bufio"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func readIDs(t *testing.T, path string) []string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var ids []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var r Record
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		ids = append(ids, r.SessionID)
	}
	return ids
}

// TestLogReopen rotates the log as logrotate does (rename, then the signal
// that makes the gateway reopen) with records still queued.
func TestLogReopen(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "usage.jsonl")
	lost := prometheus.NewCounter(prometheus.CounterOpts{Name: "lost"})
	l, err := Open(path, slog.New(slog.DiscardHandler), lost)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"a", "b", "c"} {
		l.Write(Record{SessionID: id})
	}
	if err := os.Rename(path, path+".1"); err != nil {
		t.Fatal(err)
	}
	if err := l.Reopen(); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"d", "e"} {
		l.Write(Record{SessionID: id})
	}
	l.Close()
	if err := l.Reopen(); err != nil { // after Close: nothing to do
		t.Fatal(err)
	}
	if got := readIDs(t, path+".1"); len(got) != 3 || got[0] != "a" || got[2] != "c" {
		t.Fatalf("rotated file holds %v, want a b c", got)
	}
	if got := readIDs(t, path); len(got) != 2 || got[0] != "d" || got[1] != "e" {
		t.Fatalf("new file holds %v, want d e", got)
	}
	if n := testutil.ToFloat64(lost); n != 0 {
		t.Fatalf("%v records lost", n)
	}
}

// TestLogReopenFailureKeepsWriting: a path that cannot be opened any more
// (its folder is gone) is an error, and records go on to the old file.
func TestLogReopenFailureKeepsWriting(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "logs")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "usage.jsonl")
	l, err := Open(path, slog.New(slog.DiscardHandler), prometheus.NewCounter(prometheus.CounterOpts{Name: "lost"}))
	if err != nil {
		t.Fatal(err)
	}
	moved := filepath.Join(filepath.Dir(dir), "moved")
	if err := os.Rename(dir, moved); err != nil {
		t.Fatal(err)
	}
	l.Write(Record{SessionID: "a"})
	if err := l.Reopen(); err == nil {
		t.Fatal("Reopen into a missing folder succeeded")
	}
	l.Write(Record{SessionID: "b"})
	l.Close()
	if got := readIDs(t, filepath.Join(moved, "usage.jsonl")); len(got) != 2 {
		t.Fatalf("old file holds %v, want a b", got)
	}
}
