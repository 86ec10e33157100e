package main

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"rtgate/bench/benchtest"
	"rtgate/bench/compare"
	"rtgate/bench/load"
	"rtgate/bench/proc"
	"rtgate/mockai"
)

func TestParseBenchFlags(t *testing.T) {
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	tests := []struct {
		name    string
		args    []string
		env     map[string]string
		check   func(t *testing.T, o benchOptions)
		wantErr string
	}{
		{"defaults", nil, nil, func(t *testing.T, o benchOptions) {
			if o.url != "wss://localhost:4000/v1/realtime?model=gpt-realtime" || o.n != 100 || o.c != 10 || o.timeout != 30*time.Second {
				t.Errorf("defaults: %+v", o)
			}
		}, ""},
		{"host port insecure model", []string{"-host", "127.0.0.1:4001", "-insecure", "-m", "gpt-realtime-mini", "-n", "5000", "-c", "500", "-t", "2.5"}, nil,
			func(t *testing.T, o benchOptions) {
				if o.url != "ws://127.0.0.1:4001/v1/realtime?model=gpt-realtime-mini" || o.n != 5000 || o.c != 500 || o.timeout != 2500*time.Millisecond {
					t.Errorf("got %+v", o)
				}
			}, ""},
		{"full url", []string{"-host", "wss://127.0.0.1:8443/v1/realtime?model=x"}, nil, func(t *testing.T, o benchOptions) {
			if o.url != "wss://127.0.0.1:8443/v1/realtime?model=x" {
				t.Errorf("url %q", o.url)
			}
		}, ""},
		{"key from env", nil, map[string]string{"WSBENCH_KEY": "sk-env"}, func(t *testing.T, o benchOptions) {
			if o.key != "sk-env" {
				t.Errorf("key %q", o.key)
			}
		}, ""},
		{"flag key beats env", []string{"-key", "sk-flag"}, map[string]string{"WSBENCH_KEY": "sk-env"}, func(t *testing.T, o benchOptions) {
			if o.key != "sk-flag" {
				t.Errorf("key %q", o.key)
			}
		}, ""},
		{"hold", []string{"-hold", "9000", "-hold-for", "1m", "-c", "200"}, nil, func(t *testing.T, o benchOptions) {
			if o.hold != 9000 || o.holdFor != time.Minute || o.c != 200 {
				t.Errorf("got %+v", o)
			}
		}, ""},
		{"rate and source ips", []string{"-rate", "250", "-source-ips", "127.0.0.1-127.0.0.8", "-audio"}, nil, func(t *testing.T, o benchOptions) {
			if o.open.rate != 250 || len(o.sourceIPs) != 8 || !o.audio {
				t.Errorf("got %+v", o)
			}
		}, ""},
		{"voice", []string{"-voice", "1000", "-voice-for", "30s", "-c", "100"}, nil, func(t *testing.T, o benchOptions) {
			if o.voice.n != 1000 || o.voice.duration != 30*time.Second || o.voice.interval != 20*time.Millisecond || o.c != 100 {
				t.Errorf("got %+v", o.voice)
			}
		}, ""},
		{"live", []string{"-protocol", "live", "-host", "127.0.0.1:8089", "-insecure"}, nil, func(t *testing.T, o benchOptions) {
			if o.url != "ws://127.0.0.1:8089/v1/live/sessions" || o.protocol != "live" || o.model != "gpt-live-1" {
				t.Errorf("got %+v", o)
			}
		}, ""},
		{"live with a model", []string{"-protocol", "live", "-m", "gpt-live-1.1"}, nil, func(t *testing.T, o benchOptions) {
			if o.url != "wss://localhost:4000/v1/live/sessions" || o.model != "gpt-live-1.1" {
				t.Errorf("got %+v", o)
			}
		}, ""},
		{"live with hold", []string{"-protocol", "live", "-hold", "5"}, nil, nil, "not with -hold"},
		{"gemini", []string{"-protocol", "gemini", "-host", "127.0.0.1:8089", "-insecure", "-turns", "3"}, nil, func(t *testing.T, o benchOptions) {
			if o.url != "ws://127.0.0.1:8089"+load.GeminiPath || o.protocol != load.ProtocolGemini || o.model != "gemini-3.8-live" || o.turns != 3 {
				t.Errorf("got %+v", o)
			}
		}, ""},
		{"gemini with a model", []string{"-protocol", "gemini", "-m", "gemini-live-2"}, nil, func(t *testing.T, o benchOptions) {
			if o.url != "wss://localhost:4000"+load.GeminiPath || o.model != "gemini-live-2" {
				t.Errorf("got %+v", o)
			}
		}, ""},
		{"gemini with vad", []string{"-protocol", "gemini", "-vad"}, nil, nil, "-vad turns speak the Realtime protocol"},
		{"gemini with hold", []string{"-protocol", "gemini", "-hold", "5"}, nil, nil, "-protocol gemini measures calls only"},
		{"unknown protocol", []string{"-protocol", "sip"}, nil, nil, "-protocol"},
		{"turns", []string{"-turns", "5", "-vad", "-vad-silence", "300ms"}, nil, func(t *testing.T, o benchOptions) {
			if o.turns != 5 || !o.vad || o.vadSilence != 300*time.Millisecond {
				t.Errorf("got %+v", o)
			}
		}, ""},
		{"zero turns", []string{"-turns", "0"}, nil, nil, "-turns must be at least 1"},
		{"turns with live", []string{"-turns", "2", "-protocol", "live"}, nil, nil, "not with -protocol live"},
		{"vad with hold", []string{"-vad", "-hold", "3"}, nil, nil, "not with -protocol live, -hold"},
		{"bad vad silence", []string{"-vad", "-vad-silence", "0s"}, nil, nil, "-vad-silence"},
		{"voice with hold", []string{"-voice", "5", "-hold", "5"}, nil, nil, "-voice cannot be combined"},
		{"voice interval", []string{"-voice", "5", "-voice-interval", "0"}, nil, nil, "-voice-interval at least 1ms"},
		{"zero calls", []string{"-n", "0"}, nil, nil, "-n must be positive"},
		{"zero concurrency", []string{"-c", "0"}, nil, nil, "-c must be positive"},
		{"zero timeout", []string{"-t", "0"}, nil, nil, "-t must be positive"},
		{"negative rate", []string{"-rate", "-1"}, nil, nil, "-rate"},
		{"open loop", []string{"-rate", "40", "-arrivals", "even", "-duration", "1m", "-call-length", "exp:2s", "-seed", "9",
			"-max-inflight", "300", "-when-full", "delay"}, nil, func(t *testing.T, o benchOptions) {
			p := o.open
			if p.rate != 40 || p.spacing != load.SpacingEven || p.duration != time.Minute || p.length.String() != "exp:2s" ||
				p.seed != 9 || p.maxInFlight != 300 || p.whenFull != load.FullDelay || o.n != math.MaxInt32 {
				t.Errorf("got %+v, n %d", p, o.n)
			}
		}, ""},
		{"open loop defaults", []string{"-rate", "40"}, nil, func(t *testing.T, o benchOptions) {
			p := o.open
			if p.spacing != load.SpacingPoisson || p.seed != 1 || p.whenFull != load.FullDrop || p.length.Kind != load.LengthNone || o.n != 100 {
				t.Errorf("got %+v, n %d", p, o.n)
			}
		}, ""},
		{"duration with n", []string{"-rate", "40", "-duration", "1m", "-n", "500"}, nil, func(t *testing.T, o benchOptions) {
			if o.n != 500 {
				t.Errorf("n %d, want -n's 500", o.n)
			}
		}, ""},
		{"old max-outstanding", []string{"-rate", "40", "-max-outstanding", "7"}, nil, func(t *testing.T, o benchOptions) {
			if o.open.maxInFlight != 7 {
				t.Errorf("max in flight %d", o.open.maxInFlight)
			}
		}, ""},
		{"closed loop with lengths", []string{"-call-length", "uniform:1s-3s"}, nil, func(t *testing.T, o benchOptions) {
			if o.open.length.Max != 3*time.Second || o.open.rate != 0 {
				t.Errorf("got %+v", o.open)
			}
		}, ""},
		{"bad arrivals", []string{"-rate", "4", "-arrivals", "bursty"}, nil, nil, "-arrivals"},
		{"bad when-full", []string{"-rate", "4", "-when-full", "queue"}, nil, nil, "-when-full"},
		{"bad call length", []string{"-call-length", "gauss:2s"}, nil, nil, "-call-length"},
		{"call length past the timeout", []string{"-call-length", "exp:5s", "-t", "30"}, nil, nil, "not below the per-call timeout"},
		{"duration without rate", []string{"-duration", "1m"}, nil, nil, "give -rate"},
		{"max-inflight without rate", []string{"-max-inflight", "5"}, nil, nil, "give -rate"},
		{"negative duration", []string{"-rate", "4", "-duration", "-1s"}, nil, nil, "-duration"},
		{"call length with hold", []string{"-hold", "3", "-call-length", "2s"}, nil, nil, "not with -hold"},
		{"hold with rate", []string{"-hold", "5", "-rate", "5"}, nil, nil, "cannot be combined"},
		{"bad host", []string{"-host", "http://x"}, nil, nil, "-host"},
		{"bad source ips", []string{"-source-ips", "nope"}, nil, nil, "-source-ips"},
		{"stray argument", []string{"extra"}, nil, nil, "unexpected arguments"},
		{"unknown flag", []string{"-bogus"}, nil, nil, "flag provided but not defined"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var stderr bytes.Buffer
			o, err := parseBenchFlags(tc.args, &stderr, env(tc.env))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, o)
		})
	}
}

