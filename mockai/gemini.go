package mockai

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/gorilla/websocket"
)

// Google's Gemini Live API (BidiGenerateContent), on AI Studio's paths and
// Vertex AI's, so that the gateway's translation of OpenAI Realtime to
// Gemini Live can be tested against an upstream that answers as Google's
// does. The package doc ("Gemini Live") lists what is served; every wire
// fact below names its source, and what no public source settles is
// marked "unverified". The session machinery (writes, faults, the close
// echo) is the OpenAI dialect's session; the protocol is this file's.

// GeminiConfig is the Gemini Live dialect's knobs (Config.Gemini). The
// zero value answers as Google usually does.
type GeminiConfig struct {
	// ToolCall makes every model turn that does not answer a toolResponse
	// a call of the first declared function (when setup declared any),
	// whatever the user said. Without it a turn calls a function only when
	// the user's text names it (see geminiSession.startTurn).
	ToolCall bool
	// UsageWithTurnComplete puts usageMetadata in the turnComplete message
	// ({"serverContent":{"turnComplete":true},"usageMetadata":{...}}), as
	// Google sometimes does. By default it comes in a message of its own
	// right after the turnComplete, between turns, as Google also does:
	// a relay must fold either into its response.done.
	UsageWithTurnComplete bool
	// GoAwayAfter, if set, sends goAway{timeLeft} this long after
	// setupComplete, then closes the connection when timeLeft has passed
	// (1011 "Deadline expired before operation could complete.", as a
	// Gemini connection at its cap ended in kizuna-ai-lab/sokuji#179),
	// whatever is in progress: what Google does at a connection's ~10
	// minute cap (ai.google.dev/gemini-api/docs/live-session), so a test
	// can prove a client resumes on a new connection.
	GoAwayAfter time.Duration
	// GoAwayTimeLeft is the timeLeft goAway announces and waits (0: 1s).
	GoAwayTimeLeft time.Duration
}

func (g GeminiConfig) validate() error {
	if g.GoAwayAfter < 0 || g.GoAwayTimeLeft < 0 {
		return errors.New("gemini go-away after and time left must not be negative")
	}
	return nil
}

const (
	// geminiOutputMime is the audio Gemini Live answers with: PCM16 at
	// 24 kHz (ai.google.dev/gemini-api/docs/live-guide, "Audio formats").
	geminiOutputMime = "audio/pcm;rate=24000"
	// geminiDefaultInputRate is the input rate when a chunk's mimeType
	// names none: Live API input audio is natively 16 kHz (same source).
	geminiDefaultInputRate = 16000
	// geminiTokensPerSecond: "Gemini represents each second of audio as 32
	// tokens" (ai.google.dev/gemini-api/docs/audio).
	geminiTokensPerSecond = 32
	// geminiOutputBytesPerToken is 24 kHz PCM16 (48,000 bytes/s) at 32
	// tokens per second.
	geminiOutputBytesPerToken = 48000 / geminiTokensPerSecond
	// geminiInputTranscript is what every inputTranscription says.
	geminiInputTranscript = "Hello from the caller."
	// geminiDefaultSilenceMs ends a user turn after this much silence
	// when setup does not say (Google documents no default; mockai's
	// OpenAI server VAD uses the same).
	geminiDefaultSilenceMs = 200
	// maxCloseReason is the most a close frame's reason can hold (125
	// bytes of payload less the 2-byte code, RFC 6455 5.5).
	maxCloseReason = 123
	// maxGeminiHandles bounds the resumption handles a server remembers.
	maxGeminiHandles = 10000
	// maxGeminiMessages bounds the message kinds a session record keeps.
	maxGeminiMessages = 1000
	// maxGeminiSetup bounds the setup a session record keeps verbatim.
	maxGeminiSetup = 64 << 10
	// geminiDefaultGoAwayTimeLeft is GeminiConfig.GoAwayTimeLeft's default.
	geminiDefaultGoAwayTimeLeft = time.Second
)

// Close reasons Google is seen to send. The codes follow Google's
// mapping of RPC status to WebSocket close codes as seen in public
// reports: INVALID_ARGUMENT 1007, PERMISSION_DENIED and NOT_FOUND 1008,
// INTERNAL and DEADLINE_EXCEEDED 1011.
const (
	// A second setup, and other requests Google refuses: "a second setup
	// closes the socket with 1007 Request contains an invalid argument."
	// (BerriAI/litellm#31494; the reason text also in
	// google-gemini/cookbook#781). For anything but setup first the reason
	// is unverified (no public report); mockai sends the same.
	reasonInvalidArgument = "Request contains an invalid argument."
	// No key at all: the reason a client reported on
	// discuss.ai.google.dev/t/116522; the code (1008) is unverified.
	reasonNoKey = "Method doesn't allow unregistered callers (callers without established identity)."
	// A key Google does not know (Config.Key set, another key presented):
	// the same thread's other reason, with 1007 (an expired key closes
	// 1007 in yagudaev/voiceclaw#155).
	reasonBadKey = "API key not valid. Please pass a valid API key."
	// A Vertex bearer token that is not Config.Key: Google's usual
	// UNAUTHENTICATED message; the close code (1008) is unverified.
	reasonBadToken = "Request had invalid authentication credentials."
	// A resumption handle the server does not know: yeyu2/Youtube_demos#5
	// (1008, a stale stored handle).
	reasonNoSession = "BidiGenerateContent session not found"
	// The goAway's end (kizuna-ai-lab/sokuji#179: goAway timeLeft 50s,
	// then 1011 with this reason).
	reasonDeadline = "Deadline expired before operation could complete."
)

// geminiAPI is the route a session came in on.
type geminiAPI struct {
	vertex  bool   // Vertex AI's LlmBidiService, else AI Studio's GenerativeService
	version string // v1, v1beta, v1alpha; Vertex: v1, v1beta1
}

func (a geminiAPI) dialect() string {
	if a.vertex {
		return "vertex"
	}
	return "gemini"
}

// geminiPath is where @google/genai dials (its live.ts: Live.connect):
// /ws/google.ai.generativelanguage.<version>.GenerativeService.BidiGenerateContent
// on AI Studio, /ws/google.cloud.aiplatform.<version>.LlmBidiService/BidiGenerateContent
// on Vertex AI. @google/genai 3.x dials v1 (GOOGLE_AI_API_DEFAULT_VERSION)
// and v1beta1 on Vertex; Google's docs show v1beta, and v1alpha for
// ephemeral tokens.
func (a geminiAPI) path() string {
	if a.vertex {
		return "/ws/google.cloud.aiplatform." + a.version + ".LlmBidiService/BidiGenerateContent"
	}
	return "/ws/google.ai.generativelanguage." + a.version + ".GenerativeService.BidiGenerateContent"
}

