package mockai_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"rtgate/bench/proc"
	"rtgate/mockai"
)

// Gemini Live routes, as @google/genai and Google's docs dial them.
const (
	geminiV1beta  = "/ws/google.ai.generativelanguage.v1beta.GenerativeService.BidiGenerateContent"
	geminiV1      = "/ws/google.ai.generativelanguage.v1.GenerativeService.BidiGenerateContent"
	geminiV1alpha = "/ws/google.ai.generativelanguage.v1alpha.GenerativeService.BidiGenerateContent"
	vertexV1beta1 = "/ws/google.cloud.aiplatform.v1beta1.LlmBidiService/BidiGenerateContent"
	vertexV1      = "/ws/google.cloud.aiplatform.v1.LlmBidiService/BidiGenerateContent"

	geminiModel = "models/gemini-3.8-live"
	vertexModel = "projects/p/locations/us-central1/publishers/google/models/gemini-live-2.5-flash"
)

// gconn is a gorilla client on a Gemini Live route.
type gconn struct {
	t *testing.T
	c *websocket.Conn
}

func geminiWS(srv *mockai.Server, path string) string {
	return strings.Replace(srv.GeminiBaseURL(), "http", "ws", 1) + path
}

// dialGemini opens path (with its query) on srv.
func dialGemini(t *testing.T, srv *mockai.Server, path string, hdr http.Header) *gconn {
	t.Helper()
	c, _, err := dial(t, geminiWS(srv, path), hdr, nil)
	if err != nil {
		t.Fatalf("dial %s: %v", path, err)
	}
	return &gconn{t, c}
}

// openGemini dials AI Studio's v1beta route with a key and completes a
// setup of geminiModel merged with extra.
func openGemini(t *testing.T, srv *mockai.Server, extra map[string]any) *gconn {
	t.Helper()
	g := dialGemini(t, srv, geminiV1beta+"?key=k", nil)
	g.send(map[string]any{"setup": setupWith(geminiModel, extra)})
	g.expect("setupComplete")
	return g
}

func setupWith(model string, extra map[string]any) map[string]any {
	s := map[string]any{"model": model}
	for k, v := range extra {
		s[k] = v
	}
	return s
}

func (g *gconn) send(v any) {
	g.t.Helper()
	send(g.t, g.c, v)
}

func (g *gconn) sendRaw(s string) {
	g.t.Helper()
	sendRaw(g.t, g.c, websocket.TextMessage, []byte(s))
}

// next reads one server message, which must be a binary frame holding
// JSON, as Google sends them.
func (g *gconn) next() event {
	g.t.Helper()
	ev, err := g.tryNext()
	if err != nil {
		g.t.Fatalf("read gemini message: %v", err)
	}
	return ev
}

func (g *gconn) tryNext() (event, error) {
	g.c.SetReadDeadline(time.Now().Add(ioTimeout))
	mt, data, err := g.c.ReadMessage()
	if err != nil {
		return nil, err
	}
	if mt != websocket.BinaryMessage {
		return nil, fmt.Errorf("a text frame %s: Gemini sends binary frames", data)
	}
	var ev event
	if err := json.Unmarshal(data, &ev); err != nil {
		return nil, err
	}
	return ev, nil
}

// expect reads one message and fails unless it is of kind k (gkind).
func (g *gconn) expect(k string) event {
	g.t.Helper()
	ev := g.next()
	if got := gkind(ev); got != k {
		g.t.Fatalf("got %s (%v), want %s", got, ev, k)
	}
	return ev
}

// read reads n messages.
func (g *gconn) read(n int) []event {
	g.t.Helper()
	evs := make([]event, n)
	for i := range evs {
		evs[i] = g.next()
	}
	return evs
}

// closed reads until the connection ends and returns the server's close.
func (g *gconn) closed() (int, string) {
	g.t.Helper()
	for i := 0; i < 1000; i++ {
		_, err := g.tryNext()
		if err == nil {
			continue
		}
		var ce *websocket.CloseError
		if !errors.As(err, &ce) {
			g.t.Fatalf("connection ended with %v, want a close frame", err)
		}
		return ce.Code, ce.Text
	}
	g.t.Fatal("no close within 1000 messages")
	return 0, ""
}

// gkind names a server message by what it carries: "setupComplete",
// "audio" and "text" (modelTurn parts), "inputTranscription",
// "generationComplete", "turnComplete" (+usage when usageMetadata rides
// along), "usageMetadata", "toolCall", ...
func gkind(e event) string {
	for _, k := range []string{"setupComplete", "toolCall", "toolCallCancellation", "goAway", "sessionResumptionUpdate"} {
		if _, ok := e[k]; ok {
			return k
		}
	}
	if sc, ok := e["serverContent"].(map[string]any); ok {
		for _, k := range []string{"inputTranscription", "outputTranscription", "generationComplete", "interrupted", "turnComplete"} {
			if _, ok := sc[k]; ok {
				if _, u := e["usageMetadata"]; u {
					return k + "+usage"
				}
				return k
			}
		}
		if part := firstPart(e); part != nil {
			if _, ok := part["inlineData"]; ok {
				return "audio"
			}
			return "text"
		}
		return "serverContent?"
	}
	if _, ok := e["usageMetadata"]; ok {
		return "usageMetadata"
	}
	return "unknown"
}

func firstPart(e event) map[string]any {
	parts, _ := e.get("serverContent.modelTurn.parts").([]any)
	if len(parts) == 0 {
		return nil
	}
	p, _ := parts[0].(map[string]any)
	return p
}

func kinds(evs []event) []string {
	out := make([]string, len(evs))
	for i, e := range evs {
		out[i] = gkind(e)
	}
	return out
}

// repeat is n copies of k.
func repeat(k string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = k
	}
	return out
}

