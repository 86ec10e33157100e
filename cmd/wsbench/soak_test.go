package main

import (
	"bytes"
	"os"
	"reflect"
	"testing"
	"time"

	"rtgate/bench/proc"
	"rtgate/bench/soak"
)

func TestParseSoakFlags(t *testing.T) {
	var stderr bytes.Buffer
	cfg, quiet, err := parseSoakFlags(nil, &stderr)
	if err != nil {
		t.Fatal(err)
	}
	if def := soak.DefaultConfig(); quiet || !reflect.DeepEqual(cfg, def) {
		t.Errorf("defaults: %+v, want %+v", cfg, def)
	}
	cfg, quiet, err = parseSoakFlags([]string{"-duration", "30s", "-c", "20", "-fault-rate", "0.5", "-seed", "9",
		"-faults", "hangup, upstream_stall", "-t", "12", "-max-stalled-bytes", "131072", "-write-timeout", "3s", "-handshake-timeout", "2s",
		"-pool-max-idle", "3s", "-settle", "1m", "-rss-margin-mib", "40", "-rss-margin-frac", "0.25", "-heap-margin-mib", "4",
		"-goroutine-margin", "2", "-fd-margin", "3", "-mockai", "/x/mockai", "-gateway", "/x/gw", "-out", "/x/out", "-quiet",
		"-upstream", "tls", "-redis=false"}, &stderr)
	if err != nil {
		t.Fatal(err)
	}
	want := soak.DefaultConfig()
	want.Duration, want.Concurrency, want.FaultRate, want.Seed = 30*time.Second, 20, 0.5, 9
	want.Faults = []soak.Kind{soak.Hangup, soak.UpstreamStall}
	want.CallTimeout, want.MaxStalledBytes, want.HandshakeTimeout, want.PoolMaxIdle = 12*time.Second, 131072, 2*time.Second, 3*time.Second
	want.Settle, want.WriteTimeout = time.Minute, 3*time.Second
	want.Margins = soak.Margins{RSSBytes: 40 << 20, RSSFraction: 0.25, HeapBytes: 4 << 20, Goroutines: 2, FDs: 3}
	want.MockaiBin, want.GatewayBin, want.OutDir, want.Upstream = "/x/mockai", "/x/gw", "/x/out", proc.UpstreamTLS
	want.Redis = false
	if !quiet || !reflect.DeepEqual(cfg, want) {
		t.Errorf("overrides: %+v\nwant %+v", cfg, want)
	}
}

func TestRunSoakBadInput(t *testing.T) {
	self, err := os.Executable() // an existing file stands in for mockai
	if err != nil {
		t.Fatal(err)
	}
	base := func(t *testing.T) []string {
		return []string{"soak", "-out", t.TempDir(), "-mockai", self, "-gateway", "/nonexistent/gateway"}
	}
	checkBadRuns(t, base, []badRun{
		{"bad flag", []string{"-duration", "forever"}, 2, "invalid value"},
		{"extra argument", []string{"now"}, 2, "unexpected arguments"},
		{"negative margin", []string{"-heap-margin-mib", "-1"}, 2, "must not be negative"},
		{"unknown fault", []string{"-faults", "meteor"}, 1, `unknown fault "meteor"`},
		{"fault rate", []string{"-fault-rate", "2"}, 1, "fault rate 2"},
		{"missing gateway", nil, 1, "go build -o /nonexistent/gateway ./cmd/gateway"},
	})
}