// credential is the key or token a request presents and how: on AI
// Studio the key query parameter (what @google/genai sends) or the
// x-goog-api-key header (google-genai for Python); on Vertex AI also an
// OAuth bearer token (the SDK's google-auth-library headers), which comes
// first.
func (a geminiAPI) credential(r *http.Request) (key, auth string) {
	if a.vertex {
		if h := r.Header.Get("Authorization"); len(h) > 7 && strings.EqualFold(h[:7], "bearer ") {
			return strings.TrimSpace(h[7:]), "bearer"
		}
	}
	if k := r.URL.Query().Get("key"); k != "" {
		return k, "key"
	}
	if k := r.Header.Get("x-goog-api-key"); k != "" {
		return k, "x-goog-api-key"
	}
	return "", ""
}

// GeminiBaseURL is what @google/genai takes as httpOptions.baseUrl, and a
// gateway deployment of Gemini or Vertex as its api_base:
// "http://127.0.0.1:port" ("https://..." with TLS). The sockets are at
// ws(s)://127.0.0.1:port/ws/google.ai.generativelanguage.{v1,v1beta,v1alpha}.GenerativeService.BidiGenerateContent
// and /ws/google.cloud.aiplatform.{v1,v1beta1}.LlmBidiService/BidiGenerateContent.
func (s *Server) GeminiBaseURL() string {
	scheme := "http"
	if s.cfg.TLS {
		scheme = "https"
	}
	return scheme + "://" + s.Addr()
}

func (s *Server) mountGemini(mux *http.ServeMux) {
	for _, v := range []string{"v1", "v1beta", "v1alpha"} {
		a := geminiAPI{version: v}
		mux.HandleFunc(a.path(), s.handleGemini(a))
	}
	for _, v := range []string{"v1", "v1beta1"} {
		a := geminiAPI{vertex: true, version: v}
		mux.HandleFunc(a.path(), s.handleGemini(a))
	}
	mux.HandleFunc("GET /mock/gemini/sessions", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, s.GeminiSessions())
	})
	mux.HandleFunc("GET /mock/gemini/sessions/{id}", func(w http.ResponseWriter, r *http.Request) {
		gs, ok := s.GeminiSession(r.PathValue("id"))
		if !ok {
			writeHTTPError(w, http.StatusNotFound, "invalid_request_error", "not_found", "no gemini session "+r.PathValue("id"))
			return
		}
		writeJSON(w, http.StatusOK, gs)
	})
}

// geminiPaths lets @google/genai's socket URLs through. The SDK builds
// them as `${websocketBaseUrl}/ws/...` where websocketBaseUrl is a URL's
// toString, which ends in "/" for a bare origin, so it dials
// "//ws/google.ai...": Google accepts that, and Go's ServeMux would
// answer it with a redirect that no WebSocket client follows.
func geminiPaths(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "//ws/google.") {
			r2 := new(http.Request)
			*r2 = *r
			u := *r.URL
			u.Path = strings.TrimLeft(r.URL.Path, "/")
			u.Path = "/" + u.Path
			u.RawPath = ""
			r2.URL = &u
			r = r2
		}
		h.ServeHTTP(w, r)
	})
}

// GeminiSession is what mockai saw of one Gemini Live connection: its
// route and credential, its setup, what the client sent after it, and
// what mockai did. [Server.GeminiSessions] and GET /mock/gemini/sessions
// list them (the newest 10,000); the client messages themselves (but
// audio chunks) are at GET /mock/sessions/{id}/received. The credential
// itself is in the session's Record (Server.Records), not here.
type GeminiSession struct {
	ID      string `json:"id"`      // sess_...: also the Record's SessionID once setup completes
	API     string `json:"api"`     // "gemini" (AI Studio) or "vertex"
	Version string `json:"version"` // v1, v1beta, v1alpha; Vertex: v1, v1beta1
	// Path is the request's path as dialed ("//ws/..." from @google/genai).
	Path string `json:"path"`
	// Auth is how the client authenticated: "key" (query), "x-goog-api-key"
	// (header) or "bearer" (Vertex); "" when it presented nothing.
	Auth string    `json:"auth"`
	At   time.Time `json:"at"`

	// From setup.
	Setup                    json.RawMessage `json:"setup,omitempty"` // as it arrived (up to 64 KiB)
	Model                    string          `json:"model,omitempty"`
	ResponseModalities       []string        `json:"response_modalities,omitempty"`
	Voice                    string          `json:"voice,omitempty"`
	SystemInstruction        string          `json:"system_instruction,omitempty"`
	Functions                []string        `json:"functions,omitempty"` // declared function names
	InputTranscription       bool            `json:"input_transcription"`
	OutputTranscription      bool            `json:"output_transcription"`
	AutomaticActivityDetect  bool            `json:"automatic_activity_detection"`
	SessionResumption        bool            `json:"session_resumption"`
	ContextWindowCompression bool            `json:"context_window_compression"`
	// ResumedFrom is the session the setup's resumption handle was issued
	// to ("" for a new session).
	ResumedFrom string `json:"resumed_from,omitempty"`

	// What the client sent after setup.
	AudioChunks   int64  `json:"audio_chunks"`
	AudioBytes    int64  `json:"audio_bytes"` // decoded PCM
	AudioMimeType string `json:"audio_mime_type,omitempty"`
	AudioRate     int    `json:"audio_rate,omitempty"` // from the last chunk's mimeType
	// Messages are the client's messages in order, audio chunks left out:
	// "setup", "clientContent", "toolResponse", "realtimeInput.text",
	// "realtimeInput.audioStreamEnd", "realtimeInput.activityStart", ...
	Messages          []string `json:"messages"`
	FunctionResponses []string `json:"function_responses,omitempty"` // ids answered

	// What mockai did.
	Turns         int    `json:"turns"`          // model turns started
	ToolCalls     int    `json:"tool_calls"`     // toolCall messages sent
	Interruptions int    `json:"interruptions"`  // serverContent.interrupted sent
	Cancellations int    `json:"cancellations"`  // toolCallCancellation sent
	LastHandle    string `json:"last_handle"`    // the newest sessionResumptionUpdate handle
	GoAway        bool   `json:"go_away"`        // goAway sent
	CloseCode     int    `json:"close_code"`     // the close mockai sent (0: none)
	CloseReason   string `json:"close_reason"`   // its reason
	SetupComplete bool   `json:"setup_complete"` // setupComplete sent
}

// geminiRecord is one GeminiSession, updated while the session runs.
type geminiRecord struct {
	mu sync.Mutex
	s  GeminiSession
}

