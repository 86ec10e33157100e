package main

import (
	"context"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"rtgate/bench/peers"
	"rtgate/bench/proc"
)

func TestParsePeersFlags(t *testing.T) {
	full, quick := peers.DefaultOptions(), peers.QuickOptions()
	tests := []struct {
		name    string
		args    []string
		check   func(peers.Options) bool
		wantErr string
	}{
		{name: "defaults are the full size", args: nil, check: func(o peers.Options) bool {
			return o.Sessions == full.Sessions && o.TLSSessions == full.TLSSessions && o.Rounds == 2 && !o.Quick &&
				o.VoiceSessions == 500 && o.TLSVoiceSessions == 500 && o.VoiceDuration == 10*time.Second &&
				o.VoiceWarmup == 2*time.Second && !o.Profile &&
				slices.Equal(o.Phases, peers.AllPhases) &&
				slices.Equal(o.Systems, peers.DefaultSystems) && len(o.SourceIPs) == 8 &&
				slices.Equal(o.Upstreams, []proc.Upstream{proc.UpstreamTLS, proc.UpstreamPlain})
		}},
		{name: "quick", args: []string{"-quick"}, check: func(o peers.Options) bool {
			return o.Quick && o.Sessions == quick.Sessions && o.TLSSessions == quick.TLSSessions && o.Duration == quick.Duration && o.Rounds == 2 &&
				o.VoiceSessions == quick.VoiceSessions && o.TLSVoiceSessions == quick.TLSVoiceSessions && o.VoiceDuration == quick.VoiceDuration &&
				o.VoiceWarmup == quick.VoiceWarmup
		}},
		{name: "voice warm-up and profile", args: []string{"-voice-warmup", "0s", "-profile"}, check: func(o peers.Options) bool {
			return o.VoiceWarmup == 0 && o.Profile
		}},
		{name: "explicit flags win over quick", args: []string{"-n", "2000", "-quick", "-duration", "3s"}, check: func(o peers.Options) bool {
			return o.Quick && o.Sessions == 2000 && o.Duration == 3*time.Second && o.Warmup == quick.Warmup
		}},
		{name: "lists", args: []string{"-systems", " nginx, rtgate-pool-on ,", "-phases", "memory", "-gateway-args", "-buffer-size 512"},
			check: func(o peers.Options) bool {
				return slices.Equal(o.Systems, []string{"nginx", "rtgate-pool-on"}) && slices.Equal(o.Phases, []string{"memory"}) &&
					slices.Equal(o.GatewayArgs, []string{"-buffer-size", "512"})
			}},
		{name: "plain upstream only", args: []string{"-upstream", "plain"}, check: func(o peers.Options) bool {
			return slices.Equal(o.Upstreams, []proc.Upstream{proc.UpstreamPlain})
		}},
		{name: "bad upstream", args: []string{"-upstream", "tls,quic"}, wantErr: `upstream "quic"`},
		{name: "source addresses", args: []string{"-source-ips", "2"}, check: func(o peers.Options) bool {
			return len(o.SourceIPs) == 2 && o.SourceIPs[1].String() == "127.0.0.2"
		}},
		{name: "too many source addresses", args: []string{"-source-ips", "300"}, wantErr: "-source-ips 300"},
		{name: "stray argument", args: []string{"nginx"}, wantErr: "unexpected arguments"},
		{name: "unknown flag", args: []string{"-nope"}, wantErr: "not defined"},
	}
	for _, tt := range tests {
		o, _, err := parsePeersFlags(tt.args, io.Discard)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("%s: error %v, want %q", tt.name, err, tt.wantErr)
			}
			continue
		}
		if err != nil || !tt.check(o) {
			t.Errorf("%s: got %+v, %v", tt.name, o, err)
		}
	}
}

// Invalid options stop the run before anything starts, with exit status 2 for bad
// flags and 1 for a configuration that cannot run.
func TestRunRejectsBadOptions(t *testing.T) {
	dir := t.TempDir()
	for _, tt := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"-rounds", "x"}, 2, "invalid value"},
		{[]string{"-out", dir, "-systems", "envoy"}, 1, `unknown system "envoy"`},
		{[]string{"-out", dir, "-n", "0"}, 1, "sessions 0"},
		{[]string{"-out", dir, "-systems", "direct", "-mockai", dir + "/no-such-mockai"}, 1, "mockai:"},
	} {
		var stderr strings.Builder
		args := append([]string{"peers"}, tt.args...)
		if code := run(context.Background(), args, io.Discard, &stderr); code != tt.code || !strings.Contains(stderr.String(), tt.want) {
			t.Errorf("%q: exit %d, stderr %q; want %d and %q", tt.args, code, stderr.String(), tt.code, tt.want)
		}
	}
}