func TestParseCompareFlags(t *testing.T) {
	var stderr bytes.Buffer
	cfg, quiet, err := parseCompareFlags(nil, &stderr)
	if err != nil {
		t.Fatal(err)
	}
	def := compare.DefaultConfig()
	if quiet || cfg.N != 2000 || cfg.Concurrency != 200 || cfg.Runs != 2 || cfg.MockaiBin != "bin/mockai" ||
		cfg.GatewayBin != "bin/gateway" || cfg.Pool != "auto" || cfg.Profile != def.Profile || len(cfg.Legs) != 4 || cfg.RedisTimeoutMS != 0 {
		t.Errorf("defaults: %+v", cfg)
	}
	cfg, quiet, err = parseCompareFlags([]string{"-n", "5000", "-c", "500", "-pool", "64", "-legs", "direct, pool-on",
		"-mockai", "/x/mockai", "-gateway", "/x/gw", "-first-audio-delay", "1ms", "-deltas", "3", "-quiet", "-t", "5", "-redis-timeout-ms", "5"}, &stderr)
	if err != nil {
		t.Fatal(err)
	}
	if !quiet || cfg.N != 5000 || cfg.Concurrency != 500 || cfg.Pool != "64" || strings.Join(cfg.Legs, ",") != "direct,pool-on" ||
		cfg.MockaiBin != "/x/mockai" || cfg.GatewayBin != "/x/gw" || cfg.Profile.FirstAudioDelay != time.Millisecond ||
		cfg.Profile.Deltas != 3 || cfg.Timeout != 5*time.Second || cfg.RedisTimeoutMS != 5 {
		t.Errorf("overrides: %+v", cfg)
	}
	if _, _, err := parseCompareFlags([]string{"-source-ips", "x"}, &stderr); err == nil {
		t.Error("bad -source-ips accepted")
	}
	// The steady-state (open-loop) leg: on by default for Realtime, off for
	// Live unless -rate asks for it.
	if cfg, _, _ := parseCompareFlags(nil, &stderr); cfg.Open != def.Open || cfg.Open.Rate <= 0 {
		t.Errorf("open-loop defaults %+v, want %+v", cfg.Open, def.Open)
	}
	cfg, _, err = parseCompareFlags([]string{"-rate", "20", "-duration", "10s", "-call-length", "exp:1s", "-seed", "3",
		"-arrivals", "even", "-max-inflight", "90", "-when-full", "delay"}, &stderr)
	if o := cfg.Open; err != nil || o.Rate != 20 || o.Duration != 10*time.Second || o.Length.String() != "exp:1s" || o.Seed != 3 ||
		o.Spacing != load.SpacingEven || o.MaxInFlight != 90 || o.WhenFull != load.FullDelay {
		t.Errorf("open-loop flags: %+v, %v", cfg.Open, err)
	}
	if cfg, _, err := parseCompareFlags([]string{"-protocol", "live"}, &stderr); err != nil || cfg.Open.Rate != 0 {
		t.Errorf("live without -rate: open-loop rate %v, %v; want no open-loop leg", cfg.Open.Rate, err)
	}
	if cfg, _, err := parseCompareFlags([]string{"-protocol", "live", "-rate", "10"}, &stderr); err != nil || cfg.Open.Rate != 10 {
		t.Errorf("live with -rate 10: open-loop rate %v, %v", cfg.Open.Rate, err)
	}
	// Gemini: its own legs and a bounded size unless flags say otherwise,
	// closed loop only.
	if cfg, _, err := parseCompareFlags([]string{"-protocol", "gemini"}, &stderr); err != nil || cfg.N != compare.GeminiN ||
		cfg.Concurrency != compare.GeminiConcurrency || cfg.Runs != compare.GeminiRuns || cfg.Turns != compare.GeminiTurns ||
		strings.Join(cfg.Legs, ",") != "direct,gemini,pool-off" || cfg.Open.Rate != 0 || cfg.Upstream != proc.UpstreamTLS {
		t.Errorf("gemini defaults: %+v, %v", cfg, err)
	}
	if cfg, _, err := parseCompareFlags([]string{"-protocol", "gemini", "-n", "40", "-c", "8", "-turns", "2", "-runs", "2",
		"-legs", "gemini,pool-off", "-upstream", "plain"}, &stderr); err != nil || cfg.N != 40 || cfg.Concurrency != 8 ||
		cfg.Turns != 2 || cfg.Runs != 2 || strings.Join(cfg.Legs, ",") != "gemini,pool-off" || cfg.Upstream != proc.UpstreamPlain {
		t.Errorf("gemini overrides: %+v, %v", cfg, err)
	}
	// Guardrails: the same, with its legs.
	if cfg, _, err := parseCompareFlags([]string{"-protocol", "guardrails"}, &stderr); err != nil || cfg.Protocol != compare.ProtocolGuardrails ||
		cfg.N != compare.GuardrailsN || cfg.Concurrency != compare.GuardrailsConcurrency || cfg.Runs != compare.GuardrailsRuns ||
		cfg.Turns != compare.GuardrailsTurns || strings.Join(cfg.Legs, ",") != "pool-off,record,input,output,tool-none,tool" ||
		cfg.Open.Rate != 0 || cfg.Upstream != proc.UpstreamPlain {
		t.Errorf("guardrails defaults: %+v, %v", cfg, err)
	}
	if cfg, _, err := parseCompareFlags([]string{"-protocol", "guardrails", "-n", "60", "-turns", "2", "-legs", "pool-off,output",
		"-upstream", "tls"}, &stderr); err != nil || cfg.N != 60 || cfg.Concurrency != compare.GuardrailsConcurrency || cfg.Turns != 2 ||
		strings.Join(cfg.Legs, ",") != "pool-off,output" || cfg.Upstream != proc.UpstreamTLS {
		t.Errorf("guardrails overrides: %+v, %v", cfg, err)
	}
	if _, _, err := parseCompareFlags([]string{"-protocol", "guardrail"}, &stderr); err == nil || !strings.Contains(err.Error(), "or guardrails") {
		t.Errorf("-protocol guardrail: %v", err)
	}
	if cfg, _, err := parseCompareFlags([]string{"-turns", "3"}, &stderr); err != nil || cfg.Turns != 3 || cfg.N != 2000 {
		t.Errorf("realtime -turns 3: %+v, %v", cfg, err)
	}
	if cfg, _, err := parseCompareFlags([]string{"-rate", "0"}, &stderr); err != nil || cfg.Open.Rate != 0 {
		t.Errorf("-rate 0: open-loop rate %v, %v; want none", cfg.Open.Rate, err)
	}
	for _, bad := range [][]string{{"-call-length", "gauss:1s"}, {"-arrivals", "bursty"}, {"-when-full", "queue"}} {
		if _, _, err := parseCompareFlags(bad, &stderr); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	// The upstream is wss:// unless -upstream plain.
	if def.Upstream != proc.UpstreamTLS {
		t.Errorf("default upstream %q, want tls", def.Upstream)
	}
	if cfg, _, err := parseCompareFlags([]string{"-upstream", "plain"}, &stderr); err != nil || cfg.Upstream != proc.UpstreamPlain {
		t.Errorf("-upstream plain: %q, %v", cfg.Upstream, err)
	}
	if _, _, err := parseCompareFlags([]string{"-upstream", "quic"}, &stderr); err == nil || !strings.Contains(err.Error(), `upstream "quic"`) {
		t.Errorf("-upstream quic: %v", err)
	}
}

// badRun is a wsbench run that must fail: its exit code, and a text its
// stderr must contain.
type badRun struct {
	name     string
	args     []string
	wantCode int
	wantErr  string
}

// checkBadRuns runs each of runs as a subtest, its args after what base
// returns (the subcommand and the flags every run of it needs, made in the
// subtest so that t.TempDir is its own).
func checkBadRuns(t *testing.T, base func(t *testing.T) []string, runs []badRun) {
	t.Helper()
	for _, tc := range runs {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			args := append(base(t), tc.args...)
			if code := run(context.Background(), args, &stdout, &stderr); code != tc.wantCode {
				t.Fatalf("exit %d, want %d; stderr: %s", code, tc.wantCode, stderr.String())
			}
			if !strings.Contains(stderr.String(), tc.wantErr) {
				t.Errorf("stderr %q lacks %q", stderr.String(), tc.wantErr)
			}
		})
	}
}