func concat(parts ...[]string) []string {
	var out []string
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

// pcm16 is ms milliseconds of PCM16 at rate, loud (a square wave at 8000,
// speech to mockai) or silent.
func pcm16(ms, rate int, loud bool) string {
	b := make([]byte, ms*rate/1000*2)
	if loud {
		for i := 0; i+1 < len(b); i += 2 {
			v := int16(8000)
			if (i/2)%20 >= 10 {
				v = -8000
			}
			binary.LittleEndian.PutUint16(b[i:], uint16(v))
		}
	}
	return base64.StdEncoding.EncodeToString(b)
}

func audioIn(ms, rate int, loud bool) map[string]any {
	return map[string]any{"realtimeInput": map[string]any{"audio": map[string]any{
		"data": pcm16(ms, rate, loud), "mimeType": fmt.Sprintf("audio/pcm;rate=%d", rate)}}}
}

// geminiSpeech is 300 ms of speech then 200 ms of silence at 16 kHz: a user
// turn to automatic activity detection (16,000 bytes, 16 audio tokens).
func geminiSpeech() []any {
	return []any{audioIn(100, 16000, true), audioIn(100, 16000, true), audioIn(100, 16000, true),
		audioIn(100, 16000, false), audioIn(100, 16000, false)}
}

func userText(text string, complete bool) map[string]any {
	cc := map[string]any{"turns": []any{map[string]any{"role": "user", "parts": []any{map[string]any{"text": text}}}}}
	if complete {
		cc["turnComplete"] = true
	}
	return map[string]any{"clientContent": cc}
}

// geminiUsage is a message's usageMetadata as numbers: the counts, and the
// details as "<field>.<MODALITY>".
func geminiUsage(e event) map[string]int {
	u, _ := e["usageMetadata"].(map[string]any)
	out := map[string]int{}
	for k, v := range u {
		switch v := v.(type) {
		case float64:
			out[k] = int(v)
		case []any:
			for _, d := range v {
				m, _ := d.(map[string]any)
				n, _ := m["tokenCount"].(float64)
				out[k+"."+fmt.Sprint(m["modality"])] = int(n)
			}
		}
	}
	return out
}

// lastGemini is the newest Gemini session on srv.
func lastGemini(t *testing.T, srv *mockai.Server) mockai.GeminiSession {
	t.Helper()
	all := srv.GeminiSessions()
	if len(all) == 0 {
		t.Fatal("no gemini sessions")
	}
	return all[len(all)-1]
}

func TestGeminiRoutesAndAuth(t *testing.T) {
	keyHdr := http.Header{"x-goog-api-key": {"k"}}
	tests := []struct {
		name    string
		cfg     mockai.Config
		path    string
		hdr     http.Header
		model   string
		wantErr int    // HTTP status refusing the upgrade
		code    int    // close code (0: setupComplete)
		reason  string // close reason
		auth    string // Record.Auth
		dialect string
	}{
		{name: "key query, v1beta", path: geminiV1beta + "?key=k", auth: "key", dialect: "gemini"},
		{name: "x-goog-api-key header, v1", path: geminiV1, hdr: keyHdr, auth: "x-goog-api-key", dialect: "gemini"},
		{name: "v1alpha", path: geminiV1alpha + "?key=k", auth: "key", dialect: "gemini"},
		{name: "@google/genai's double slash", path: "/" + geminiV1 + "?key=k", auth: "key", dialect: "gemini"},
		{name: "Vertex bearer, v1beta1", path: vertexV1beta1, hdr: bearer("tok"), model: vertexModel, auth: "bearer", dialect: "vertex"},
		{name: "Vertex express key header, v1", path: vertexV1, hdr: keyHdr, model: "publishers/google/models/gemini-live-2.5-flash", auth: "x-goog-api-key", dialect: "vertex"},
		{name: "the configured key", cfg: mockai.Config{Key: "k"}, path: geminiV1beta + "?key=k", auth: "key", dialect: "gemini"},
		{name: "the configured key as a Vertex token", cfg: mockai.Config{Key: "k"}, path: vertexV1beta1, hdr: bearer("k"), model: vertexModel, auth: "bearer", dialect: "vertex"},
		{name: "no key", path: geminiV1beta, code: 1008,
			reason: "Method doesn't allow unregistered callers (callers without established identity).", dialect: "gemini"},
		{name: "a bearer is no key on AI Studio", path: geminiV1beta, hdr: bearer("tok"), code: 1008,
			reason: "Method doesn't allow unregistered callers (callers without established identity).", dialect: "gemini"},
		{name: "a wrong key", cfg: mockai.Config{Key: "k"}, path: geminiV1beta + "?key=other", code: 1007,
			reason: "API key not valid. Please pass a valid API key.", auth: "key", dialect: "gemini"},
		{name: "a wrong Vertex token", cfg: mockai.Config{Key: "k"}, path: vertexV1beta1, hdr: bearer("other"), code: 1008,
			reason: "Request had invalid authentication credentials.", auth: "bearer", dialect: "vertex"},
		{name: "RejectStatus refuses over HTTP", cfg: mockai.Config{Key: "k", RejectStatus: 401}, path: geminiV1beta + "?key=other",
			wantErr: 401, auth: "key", dialect: "gemini"},
		{name: "StatusCode applies", cfg: mockai.Config{StatusCode: 503}, path: geminiV1beta + "?key=k", wantErr: 503, auth: "key", dialect: "gemini"},
		// OneSegment holds the 101 for the server's first frame, which on
		// this route follows the client's setup: it must not apply.
		{name: "OneSegment does not hold the 101", cfg: mockai.Config{OneSegment: true}, path: geminiV1beta + "?key=k", auth: "key", dialect: "gemini"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			srv := start(t, tc.cfg)
			c, resp, err := dial(t, geminiWS(srv, tc.path), tc.hdr, nil)
			if tc.wantErr != 0 {
				if err == nil || resp == nil || resp.StatusCode != tc.wantErr {
					t.Fatalf("dial: %v (%v), want HTTP %d", err, resp, tc.wantErr)
				}
			} else {
				if err != nil {
					t.Fatalf("dial: %v", err)
				}
				g := &gconn{t, c}
				if tc.code != 0 {
					if code, reason := g.closed(); code != tc.code || reason != tc.reason {
						t.Fatalf("closed %d %q, want %d %q", code, reason, tc.code, tc.reason)
					}
					if s := lastGemini(t, srv); s.CloseCode != tc.code || s.SetupComplete {
						t.Errorf("session record %+v, want close %d and no setup", s, tc.code)
					}
				} else {
					model := tc.model
					if model == "" {
						model = geminiModel
					}
					g.send(map[string]any{"setup": map[string]any{"model": model}})
					g.expect("setupComplete")
					s := lastGemini(t, srv)
					if s.Auth != tc.auth || s.API != tc.dialect || s.Model != model || !s.SetupComplete {
						t.Errorf("session record %+v, want auth %q api %q model %q", s, tc.auth, tc.dialect, model)
					}
				}
			}
			recs := srv.Records()
			if len(recs) != 1 {
				t.Fatalf("%d records, want 1", len(recs))
			}
			r := recs[0]
			if r.Auth != tc.auth || r.Dialect != tc.dialect {
				t.Errorf("record auth %q dialect %q, want %q %q", r.Auth, r.Dialect, tc.auth, tc.dialect)
			}
			if got := r.SessionID != ""; got != (tc.code == 0 && tc.wantErr == 0) {
				t.Errorf("record session id %q: a session was opened: %v", r.SessionID, got)
			}
		})
	}
}