func (r *geminiRecord) update(f func(*GeminiSession)) {
	r.mu.Lock()
	f(&r.s)
	r.mu.Unlock()
}

func (r *geminiRecord) note(kind string) {
	r.update(func(g *GeminiSession) {
		if len(g.Messages) < maxGeminiMessages {
			g.Messages = append(g.Messages, kind)
		}
	})
}

func (r *geminiRecord) snapshot() GeminiSession {
	r.mu.Lock()
	defer r.mu.Unlock()
	g := r.s
	g.Setup = append(json.RawMessage(nil), r.s.Setup...)
	g.ResponseModalities = append([]string(nil), r.s.ResponseModalities...)
	g.Functions = append([]string(nil), r.s.Functions...)
	g.Messages = append([]string{}, r.s.Messages...)
	g.FunctionResponses = append([]string(nil), r.s.FunctionResponses...)
	return g
}

// geminiState is the server's Gemini side: the session records and the
// resumption handles issued.
type geminiState struct {
	mu       sync.Mutex
	sessions []*geminiRecord // oldest first, at most maxRecords
	handles  map[string]string
	order    []string // handles, oldest first, so the map stays bounded

	audioOnce sync.Once
	audioMsg  []byte // the model-turn audio message: the same every time
}

func (g *geminiState) add(r *geminiRecord) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.sessions) >= maxRecords {
		g.sessions = g.sessions[1:]
	}
	g.sessions = append(g.sessions, r)
}

// issue remembers a new resumption handle for session id and returns it.
func (g *geminiState) issue(id string) string {
	h := newID("mockai-resume-")
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.handles == nil {
		g.handles = make(map[string]string)
	}
	if len(g.order) >= maxGeminiHandles {
		delete(g.handles, g.order[0])
		g.order = g.order[1:]
	}
	g.handles[h] = id
	g.order = append(g.order, h)
	return h
}

// resume is the session a handle was issued to ("" if none). Handles stay
// valid after use: Google keeps them for two hours
// (ai.google.dev/gemini-api/docs/live-session).
func (g *geminiState) resume(h string) string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.handles[h]
}

// audioMessage is the serverContent every model-turn audio chunk is, with
// the payload every mockai audio delta carries (PCMPattern).
func (g *geminiState) audioMessage(b64 string) []byte {
	g.audioOnce.Do(func() {
		g.audioMsg, _ = json.Marshal(map[string]any{"serverContent": map[string]any{"modelTurn": map[string]any{
			"parts": []any{map[string]any{"inlineData": map[string]any{"mimeType": geminiOutputMime, "data": b64}}}}}})
	})
	return g.audioMsg
}

// GeminiSessions returns the Gemini Live sessions (the newest 10,000),
// oldest first.
func (s *Server) GeminiSessions() []GeminiSession {
	s.gemini.mu.Lock()
	recs := append([]*geminiRecord(nil), s.gemini.sessions...)
	s.gemini.mu.Unlock()
	out := make([]GeminiSession, 0, len(recs))
	for _, r := range recs {
		out = append(out, r.snapshot())
	}
	return out
}

// GeminiSession returns what mockai saw of the Gemini Live session id
// (sess_...); false if it has no such session.
func (s *Server) GeminiSession(id string) (GeminiSession, bool) {
	s.gemini.mu.Lock()
	defer s.gemini.mu.Unlock()
	for _, r := range s.gemini.sessions {
		if r.s.ID == id { // ID is set before the record is added, never changed
			return r.snapshot(), true
		}
	}
	return GeminiSession{}, false
}

// handleGemini answers an upgrade on a Gemini Live route: the knobs every
// route shares (admit: StatusCode, FaultsFromQuery, Config.Key with
// RejectStatus; UpgradeDelay), then the session. Google
// completes the upgrade and then refuses a bad credential with a close
// frame (discuss.ai.google.dev/t/116522: the socket "closes immediately"
// with the reason), so mockai does too, unless RejectStatus asks for an
// HTTP refusal.
func (s *Server) handleGemini(api geminiAPI) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !s.enter() {
			writeHTTPError(w, http.StatusServiceUnavailable, "server_error", "shutting_down", "the server is shutting down")
			return
		}
		defer s.wg.Done()
		rec := newRecord(r)
		rec.Dialect = api.dialect()
		rec.Key, rec.Auth = api.credential(r)
		s.addRecord(rec)
		cfg, badKey, ok := s.admit(w, r, rec, nil)
		if !ok {
			return
		}
		dialed, _, _ := strings.Cut(r.RequestURI, "?")
		ws, held, ok := s.upgradeConn(w, r)
		if !ok {
			return
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			defer func() {
				ws.Close()
				s.removeConn(ws)
				s.active.Add(-1)
			}()
			// Config.OneSegment does not apply: it holds the 101 for the
			// server's first frame, and a Gemini server says nothing before
			// the client's setup, which waits for the 101.
			if held != nil && held.release() != nil {
				return
			}
			sess := newSession(s, ws, "")
			sess.cfg = cfg
			defer sess.end()
			g := &geminiSession{session: sess, api: api, rec: &geminiRecord{s: GeminiSession{
				ID: sess.id, API: api.dialect(), Version: api.version, Path: dialed, Auth: rec.Auth, At: time.Now(), Messages: []string{},
			}}}
			s.gemini.add(g.rec)
			switch {
			case rec.Auth == "":
				s.rejected.Add(1)
				g.closeWith(websocket.ClosePolicyViolation, reasonNoKey)
			case badKey && rec.Auth == "bearer":
				s.rejected.Add(1)
				g.closeWith(websocket.ClosePolicyViolation, reasonBadToken)
			case badKey:
				s.rejected.Add(1)
				g.closeWith(websocket.CloseInvalidFramePayloadData, reasonBadKey)
			default:
				g.run(rec)
			}
		}()
	}
}

// geminiSession is one Gemini Live connection. The handler goroutine
// reads the client's messages in order; a model turn streams from a
// goroutine of its own (stream), as the OpenAI dialect's responses do.
type geminiSession struct {
	*session
	api geminiAPI
	rec *geminiRecord

	// Used only by the handler goroutine.
	setup     *geminiSetup // nil until setup arrived
	turnAudio int64        // audio bytes since the last model turn started
	rate      int          // the last audio chunk's sample rate
	speaking  bool         // automatic activity detection heard speech
	silence   int64        // bytes of silence since, while speaking
	activity  bool         // between activityStart and activityEnd
	userText  string       // text since the last model turn started

	mu      sync.Mutex
	active  *geminiTurn // the model turn streaming, nil when none
	pending []string    // function call ids sent and not yet answered
}

