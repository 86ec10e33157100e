package load

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"runtime"
	"strings"
	"testing"
	"time"

	"rtgate/bench/benchtest"
	"rtgate/mockai"
)

// TestLiveCall: a Live call's phases and failure classes against mockai,
// over ws:// and wss://.
func TestLiveCall(t *testing.T) {
	const key = "sk-mock-live-key"
	tests := []struct {
		name        string
		mock        mockai.Config
		key         string
		timeout     time.Duration
		audio       bool
		wantFailure string
		wantReached Phase
	}{
		{"success", mockai.Config{}, "", 0, false, "", PhaseDone},
		{"success with key and input audio", mockai.Config{Key: key}, key, 0, true, "", PhaseDone},
		{"handshake 429", mockai.Config{StatusCode: 429}, "", 0, false, "handshake_429", PhaseNone},
		{"bad key as error event", mockai.Config{Key: key}, "sk-wrong-live-key", 0, false, "error_event_invalid_api_key", PhaseDial},
		{"drop after session.started", mockai.Config{DropAfterFrames: 1}, "", 0, false, "unexpected_close_1006", PhaseSession},
		{"close after session.started", mockai.Config{CloseAfterFrames: 1}, "", 0, false, "unexpected_close_1011", PhaseSession},
		{"slow start", mockai.Config{SessionDelay: time.Second}, "", 200 * time.Millisecond, false, "timeout_session", PhaseDial},
		{"slow first audio", mockai.Config{FirstAudioDelay: time.Second}, "", 200 * time.Millisecond, false, "timeout_first_audio", PhaseSession},
		{"stalled before session.start", mockai.Config{StopReading: true}, "", 200 * time.Millisecond, false, "timeout_session", PhaseDial},
		{"no session.closed", mockai.Config{Live: mockai.LiveConfig{NoClosed: true}}, "", 0, false, "no_session_closed", PhaseFirstAudio},
	}
	for _, tc := range tests {
		for _, useTLS := range []bool{false, true} {
			t.Run(tc.name+map[bool]string{false: "/ws", true: "/wss"}[useTLS], func(t *testing.T) {
				before := runtime.NumGoroutine()
				mc := tc.mock
				mc.TLS = useTLS
				srv := benchtest.Mockai(t, mc)
				url, err := BuildURLFor(ProtocolLive, srv.BaseURL()[:strings.LastIndex(srv.BaseURL(), "/v1")], false, "")
				if err != nil {
					t.Fatal(err)
				}
				cfg := Config{URL: url, Key: tc.key, Timeout: tc.timeout, Audio: tc.audio, AudioLength: 100 * time.Millisecond, Protocol: ProtocolLive}
				if useTLS {
					roots := x509.NewCertPool()
					roots.AppendCertsFromPEM(srv.CertPEM())
					cfg.TLS = &tls.Config{RootCAs: roots}
				}
				c := newTestClient(t, cfg)
				s := c.Call(context.Background(), time.Now())
				if s.Failure != tc.wantFailure || s.Reached != tc.wantReached {
					t.Fatalf("got failure %q reached %d (%s), want %q reached %d", s.Failure, s.Reached, s.Detail, tc.wantFailure, tc.wantReached)
				}
				if tc.key != "" && strings.Contains(s.Detail, tc.key) {
					t.Errorf("detail leaks the key: %q", s.Detail)
				}
				if s.OK() {
					if s.Dial <= 0 || s.Session <= 0 || s.FirstAudio <= 0 || s.Total < s.Dial+s.Session+s.FirstAudio {
						t.Errorf("implausible phases: %+v", s)
					}
					recs := srv.LiveSessions()
					if len(recs) != 1 || recs[0].Model != "gpt-live-1" || recs[0].Reason != "close_requested" || !recs[0].ClosedSent {
						t.Errorf("mockai saw %+v", recs)
					}
					if tc.audio {
						// 5 appends of 20 ms of 24 kHz PCM16.
						if got := srv.Stats().AudioBytes; got != 5*audioChunkBytes {
							t.Errorf("mockai got %d audio bytes, want %d", got, 5*audioChunkBytes)
						}
					}
				}
				_ = srv.Close()
				checkNoLeak(t, before)
			})
		}
	}
}

func TestParseProtocol(t *testing.T) {
	for in, want := range map[string]Protocol{"realtime": ProtocolRealtime, " live": ProtocolLive, "gemini": ProtocolGemini} {
		if got, err := ParseProtocol(in); err != nil || got != want {
			t.Errorf("ParseProtocol(%q) = %q, %v", in, got, err)
		}
	}
	if _, err := ParseProtocol("sip"); err == nil || !strings.Contains(err.Error(), "realtime, live or gemini") {
		t.Errorf("ParseProtocol(sip): %v", err)
	}
}

func TestBuildURLForLive(t *testing.T) {
	for _, tt := range []struct{ host, want string }{
		{"127.0.0.1:8089", "wss://127.0.0.1:8089/v1/live/sessions"},
		{"ws://127.0.0.1:8089", "ws://127.0.0.1:8089/v1/live/sessions"},
		{"wss://h/openai/v1/live/sessions?fault=no_closed", "wss://h/openai/v1/live/sessions?fault=no_closed"},
	} {
		if got, err := BuildURLFor(ProtocolLive, tt.host, false, "gpt-live-1"); err != nil || got != tt.want {
			t.Errorf("%s: %q %v, want %q", tt.host, got, err, tt.want)
		}
	}
}