func TestGeminiProtocolErrors(t *testing.T) {
	const invalid = "Request contains an invalid argument."
	setup := `{"setup":{"model":"models/gemini-3.8-live"}}`
	tests := []struct {
		name       string
		setupFirst bool     // send setup and read setupComplete first
		send       []string // then these, raw
		code       int
		reason     string // the close reason, or its start when prefix
		prefix     bool
	}{
		{name: "audio before setup", send: []string{`{"realtimeInput":{"audio":{"data":"AAAA","mimeType":"audio/pcm;rate=16000"}}}`}, code: 1007, reason: invalid},
		{name: "clientContent before setup", send: []string{`{"clientContent":{"turnComplete":true}}`}, code: 1007, reason: invalid},
		{name: "a second setup", setupFirst: true, send: []string{setup}, code: 1007, reason: invalid},
		{name: "an OpenAI event", send: []string{`{"type":"session.update","session":{}}`}, code: 1007,
			reason: `Invalid JSON payload received. Unknown name "type": Cannot find field.`},
		{name: "two messages in one", setupFirst: true, send: []string{`{"clientContent":{"turnComplete":true},"toolResponse":{}}`}, code: 1007, reason: invalid},
		{name: "a generation field at setup's level", send: []string{`{"setup":{"model":"models/gemini-3.8-live","responseModalities":["AUDIO"]}}`}, code: 1007,
			reason: `Invalid JSON payload received. Unknown name "responseModalities" at 'setup': Cannot find field.`},
		{name: "a lowercase modality", send: []string{`{"setup":{"model":"models/gemini-3.8-live","generationConfig":{"responseModalities":["audio"]}}}`}, code: 1007,
			reason: "Invalid value at 'setup.generation_config.response_modalities[0]' (type.googleapis.com/google.ai.generativelanguage.v1beta.", prefix: true},
		{name: "no model", send: []string{`{"setup":{}}`}, code: 1007, reason: invalid},
		{name: "a model without models/", send: []string{`{"setup":{"model":"gemini-3.8-live"}}`}, code: 1007, reason: invalid},
		{name: "not JSON", send: []string{`hello`}, code: 1007, reason: "Invalid JSON payload received. Expected an object."},
		{name: "an unknown realtimeInput field", setupFirst: true, send: []string{`{"realtimeInput":{"audio_chunk":{}}}`}, code: 1007,
			reason: `Invalid JSON payload received. Unknown name "audio_chunk" at 'realtime_input': Cannot find field.`},
		{name: "audio that is not base64", setupFirst: true, send: []string{`{"realtimeInput":{"audio":{"data":"!!!","mimeType":"audio/pcm;rate=16000"}}}`}, code: 1007,
			reason: "Invalid value at 'realtime_input.audio.data' (TYPE_BYTES), Base64 decoding failed"},
		{name: "an unknown resumption handle", send: []string{`{"setup":{"model":"models/gemini-3.8-live","sessionResumption":{"handle":"nope"}}}`}, code: 1008,
			reason: "BidiGenerateContent session not found"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			srv := start(t, mockai.Config{})
			g := dialGemini(t, srv, geminiV1beta+"?key=k", nil)
			if tc.setupFirst {
				g.sendRaw(setup)
				g.expect("setupComplete")
			}
			for _, m := range tc.send {
				g.sendRaw(m)
			}
			code, reason := g.closed()
			if len(reason) > 123 {
				t.Errorf("close reason of %d bytes: a close frame holds 123", len(reason))
			}
			if code != tc.code || (reason != tc.reason && !(tc.prefix && strings.HasPrefix(reason, tc.reason))) {
				t.Fatalf("closed %d %q, want %d %q", code, reason, tc.code, tc.reason)
			}
			if s := lastGemini(t, srv); s.CloseCode != tc.code || s.CloseReason != reason {
				t.Errorf("session record close %d %q, want %d %q", s.CloseCode, s.CloseReason, code, reason)
			}
		})
	}
}