// geminiTurn is one model turn being streamed.
type geminiTurn struct {
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{} // closed when stream returns
	// interrupted: a client message interrupted it; guarded by geminiSession.mu.
	interrupted bool

	audioIn    int64 // the user's audio it answers (bytes) and its rate
	rate       int
	transcribe bool            // send inputTranscription (enabled, and audio came)
	call       *geminiFunction // a function call instead of speech
}

// geminiSetup is what mockai reads of a setup message.
type geminiSetup struct {
	model         string
	text          bool // responseModalities ["TEXT"]: text parts, no audio
	voice         string
	instruction   string
	functions     []geminiFunction
	inTranscribe  bool
	outTranscribe bool
	autoActivity  bool
	silenceMs     int64
	resumption    bool
	handle        string
	compression   bool
	modalities    []string
}

// geminiFunction is a declared function and the arguments mockai calls it
// with: a fixed value per declared property, by type ("mock", 1, true,
// [], {}), so a relay's argument translation is visible.
type geminiFunction struct {
	name string
	args map[string]any
}

// run answers the client until the connection ends. The first message
// must be setup; nothing is sent before it.
func (g *geminiSession) run(rec *Record) {
	if g.cfg.StopReading {
		g.stall()
		return
	}
	for {
		_, data, err := g.ws.ReadMessage()
		if err != nil {
			g.srv.log.Debug("gemini session closed", "session", g.id, "err", err)
			return
		}
		g.srv.framesIn.Add(1)
		if !g.handle(data, rec) {
			return
		}
	}
}

// closeWith sends a close frame with code and reason (clipped to what a
// close frame holds), records it, and waits for the client's answer.
func (g *geminiSession) closeWith(code int, reason string) {
	g.sendClose(code, reason)
	for { // the client's close answer, or the close deadline
		if _, _, err := g.ws.ReadMessage(); err != nil {
			return
		}
	}
}

// sendClose sends a close frame with code and reason unless the session
// has already stopped sending, and records it.
func (g *geminiSession) sendClose(code int, reason string) {
	reason = clipReason(reason)
	g.wmu.Lock()
	defer g.wmu.Unlock()
	if !g.stopped { // recorded first, so a client that saw the close finds it
		g.rec.update(func(r *GeminiSession) { r.CloseCode, r.CloseReason = code, reason })
	}
	g.writeClose(code, reason)
}

// clipReason cuts reason to maxCloseReason bytes at a rune boundary.
func clipReason(reason string) string {
	if len(reason) <= maxCloseReason {
		return reason
	}
	cut := maxCloseReason
	for cut > 0 && !utf8.RuneStart(reason[cut]) {
		cut--
	}
	return reason[:cut]
}

// sendMsg writes v as one binary frame holding JSON: Google sends every
// server message so (setupComplete arrives as opcode 2, ai-shifu/ai-shifu#2760;
// @google/genai decodes Blob and ArrayBuffer data for it).
func (g *geminiSession) sendMsg(v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode gemini message: %w", err)
	}
	return g.write(websocket.BinaryMessage, data)
}

// The client messages (BidiGenerateContentClientMessage; ai.google.dev/api/live)
// and the fields mockai knows in each. Google parses them as protobuf
// JSON, which takes a field's lowerCamelCase or its proto (snake_case)
// name and refuses unknown names, so mockai compares names in camelCase.
var (
	geminiMessageKinds = []string{"setup", "clientContent", "realtimeInput", "toolResponse", "contextUpdate"}
	// Setup's fields: @google/genai 3.3.0's liveConnectConfigToMldev and
	// ToVertex (what it can send), ai.google.dev/api/live, and toolConfig.
	geminiSetupFields = []string{"model", "generationConfig", "systemInstruction", "tools", "toolConfig",
		"realtimeInputConfig", "sessionResumption", "contextWindowCompression", "inputAudioTranscription",
		"outputAudioTranscription", "proactivity", "explicitVadSignal", "avatarConfig", "labels", "safetySettings"}
	geminiRealtimeFields = []string{"mediaChunks", "audio", "audioStreamEnd", "video", "text", "activityStart", "activityEnd"}
	geminiContentFields  = []string{"turns", "turnComplete"}
	geminiToolRespFields = []string{"functionResponses"}
)

// geminiProtoNames are the proto names of the messages, for Google's
// error text ("at 'realtime_input'").
var geminiProtoNames = map[string]string{"setup": "setup", "clientContent": "client_content",
	"realtimeInput": "realtime_input", "toolResponse": "tool_response"}

// handle answers one client message; false means the session is over
// (mockai closed it).
func (g *geminiSession) handle(data []byte, rec *Record) bool {
	// Text and binary frames alike: @google/genai sends text; Google
	// reads JSON from either (unverified for binary).
	msg := camelFields(data)
	if msg == nil { // Google's words for this are unverified
		g.closeWith(websocket.CloseInvalidFramePayloadData, "Invalid JSON payload received. Expected an object.")
		return false
	}
	if k := unknownName(data, geminiMessageKinds); k != "" {
		g.closeWith(websocket.CloseInvalidFramePayloadData, fmt.Sprintf("Invalid JSON payload received. Unknown name %q: Cannot find field.", k))
		return false
	}
	kind := ""
	for k := range msg {
		if kind != "" { // a oneof: one message kind per client message
			g.closeWith(websocket.CloseInvalidFramePayloadData, reasonInvalidArgument)
			return false
		}
		kind = k
	}
	if kind == "" || (g.setup == nil) != (kind == "setup") { // nothing, something before setup, or a second setup
		g.note(kind, data)
		g.closeWith(websocket.CloseInvalidFramePayloadData, reasonInvalidArgument)
		return false
	}
	if kind != "realtimeInput" { // realtimeInput notes each of its parts (but audio)
		g.note(kind, data)
	}
	switch kind {
	case "setup":
		return g.onSetup(msg["setup"], rec)
	case "clientContent":
		return g.onClientContent(msg["clientContent"])
	case "realtimeInput":
		return g.onRealtimeInput(msg["realtimeInput"], data)
	case "toolResponse":
		return g.onToolResponse(msg["toolResponse"])
	}
	return true // contextUpdate: recorded, nothing to answer
}

// note records a client message of kind (its JSON to Server.Received).
func (g *geminiSession) note(kind string, data []byte) {
	if kind == "" {
		kind = "(empty)"
	}
	g.rec.note(kind)
	g.srv.noteEvent(g.session, kind, data)
}

