package load

import (
	"context"
	"strings"
	"testing"
	"time"

	"rtgate/bench/benchtest"
	"rtgate/mockai"
)

// TestFlows: calls of each flow against mockai, what they end in and what
// mockai read of them.
func TestFlows(t *testing.T) {
	turnBytes := int64(turnAudio/audioChunk) * audioChunkBytes
	tests := []struct {
		name        string
		mock        mockai.Config
		flow        Flow
		turns       int
		timeout     time.Duration
		wantFailure string
		wantLater   int
		// the client events mockai must have read, by type
		wantEvents map[string]int
	}{
		{"commit", mockai.Config{}, FlowCommit, 3, 0, "", 2,
			map[string]int{"input_audio_buffer.commit": 3, "response.create": 3, "session.update": 0}},
		{"tool calls answered", mockai.Config{ToolArguments: `{"order_id":"A-1001"}`}, FlowTool, 2, 0, "", 1,
			map[string]int{"session.update": 1, "input_audio_buffer.commit": 2, "response.create": 4, "conversation.item.create": 2}},
		{"one tool turn", mockai.Config{}, FlowTool, 1, 0, "", 0,
			map[string]int{"session.update": 1, "response.create": 2, "conversation.item.create": 1}},
		// mockai answers a commit only under server VAD: nobody answers.
		{"server answers, nobody does", mockai.Config{}, FlowServerAnswers, 2, 400 * time.Millisecond, "timeout_first_audio", 0,
			map[string]int{"input_audio_buffer.commit": 1, "response.create": 0}},
		{"failed tool turn", mockai.Config{FailResponses: true}, FlowTool, 2, 0, "response_failed", 0,
			map[string]int{"response.create": 1, "conversation.item.create": 0}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			srv := benchtest.Mockai(t, tc.mock)
			c := newTestClient(t, Config{URL: realtimeURL(srv.BaseURL()), Flow: tc.flow, Turns: tc.turns, Timeout: tc.timeout})
			s := c.Call(context.Background(), time.Now())
			if s.Failure != tc.wantFailure {
				t.Fatalf("failure %q (%s), want %q", s.Failure, s.Detail, tc.wantFailure)
			}
			if tc.wantFailure != "" && !strings.HasPrefix(s.Detail, "turn 1:") {
				t.Errorf("detail %q does not name turn 1", s.Detail)
			}
			if len(s.LaterFirstAudio) != tc.wantLater {
				t.Errorf("%d later turns measured, want %d", len(s.LaterFirstAudio), tc.wantLater)
			}
			got := map[string]int{}
			for _, e := range srv.Events() {
				got[e.Type]++
			}
			for typ, n := range tc.wantEvents {
				if got[typ] != n {
					t.Errorf("mockai read %d %s, want %d (all: %v)", got[typ], typ, n, got)
				}
			}
			if st := srv.Stats(); st.AudioBytes != int64(got["input_audio_buffer.commit"])*turnBytes {
				t.Errorf("mockai got %d audio bytes for %d turns, want %d a turn", st.AudioBytes, got["input_audio_buffer.commit"], turnBytes)
			}
		})
	}
}

// TestFlowConfig: a flow speaks Realtime and appends its own audio.
func TestFlowConfig(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
		want string // "" for none
	}{
		{"commit", Config{Flow: FlowCommit, Turns: 3}, ""},
		{"tool over Realtime", Config{Flow: FlowTool, Protocol: ProtocolRealtime}, ""},
		{"unknown", Config{Flow: "shout"}, `flow "shout"`},
		{"with VAD", Config{Flow: FlowCommit, VAD: true}, "without VAD turns"},
		{"with streamed audio", Config{Flow: FlowServerAnswers, Audio: true}, "appends its own"},
		{"Gemini", Config{Flow: FlowTool, Protocol: ProtocolGemini}, "speaks the Realtime protocol"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.URL, tc.cfg.Timeout = "ws://127.0.0.1:1/v1/realtime", time.Second
			_, err := NewClient(tc.cfg)
			if (err == nil) != (tc.want == "") || (err != nil && !strings.Contains(err.Error(), tc.want)) {
				t.Fatalf("error %v, want %q", err, tc.want)
			}
		})
	}
	for in, want := range map[string]Flow{"": FlowTurns, "turns": FlowTurns, "tool": FlowTool, "server-answers": FlowServerAnswers} {
		if f, err := ParseFlow(in); err != nil || f != want {
			t.Errorf("ParseFlow(%q) = %q, %v; want %q", in, f, err, want)
		}
	}
}