func TestGeminiTurns(t *testing.T) {
	audio5 := repeat("audio", 5)
	done := []string{"generationComplete", "turnComplete", "usageMetadata"}
	transcribe := map[string]any{"inputAudioTranscription": map[string]any{}, "outputAudioTranscription": map[string]any{}}
	manual := map[string]any{"realtimeInputConfig": map[string]any{"automaticActivityDetection": map[string]any{"disabled": true}}}
	tests := []struct {
		name      string
		cfg       mockai.Config
		vertex    bool
		setup     map[string]any
		input     []any
		want      []string
		wantUsage map[string]int // these usageMetadata numbers (of the last usage read)
		wantTurns int            // model turns the record counts (0: 1)
	}{
		{name: "speech then silence, both transcriptions", setup: transcribe, input: geminiSpeech(),
			want: concat([]string{"inputTranscription"}, audio5, []string{"outputTranscription"}, done),
			wantUsage: map[string]int{"promptTokenCount": 26, "promptTokensDetails.TEXT": 10, "promptTokensDetails.AUDIO": 16,
				"responseTokenCount": 16, "responseTokensDetails.AUDIO": 16, "totalTokenCount": 42}},
		{name: "speech then silence, no transcription", input: geminiSpeech(), want: concat(audio5, done)},
		{name: "24 kHz input and a longer silence", setup: map[string]any{"realtimeInputConfig": map[string]any{
			"automaticActivityDetection": map[string]any{"silenceDurationMs": 300}}},
			input: []any{audioIn(100, 24000, true), audioIn(100, 24000, true), audioIn(100, 24000, true),
				audioIn(100, 24000, false), audioIn(100, 24000, false), audioIn(100, 24000, false)},
			want: concat(audio5, done), wantUsage: map[string]int{"promptTokensDetails.AUDIO": 19}}, // 28,800 bytes at 48,000 a second
		{name: "audioStreamEnd mid-speech", setup: transcribe,
			input: []any{audioIn(100, 16000, true), audioIn(100, 16000, true), map[string]any{"realtimeInput": map[string]any{"audioStreamEnd": true}}},
			want:  concat([]string{"inputTranscription"}, audio5, []string{"outputTranscription"}, done), wantUsage: map[string]int{"promptTokensDetails.AUDIO": 6}},
		{name: "activity signals with detection disabled", setup: manual,
			input: concat2(
				[]any{map[string]any{"realtimeInput": map[string]any{"activityStart": map[string]any{}}}},
				geminiSpeech(), // no turn of its own: detection is off
				[]any{map[string]any{"realtimeInput": map[string]any{"activityEnd": map[string]any{}}}}),
			want: concat(audio5, done), wantUsage: map[string]int{"promptTokensDetails.AUDIO": 16}},
		{name: "a text turn", input: []any{userText("Hello?", true)}, want: concat(audio5, done),
			wantUsage: map[string]int{"promptTokenCount": 10, "promptTokensDetails.AUDIO": 0}},
		{name: "clientContent without turnComplete waits for one", input: []any{userText("Hello", false), userText("again?", true)},
			want: concat(audio5, done)},
		{name: "realtime text", input: []any{map[string]any{"realtimeInput": map[string]any{"text": "Hello?"}}}, want: concat(audio5, done)},
		{name: "TEXT responses", setup: map[string]any{"generationConfig": map[string]any{"responseModalities": []string{"TEXT"}}},
			input: []any{userText("Hello?", true)}, want: concat(repeat("text", 3), done),
			wantUsage: map[string]int{"responseTokenCount": 5, "responseTokensDetails.TEXT": 5, "totalTokenCount": 15}},
		{name: "proto names (snake_case) are accepted", setup: map[string]any{"generation_config": map[string]any{"response_modalities": []string{"TEXT"}}},
			input: []any{map[string]any{"client_content": map[string]any{"turn_complete": true}}}, want: concat(repeat("text", 3), done)},
		{name: "usage in the turnComplete message", cfg: mockai.Config{Gemini: mockai.GeminiConfig{UsageWithTurnComplete: true}},
			input: []any{userText("Hello?", true)}, want: concat(audio5, []string{"generationComplete", "turnComplete+usage"}),
			wantUsage: map[string]int{"responseTokenCount": 16}},
		{name: "Vertex names the response tokens candidates", vertex: true, input: []any{userText("Hello?", true)}, want: concat(audio5, done),
			wantUsage: map[string]int{"candidatesTokenCount": 16, "candidatesTokensDetails.AUDIO": 16, "responseTokenCount": 0}},
		{name: "a resumption handle after the turn", setup: map[string]any{"sessionResumption": map[string]any{}},
			input: []any{userText("Hello?", true)}, want: concat(audio5, done, []string{"sessionResumptionUpdate"})},
		{name: "AudioDeltas sets the chunks", cfg: mockai.Config{AudioDeltas: 2, AudioDeltaBytes: 3000},
			input: []any{userText("Hello?", true)}, want: concat(repeat("audio", 2), done),
			wantUsage: map[string]int{"responseTokensDetails.AUDIO": 4}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			srv := start(t, tc.cfg)
			var g *gconn
			if tc.vertex {
				g = dialGemini(t, srv, vertexV1beta1, bearer("tok"))
				g.send(map[string]any{"setup": setupWith(vertexModel, tc.setup)})
				g.expect("setupComplete")
			} else {
				g = openGemini(t, srv, tc.setup)
			}
			for _, m := range tc.input {
				g.send(m)
			}
			evs := g.read(len(tc.want))
			if got := kinds(evs); !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("messages %v, want %v", got, tc.want)
			}
			var usage map[string]int
			chunk := tc.cfg.AudioDeltaBytes
			if chunk == 0 {
				chunk = 4800
			}
			for _, e := range evs {
				switch gkind(e) {
				case "audio":
					inline, _ := firstPart(e)["inlineData"].(map[string]any)
					raw, err := base64.StdEncoding.DecodeString(fmt.Sprint(inline["data"]))
					if inline["mimeType"] != "audio/pcm;rate=24000" || err != nil || !bytes.Equal(raw, mockai.PCMPattern(chunk)) {
						t.Errorf("audio part %v: want audio/pcm;rate=24000 carrying PCMPattern(%d)", inline["mimeType"], chunk)
					}
				case "inputTranscription":
					if got := e.str("serverContent.inputTranscription.text"); got == "" {
						t.Errorf("empty input transcription")
					}
				case "outputTranscription":
					if got := e.str("serverContent.outputTranscription.text"); got != "Hello from mockai." {
						t.Errorf("output transcription %q", got)
					}
				case "text":
					if p := firstPart(e); p["text"] == "" {
						t.Errorf("empty text part")
					}
				case "usageMetadata", "turnComplete+usage":
					usage = geminiUsage(e)
				case "sessionResumptionUpdate":
					if e.str("sessionResumptionUpdate.newHandle") == "" || e.get("sessionResumptionUpdate.resumable") != true {
						t.Errorf("resumption update %v: want a handle, resumable", e)
					}
				}
			}
			for k, want := range tc.wantUsage {
				if usage[k] != want {
					t.Errorf("usage %s = %d, want %d (%v)", k, usage[k], want, usage)
				}
			}
			if usage["totalTokenCount"] != usage["promptTokenCount"]+usage["responseTokenCount"]+usage["candidatesTokenCount"] {
				t.Errorf("usage %v: total is not prompt + response", usage)
			}
			wantTurns := tc.wantTurns
			if wantTurns == 0 {
				wantTurns = 1
			}
			if s := lastGemini(t, srv); s.Turns != wantTurns {
				t.Errorf("record counts %d turns, want %d", s.Turns, wantTurns)
			}
		})
	}
}