// unknownField closes the session as Google refuses an unknown field of a
// message (raw, the object at at), true if it did.
func (g *geminiSession) unknownField(raw json.RawMessage, known []string, at string) bool {
	k := unknownName(raw, known)
	if k == "" {
		return false
	}
	g.closeWith(websocket.CloseInvalidFramePayloadData,
		fmt.Sprintf("Invalid JSON payload received. Unknown name %q at '%s': Cannot find field.", k, at))
	return true
}

// unknownName is the first field of the object raw (in the client's
// order, as Google names the first) that is not in known by its
// lowerCamelCase name, as the client wrote it; "" if there is none.
func unknownName(raw []byte, known []string) string {
	dec := json.NewDecoder(bytes.NewReader(raw))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return ""
	}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return ""
		}
		if k, _ := tok.(string); !contains(known, lowerCamel(k)) {
			return k
		}
		var skip json.RawMessage
		if dec.Decode(&skip) != nil {
			return ""
		}
	}
	return ""
}

// onSetup reads the setup, records it and answers setupComplete (after
// Config.SessionDelay), or closes as Google refuses it.
func (g *geminiSession) onSetup(raw json.RawMessage, rec *Record) bool {
	fields := camelFields(raw)
	if fields == nil {
		g.closeWith(websocket.CloseInvalidFramePayloadData, reasonInvalidArgument)
		return false
	}
	if g.unknownField(raw, geminiSetupFields, "setup") {
		return false
	}
	st, reason := parseGeminiSetup(fields, g.api)
	if reason != "" {
		g.closeWith(websocket.CloseInvalidFramePayloadData, reason)
		return false
	}
	resumed := ""
	if st.handle != "" {
		if resumed = g.srv.gemini.resume(st.handle); resumed == "" {
			g.closeWith(websocket.ClosePolicyViolation, reasonNoSession)
			return false
		}
	}
	g.setup = st
	g.rate = geminiDefaultInputRate
	fnames := make([]string, 0, len(st.functions))
	for _, f := range st.functions {
		fnames = append(fnames, f.name)
	}
	g.rec.update(func(r *GeminiSession) {
		if len(raw) <= maxGeminiSetup {
			r.Setup = append(json.RawMessage(nil), raw...)
		}
		r.Model, r.ResponseModalities, r.Voice, r.SystemInstruction = st.model, st.modalities, st.voice, st.instruction
		r.Functions, r.InputTranscription, r.OutputTranscription = fnames, st.inTranscribe, st.outTranscribe
		r.AutomaticActivityDetect, r.SessionResumption, r.ContextWindowCompression = st.autoActivity, st.resumption, st.compression
		r.ResumedFrom = resumed
	})
	if !g.srv.sleep(g.ctx, g.cfg.SessionDelay) {
		return false
	}
	g.model = st.model
	g.srv.sessions.Add(1)
	g.srv.setRecordSession(rec, g.id)
	// setupComplete is {} (sessionId and voiceConsentSignature are
	// optional in @google/genai's LiveServerSetupComplete).
	// Records are updated before the message that tells the client, so
	// a client that saw it finds it recorded.
	g.rec.update(func(r *GeminiSession) { r.SetupComplete = true })
	if g.sendMsg(map[string]any{"setupComplete": map[string]any{}}) != nil {
		return false
	}
	g.srv.log.Debug("gemini session opened", "session", g.id, "api", g.api.dialect(), "model", st.model)
	g.startGoAway()
	return true
}

// parseGeminiSetup reads setup's fields; reason says why Google would
// refuse it ("" if not).
func parseGeminiSetup(f map[string]json.RawMessage, api geminiAPI) (*geminiSetup, string) {
	st := &geminiSetup{autoActivity: true, silenceMs: geminiDefaultSilenceMs}
	_ = json.Unmarshal(f["model"], &st.model)
	// A model resource: models/... on AI Studio (@google/genai's tModel
	// adds the prefix), projects/.../models/... or publishers/.../models/...
	// on Vertex. What Google says of another is unverified.
	switch {
	case st.model == "":
		return nil, reasonInvalidArgument
	case api.vertex && !strings.HasPrefix(st.model, "models/") && !strings.Contains(st.model, "/models/"):
		return nil, reasonInvalidArgument
	case !api.vertex && !strings.HasPrefix(st.model, "models/") && !strings.HasPrefix(st.model, "tunedModels/"):
		return nil, reasonInvalidArgument
	}
	gc := camelFields(f["generationConfig"])
	if raw, ok := gc["responseModalities"]; ok {
		if err := json.Unmarshal(raw, &st.modalities); err != nil {
			return nil, reasonInvalidArgument
		}
		for i, m := range st.modalities {
			// Protobuf JSON enum names are case-sensitive: "audio" is refused.
			if m != "AUDIO" && m != "TEXT" && m != "IMAGE" && m != "MODALITY_UNSPECIFIED" {
				return nil, fmt.Sprintf("Invalid value at 'setup.generation_config.response_modalities[%d]' (type.googleapis.com/google.ai.generativelanguage.%s.GenerationConfig.Modality), %q", i, api.version, m)
			}
		}
		st.text = contains(st.modalities, "TEXT") && !contains(st.modalities, "AUDIO")
	}
	pv := camelFields(camelFields(camelFields(gc["speechConfig"])["voiceConfig"])["prebuiltVoiceConfig"])
	_ = json.Unmarshal(pv["voiceName"], &st.voice)
	st.instruction = contentText(f["systemInstruction"])
	var tools []json.RawMessage
	_ = json.Unmarshal(f["tools"], &tools)
	for _, t := range tools {
		var decls []json.RawMessage
		_ = json.Unmarshal(camelFields(t)["functionDeclarations"], &decls)
		for _, d := range decls {
			df := camelFields(d)
			var fn geminiFunction
			_ = json.Unmarshal(df["name"], &fn.name)
			if fn.name == "" {
				return nil, reasonInvalidArgument
			}
			params := df["parameters"]
			if params == nil {
				params = df["parametersJsonSchema"]
			}
			fn.args = mockArgs(params)
			st.functions = append(st.functions, fn)
		}
	}
	st.inTranscribe = present(f["inputAudioTranscription"])
	st.outTranscribe = present(f["outputAudioTranscription"])
	aad := camelFields(camelFields(f["realtimeInputConfig"])["automaticActivityDetection"])
	var disabled bool
	_ = json.Unmarshal(aad["disabled"], &disabled)
	st.autoActivity = !disabled
	var silence int64
	if json.Unmarshal(aad["silenceDurationMs"], &silence) == nil && silence > 0 {
		st.silenceMs = silence
	}
	st.resumption = present(f["sessionResumption"])
	_ = json.Unmarshal(camelFields(f["sessionResumption"])["handle"], &st.handle)
	st.compression = present(f["contextWindowCompression"])
	return st, ""
}