func TestRunCompareBadInput(t *testing.T) {
	checkBadRuns(t, func(t *testing.T) []string { return []string{"compare", "-out", t.TempDir()} }, []badRun{
		{"unknown leg", []string{"-legs", "direct,sideways"}, 1, "unknown leg"},
		{"bad pool", []string{"-pool", "many"}, 1, "-pool"},
		{"missing mockai", []string{"-mockai", "/nonexistent/mockai", "-legs", "direct"}, 1, "go build -o /nonexistent/mockai ./cmd/mockai"},
		{"bad flag", []string{"-n", "lots"}, 2, "invalid value"},
		{"gemini pool on", []string{"-protocol", "gemini", "-legs", "direct,pool-on"}, 1, "the gateway never warms Gemini sockets"},
		{"gemini with audio", []string{"-protocol", "gemini", "-audio"}, 1, "does not take -audio"},
		{"gemini open loop", []string{"-protocol", "gemini", "-rate", "10"}, 1, "closed-loop only"},
		{"gemini leg without gemini", []string{"-legs", "direct,gemini"}, 1, "-protocol gemini's"},
		{"guardrails pool on", []string{"-protocol", "guardrails", "-legs", "pool-off,pool-on"}, 1, "-protocol guardrails has no pool-on leg"},
		{"guardrails open loop", []string{"-protocol", "guardrails", "-rate", "10"}, 1, "closed-loop only"},
		{"guardrail leg without guardrails", []string{"-legs", "pool-off,record"}, 1, "the record leg is -protocol guardrails'"},
		{"turns with live", []string{"-protocol", "live", "-turns", "2"}, 1, "-turns 2"},
	})
}