// TestGeminiAudioStreamEndNeedsSpeech: audioStreamEnd ends speech in
// progress, and makes no turn of silence alone or of speech that its
// silence already ended. The witness is the text turn sent after it,
// which names a function: its toolCall must be the next message.
func TestGeminiAudioStreamEndNeedsSpeech(t *testing.T) {
	tools := map[string]any{"tools": []any{map[string]any{"functionDeclarations": []any{map[string]any{"name": "get_weather"}}}}}
	streamEnd := map[string]any{"realtimeInput": map[string]any{"audioStreamEnd": true}}
	tests := []struct {
		name      string
		before    []any // sent, and its turn (if any) read, first
		turns     int   // model turns before
		audio     []any // then these, audioStreamEnd and the text turn
		wantAudio int   // the text turn's prompt audio tokens
	}{
		{name: "silence alone", audio: []any{audioIn(100, 16000, false), audioIn(100, 16000, false)}, wantAudio: 6},
		{name: "after speech its silence ended", before: geminiSpeech(), turns: 1, audio: []any{audioIn(100, 16000, false)}, wantAudio: 3},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			srv := start(t, mockai.Config{})
			g := openGemini(t, srv, tools)
			for _, m := range tc.before {
				g.send(m)
			}
			g.read(8 * tc.turns)
			for _, m := range append(tc.audio, streamEnd, userText("get_weather, please", true)) {
				g.send(m)
			}
			evs := g.read(2)
			if got := kinds(evs); !reflect.DeepEqual(got, []string{"toolCall", "usageMetadata"}) {
				t.Fatalf("messages %v: want the text turn's toolCall, no turn for audioStreamEnd", got)
			}
			if u := geminiUsage(evs[1]); u["promptTokensDetails.AUDIO"] != tc.wantAudio {
				t.Errorf("usage %v: want the audio since the last turn (%d tokens) in the text turn", u, tc.wantAudio)
			}
		})
	}
}

func concat2(parts ...[]any) []any {
	var out []any
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

func TestGeminiToolCalls(t *testing.T) {
	weather := map[string]any{"tools": []any{map[string]any{"functionDeclarations": []any{map[string]any{
		"name": "get_weather", "description": "The weather in a city.",
		"parameters": map[string]any{"type": "OBJECT", "properties": map[string]any{
			"city": map[string]any{"type": "STRING"}, "days": map[string]any{"type": "INTEGER"}, "metric": map[string]any{"type": "BOOLEAN"}}},
	}}}}}
	jsonSchema := map[string]any{"tools": []any{map[string]any{"functionDeclarations": []any{map[string]any{
		"name": "lookup", "parametersJsonSchema": map[string]any{"type": "object", "properties": map[string]any{
			"q": map[string]any{"type": "string"}, "n": map[string]any{"type": "number"}, "tags": map[string]any{"type": "array"}}},
	}}}}}
	withResumption := map[string]any{"sessionResumption": map[string]any{}}
	for k, v := range weather {
		withResumption[k] = v
	}
	spoken := concat(repeat("audio", 5), []string{"generationComplete", "turnComplete", "usageMetadata"})
	tests := []struct {
		name     string
		cfg      mockai.Config
		setup    map[string]any
		input    []any
		want     []string       // the first turn's messages
		wantCall string         // the function called ("" for speech)
		wantArgs map[string]any // its arguments
		after    []string       // the messages after the toolResponse
	}{
		{name: "the user's text names the function", setup: weather, input: []any{userText("Use get_weather for Paris.", true)},
			want: []string{"toolCall", "usageMetadata"}, wantCall: "get_weather",
			wantArgs: map[string]any{"city": "mock", "days": float64(1), "metric": true}, after: spoken},
		{name: "ToolCall calls on an audio turn", cfg: mockai.Config{Gemini: mockai.GeminiConfig{ToolCall: true}}, setup: weather, input: geminiSpeech(),
			want: []string{"toolCall", "usageMetadata"}, wantCall: "get_weather",
			wantArgs: map[string]any{"city": "mock", "days": float64(1), "metric": true}, after: spoken},
		{name: "a JSON schema's parameters", setup: jsonSchema, input: []any{userText("lookup something", true)},
			want: []string{"toolCall", "usageMetadata"}, wantCall: "lookup", wantArgs: map[string]any{"q": "mock", "n": float64(1), "tags": []any{}}, after: spoken},
		{name: "text that names no function speaks", setup: weather, input: []any{userText("Hello?", true)}, want: spoken},
		{name: "no functions declared, ToolCall speaks", cfg: mockai.Config{Gemini: mockai.GeminiConfig{ToolCall: true}}, input: []any{userText("get_weather", true)}, want: spoken},
		{name: "not resumable while the call is out", setup: withResumption, input: []any{userText("get_weather please", true)},
			want: []string{"toolCall", "usageMetadata", "sessionResumptionUpdate"}, wantCall: "get_weather",
			wantArgs: map[string]any{"city": "mock", "days": float64(1), "metric": true}, after: concat(spoken, []string{"sessionResumptionUpdate"})},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			srv := start(t, tc.cfg)
			g := openGemini(t, srv, tc.setup)
			for _, m := range tc.input {
				g.send(m)
			}
			evs := g.read(len(tc.want))
			if got := kinds(evs); !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("messages %v, want %v", got, tc.want)
			}
			if tc.wantCall == "" {
				return
			}
			calls, _ := evs[0].get("toolCall.functionCalls").([]any)
			if len(calls) != 1 {
				t.Fatalf("toolCall %v: want one call", evs[0])
			}
			call := event(calls[0].(map[string]any))
			if call.str("name") != tc.wantCall || call.str("id") == "" || !reflect.DeepEqual(call.get("args"), tc.wantArgs) {
				t.Fatalf("call %v, want %s with an id and args %v", call, tc.wantCall, tc.wantArgs)
			}
			if u := geminiUsage(evs[1]); u["responseTokensDetails.TEXT"] != 5 {
				t.Errorf("the call's usage %v: want 5 response text tokens", u)
			}
			if len(tc.want) == 3 { // the update while the call is out holds no handle
				if upd := evs[2]["sessionResumptionUpdate"].(map[string]any); len(upd) != 0 {
					t.Errorf("resumption update %v while a call is out: want neither handle nor resumable", upd)
				}
			}
			g.send(map[string]any{"toolResponse": map[string]any{"functionResponses": []any{map[string]any{
				"id": call.str("id"), "name": call.str("name"), "response": map[string]any{"output": "sunny"}}}}})
			if got := kinds(g.read(len(tc.after))); !reflect.DeepEqual(got, tc.after) {
				t.Fatalf("after the toolResponse %v, want %v", got, tc.after)
			}
			s := lastGemini(t, srv)
			if s.ToolCalls != 1 || !reflect.DeepEqual(s.FunctionResponses, []string{call.str("id")}) || s.Turns != 2 {
				t.Errorf("record %+v: want 1 tool call, its response, 2 turns", s)
			}
		})
	}
}