// mockArgs is a call's arguments for a declared parameters schema (a
// Gemini Schema or a JSON schema): each property gets a value of its type.
func mockArgs(params json.RawMessage) map[string]any {
	args := map[string]any{}
	props := map[string]json.RawMessage{}
	_ = json.Unmarshal(camelFields(params)["properties"], &props)
	for name, p := range props {
		var typ string
		_ = json.Unmarshal(camelFields(p)["type"], &typ)
		switch strings.ToLower(typ) {
		case "integer", "number":
			args[name] = 1
		case "boolean":
			args[name] = true
		case "array":
			args[name] = []any{}
		case "object":
			args[name] = map[string]any{}
		default:
			args[name] = "mock"
		}
	}
	return args
}

// contentText is the text of a Content ({parts:[{text}]}), or of a plain
// string (what Google's setup reference shows for systemInstruction).
func contentText(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var parts []json.RawMessage
	_ = json.Unmarshal(camelFields(raw)["parts"], &parts)
	var b strings.Builder
	for _, p := range parts {
		var t string
		if json.Unmarshal(camelFields(p)["text"], &t) == nil {
			b.WriteString(t)
		}
	}
	return b.String()
}

// onClientContent appends the turns' text and, with turnComplete, starts
// a model turn. Any clientContent interrupts the model turn in progress:
// "A message here will interrupt any current model generation."
// (BidiGenerateContentClientContent in google.ai.generativelanguage.v1beta).
func (g *geminiSession) onClientContent(raw json.RawMessage) bool {
	f := camelFields(raw)
	if f == nil {
		g.closeWith(websocket.CloseInvalidFramePayloadData, reasonInvalidArgument)
		return false
	}
	if g.unknownField(raw, geminiContentFields, geminiProtoNames["clientContent"]) {
		return false
	}
	g.interrupt()
	var turns []json.RawMessage
	_ = json.Unmarshal(f["turns"], &turns)
	for _, t := range turns {
		g.userText += contentText(t)
	}
	var complete bool
	_ = json.Unmarshal(f["turnComplete"], &complete)
	if complete {
		g.startTurn(false)
	}
	return true
}

// onRealtimeInput counts audio and follows the user's activity: with
// automatic activity detection (the default), loud audio is speech (it
// interrupts the model), and silence after it, or audioStreamEnd after
// speech, ends the user's turn; with it disabled, activityStart
// interrupts and activityEnd ends the turn. Text is a user turn at once
// (with automatic detection) or joins the activity's turn.
func (g *geminiSession) onRealtimeInput(raw json.RawMessage, data []byte) bool {
	f := camelFields(raw)
	if f == nil {
		g.closeWith(websocket.CloseInvalidFramePayloadData, reasonInvalidArgument)
		return false
	}
	if g.unknownField(raw, geminiRealtimeFields, geminiProtoNames["realtimeInput"]) {
		return false
	}
	if a, ok := f["audio"]; ok && !g.audioChunk(a) {
		return false
	}
	var chunks []json.RawMessage
	_ = json.Unmarshal(f["mediaChunks"], &chunks) // the deprecated form
	for _, c := range chunks {
		var mime string
		_ = json.Unmarshal(camelFields(c)["mimeType"], &mime)
		if strings.HasPrefix(mime, "audio/") && !g.audioChunk(c) {
			return false
		}
	}
	for _, k := range []string{"video", "text", "activityStart", "activityEnd", "audioStreamEnd"} {
		if _, ok := f[k]; ok {
			g.note("realtimeInput."+k, data)
		}
	}
	auto := g.setup.autoActivity
	if t, ok := f["text"]; ok {
		var text string
		_ = json.Unmarshal(t, &text)
		if auto {
			g.interrupt()
			g.userText += text
			g.startTurn(false)
		} else {
			g.userText += text
		}
	}
	if _, ok := f["activityStart"]; ok && !auto {
		g.activity = true
		g.interrupt()
	}
	if _, ok := f["activityEnd"]; ok && !auto && g.activity {
		g.activity = false
		g.startTurn(false)
	}
	// audioStreamEnd ends speech in progress: the microphone went off
	// mid-utterance. Silence alone, or speech already ended by the
	// silence after it, makes no turn.
	var streamEnd bool
	_ = json.Unmarshal(f["audioStreamEnd"], &streamEnd)
	if streamEnd && auto && g.speaking {
		g.speaking, g.silence = false, 0
		g.startTurn(false)
	}
	// Unverified, so left alone: activityStart/End with automatic
	// detection on, and audioStreamEnd with it off ("should only be sent
	// when automatic activity detection is enabled", @google/genai).
	return true
}

// audioChunk counts one Blob of audio and runs activity detection on it;
// false means the session was closed (undecodable data).
func (g *geminiSession) audioChunk(raw json.RawMessage) bool {
	b := camelFields(raw)
	var b64, mime string
	_ = json.Unmarshal(b["data"], &b64)
	_ = json.Unmarshal(b["mimeType"], &mime)
	w, err := decodeAudio(b64)
	if err != nil {
		g.closeWith(websocket.CloseInvalidFramePayloadData,
			"Invalid value at 'realtime_input.audio.data' (TYPE_BYTES), Base64 decoding failed")
		return false
	}
	g.rate = pcmRate(mime)
	g.turnAudio += w.n
	g.srv.audioAppends.Add(1)
	g.srv.audioBytes.Add(w.n)
	rate := g.rate
	g.rec.update(func(r *GeminiSession) {
		r.AudioChunks++
		r.AudioBytes += w.n
		r.AudioMimeType, r.AudioRate = mime, rate
	})
	if !g.setup.autoActivity {
		return true
	}
	loud := w.peak >= vadThreshold
	switch {
	case loud && !g.speaking:
		g.speaking, g.silence = true, 0
		g.interrupt()
	case loud:
		g.silence = 0
	case g.speaking:
		g.silence += w.n
		if g.silence*1000/int64(2*g.rate) >= g.setup.silenceMs {
			g.speaking, g.silence = false, 0
			g.startTurn(false)
		}
	}
	return true
}

// pcmRate reads the rate of "audio/pcm;rate=16000" (16 kHz when absent).
func pcmRate(mime string) int {
	for _, p := range strings.Split(mime, ";") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(p), "rate="); ok {
			if r, err := strconv.Atoi(v); err == nil && r > 0 {
				return r
			}
		}
	}
	return geminiDefaultInputRate
}

