package load

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"strings"
	"testing"
	"time"

	"rtgate/bench/benchtest"
	"rtgate/mockai"
)

// TestTurns: calls of several manual or server-VAD turns against mockai,
// over ws:// and wss://, and what mockai saw of them.
func TestTurns(t *testing.T) {
	// A manual turn without audio makes mockai send 9 frames (response.created,
	// rate_limits.updated, 5 audio deltas, the transcript delta, response.done)
	// after session.created: dropping after 1+9+3 frames kills turn 2.
	const framesPerTurn = 9
	tests := []struct {
		name        string
		mock        mockai.Config
		cfg         Config
		wantFailure string
		wantReached Phase
		wantDetail  string
		wantLater   int
		// what mockai must have read: client frames and audio bytes
		wantFramesIn, wantAudio int64
	}{
		{"three manual turns", mockai.Config{}, Config{Turns: 3}, "", PhaseDone, "", 2, 3, 0},
		{"manual turns with audio", mockai.Config{}, Config{Turns: 2, Audio: true, AudioLength: 40 * time.Millisecond}, "", PhaseDone, "", 1,
			2 * (2 + 2), 2 * 2 * audioChunkBytes},
		{"VAD turns", mockai.Config{}, Config{Turns: 3, VAD: true, AudioLength: 60 * time.Millisecond, VADSilence: 60 * time.Millisecond}, "", PhaseDone, "", 2, -1, -1},
		{"one VAD turn", mockai.Config{}, Config{VAD: true, AudioLength: 40 * time.Millisecond, VADSilence: 40 * time.Millisecond}, "", PhaseDone, "", 0, -1, -1},
		{"a later turn's connection drops", mockai.Config{DropAfterFrames: 1 + framesPerTurn + 3}, Config{Turns: 3}, "unexpected_close_1006", PhaseFirstAudio, "turn 2:", 0, -1, -1},
		{"a later turn is refused", mockai.Config{CloseAfterFrames: 1 + 2*framesPerTurn + 1}, Config{Turns: 3}, "unexpected_close_1011", PhaseFirstAudio, "turn 3:", 1, -1, -1},
	}
	for _, tc := range tests {
		for _, useTLS := range []bool{false, true} {
			t.Run(tc.name+map[bool]string{false: "/ws", true: "/wss"}[useTLS], func(t *testing.T) {
				mc := tc.mock
				mc.TLS = useTLS
				srv := benchtest.Mockai(t, mc)
				cfg := tc.cfg
				cfg.URL = realtimeURL(srv.BaseURL())
				if useTLS {
					roots := x509.NewCertPool()
					roots.AppendCertsFromPEM(srv.CertPEM())
					cfg.TLS = &tls.Config{RootCAs: roots}
				}
				s := newTestClient(t, cfg).Call(context.Background(), time.Now())
				if s.Failure != tc.wantFailure || s.Reached != tc.wantReached || !strings.HasPrefix(s.Detail, tc.wantDetail) {
					t.Fatalf("got failure %q reached %d (%s), want %q reached %d, detail %q", s.Failure, s.Reached, s.Detail, tc.wantFailure, tc.wantReached, tc.wantDetail)
				}
				if len(s.LaterFirstAudio) != tc.wantLater {
					t.Errorf("%d later turns measured, want %d", len(s.LaterFirstAudio), tc.wantLater)
				}
				for i, d := range s.LaterFirstAudio {
					if d <= 0 {
						t.Errorf("turn %d: first audio %v", i+2, d)
					}
				}
				st := srv.Stats()
				if tc.wantFramesIn >= 0 && st.FramesIn != tc.wantFramesIn {
					t.Errorf("mockai read %d client frames, want %d", st.FramesIn, tc.wantFramesIn)
				}
				if tc.wantAudio >= 0 && st.AudioBytes != tc.wantAudio {
					t.Errorf("mockai got %d audio bytes, want %d", st.AudioBytes, tc.wantAudio)
				}
				if cfg.VAD && s.OK() {
					// Every turn's speech and at least its silence window reached mockai.
					turns := int64(max(cfg.Turns, 1))
					speech := int64(cfg.AudioLength/audioChunk) * audioChunkBytes
					silence := int64(cfg.VADSilence/audioChunk) * audioChunkBytes
					if st.AudioBytes < turns*(speech+silence) {
						t.Errorf("mockai got %d audio bytes, want at least %d", st.AudioBytes, turns*(speech+silence))
					}
				}
			})
		}
	}
}