func TestGeminiInterruptions(t *testing.T) {
	// The turn sends its first audio chunk and then waits an hour for the
	// next: the interruption always lands mid-turn.
	cfg := mockai.Config{AudioDeltaInterval: time.Hour}
	interrupted := []string{"interrupted", "turnComplete", "usageMetadata"}
	tests := []struct {
		name  string
		setup map[string]any
		by    []any    // what the client sends mid-turn
		then  []string // what follows the first audio chunk
	}{
		{name: "speech", by: []any{audioIn(100, 16000, true)}, then: interrupted},
		{name: "clientContent", by: []any{userText("Wait.", false)}, then: interrupted},
		{name: "realtime text, which is a turn of its own", by: []any{map[string]any{"realtimeInput": map[string]any{"text": "Wait."}}},
			then: concat(interrupted, []string{"audio"})},
		{name: "activityStart with detection disabled",
			setup: map[string]any{"realtimeInputConfig": map[string]any{"automaticActivityDetection": map[string]any{"disabled": true}}},
			by:    []any{map[string]any{"realtimeInput": map[string]any{"activityStart": map[string]any{}}}}, then: interrupted},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			srv := start(t, cfg)
			g := openGemini(t, srv, tc.setup)
			g.send(userText("Talk to me.", true))
			g.expect("audio")
			for _, m := range tc.by {
				g.send(m)
			}
			evs := g.read(len(tc.then))
			if got := kinds(evs); !reflect.DeepEqual(got, tc.then) {
				t.Fatalf("messages %v, want %v", got, tc.then)
			}
			if u := geminiUsage(evs[2]); u["responseTokensDetails.AUDIO"] != 3 { // one 4,800-byte chunk
				t.Errorf("usage %v: want the one chunk sent (3 audio tokens)", u)
			}
			if s := lastGemini(t, srv); s.Interruptions != 1 {
				t.Errorf("record counts %d interruptions, want 1", s.Interruptions)
			}
		})
	}
}

func TestGeminiToolCallCancellation(t *testing.T) {
	srv := start(t, mockai.Config{Gemini: mockai.GeminiConfig{ToolCall: true}})
	g := openGemini(t, srv, map[string]any{"tools": []any{map[string]any{"functionDeclarations": []any{map[string]any{"name": "f"}}}}})
	g.send(userText("Hello?", true))
	call := g.expect("toolCall")
	g.expect("usageMetadata")
	id := call.get("toolCall.functionCalls").([]any)[0].(map[string]any)["id"]
	g.send(audioIn(100, 16000, true)) // the user speaks over the pending call
	cancel := g.expect("toolCallCancellation")
	if ids, _ := cancel.get("toolCallCancellation.ids").([]any); len(ids) != 1 || ids[0] != id {
		t.Fatalf("cancellation %v, want the call %v", cancel, id)
	}
	if s := lastGemini(t, srv); s.Cancellations != 1 {
		t.Errorf("record counts %d cancellations, want 1", s.Cancellations)
	}
}

func TestGeminiResumption(t *testing.T) {
	srv := start(t, mockai.Config{})
	resume := map[string]any{"sessionResumption": map[string]any{}}
	first := openGemini(t, srv, resume)
	first.send(userText("Hello?", true))
	evs := first.read(9) // 5 audio, generationComplete, turnComplete, usage, the update
	handle := evs[8].str("sessionResumptionUpdate.newHandle")
	if handle == "" {
		t.Fatalf("no handle in %v", evs[8])
	}
	firstID := lastGemini(t, srv).ID
	first.c.Close()
	for i := 0; i < 2; i++ { // a handle stays valid after use
		g := openGemini(t, srv, map[string]any{"sessionResumption": map[string]any{"handle": handle}})
		g.send(userText("Where were we?", true))
		g.read(9)
		if s := lastGemini(t, srv); s.ResumedFrom != firstID || !s.SessionResumption {
			t.Fatalf("resumed session %+v, want resumed from %s", s, firstID)
		}
		g.c.Close()
	}
}

func TestGeminiGoAway(t *testing.T) {
	tests := []struct {
		name     string
		timeLeft time.Duration
		want     string
	}{
		{name: "milliseconds", timeLeft: 50 * time.Millisecond, want: "0.050s"},
		{name: "the default second", want: "1s"},
		{name: "microseconds", timeLeft: 1001 * time.Microsecond, want: "0.001001s"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			srv := start(t, mockai.Config{Gemini: mockai.GeminiConfig{GoAwayAfter: time.Millisecond, GoAwayTimeLeft: tc.timeLeft}})
			g := openGemini(t, srv, nil)
			if got := g.expect("goAway").str("goAway.timeLeft"); got != tc.want {
				t.Fatalf("timeLeft %q, want %q", got, tc.want)
			}
			if code, reason := g.closed(); code != 1011 || reason != "Deadline expired before operation could complete." {
				t.Fatalf("closed %d %q after goAway", code, reason)
			}
			if s := lastGemini(t, srv); !s.GoAway || s.CloseCode != 1011 {
				t.Errorf("record %+v: want goAway and close 1011", s)
			}
		})
	}
}