// onToolResponse takes the client's function results; once every call
// sent is answered, the model speaks (the turn after a tool call never
// calls again, so a chain ends: call, response, speech).
func (g *geminiSession) onToolResponse(raw json.RawMessage) bool {
	f := camelFields(raw)
	if f == nil {
		g.closeWith(websocket.CloseInvalidFramePayloadData, reasonInvalidArgument)
		return false
	}
	if g.unknownField(raw, geminiToolRespFields, geminiProtoNames["toolResponse"]) {
		return false
	}
	var responses []json.RawMessage
	_ = json.Unmarshal(f["functionResponses"], &responses)
	var ids []string
	for _, r := range responses {
		var id string
		_ = json.Unmarshal(camelFields(r)["id"], &id)
		ids = append(ids, id)
	}
	g.mu.Lock()
	kept := g.pending[:0]
	for _, p := range g.pending {
		if !contains(ids, p) {
			kept = append(kept, p)
		}
	}
	g.pending = kept
	waiting := len(kept)
	g.mu.Unlock()
	g.rec.update(func(r *GeminiSession) { r.FunctionResponses = append(r.FunctionResponses, ids...) })
	if waiting == 0 {
		g.startTurn(true)
	}
	return true
}

// interrupt stops the model turn in progress (it then sends
// serverContent.interrupted) and cancels the function calls awaiting a
// response: toolCallCancellation "occurs only in cases where the clients
// interrupt server turns" (BidiGenerateContentToolCallCancellation,
// ai.google.dev/api/live).
func (g *geminiSession) interrupt() {
	g.mu.Lock()
	if t := g.active; t != nil && !t.interrupted {
		t.interrupted = true
		t.cancel()
	}
	ids := g.pending
	g.pending = nil
	g.mu.Unlock()
	if len(ids) > 0 {
		g.rec.update(func(r *GeminiSession) { r.Cancellations++ })
		_ = g.sendMsg(map[string]any{"toolCallCancellation": map[string]any{"ids": ids}})
	}
}

// startTurn starts a model turn answering what the user said since the
// last one, once the turn before it has ended. The deterministic tool
// rule: unless it follows a toolResponse (afterTool), a turn calls a
// function when setup declared functions and either GeminiConfig.ToolCall
// is set (the first function) or the user's text names one (the first
// named, case-insensitively).
func (g *geminiSession) startTurn(afterTool bool) {
	st := g.setup
	t := &geminiTurn{audioIn: g.turnAudio, rate: g.rate, done: make(chan struct{})}
	t.transcribe = st.inTranscribe && t.audioIn > 0
	if !afterTool && len(st.functions) > 0 {
		low := strings.ToLower(g.userText)
		for i := range st.functions {
			if strings.Contains(low, strings.ToLower(st.functions[i].name)) {
				t.call = &st.functions[i]
				break
			}
		}
		if t.call == nil && g.cfg.Gemini.ToolCall {
			t.call = &st.functions[0]
		}
	}
	g.turnAudio, g.userText = 0, ""
	g.mu.Lock()
	prev := g.active
	g.mu.Unlock()
	if prev != nil {
		select {
		case <-prev.done:
		case <-g.ctx.Done():
			return
		}
	}
	t.ctx, t.cancel = context.WithCancel(g.ctx)
	g.mu.Lock()
	g.active = t
	g.mu.Unlock()
	g.rec.update(func(r *GeminiSession) { r.Turns++ })
	g.rwg.Add(1)
	go g.stream(t)
}

// stream sends one model turn: after the first-audio delay, the input
// transcription (when enabled and audio came), then either a toolCall,
// or the model's audio chunks (text parts with responseModalities TEXT)
// and the output transcription, generationComplete and turnComplete; then
// usageMetadata and, with session resumption, a new handle. An
// interruption ends it with serverContent.interrupted and turnComplete
// ("When model is interrupted while generating there will be no
// generation_complete message in interrupted turn, it will go through
// interrupted > turn_complete", @google/genai's LiveServerContent).
func (g *geminiSession) stream(t *geminiTurn) {
	defer g.rwg.Done()
	defer func() {
		t.cancel()
		g.mu.Lock()
		if g.active == t {
			g.active = nil
		}
		g.mu.Unlock()
		close(t.done)
	}()
	st := g.setup
	outAudio, outText := 0, 0
	if g.srv.sleep(t.ctx, g.srv.firstAudioDelay(g.cfg)) {
		if t.transcribe {
			_ = g.sendMsg(map[string]any{"serverContent": map[string]any{"inputTranscription": map[string]any{"text": geminiInputTranscript}}})
		}
		switch {
		case t.call != nil:
			if g.callFunction(t) {
				return
			}
		case st.text:
			for i, d := range []string{"Hello ", "from ", "mockai."} {
				if (i > 0 && !g.srv.sleep(t.ctx, g.cfg.AudioDeltaInterval)) || t.ctx.Err() != nil {
					break
				}
				if g.sendMsg(map[string]any{"serverContent": map[string]any{"modelTurn": map[string]any{
					"parts": []any{map[string]any{"text": d}}}}}) != nil {
					break
				}
				outText = outputTextTokens
			}
		default:
			msg := g.srv.gemini.audioMessage(g.srv.audioDelta)
			for i := 0; i < g.cfg.AudioDeltas; i++ {
				if (i > 0 && !g.srv.sleep(t.ctx, g.cfg.AudioDeltaInterval)) || t.ctx.Err() != nil {
					break
				}
				if g.write(websocket.BinaryMessage, msg) != nil {
					break
				}
				outAudio += g.cfg.AudioDeltaBytes
			}
			if st.outTranscribe && t.ctx.Err() == nil {
				_ = g.sendMsg(map[string]any{"serverContent": map[string]any{"outputTranscription": map[string]any{"text": transcript}}})
			}
		}
	}
	g.mu.Lock()
	interrupted := t.interrupted
	g.mu.Unlock()
	if g.ctx.Err() != nil { // the session is ending: nothing more to say
		return
	}
	if interrupted {
		g.rec.update(func(r *GeminiSession) { r.Interruptions++ })
		_ = g.sendMsg(map[string]any{"serverContent": map[string]any{"interrupted": true}})
	} else {
		_ = g.sendMsg(map[string]any{"serverContent": map[string]any{"generationComplete": true}})
	}
	usage := g.usage(t, outAudio, outText)
	done := map[string]any{"serverContent": map[string]any{"turnComplete": true}}
	if g.cfg.Gemini.UsageWithTurnComplete {
		done["usageMetadata"] = usage
	}
	_ = g.sendMsg(done)
	if !g.cfg.Gemini.UsageWithTurnComplete {
		_ = g.sendMsg(map[string]any{"usageMetadata": usage})
	}
	if st.resumption {
		h := g.srv.gemini.issue(g.id)
		g.rec.update(func(r *GeminiSession) { r.LastHandle = h })
		_ = g.sendMsg(map[string]any{"sessionResumptionUpdate": map[string]any{"newHandle": h, "resumable": true}})
	}
}

