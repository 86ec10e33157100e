package load

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"rtgate/bench/benchtest"
	"rtgate/mockai"
)

// TestGeminiCall: a direct Gemini Live call's phases, turns and failure
// classes against mockai's Gemini endpoint, over ws:// and wss://, and what
// mockai saw of it.
func TestGeminiCall(t *testing.T) {
	const key = "gem-mock-key-1234"
	// A turn is 8 frames from mockai (3 audio parts here, the output
	// transcription, generationComplete, turnComplete, usageMetadata, a
	// resumption handle) after setupComplete: dropping after 1+8+2 frames
	// kills turn 2 after its first audio part.
	const framesPerTurn = 8
	tests := []struct {
		name        string
		mock        mockai.Config
		key         string
		turns       int
		audio       bool
		timeout     time.Duration
		wantFailure string
		wantReached Phase
		wantDetail  string
		wantLater   int
	}{
		{"one turn, any key", mockai.Config{}, "gem-any", 1, false, 0, "", PhaseDone, "", 0},
		{"three turns with a key and input audio", mockai.Config{Key: key}, key, 3, true, 0, "", PhaseDone, "", 2},
		{"wrong key", mockai.Config{Key: key}, "gem-wrong-key", 1, false, 0, "unexpected_close_1007", PhaseDial, "", 0},
		{"no key (Gemini refuses callers without one)", mockai.Config{}, "", 1, false, 0, "unexpected_close_1008", PhaseDial, "", 0},
		{"refused upgrade", mockai.Config{StatusCode: 429}, "", 1, false, 0, "handshake_429", PhaseNone, "", 0},
		{"slow setupComplete", mockai.Config{SessionDelay: time.Second}, "gem-any", 1, false, 200 * time.Millisecond, "timeout_session", PhaseDial, "", 0},
		{"slow first audio", mockai.Config{FirstAudioDelay: time.Second}, "gem-any", 1, false, 200 * time.Millisecond, "timeout_first_audio", PhaseSession, "", 0},
		{"a turn without audio", mockai.Config{AudioDeltas: -1}, "gem-any", 1, false, 0, "no_audio", PhaseSession, "", 0},
		{"a later turn's connection drops", mockai.Config{DropAfterFrames: 1 + framesPerTurn + 2}, "gem-any", 3, false, 0, "unexpected_close_1006", PhaseFirstAudio, "turn 2:", 0},
	}
	for _, tc := range tests {
		for _, useTLS := range []bool{false, true} {
			t.Run(tc.name+map[bool]string{false: "/ws", true: "/wss"}[useTLS], func(t *testing.T) {
				before := runtime.NumGoroutine()
				mc := tc.mock
				mc.TLS = useTLS
				if mc.AudioDeltas == 0 {
					mc.AudioDeltas = 3
				}
				srv := benchtest.Mockai(t, mc)
				url, err := BuildURLFor(ProtocolGemini, strings.TrimSuffix(srv.BaseURL(), "/v1"), false, "")
				if err != nil {
					t.Fatal(err)
				}
				cfg := Config{URL: url, Key: tc.key, Timeout: tc.timeout, Turns: tc.turns, Audio: tc.audio,
					AudioLength: 40 * time.Millisecond, Protocol: ProtocolGemini}
				if useTLS {
					roots := x509.NewCertPool()
					roots.AppendCertsFromPEM(srv.CertPEM())
					cfg.TLS = &tls.Config{RootCAs: roots}
				}
				s := newTestClient(t, cfg).Call(context.Background(), time.Now())
				if s.Failure != tc.wantFailure || s.Reached != tc.wantReached || !strings.HasPrefix(s.Detail, tc.wantDetail) {
					t.Fatalf("got failure %q reached %d (%s), want %q reached %d, detail %q", s.Failure, s.Reached, s.Detail,
						tc.wantFailure, tc.wantReached, tc.wantDetail)
				}
				if tc.key != "" && strings.Contains(s.Detail, tc.key) {
					t.Errorf("detail leaks the key: %q", s.Detail)
				}
				if len(s.LaterFirstAudio) != tc.wantLater {
					t.Errorf("%d later turns measured, want %d", len(s.LaterFirstAudio), tc.wantLater)
				}
				if s.OK() {
					if s.Dial <= 0 || s.Session <= 0 || s.FirstAudio <= 0 || s.Total < s.Dial+s.Session+s.FirstAudio {
						t.Errorf("implausible phases: %+v", s)
					}
					recs := srv.GeminiSessions()
					if len(recs) != 1 {
						t.Fatalf("mockai saw %d Gemini sessions, want 1", len(recs))
					}
					g := recs[0]
					if g.Model != "models/gemini-3.8-live" || g.Auth != "x-goog-api-key" || g.Turns != tc.turns || !g.OutputTranscription ||
						!g.SessionResumption || !g.AutomaticActivityDetect || g.Interruptions != 0 || g.CloseCode != 0 {
						t.Errorf("mockai saw %+v", g)
					}
					if got := strings.Count(strings.Join(g.Messages, ","), "clientContent"); got != tc.turns {
						t.Errorf("mockai got %d clientContent messages (%v), want one a turn", got, g.Messages)
					}
					if tc.audio && (g.AudioChunks != int64(2*tc.turns) || g.AudioRate != 24000) {
						t.Errorf("mockai got %d audio chunks at %d Hz, want 2 a turn at 24000", g.AudioChunks, g.AudioRate)
					}
				}
				_ = srv.Close()
				checkNoLeak(t, before)
			})
		}
	}
}