// TestRunBench drives the command end to end against in-process mockai.
func TestRunBench(t *testing.T) {
	const key = "sk-secret-test-key-42"
	tests := []struct {
		name     string
		mock     mockai.Config
		args     []string
		wantCode int
		wantOut  []string
	}{
		{"closed loop", mockai.Config{Key: key}, []string{"-n", "20", "-c", "4", "-v"}, 0,
			[]string{"calls 20, ok 20 (100.0%)", "| total | 20 |", "wsbench CPU:"}},
		{"open loop", mockai.Config{Key: key}, []string{"-n", "10", "-c", "2", "-rate", "100"}, 0,
			[]string{"calls 10, ok 10 (100.0%)", "open loop: 10 arrivals at 100/s (poisson, seed 1;", "10 started, 0 dropped and 0 delayed at the cap of 20 in flight"}},
		{"open loop for a duration, call lengths", mockai.Config{Key: key}, []string{"-rate", "50", "-duration", "400ms", "-call-length", "exp:100ms", "-seed", "4", "-c", "2"}, 0,
			[]string{"call length exp:100ms", "0 dropped and 0 delayed"}},
		{"open loop over its cap", mockai.Config{Key: key, SessionDelay: 300 * time.Millisecond}, []string{"-n", "6", "-rate", "500", "-max-inflight", "2"}, 0,
			[]string{"| overload | 4 |", "2 started, 4 dropped and 0 delayed at the cap of 2 in flight"}},
		{"with input audio", mockai.Config{Key: key}, []string{"-n", "2", "-c", "2", "-audio"}, 0,
			[]string{"calls 2, ok 2"}},
		{"wrong key", mockai.Config{Key: "sk-other"}, []string{"-n", "3", "-c", "3"}, 1,
			[]string{"ok 0 (0.0%)", "| error_event_invalid_api_key | 3 |"}},
		{"rate limited", mockai.Config{StatusCode: 429}, []string{"-n", "3", "-c", "3"}, 1,
			[]string{"| handshake_429 | 3 |"}},
		{"hold", mockai.Config{Key: key}, []string{"-hold", "6", "-hold-for", "200ms", "-c", "3"}, 0,
			[]string{"| established | 6 |", "| held to the end | 6 |", "| closed cleanly | 6 |"}},
		{"voice", mockai.Config{Key: key, Stream: mockai.StreamConfig{Interval: 20 * time.Millisecond}},
			[]string{"-voice", "4", "-voice-for", "300ms", "-c", "2"}, 0,
			[]string{"| sessions opened | 4 of 4 |", "| appends sent | 60 of 60 | 100.0% |", "| deltas received |"}},
		{"live", mockai.Config{Key: key}, []string{"-protocol", "live", "-n", "6", "-c", "3"}, 0,
			[]string{"calls 6, ok 6 (100.0%)", "| session | 6 |", "| first audio | 6 |", "| total | 6 |"}},
		{"live, open loop with lengths", mockai.Config{Key: key}, []string{"-protocol", "live", "-rate", "50", "-n", "4", "-call-length", "60ms"}, 0,
			[]string{"calls 4, ok 4 (100.0%)", "| exchange (total - held) | 4 |", "4 started, 0 dropped"}},
		{"live with input audio", mockai.Config{Key: key}, []string{"-protocol", "live", "-n", "2", "-c", "2", "-audio"}, 0,
			[]string{"calls 2, ok 2"}},
		{"live, usage unconfirmed", mockai.Config{Key: key, Live: mockai.LiveConfig{NoClosed: true}}, []string{"-protocol", "live", "-n", "2", "-c", "2"}, 1,
			[]string{"| no_session_closed | 2 |"}},
		{"manual turns", mockai.Config{Key: key}, []string{"-n", "3", "-c", "2", "-turns", "3"}, 0,
			[]string{"calls 3, ok 3 (100.0%)", "| first audio, turn 1 | 3 |", "| first audio, turns 2+ | 6 |", "| total | 3 |"}},
		{"VAD turns", mockai.Config{Key: key}, []string{"-n", "2", "-c", "2", "-turns", "2", "-vad", "-vad-silence", "60ms"}, 0,
			[]string{"calls 2, ok 2 (100.0%)", "| first audio, turn 1 | 2 |", "| first audio, turns 2+ | 2 |"}},
		{"gemini turns", mockai.Config{Key: key}, []string{"-protocol", "gemini", "-n", "4", "-c", "2", "-turns", "2"}, 0,
			[]string{"calls 4, ok 4 (100.0%)", "| session | 4 |", "| first audio, turn 1 | 4 |", "| first audio, turns 2+ | 4 |", "| total | 4 |"}},
		{"gemini with input audio", mockai.Config{Key: key}, []string{"-protocol", "gemini", "-n", "2", "-c", "2", "-audio"}, 0,
			[]string{"calls 2, ok 2"}},
		{"gemini, wrong key", mockai.Config{Key: "gem-other-key"}, []string{"-protocol", "gemini", "-n", "2", "-c", "2"}, 1,
			[]string{"ok 0 (0.0%)", "| unexpected_close_1007 | 2 |"}},
		{"turns, a later one fails", mockai.Config{Key: key, DropAfterFrames: 13}, []string{"-n", "1", "-c", "1", "-turns", "3"}, 1,
			[]string{"ok 0 (0.0%)", "| first audio, turn 1 | 1 |", "| unexpected_close_1006 | 1 |"}},
		{"voice, upstream refuses", mockai.Config{StatusCode: 429}, []string{"-voice", "2", "-voice-for", "100ms"}, 1,
			[]string{"| sessions opened | 0 of 2 |", "| handshake_429 | 2 |"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			addr := benchtest.Mockai(t, tc.mock).Addr()
			jsonPath := filepath.Join(t.TempDir(), "out.json")
			args := append([]string{"-host", addr, "-insecure", "-key", key, "-json", jsonPath, "-t", "5"}, tc.args...)
			var stdout, stderr bytes.Buffer
			code := run(context.Background(), args, &stdout, &stderr)
			if code != tc.wantCode {
				t.Fatalf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", code, tc.wantCode, stdout.String(), stderr.String())
			}
			for _, want := range tc.wantOut {
				if !strings.Contains(stdout.String(), want) {
					t.Errorf("stdout lacks %q:\n%s", want, stdout.String())
				}
			}
			raw, err := os.ReadFile(jsonPath)
			if err != nil {
				t.Fatal(err)
			}
			for name, text := range map[string]string{"stdout": stdout.String(), "stderr": stderr.String(), "json": string(raw)} {
				if strings.Contains(text, key) {
					t.Errorf("%s contains the key", name)
				}
			}
			var doc map[string]any
			if err := json.Unmarshal(raw, &doc); err != nil {
				t.Fatalf("-json output: %v", err)
			}
			samples, _ := doc["samples"].([]any)
			if samples == nil {
				samples, _ = doc["opening"].([]any)
			}
			if len(samples) == 0 && doc["sent_expected"] == nil { // voice mode has counts, not samples
				t.Errorf("-json output has no samples: %s", raw[:min(len(raw), 300)])
			}
			if strings.Contains(stderr.String(), "\r") {
				t.Errorf("progress line written to a non-terminal stderr")
			}
		})
	}
}