// callFunction sends t's function call, then the usage so far; false
// means t was interrupted first and nothing was sent. Gemini
// then waits for the toolResponse: no generationComplete or turnComplete
// until the model has spoken after it (BerriAI/litellm#26590;
// pipecat-ai/pipecat#3609). With session resumption, the state is not
// resumable while a call is out: an update with no handle (resumable
// false, both left out as protobuf JSON leaves out defaults), as
// LiveServerSessionResumptionUpdate documents for "executing function calls".
func (g *geminiSession) callFunction(t *geminiTurn) bool {
	id := newID("function-call-")
	call := map[string]any{"id": id, "name": t.call.name, "args": t.call.args}
	// Under g.mu, so that an interruption either comes first (no call) or
	// cancels a call the client has been sent; pending before the client
	// can answer it.
	g.mu.Lock()
	if t.interrupted {
		g.mu.Unlock()
		return false
	}
	g.pending = append(g.pending, id)
	g.rec.update(func(r *GeminiSession) { r.ToolCalls++ })
	err := g.sendMsg(map[string]any{"toolCall": map[string]any{"functionCalls": []any{call}}})
	g.mu.Unlock()
	if err != nil {
		return true
	}
	_ = g.sendMsg(map[string]any{"usageMetadata": g.usage(t, 0, outputTextTokens)})
	if g.setup.resumption {
		_ = g.sendMsg(map[string]any{"sessionResumptionUpdate": map[string]any{}})
	}
	return true
}

// geminiModality is one entry of usageMetadata's per-modality details
// (ModalityTokenCount).
type geminiModality struct {
	Modality   string `json:"modality"`
	TokenCount int    `json:"tokenCount,omitempty"`
}

// usage is a turn's usageMetadata, predictable for tests:
//
//	prompt   TEXT 10 (the instructions and any text), AUDIO the turn's input
//	         audio at 32 tokens a second (bytes * 16 / rate), left out when 0
//	response AUDIO output bytes / 1500 (24 kHz at 32 tokens a second), or TEXT
//	         5 for text parts and for a function call
//
// promptTokenCount and the response count are the sums, totalTokenCount
// theirs; zero counts are left out, as protobuf JSON leaves them out. AI
// Studio names the response fields responseTokenCount and
// responseTokensDetails; Vertex AI candidatesTokenCount and
// candidatesTokensDetails (@google/genai's usageMetadataFromVertex maps
// them back).
func (g *geminiSession) usage(t *geminiTurn, outAudio, outText int) map[string]any {
	prompt := []geminiModality{{"TEXT", inputTextTokens}}
	if a := int(t.audioIn * geminiTokensPerSecond / int64(2*t.rate)); a > 0 {
		prompt = append(prompt, geminiModality{"AUDIO", a})
	}
	var response []geminiModality
	if a := outAudio / geminiOutputBytesPerToken; a > 0 {
		response = append(response, geminiModality{"AUDIO", a})
	}
	if outText > 0 {
		response = append(response, geminiModality{"TEXT", outText})
	}
	sum := func(ms []geminiModality) int {
		n := 0
		for _, m := range ms {
			n += m.TokenCount
		}
		return n
	}
	p, r := sum(prompt), sum(response)
	u := map[string]any{"promptTokenCount": p, "promptTokensDetails": prompt, "totalTokenCount": p + r}
	count, details := "responseTokenCount", "responseTokensDetails"
	if g.api.vertex {
		count, details = "candidatesTokenCount", "candidatesTokensDetails"
	}
	if r > 0 {
		u[count], u[details] = r, response
	}
	return u
}

// startGoAway arms GeminiConfig.GoAwayAfter: goAway{timeLeft}, then the
// close once timeLeft has passed.
func (g *geminiSession) startGoAway() {
	after := g.cfg.Gemini.GoAwayAfter
	if after <= 0 {
		return
	}
	left := g.cfg.Gemini.GoAwayTimeLeft
	if left <= 0 {
		left = geminiDefaultGoAwayTimeLeft
	}
	g.rwg.Add(1)
	go func() {
		defer g.rwg.Done()
		if !g.srv.sleep(g.ctx, after) {
			return
		}
		g.rec.update(func(r *GeminiSession) { r.GoAway = true })
		if g.sendMsg(map[string]any{"goAway": map[string]any{"timeLeft": protoDuration(left)}}) != nil {
			return
		}
		if !g.srv.sleep(g.ctx, left) {
			return
		}
		g.sendClose(websocket.CloseInternalServerErr, reasonDeadline)
	}()
}

// protoDuration writes d as protobuf JSON writes a Duration: seconds
// with 0, 3, 6 or 9 fractional digits and an "s" ("50s", "0.500s").
func protoDuration(d time.Duration) string {
	sec, ns := int64(d/time.Second), int64(d%time.Second)
	switch {
	case ns == 0:
		return fmt.Sprintf("%ds", sec)
	case ns%1e6 == 0:
		return fmt.Sprintf("%d.%03ds", sec, ns/1e6)
	case ns%1e3 == 0:
		return fmt.Sprintf("%d.%06ds", sec, ns/1e3)
	}
	return fmt.Sprintf("%d.%09ds", sec, ns)
}

// camelFields decodes a JSON object with its keys in lowerCamelCase (a
// proto name, snake_case, is what protobuf JSON also accepts); nil if raw
// is not an object.
func camelFields(raw []byte) map[string]json.RawMessage {
	var m map[string]json.RawMessage
	if len(raw) == 0 || json.Unmarshal(raw, &m) != nil || m == nil {
		return nil
	}
	for k, v := range m {
		if c := lowerCamel(k); c != k {
			delete(m, k)
			m[c] = v
		}
	}
	return m
}

// lowerCamel is protobuf's JSON name for a field name: "audio_stream_end"
// is "audioStreamEnd".
func lowerCamel(k string) string {
	if !strings.Contains(k, "_") {
		return k
	}
	var b strings.Builder
	up := false
	for _, r := range k {
		switch {
		case r == '_':
			up = true
		case up:
			b.WriteRune(unicode.ToUpper(r))
			up = false
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// present reports whether a field is set to something other than null.
func present(raw json.RawMessage) bool {
	return len(raw) > 0 && string(raw) != "null"
}

func contains(list []string, v string) bool {
	for _, x := range list {
		if x == v {
			return true
		}
	}
	return false
}