// TestGeminiTurnEnds: how a turn ends decides the call, whatever frame
// type (Gemini's binary, or text) carries the messages.
func TestGeminiTurnEnds(t *testing.T) {
	audio := `{"serverContent":{"modelTurn":{"parts":[{"inlineData":{"mimeType":"audio/pcm;rate=24000","data":"AAAA"}}]}}}`
	tests := []struct {
		name        string
		frame       int // websocket.TextMessage or BinaryMessage
		turn        []string
		wantFailure string
		wantReached Phase
	}{
		{"audio then turnComplete", websocket.BinaryMessage, []string{audio, `{"serverContent":{"turnComplete":true}}`}, "", PhaseDone},
		{"as text frames", websocket.TextMessage, []string{audio, `{"serverContent":{"turnComplete":true}}`}, "", PhaseDone},
		{"the last part with turnComplete", websocket.BinaryMessage,
			[]string{`{"serverContent":{"modelTurn":{"parts":[{"inlineData":{"mimeType":"audio/pcm","data":"AA=="}}]},"turnComplete":true}}`}, "", PhaseDone},
		{"interrupted", websocket.BinaryMessage, []string{audio, `{"serverContent":{"interrupted":true}}`}, "interrupted", PhaseSession},
		{"text only", websocket.BinaryMessage, []string{`{"serverContent":{"modelTurn":{"parts":[{"text":"hi"}]}}}`,
			`{"serverContent":{"turnComplete":true}}`}, "no_audio", PhaseSession},
		{"an image is not audio", websocket.BinaryMessage, []string{`{"serverContent":{"modelTurn":{"parts":[{"inlineData":{"mimeType":"image/png","data":"AA=="}}]}}}`,
			`{"serverContent":{"turnComplete":true}}`}, "no_audio", PhaseSession},
		{"not JSON", websocket.BinaryMessage, []string{`{"serverContent":`}, "protocol", PhaseSession},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			url := scriptedGemini(t, tc.frame, tc.turn)
			s := newTestClient(t, Config{URL: url, Protocol: ProtocolGemini, Timeout: 3 * time.Second}).Call(context.Background(), time.Now())
			if s.Failure != tc.wantFailure || s.Reached != tc.wantReached {
				t.Fatalf("got failure %q reached %d (%s), want %q reached %d", s.Failure, s.Reached, s.Detail, tc.wantFailure, tc.wantReached)
			}
		})
	}
}

// scriptedGemini is a Gemini server that answers setup with setupComplete
// and the first clientContent with turn, each message a frame of type
// frame, then echoes the client's close.
func scriptedGemini(t *testing.T, frame int, turn []string) string {
	t.Helper()
	up := websocket.Upgrader{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := up.Upgrade(w, r, nil)
		if err != nil {
			return
		}
		defer c.Close()
		script := map[string][]string{"setup": {`{"setupComplete":{}}`}, "clientContent": turn}
		for range 10 {
			_, msg, err := c.ReadMessage()
			if err != nil {
				return
			}
			for kind, answer := range script {
				if strings.HasPrefix(string(msg), `{"`+kind+`"`) {
					for _, a := range answer {
						if c.WriteMessage(frame, []byte(a)) != nil {
							return
						}
					}
				}
			}
		}
	}))
	t.Cleanup(srv.Close)
	return "ws" + strings.TrimPrefix(srv.URL, "http") + GeminiPath
}