// TestGeminiGoAwayResume is what a client that survives goAway does: it
// keeps the newest handle and resumes on a new connection when the old
// one closes.
func TestGeminiGoAwayResume(t *testing.T) {
	// Long enough for a loopback turn to finish first; the test only
	// needs the handle before the close, in whatever order the rest comes.
	srv := start(t, mockai.Config{Gemini: mockai.GeminiConfig{GoAwayAfter: 500 * time.Millisecond, GoAwayTimeLeft: 50 * time.Millisecond}})
	g := openGemini(t, srv, map[string]any{"sessionResumption": map[string]any{}})
	g.send(userText("Hello?", true))
	handle, goAway := "", false
	var closeErr *websocket.CloseError
	for i := 0; i < 100 && closeErr == nil; i++ {
		ev, err := g.tryNext()
		switch {
		case errors.As(err, &closeErr):
		case err != nil:
			t.Fatalf("read: %v", err)
		case gkind(ev) == "goAway":
			goAway = true
		case gkind(ev) == "sessionResumptionUpdate":
			handle = ev.str("sessionResumptionUpdate.newHandle")
		}
	}
	if closeErr == nil || closeErr.Code != 1011 || !goAway || handle == "" {
		t.Fatalf("close %v, goAway %v, handle %q: want a handle, goAway, then close 1011", closeErr, goAway, handle)
	}
	oldID := lastGemini(t, srv).ID
	next := openGemini(t, srv, map[string]any{"sessionResumption": map[string]any{"handle": handle}})
	next.send(userText("Still there?", true))
	next.expect("audio")
	if s := lastGemini(t, srv); s.ResumedFrom != oldID {
		t.Fatalf("new session %+v, want resumed from %s", s, oldID)
	}
}

func TestGeminiRecordsAndStats(t *testing.T) {
	srv := start(t, mockai.Config{})
	g := openGemini(t, srv, map[string]any{"systemInstruction": map[string]any{"parts": []any{map[string]any{"text": "Be brief."}}},
		"generationConfig": map[string]any{"responseModalities": []string{"AUDIO"},
			"speechConfig": map[string]any{"voiceConfig": map[string]any{"prebuiltVoiceConfig": map[string]any{"voiceName": "Kore"}}}},
		"contextWindowCompression": map[string]any{"slidingWindow": map[string]any{}}})
	for _, m := range geminiSpeech() {
		g.send(m)
	}
	g.read(8)
	g.send(map[string]any{"realtimeInput": map[string]any{"audioStreamEnd": true}})
	g.send(userText("And?", true))
	g.read(8)
	s := lastGemini(t, srv)
	wantMsgs := []string{"setup", "realtimeInput.audioStreamEnd", "clientContent"}
	if s.Voice != "Kore" || s.SystemInstruction != "Be brief." || !s.ContextWindowCompression || !s.AutomaticActivityDetect ||
		s.AudioChunks != 5 || s.AudioBytes != 16000 || s.AudioRate != 16000 || s.AudioMimeType != "audio/pcm;rate=16000" ||
		!reflect.DeepEqual(s.Messages, wantMsgs) || !reflect.DeepEqual(s.ResponseModalities, []string{"AUDIO"}) {
		t.Fatalf("session record %+v", s)
	}
	if st := srv.Stats(); st.AudioAppends != 5 || st.AudioBytes != 16000 || st.Sessions != 1 {
		t.Errorf("stats %+v: want 5 audio chunks of 16,000 bytes in all, 1 session", st)
	}
	var got []string
	for _, e := range srv.Received(s.ID) {
		got = append(got, e.Type)
	}
	if !reflect.DeepEqual(got, wantMsgs) {
		t.Errorf("received %v, want %v", got, wantMsgs)
	}
	if recs := srv.Records(); len(recs) != 1 || recs[0].SessionID != s.ID || recs[0].Key != "k" {
		t.Errorf("records %+v: want one, of session %s with key k", recs, s.ID)
	}
	for _, tc := range []struct {
		path   string
		status int
	}{{"/mock/gemini/sessions", 200}, {"/mock/gemini/sessions/" + s.ID, 200}, {"/mock/gemini/sessions/sess_nope", 404}} {
		resp, err := http.Get(srv.GeminiBaseURL() + tc.path)
		if err != nil {
			t.Fatal(err)
		}
		var body any
		err = json.NewDecoder(resp.Body).Decode(&body)
		resp.Body.Close()
		if resp.StatusCode != tc.status || err != nil || (tc.status == 200 && !strings.Contains(fmt.Sprint(body), s.ID)) {
			t.Errorf("GET %s: %d %v, want %d naming %s", tc.path, resp.StatusCode, body, tc.status, s.ID)
		}
	}
}

func TestGeminiConfigValidation(t *testing.T) {
	for _, cfg := range []mockai.GeminiConfig{{GoAwayAfter: -1}, {GoAwayTimeLeft: -time.Second}} {
		if _, err := mockai.Start(mockai.Config{Gemini: cfg}, "127.0.0.1:0"); !errors.Is(err, mockai.ErrConfig) {
			t.Errorf("Start with %+v: %v, want ErrConfig", cfg, err)
		}
	}
}

