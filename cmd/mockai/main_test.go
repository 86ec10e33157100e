package main

import (
	"io"
	"reflect"
	"strings"
	"testing"
	"time"

	"rtgate/mockai"
)

func TestParseFlags(t *testing.T) {
	for _, tt := range []struct {
		args    []string
		want    mockai.Config
		addr    string
		wantErr string
	}{
		{args: nil, addr: "127.0.0.1:8089"},
		{
			args: []string{"-addr", "127.0.0.1:0", "-key", "sk-x", "-reject-status", "401", "-tls", "-cert-out", "c.pem",
				"-upgrade-delay", "5ms", "-session-delay", "6ms", "-first-audio-delay", "7ms", "-deltas", "-1",
				"-delta-bytes", "960", "-delta-interval", "8ms", "-close-after", "1", "-drop-after", "2",
				"-malformed-after", "3", "-stop-reading", "-status", "429", "-echo", "-stall-for", "9s", "-faults-from-query", "-one-segment",
				"-live-usage-interval", "30s", "-live-media-interval", "20ms", "-live-max-duration", "2m", "-live-no-closed", "-live-start-timeout", "15s", "-live-client-delegations",
				"-session-cap", "1m", "-cut", "close", "-cut-code", "1012", "-cut-during", "-cut-times", "2"},
			addr: "127.0.0.1:0",
			want: mockai.Config{Key: "sk-x", RejectStatus: 401, TLS: true, CertFile: "c.pem",
				UpgradeDelay: 5 * time.Millisecond, SessionDelay: 6 * time.Millisecond, FirstAudioDelay: 7 * time.Millisecond,
				AudioDeltas: -1, AudioDeltaBytes: 960, AudioDeltaInterval: 8 * time.Millisecond,
				CloseAfterFrames: 1, DropAfterFrames: 2, MalformedAfterFrames: 3, StopReading: true, StatusCode: 429, Echo: true,
				StallFor: 9 * time.Second, FaultsFromQuery: true, OneSegment: true,
				Live:       mockai.LiveConfig{UsageInterval: 30 * time.Second, MediaInterval: 20 * time.Millisecond, MaxDuration: 2 * time.Minute, NoClosed: true, StartTimeout: 15 * time.Second, ClientDelegations: true},
				SessionCap: time.Minute, Cut: mockai.Cut{Kind: "close", Code: 1012, AfterResponses: 1, During: true, Times: 2}},
		},
		{
			args: []string{"-xai-ping-interval", "250ms", "-xai-session-created", "-gemini-go-away-after", "2s", "-gemini-go-away-time-left", "500ms"},
			addr: "127.0.0.1:8089",
			want: mockai.Config{XAIPingInterval: 250 * time.Millisecond, XAISessionCreated: true,
				Gemini: mockai.GeminiConfig{GoAwayAfter: 2 * time.Second, GoAwayTimeLeft: 500 * time.Millisecond}},
		},
		{
			args: []string{"-input-transcript", "book a flight", "-input-transcript", "to Paris", "-transcription-delay", "300ms",
				"-output-transcript", "Sure, booking it.", "-output-transcript-lag", "50ms", "-tool-arguments", `{"city":"Paris"}`},
			addr: "127.0.0.1:8089",
			want: mockai.Config{InputTranscripts: []string{"book a flight", "to Paris"}, TranscriptionDelay: 300 * time.Millisecond,
				OutputTranscripts: []string{"Sure, booking it."}, OutputTranscriptLag: 50 * time.Millisecond, ToolArguments: `{"city":"Paris"}`},
		},
		{args: []string{"-deltas", "-2"}, wantErr: "-deltas -2"},
		{args: []string{"-upgrade-delay", "soon"}, wantErr: "invalid value"},
		{args: []string{"-nope"}, wantErr: "not defined"},
		{args: []string{"extra"}, wantErr: "unexpected arguments"},
	} {
		o, err := parseFlags(tt.args, io.Discard)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("%q: error %v, want %q", tt.args, err, tt.wantErr)
			}
			continue
		}
		if err != nil || o.addr != tt.addr || !reflect.DeepEqual(o.cfg, tt.want) {
			t.Errorf("%q: got %+v %v, want addr %s cfg %+v", tt.args, o, err, tt.addr, tt.want)
		}
	}
}

func TestRunRejectsBadValues(t *testing.T) {
	for _, args := range [][]string{
		{"-deltas", "-3"},
		{"-reject-status", "500"},
		{"-status", "99"},
		{"-cert-out", "x.pem"}, // without -tls
		{"-session-delay", "-1s"},
		{"-stall-for", "-1s"},
		{"-transcription-delay", "-1s"},
		{"-output-transcript-lag", "-1s"},
		{"-live-media-interval", "-1s"},
		{"-live-max-duration", "-1s"},
		{"-live-start-timeout", "-1s"},
		{"-xai-ping-interval", "500us"}, // below 1ms: refused, not a busy loop
	} {
		var stderr strings.Builder
		if code := run(args, io.Discard, &stderr); code != 2 || stderr.Len() == 0 {
			t.Errorf("%q: exit %d, stderr %q; want 2 and a message", args, code, stderr.String())
		}
	}
}