func TestBuildURLForGemini(t *testing.T) {
	for _, tt := range []struct{ host, want string }{
		{"127.0.0.1:8089", "wss://127.0.0.1:8089" + GeminiPath},
		{"ws://127.0.0.1:8089/", "ws://127.0.0.1:8089" + GeminiPath},
		{"wss://h/ws/google.ai.generativelanguage.v1alpha.GenerativeService.BidiGenerateContent",
			"wss://h/ws/google.ai.generativelanguage.v1alpha.GenerativeService.BidiGenerateContent"},
	} {
		if got, err := BuildURLFor(ProtocolGemini, tt.host, false, "gemini-3.8-live"); err != nil || got != tt.want {
			t.Errorf("%s: %q %v, want %q", tt.host, got, err, tt.want)
		}
	}
}

// TestGeminiClientRefusals: what a Gemini client does not do.
func TestGeminiClientRefusals(t *testing.T) {
	if _, err := NewClient(Config{URL: "ws://127.0.0.1:1" + GeminiPath, Timeout: time.Second, Protocol: ProtocolGemini, VAD: true}); err == nil ||
		!strings.Contains(err.Error(), "Realtime protocol only") {
		t.Errorf("VAD turns over Gemini: %v", err)
	}
	c := newTestClient(t, Config{URL: "ws://127.0.0.1:1" + GeminiPath, Protocol: ProtocolGemini})
	if _, s := c.Open(context.Background()); s.Failure != "protocol" {
		t.Errorf("hold over Gemini: %+v, want a protocol failure", s)
	}
}

// TestParseGeminiMsg: what each server message means to a call, by the
// fast path for a lone audio part or by walking the fields.
func TestParseGeminiMsg(t *testing.T) {
	tests := []struct {
		name    string
		msg     string
		want    geminiMsg
		wantErr bool
	}{
		{"setupComplete", `{"setupComplete":{}}`, geminiMsg{setupComplete: true}, false},
		{"an audio part, mockai's layout", `{"serverContent":{"modelTurn":{"parts":[{"inlineData":{"data":"AAAA","mimeType":"audio/pcm;rate=24000"}}]}}}`,
			geminiMsg{audio: true}, false},
		{"an audio part, mime type first", `{"serverContent":{"modelTurn":{"parts":[{"inlineData":{"mimeType":"audio/pcm","data":"AA=="}}]}}}`,
			geminiMsg{audio: true}, false},
		{"with spaces", `{ "serverContent" : { "modelTurn" : { "parts" : [ { "inlineData" : { "mimeType" : "audio/pcm" , "data" : "AA==" } } ] } } }`,
			geminiMsg{audio: true}, false},
		{"an image part", `{"serverContent":{"modelTurn":{"parts":[{"inlineData":{"data":"AAAA","mimeType":"image/png"}}]}}}`, geminiMsg{}, false},
		{"a text part then audio", `{"serverContent":{"modelTurn":{"parts":[{"text":"mimeType"},{"inlineData":{"mimeType":"audio/pcm","data":"AA=="}}]}}}`,
			geminiMsg{audio: true}, false},
		{"the last part with turnComplete", `{"serverContent":{"modelTurn":{"parts":[{"inlineData":{"data":"AA==","mimeType":"audio/pcm"}}]},"turnComplete":true}}`,
			geminiMsg{audio: true, turnComplete: true}, false},
		{"turnComplete with usage", `{"serverContent":{"turnComplete":true},"usageMetadata":{"totalTokenCount":9}}`, geminiMsg{turnComplete: true}, false},
		{"turnComplete false", `{"serverContent":{"turnComplete":false}}`, geminiMsg{}, false},
		{"interrupted", `{"serverContent":{"interrupted":true}}`, geminiMsg{interrupted: true}, false},
		{"usage alone", `{"usageMetadata":{"promptTokenCount":10}}`, geminiMsg{}, false},
		{"not an object", `[1,2]`, geminiMsg{}, true},
		{"cut short", `{"serverContent":{"modelTurn":{"parts":[{"inlineData":{`, geminiMsg{}, true},
		{"parts not an array", `{"serverContent":{"modelTurn":{"parts":{}}}}`, geminiMsg{}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseGeminiMsg([]byte(tc.msg))
			if (err != nil) != tc.wantErr || (err == nil && got != tc.want) {
				t.Fatalf("got %+v, %v; want %+v, error %v", got, err, tc.want, tc.wantErr)
			}
		})
	}
}
