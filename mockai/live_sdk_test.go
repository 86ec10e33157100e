package mockai_test

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"rtgate/bench/proc"
)

// TestLiveNodeSDK drives mockai, run as a separate process over ws:// and
// wss://, with the official openai SDK's Live classes (LiveWS, SidebandWS,
// ForksWS, client.live.create and client.live.sessions.*) unchanged:
// testdata/node/live.mjs. What the SDK parses, mockai must send, so gateway
// tests built on mockai hold against OpenAI. CI installs node and npm and
// runs npm ci in testdata/node (.ci/run); without node_modules the test
// runs npm ci itself.
func TestLiveNodeSDK(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatal("node is not installed (apt-get install -y nodejs npm)")
	}
	dir := liveNodeModules(t)
	bin := buildMockaiBinary(t)
	const offer = "v=0\r\no=- 1 2 IN IP4 127.0.0.1\r\ns=-\r\nt=0 0\r\nm=audio 9 UDP/TLS/RTP/SAVPF 111\r\na=mid:0\r\n"
	for _, upstream := range []proc.Upstream{proc.UpstreamPlain, proc.UpstreamTLS} {
		t.Run(string(upstream), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
			defer cancel()
			m, err := proc.StartMockai(ctx, bin, upstream, []string{"-key", "sk-sdk"}, t.TempDir(), 30*time.Second)
			if err != nil {
				t.Fatalf("starting mockai: %v", err)
			}
			t.Cleanup(func() { _ = m.Stop(5 * time.Second) })
			base := strings.Replace(strings.Replace(m.Base, "wss://", "https://", 1), "ws://", "http://", 1)
			cmd := exec.CommandContext(ctx, node, "live.mjs")
			cmd.Dir = dir
			cmd.Env = append(os.Environ(), "MOCK_BASE="+base, "MOCK_KEY=sk-sdk", "SDP_OFFER="+offer)
			if m.CAFile != "" {
				cmd.Env = append(cmd.Env, "NODE_EXTRA_CA_CERTS="+m.CAFile)
			}
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("node live.mjs: %v (%s)", err, out)
			}
			var got struct {
				LiveURL         string  `json:"live_url"`
				SidebandURL     string  `json:"sideband_url"`
				SessionID       string  `json:"session_id"`
				Model           string  `json:"model"`
				ClientEventID   string  `json:"client_event_id"`
				ExpiresIn       float64 `json:"expires_in"`
				SidebandStarted string  `json:"sideband_started"`
				Reflected       struct {
					SameAudio bool `json:"same_audio"`
					StartMs   int  `json:"start_ms"`
					EndMs     int  `json:"end_ms"`
				} `json:"reflected"`
				OutputAudioBytes   int    `json:"output_audio_bytes"`
				InputTranscript    string `json:"input_transcript"`
				BackendModel       string `json:"backend_model"`
				BackendTotalTokens int    `json:"backend_total_tokens"`
				Closed             struct {
					Reason         string  `json:"reason"`
					Seconds        float64 `json:"seconds"`
					SidebandReason string  `json:"sideband_reason"`
				} `json:"closed"`
				LiveClose     int `json:"live_close"`
				SidebandClose int `json:"sideband_close"`
				Strict        struct {
					Code  string `json:"code"`
					Param string `json:"param"`
				} `json:"strict"`
				Recording struct {
					Type  string `json:"type"`
					Bytes int    `json:"bytes"`
				} `json:"recording"`
				ForkIDPrefix     string `json:"fork_id_prefix"`
				ForkAnswerStarts string `json:"fork_answer_starts"`
				ForkWSModel      string `json:"fork_ws_model"`
				WebRTC           struct {
					IDPrefix     string `json:"id_prefix"`
					AnswerStarts string `json:"answer_starts"`
					Type         string `json:"type"`
				} `json:"webrtc"`
				BadReject struct {
					Status int    `json:"status"`
					Code   string `json:"code"`
					Param  string `json:"param"`
				} `json:"bad_reject"`
				SipOK bool   `json:"sip_ok"`
				Error string `json:"error"`
			}
			if err := json.Unmarshal(out, &got); err != nil {
				t.Fatalf("live.mjs printed %q: %v", out, err)
			}
			wantScheme := map[proc.Upstream]string{proc.UpstreamPlain: "ws://", proc.UpstreamTLS: "wss://"}[upstream]
			switch {
			case got.Error != "":
				t.Fatalf("the SDK failed: %s", got.Error)
			case got.LiveURL != wantScheme+"HOST/v1/live/sessions" || got.SidebandURL != wantScheme+"HOST/v1/live/sessions/"+got.SessionID+"/attach?graceful_close=true":
				t.Fatalf("the SDK's URLs: %s, %s", got.LiveURL, got.SidebandURL)
			case !strings.HasPrefix(got.SessionID, "live_") || got.Model != "gpt-live-1" || got.ClientEventID != "evt_sdk" || got.ExpiresIn < 3500:
				t.Fatalf("LiveWS session.started: %+v", got)
			case got.SidebandStarted != got.SessionID || !got.Reflected.SameAudio || got.Reflected.StartMs != 0 || got.Reflected.EndMs != 100 || got.OutputAudioBytes != 4800 || got.InputTranscript == "":
				t.Fatalf("audio and the sideband: %+v", got)
			case got.BackendModel != "gpt-5.2-mini" || got.BackendTotalTokens != 150:
				t.Fatalf("response.event: %+v", got)
			case got.Closed.Reason != "close_requested" || got.Closed.Seconds != 0.1 || got.Closed.SidebandReason != "close_requested" ||
				got.LiveClose != 1000 || got.SidebandClose != 1000:
				t.Fatalf("session.close: %+v", got)
			case got.Strict.Code != "unknown_parameter" || got.Strict.Param != "session.voice":
				t.Fatalf("strict config: %+v", got.Strict)
			case got.Recording.Type != "audio/wav" || got.Recording.Bytes != 44+24000*2*2: // the 1 s minimum
				t.Fatalf("downloadRecording: %+v", got.Recording)
			case got.ForkIDPrefix != "live_" || got.ForkAnswerStarts != "v=0\r\n" || got.ForkWSModel != "gpt-live-1":
				t.Fatalf("fork: %+v", got)
			case got.WebRTC.IDPrefix != "live_" || got.WebRTC.AnswerStarts != "v=0\r\n" || got.WebRTC.Type != "webrtc":
				t.Fatalf("live.create: %+v", got.WebRTC)
			case !got.SipOK || got.BadReject.Status != 400 || got.BadReject.Param != "status_code":
				t.Fatalf("call controls: ok %v, bad reject %+v", got.SipOK, got.BadReject)
			}
		})
	}
}

// liveNodeModules installs testdata/node's locked dependencies when missing.
func liveNodeModules(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs(filepath.Join("testdata", "node"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "openai", "package.json")); err == nil {
		return dir
	}
	npm, err := exec.LookPath("npm")
	if err != nil {
		t.Fatal("npm is not installed (apt-get install -y nodejs npm)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, npm, "ci", "--no-audit", "--no-fund")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("npm ci in %s: %v\n%s", dir, err, out)
	}
	return dir
}

// buildMockaiBinary builds cmd/mockai into the test's temp dir.
func buildMockaiBinary(t *testing.T) string {
	t.Helper()
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("finding the go tool: %v", err)
	}
	bin := filepath.Join(t.TempDir(), "mockai")
	if out, err := exec.Command(goTool, "build", "-o", bin, "rtgate/cmd/mockai").CombinedOutput(); err != nil {
		t.Fatalf("go build rtgate/cmd/mockai: %v\n%s", err, out)
	}
	return bin
}