// TestGeminiNodeSDK drives mockai's Gemini Live dialect, run as a
// separate process over ws:// and wss://, with Google's @google/genai
// live client (ai.live.connect) unchanged: testdata/node/gemini.mjs. What
// the SDK parses, mockai must send: setupComplete, audio and text parts,
// transcriptions, turnComplete, usageMetadata (Vertex's names too),
// toolCall, resumption. CI runs npm ci in testdata/node (.ci/run);
// without @google/genai there the test runs npm ci itself.
func TestGeminiNodeSDK(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatal("node is not installed (apt-get install -y nodejs npm)")
	}
	dir := geminiNodeModules(t)
	bin := buildMockaiBinary(t)
	for _, upstream := range []proc.Upstream{proc.UpstreamPlain, proc.UpstreamTLS} {
		t.Run(string(upstream), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
			defer cancel()
			m, err := proc.StartMockai(ctx, bin, upstream, []string{"-key", "sk-gemini"}, t.TempDir(), 30*time.Second)
			if err != nil {
				t.Fatalf("starting mockai: %v", err)
			}
			t.Cleanup(func() { _ = m.Stop(5 * time.Second) })
			scheme := map[proc.Upstream]string{proc.UpstreamPlain: "http://", proc.UpstreamTLS: "https://"}[upstream]
			cmd := exec.CommandContext(ctx, node, "gemini.mjs")
			cmd.Dir = dir
			cmd.Env = append(os.Environ(), "MOCK_HTTP_BASE="+scheme+m.Addr, "MOCK_KEY=sk-gemini")
			if m.CAFile != "" {
				cmd.Env = append(cmd.Env, "NODE_EXTRA_CA_CERTS="+m.CAFile)
			}
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("node gemini.mjs: %v (%s)", err, out)
			}
			type usage struct {
				Prompt   int `json:"promptTokenCount"`
				Response int `json:"responseTokenCount"`
				Total    int `json:"totalTokenCount"`
				Details  []struct {
					Modality   string `json:"modality"`
					TokenCount int    `json:"tokenCount"`
				} `json:"responseTokensDetails"`
			}
			type turn struct {
				AudioParts         int    `json:"audio_parts"`
				AudioBytes         int    `json:"audio_bytes"`
				Mime               string `json:"mime"`
				Text               string `json:"text"`
				InputTranscript    string `json:"input_transcript"`
				OutputTranscript   string `json:"output_transcript"`
				GenerationComplete bool   `json:"generation_complete"`
				TurnComplete       bool   `json:"turn_complete"`
				Usage              usage  `json:"usage"`
			}
			var got struct {
				SetupComplete bool   `json:"setup_complete"`
				AudioTurn     turn   `json:"audio_turn"`
				Handle        string `json:"handle"`
				ToolCall      struct {
					IDSet bool           `json:"id_set"`
					Name  string         `json:"name"`
					Args  map[string]any `json:"args"`
					Count int            `json:"count"`
				} `json:"tool_call"`
				AfterTool            turn `json:"after_tool"`
				Close                int  `json:"close"`
				ResumedSetupComplete bool `json:"resumed_setup_complete"`
				SecondSetup          struct {
					Code   int    `json:"code"`
					Reason string `json:"reason"`
				} `json:"second_setup"`
				TextTurn            turn   `json:"text_turn"`
				VertexSetupComplete bool   `json:"vertex_setup_complete"`
				VertexTurn          turn   `json:"vertex_turn"`
				Error               string `json:"error"`
			}
			if err := json.Unmarshal(out, &got); err != nil {
				t.Fatalf("gemini.mjs printed %q: %v", out, err)
			}
			spoken := func(tr turn) bool {
				return tr.AudioParts == 5 && tr.AudioBytes == 24000 && tr.Mime == "audio/pcm;rate=24000" && tr.GenerationComplete &&
					tr.TurnComplete && tr.Usage.Response == 16 && tr.Usage.Total == tr.Usage.Prompt+16
			}
			switch {
			case got.Error != "":
				t.Fatalf("the SDK failed: %s", got.Error)
			case !got.SetupComplete || got.Handle == "":
				t.Fatalf("setup: %+v", got)
			case !spoken(got.AudioTurn) || got.AudioTurn.InputTranscript == "" || got.AudioTurn.OutputTranscript != "Hello from mockai." ||
				got.AudioTurn.Usage.Prompt != 26 || len(got.AudioTurn.Usage.Details) != 1 || got.AudioTurn.Usage.Details[0].Modality != "AUDIO":
				t.Fatalf("the audio turn: %+v", got.AudioTurn)
			case !got.ToolCall.IDSet || got.ToolCall.Name != "get_weather" || got.ToolCall.Count != 1 ||
				!reflect.DeepEqual(got.ToolCall.Args, map[string]any{"city": "mock", "days": float64(1)}):
				t.Fatalf("toolCall: %+v", got.ToolCall)
			case !spoken(got.AfterTool):
				t.Fatalf("after the toolResponse: %+v", got.AfterTool)
			case !got.ResumedSetupComplete || got.SecondSetup.Code != 1007 || got.SecondSetup.Reason != "Request contains an invalid argument.":
				t.Fatalf("resumption and a second setup: %+v, %+v", got.ResumedSetupComplete, got.SecondSetup)
			case got.TextTurn.Text != "Hello from mockai." || got.TextTurn.AudioParts != 0 || got.TextTurn.Usage.Response != 5:
				t.Fatalf("the text turn: %+v", got.TextTurn)
			case !got.VertexSetupComplete || !spoken(got.VertexTurn): // the SDK maps Vertex's candidatesTokenCount to responseTokenCount
				t.Fatalf("Vertex: %+v", got.VertexTurn)
			}
			sessions := geminiSessionsOver(t, ctx, m)
			want := []struct{ api, auth, version, model string }{
				{"gemini", "key", "v1", geminiModel},
				{"gemini", "key", "v1", geminiModel},
				{"gemini", "key", "v1", geminiModel},
				{"vertex", "bearer", "v1beta1", "projects/mock-project/locations/us-central1/publishers/google/models/gemini-live-2.5-flash"},
			}
			if len(sessions) != len(want) {
				t.Fatalf("%d gemini sessions, want %d: %+v", len(sessions), len(want), sessions)
			}
			for i, w := range want {
				s := sessions[i]
				if s.API != w.api || s.Auth != w.auth || s.Version != w.version || s.Model != w.model || !strings.HasPrefix(s.Path, "//ws/") {
					t.Errorf("session %d: %+v, want %+v dialed at //ws/...", i, s, w)
				}
			}
			if s := sessions[0]; s.Voice != "Kore" || s.SystemInstruction != "From the SDK." || !s.InputTranscription || !s.OutputTranscription ||
				!s.SessionResumption || !s.ContextWindowCompression || s.AudioRate != 16000 || s.AudioBytes != 19200 ||
				!reflect.DeepEqual(s.Functions, []string{"get_weather"}) {
				t.Errorf("the SDK's setup as mockai read it: %+v", s)
			}
			if sessions[1].ResumedFrom != sessions[0].ID {
				t.Errorf("the second session resumed from %q, want %q", sessions[1].ResumedFrom, sessions[0].ID)
			}
		})
	}
}

// geminiSessionsOver reads GET /mock/gemini/sessions from a mockai process.
func geminiSessionsOver(t *testing.T, ctx context.Context, m *proc.Mockai) []mockai.GeminiSession {
	t.Helper()
	scheme := "http"
	client := &http.Client{Timeout: 5 * time.Second}
	if cfg := m.TLSConfig(); cfg != nil {
		scheme = "https"
		client.Transport = &http.Transport{TLSClientConfig: cfg}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, scheme+"://"+m.Addr+"/mock/gemini/sessions", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("GET /mock/gemini/sessions: %v", err)
	}
	defer resp.Body.Close()
	var out []mockai.GeminiSession
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatalf("GET /mock/gemini/sessions: %v", err)
	}
	return out
}

// geminiNodeModules installs testdata/node's locked dependencies when
// @google/genai is missing from them.
func geminiNodeModules(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs(filepath.Join("testdata", "node"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "@google", "genai", "package.json")); err == nil {
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
