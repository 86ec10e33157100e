package harness

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

func TestResultsDir(t *testing.T) {
	out := t.TempDir()
	dir, err := ResultsDir(out, "peers", time.Date(2026, 12, 1, 9, 5, 7, 0, time.UTC))
	if err != nil || dir != filepath.Join(out, "peers-20261201-090507") {
		t.Fatalf("ResultsDir = %q, %v", dir, err)
	}
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		t.Errorf("not made: %v", err)
	}
	blocker := filepath.Join(out, "file")
	os.WriteFile(blocker, nil, 0o644)
	if _, err := ResultsDir(blocker, "x", time.Now()); err == nil {
		t.Error("a file in the way: no error")
	}
}

func TestSayerRandomKeySleep(t *testing.T) {
	var b strings.Builder
	Sayer(&b)("%s %d", "a", 1)
	Sayer(nil)("dropped")
	if b.String() != "a 1\n" {
		t.Errorf("Sayer wrote %q", b.String())
	}
	k1, k2 := RandomKey("sk-x-"), RandomKey("sk-x-")
	if !regexp.MustCompile(`^sk-x-[0-9a-f]{32}$`).MatchString(k1) || k1 == k2 {
		t.Errorf("keys %q, %q", k1, k2)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := Sleep(ctx, time.Hour); !errors.Is(err, context.Canceled) {
		t.Errorf("Sleep on a cancelled context = %v", err)
	}
	if SleepUntil(ctx, time.Now().Add(-time.Second)) {
		t.Error("SleepUntil on a cancelled context reported live")
	}
	if err := Sleep(context.Background(), time.Millisecond); err != nil {
		t.Errorf("Sleep = %v", err)
	}
}

func TestWriteJSONAndSnapshot(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "r.json")
	if err := WriteJSON(path, map[string]int{"a": 1}); err != nil {
		t.Fatal(err)
	}
	var got map[string]int
	data, _ := os.ReadFile(path)
	if err := json.Unmarshal(data, &got); err != nil || got["a"] != 1 {
		t.Errorf("read back %s: %v", data, err)
	}
	if _, err := os.Stat(path + ".tmp"); !os.IsNotExist(err) {
		t.Errorf("temp file left: %v", err)
	}
	src := filepath.Join(dir, "bin")
	os.WriteFile(src, []byte("abc"), 0o755)
	sum, err := Snapshot(src, filepath.Join(dir, "copy"))
	// sha256("abc") = ba7816bf8f01...
	if err != nil || sum != "ba7816bf8f01" {
		t.Errorf("Snapshot = %q, %v", sum, err)
	}
	if _, err := Snapshot(filepath.Join(dir, "none"), filepath.Join(dir, "c2")); err == nil {
		t.Error("missing source: no error")
	}
}

func TestSettings(t *testing.T) {
	out := t.TempDir()
	bin := filepath.Join(out, "mockai")
	os.WriteFile(bin, nil, 0o755)
	s := Settings{MockaiBin: bin, GatewayBin: filepath.Join(out, "gateway"), Upstream: "tls", OutDir: out,
		Now: func() time.Time { return time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC) }}
	if errs := s.Check(true); len(errs) != 0 {
		t.Errorf("Check = %v", errs)
	}
	if errs := (Settings{Upstream: "quic"}).Check(true); len(errs) != 3 {
		t.Errorf("Check of nothing = %v, want three problems", errs)
	}
	if _, _, _, err := s.Begin("soak", true); err == nil || !strings.Contains(err.Error(), "go build -o "+s.GatewayBin+" ./cmd/gateway") {
		t.Errorf("missing gateway: %v", err)
	}
	dir, started, say, err := s.Begin("compare", false)
	if err != nil || dir != filepath.Join(out, "compare-20261201-080000") || !started.Equal(s.Now()) || say == nil {
		t.Errorf("Begin = %q, %v, %v", dir, started, err)
	}
}