func TestRunBenchVerboseLines(t *testing.T) {
	addr := benchtest.Mockai(t, mockai.Config{}).Addr()
	var stdout, stderr bytes.Buffer
	if code := run(context.Background(), []string{"-host", addr, "-insecure", "-n", "3", "-c", "1", "-v", "-quiet"}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	if n := strings.Count(stderr.String(), ": ok dial "); n != 3 {
		t.Errorf("want 3 per-call lines, got %d:\n%s", n, stderr.String())
	}
	if strings.Contains(stderr.String(), "wsbench: 3 calls") {
		t.Errorf("-quiet should drop the banner:\n%s", stderr.String())
	}
}

func TestRunBenchTLSWithCA(t *testing.T) {
	srv, err := mockai.Start(mockai.Config{TLS: true}, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	ca := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(ca, srv.CertPEM(), 0o600); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	if code := run(context.Background(), []string{"-host", srv.Addr(), "-ca", ca, "-n", "2", "-c", "2"}, &stdout, &stderr); code != 0 {
		t.Fatalf("wss with -ca: exit %d\n%s%s", code, stdout.String(), stderr.String())
	}
	stdout.Reset()
	if code := run(context.Background(), []string{"-host", srv.Addr(), "-n", "1", "-c", "1"}, &stdout, &stderr); code != 1 ||
		!strings.Contains(stdout.String(), "| dial | 1 |") {
		t.Fatalf("wss without -ca should fail to dial: exit %d\n%s", code, stdout.String())
	}
	stdout.Reset()
	if code := run(context.Background(), []string{"-protocol", "live", "-host", srv.Addr(), "-ca", ca, "-n", "2", "-c", "2"}, &stdout, &stderr); code != 0 ||
		!strings.Contains(stdout.String(), "calls 2, ok 2") {
		t.Fatalf("live over wss with -ca: exit %d\n%s%s", code, stdout.String(), stderr.String())
	}
	if code := run(context.Background(), []string{"-host", srv.Addr(), "-ca", "/nonexistent.pem"}, &stdout, &stderr); code != 2 {
		t.Fatalf("missing -ca file: exit %d, want 2", code)
	}
}

// TestRunBenchOpenLoopOverTLS runs the open-loop mode end to end over a
// wss:// mockai twice with one seed: the JSON carries every arrival's call
// with its drawn length, the open-loop counts, and the same schedule both
// times.
func TestRunBenchOpenLoopOverTLS(t *testing.T) {
	srv := benchtest.Mockai(t, mockai.Config{TLS: true, AudioDeltas: 1})
	ca := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(ca, srv.CertPEM(), 0o600); err != nil {
		t.Fatal(err)
	}
	type sample struct {
		StartMS  float64 `json:"start_ms"`
		LengthMS float64 `json:"length_ms"`
		TotalMS  float64 `json:"total_ms"`
		OK       bool    `json:"ok"`
	}
	type doc struct {
		N       int `json:"n"`
		Summary struct {
			OK       int            `json:"ok"`
			OpenLoop *load.OpenLoop `json:"open_loop"`
		} `json:"summary"`
		Samples []sample `json:"samples"`
	}
	runOnce := func() doc {
		out := filepath.Join(t.TempDir(), "out.json")
		var stdout, stderr bytes.Buffer
		args := []string{"-host", srv.Addr(), "-ca", ca, "-rate", "40", "-duration", "300ms", "-call-length", "uniform:20ms-60ms",
			"-seed", "5", "-json", out, "-t", "5"}
		if code := run(context.Background(), args, &stdout, &stderr); code != 0 {
			t.Fatalf("exit %d\n%s%s", code, stdout.String(), stderr.String())
		}
		raw, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		var d doc
		if err := json.Unmarshal(raw, &d); err != nil {
			t.Fatal(err)
		}
		return d
	}
	a, b := runOnce(), runOnce()
	o := a.Summary.OpenLoop
	if o == nil || o.Scheduled == 0 || o.Started != o.Scheduled || a.N != o.Scheduled || len(a.Samples) != o.Scheduled || a.Summary.OK != o.Scheduled {
		t.Fatalf("open loop %+v, n %d, %d samples, %d ok: want every scheduled arrival made and ok", o, a.N, len(a.Samples), a.Summary.OK)
	}
	if len(b.Samples) != len(a.Samples) {
		t.Fatalf("seed 5 scheduled %d arrivals, then %d", len(a.Samples), len(b.Samples))
	}
	first := a.Samples[0].StartMS
	for i, s := range a.Samples {
		if s.LengthMS < 20 || s.LengthMS > 60 || s.TotalMS < s.LengthMS || !s.OK {
			t.Errorf("call %d: %+v, want a length in [20, 60] ms held to the end", i, s)
		}
		// The same seed, the same schedule (start offsets to the microsecond,
		// relative to each run's first arrival).
		if d := (s.StartMS - first) - (b.Samples[i].StartMS - b.Samples[0].StartMS); math.Abs(d) > 0.001 || s.LengthMS != b.Samples[i].LengthMS {
			t.Errorf("call %d differs between two runs of seed 5: %+v and %+v", i, s, b.Samples[i])
		}
	}
}
