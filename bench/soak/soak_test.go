package soak

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"rtgate/bench/benchtest"
)

// buildBinaries builds mockai and the gateway into dir (benchtest.Build:
// the gateway without -race; `wsbench soak -gateway` takes a race-built one
// for that hunt).
func buildBinaries(t *testing.T, dir string) (mockai, gateway string) {
	t.Helper()
	bins := benchtest.Build(t, dir, "mockai", "gateway")
	return bins[0], bins[1]
}

// A short soak, end to end: every fault kind runs at least once against the
// real binaries, every session is explained, the gateway comes back to its
// start values, and the report files are written.
func TestSoakEndToEnd(t *testing.T) {
	bin := t.TempDir()
	mockai, gateway := buildBinaries(t, bin)
	cfg := DefaultConfig()
	cfg.MockaiBin, cfg.GatewayBin = mockai, gateway
	cfg.Duration = 4 * time.Second
	cfg.CallTimeout = 15 * time.Second
	cfg.Concurrency = 16
	cfg.FaultRate = 0.5
	cfg.Seed = 7
	cfg.HandshakeTimeout = time.Second
	cfg.PoolMaxIdle = time.Second
	cfg.Settle = 60 * time.Second
	cfg.OutDir = t.TempDir()
	var progress strings.Builder
	cfg.Progress = &progress

	rep, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatalf("Run: %v\nprogress:\n%s", err, progress.String())
	}
	if !rep.Pass {
		t.Errorf("soak failed: %q\n%s\nprogress:\n%s", rep.Problems, rep.Markdown(), progress.String())
	}
	ran := map[Kind]int{}
	for _, k := range rep.Counts.Kinds {
		ran[k.Kind] = k.Attempted
	}
	for _, k := range Kinds() {
		if ran[k] == 0 {
			t.Errorf("kind %s never ran", k)
		}
	}
	if rep.Counts.Completed == 0 || rep.Counts.Unexplained != 0 {
		t.Errorf("%d completed, %d unexplained; want some and none", rep.Counts.Completed, rep.Counts.Unexplained)
	}
	if rep.Peak.SessionsOpen == 0 || rep.End.SessionsOpen != 0 || len(rep.Readings) < 3 {
		t.Errorf("peak %d sessions, end %d, %d readings: the sampler saw no load, or it did not drain",
			rep.Peak.SessionsOpen, rep.End.SessionsOpen, len(rep.Readings))
	}
	if rep.PoolHits == 0 {
		t.Error("no warm pool hits: the pool was not in play")
	}
	if !rep.Config.Redis || !strings.Contains(rep.Markdown(), "Shared limits (REDIS_URL, a limited key)") {
		t.Error("the soak's gateway did not share its limits through the soak's redis-server, or the summary does not say")
	}
	b, err := os.ReadFile(rep.JSONPath)
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Pass bool `json:"pass"`
	}
	if err := json.Unmarshal(b, &got); err != nil || got.Pass != rep.Pass {
		t.Errorf("results.json: %v, pass %v", err, got.Pass)
	}
	for _, f := range []string{"summary.md", "gateway.log", "mockai.log", "heap-end.pprof"} {
		if _, err := os.Stat(filepath.Join(rep.Dir, f)); err != nil {
			t.Errorf("results: %v", err)
		}
	}
}

// The soak refuses what it cannot run, before starting anything.
func TestRunRejects(t *testing.T) {
	for _, tt := range []struct {
		name   string
		change func(*Config)
		want   string
	}{
		{"no binary", func(c *Config) { c.GatewayBin = filepath.Join(t.TempDir(), "gateway") }, "build it first"},
		{"rate", func(c *Config) { c.FaultRate = 1.5 }, "fault rate 1.5"},
		{"duration", func(c *Config) { c.Duration = 0 }, "must be positive"},
		{"concurrency", func(c *Config) { c.Concurrency = 5000 }, "at most 2000"},
		{"profile", func(c *Config) { c.Profile.Deltas = 0 }, "at least one delta"},
		{"limits", func(c *Config) { c.MaxStalledBytes = 1000 }, "stalled bytes >= 64 KiB"},
	} {
		cfg := DefaultConfig()
		self, _ := os.Executable() // any existing file stands in for the binaries
		cfg.MockaiBin, cfg.GatewayBin, cfg.OutDir = self, self, t.TempDir()
		tt.change(&cfg)
		if _, err := Run(context.Background(), cfg); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: error %v, want %q", tt.name, err, tt.want)
		}
	}
}
