package mockai

import (
	"context"
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"
)

// Config sets the server's behaviour. The zero value is a well-behaved server that
// accepts any key.
type Config struct {
	// Key, if non-empty, is the only API key accepted: as "Authorization: Bearer <Key>",
	// the Azure-style "api-key: <Key>" header, or the browser subprotocol
	// "openai-insecure-api-key.<Key>".
	Key string
	// RejectStatus says how a wrong or missing key is refused. 0: the upgrade completes,
	// then an error event with code invalid_api_key and close 4000
	// "invalid_request_error.invalid_api_key" (what OpenAI usually does). 401 or 403: that
	// HTTP status with an OpenAI-shaped JSON error body instead of the upgrade.
	RejectStatus int
	// TLS serves wss:// with a freshly generated self-signed certificate (ECDSA P-256,
	// valid for 127.0.0.1, ::1 and localhost).
	TLS bool
	// CertFile, with TLS, is where the certificate is written (PEM) for clients to trust.
	// If empty, the certificate is only available from CertPEM.
	CertFile string

	UpgradeDelay    time.Duration // before the 101 response
	SessionDelay    time.Duration // after the 101, before session.created
	FirstAudioDelay time.Duration // after response.create, before the first audio delta
	// CreatedWithFirstOutput holds a response's response.created (and
	// rate_limits.updated) until its first output delta, as an upstream
	// that is slow to start a response (queueing, a loaded region, a cold
	// model) sends it: a relay that times turns from response.created
	// then measures nothing of the wait.
	CreatedWithFirstOutput bool
	// FailResponses fails every response: response.created, then after
	// the first-audio delay response.done with status failed and a
	// server_error, no output (a deployment that accepts sessions and
	// fails their answers).
	FailResponses bool

	// AudioDeltas is the number of response.output_audio.delta events per response:
	// 0 means the default of 5, a negative number means none.
	AudioDeltas int
	// AudioDeltaBytes is the raw PCM bytes per delta before base64 (0: 4800, 100 ms).
	AudioDeltaBytes int
	// AudioDeltaInterval is the gap between two deltas (default none).
	AudioDeltaInterval time.Duration

	// Fault knobs, 0 (or false) = off. N counts data frames sent on the connection,
	// session.created included.
	CloseAfterFrames     int  // after N frames: close 1011 "mock: closing after N frames"
	DropAfterFrames      int  // after N frames: drop the TCP connection, no close frame
	MalformedAfterFrames int  // after N frames: write a frame with reserved opcode 0x3
	StopReading          bool // after session.created, never read from the socket again
	// IgnoreCancel never answers response.cancel: the response streams on
	// to its end, and no cancelled response.done comes (an upstream that
	// does not confirm a cancel in time). By default response.cancel stops
	// the active response, whose response.done (status cancelled) carries
	// the usage of what was sent.
	IgnoreCancel bool
	// CancelLate answers response.cancel as an upstream does when the
	// response ended on its own just as the cancel arrived: an error event
	// response_cancel_not_active naming the cancel's event_id, and the
	// active response then ends at once, completed (its response.done
	// carries the usage of what was sent). The error goes first, so that
	// a relay still waiting for the response sees it every time.
	CancelLate bool
	// StatusCode, if non-zero (e.g. 429, 500), answers every upgrade with this HTTP
	// status and a JSON error body.
	StatusCode int

	// StallFor bounds a stalled connection (StopReading, or fault=stall from the
	// query): this long after session.created the server drops it without a close
	// frame. 0 stalls until the server closes. A stalled connection never reads, so it
	// cannot notice its peer leaving; soak runs set this so stalls do not pile up.
	StallFor time.Duration
	// FaultsFromQuery lets each connection choose a fault with the query parameters
	// fault (drop, close, malformed, stall, or an HTTP error status) and fault_after
	// (frames, default 1), on top of the knobs above; see Config.queryFault. A bad value
	// is refused with HTTP 400. Off, those parameters are ignored.
	FaultsFromQuery bool
	// firstAudioPinned says FirstAudioDelay was set by the connection's query
	// (first_audio_delay, with FaultsFromQuery), so POST /mock/config does not
	// change it.
	firstAudioPinned bool

	// OneSegment writes the 101 response and the first data frame (session.created)
	// with one socket write, so they arrive in one TCP segment: over TLS, two records
	// in one segment. The 101 waits for session.created (so also for SessionDelay).
	// See heldConn.
	OneSegment bool

	// Echo sends every data message (text or binary) back verbatim, with the same
	// message type, instead of answering it as a client event. session.created is
	// still sent first, so relays and warm pools work unchanged. For benchmarks that
	// time round trips and relay throughput without the conversation's JSON work.
	Echo bool

	// Stream is the sustained voice mode (session.streamVoice): steady audio deltas both
	// ways for as long as the session lasts. Off when Stream.Interval is 0.
	Stream StreamConfig

	// Live is the GPT-Live side's schedule and Live-only faults.
	Live LiveConfig

	// XAIPingInterval is how often an xAI session (WS /xai/v1/realtime)
	// gets a ping event after the one that follows conversation.created:
	// 0 means the default of 1 s (short, so tests see them), a negative
	// value means only that first ping. See xai.go.
	XAIPingInterval time.Duration
	// XAISessionCreated opens xAI sessions as xAI has since May 2026:
	// session.created, then conversation.created. Off, they open as xAI's
	// did before (and as LiteLLM's normaliser and the project's notes
	// describe it): conversation.created first and no session.created,
	// the case a relay has to repair for OpenAI clients.
	XAISessionCreated bool

	// Gemini is the Gemini Live dialect's knobs (gemini.go).
	Gemini GeminiConfig

	// Cut ends upstream sessions at a point of their conversation
	// (session.cut): after or during their Nth response.
	Cut Cut
	// SessionCap is OpenAI's cap on a session's length (0: an hour, never
	// enforced): expires_at in session.created says it, and when it passes
	// the session gets an error event session_expired and close 1001
	// "Your session hit the maximum duration of ...", whatever is in
	// progress (session.expire).
	SessionCap time.Duration
	// NoExpiresAt leaves expires_at out of the session object (it is
	// optional in GA; GPT-Live's session.started too): a relay then
	// cannot see the cap coming.
	NoExpiresAt bool
	// AudioItems: committed audio becomes a user item the client is told
	// of, as OpenAI does: conversation.item.added and conversation.item.done
	// (content input_audio, transcript null) after input_audio_buffer.committed.
	// Off by default, so the events a client reads after a commit are
	// those older tests expect.
	AudioItems bool

	// What mockai says, scripted per test (all off when empty or 0, and
	// the defaults then stay what they were): for guardrail and
	// conversation-record tests, which need known words in known places.
	//
	// InputTranscripts is the transcript of each committed user audio
	// turn (input_audio_buffer.commit or a server VAD turn) of a session
	// in order, cycling: the session's Nth commit gets
	// InputTranscripts[(N-1) % len], sent in
	// conversation.item.input_audio_transcription.completed when the
	// session transcribes its input (transcribed) and kept as the user
	// item's transcript. Empty: "Hello from mockai." for every turn.
	InputTranscripts []string
	// TranscriptionDelay holds each transcription.completed this long
	// after its input_audio_buffer.committed, without holding anything
	// else: the response server VAD's create_response starts goes out
	// before the transcript, as OpenAI's often does. Transcripts keep
	// the order of their turns. 0: sent right after the commit.
	TranscriptionDelay time.Duration
	// OutputTranscripts is the assistant's spoken transcript of each
	// audio response of a session in order, cycling (text-only responses
	// and tool calls do not count). Set, the transcript is split into
	// words (each with the spaces after it) spread over the response's
	// audio deltas: after each audio delta, one
	// response.output_audio_transcript.delta with the words that delta
	// covers; then response.output_audio_transcript.done with all that
	// was sent, and response.done's message carries it. Empty: one delta
	// "Hello from mockai." after the last audio delta and no .done.
	OutputTranscripts []string
	// OutputTranscriptLag sends each output transcript delta this long
	// after the audio delta it covers, without delaying the audio (late
	// transcripts, as OpenAI's sometimes are); the transcript's .done and
	// response.done still come after every delta. 0: right after it.
	OutputTranscriptLag time.Duration
	// ToolArguments is the arguments string of every function call
	// mockai makes (Turns, tool calls), streamed as two or more
	// response.function_call_arguments.delta pieces (AudioDeltaInterval
	// apart) and whole in .done, response.output_item.done and
	// response.done. Empty: "{}" in a single delta. Not checked: a test
	// may script arguments that are not JSON.
	ToolArguments string

	// Logger receives debug-level connection logs; nil discards them. Keys are never logged.
	Logger *slog.Logger
}

const (
	defaultAudioDeltas     = 5
	defaultAudioDeltaBytes = 4800
	// maxRecords bounds the memory Records uses in long load runs.
	maxRecords = 10000
	// readLimit admits the largest client event OpenAI accepts (15 MiB) plus framing slack.
	readLimit = 16 << 20
	// closeWait is how long the server waits for the client to answer its close frame.
	closeWait = 2 * time.Second
)

// ErrConfig is wrapped by Start's error when the Config itself is unusable.
var ErrConfig = errors.New("mockai: invalid config")

// validate reports the first setting that cannot work, so callers get a clear error.
func (c Config) validate() error {
	switch {
	case c.RejectStatus != 0 && c.RejectStatus != http.StatusUnauthorized && c.RejectStatus != http.StatusForbidden:
		return fmt.Errorf("reject status %d: must be 0, 401 or 403", c.RejectStatus)
	case c.StatusCode != 0 && (c.StatusCode < 200 || c.StatusCode > 599 || c.StatusCode == http.StatusSwitchingProtocols):
		return fmt.Errorf("status code %d: must be 0 or an HTTP status from 200 to 599", c.StatusCode)
	case c.UpgradeDelay < 0 || c.SessionDelay < 0 || c.FirstAudioDelay < 0 || c.AudioDeltaInterval < 0 || c.StallFor < 0 ||
		c.TranscriptionDelay < 0 || c.OutputTranscriptLag < 0:
		return errors.New("delays and intervals must not be negative")
	case c.AudioDeltaBytes < 0 || c.AudioDeltaBytes > readLimit:
		return fmt.Errorf("audio delta bytes %d: must be between 0 and %d", c.AudioDeltaBytes, readLimit)
	case c.AudioDeltaBytes%2 != 0:
		return fmt.Errorf("audio delta bytes %d: PCM16 needs an even number of bytes", c.AudioDeltaBytes)
	case c.CloseAfterFrames < 0 || c.DropAfterFrames < 0 || c.MalformedAfterFrames < 0:
		return errors.New("fault frame counts must not be negative")
	case c.SessionCap < 0:
		return errors.New("session cap must not be negative")
	case c.CertFile != "" && !c.TLS:
		return errors.New("a cert file needs TLS")
	case c.Live.MediaInterval < 0 || c.Live.MediaChunk < 0 || c.Live.MaxDuration < 0 || c.Live.StartTimeout < 0 || c.Live.StartCrossed < 0:
		return errors.New("live media interval and chunk, max duration and start timeout must not be negative")
	case c.Live.MediaChunk > time.Minute:
		return fmt.Errorf("live media chunk %v: at most 1m", c.Live.MediaChunk)
	case c.Live.MediaInterval > 0 && c.Live.MediaInterval < time.Millisecond:
		return fmt.Errorf("live media interval %v: at least 1ms", c.Live.MediaInterval)
	case c.XAIPingInterval > 0 && c.XAIPingInterval < time.Millisecond:
		return fmt.Errorf("xai ping interval %v: at least 1ms (negative: no periodic pings)", c.XAIPingInterval)
	}
	if err := c.Cut.validate(); err != nil {
		return err
	}
	if err := c.Gemini.validate(); err != nil {
		return err
	}
	return c.Stream.validate(c.Echo)
}

// Record describes one upgrade attempt on a realtime path, as it arrived.
// Records are test data: they hold the key, so never log them.
type Record struct {
	Path         string      `json:"path"`
	Query        string      `json:"query"`
	Header       http.Header `json:"header"`
	Subprotocols []string    `json:"subprotocols"`
	// Key is the bearer, api-key or subprotocol key it arrived with ("" if none).
	Key string `json:"key"`
	// SessionID is the sess_... id issued to it ("" if it got no session).
	SessionID string    `json:"session_id"`
	At        time.Time `json:"at"`
	// Dialect is "xai" for an attempt on xAI's route (/xai/v1/realtime),
	// "" for OpenAI's and GPT-Live's.
	Dialect string `json:"dialect,omitempty"`
	// Auth is how an attempt on a Gemini Live route presented its
	// credential ("key", "x-goog-api-key", "bearer"; "" for none); its
	// Dialect is "gemini" or "vertex" (gemini.go).
	Auth string `json:"auth,omitempty"`
}

// Stats are the server's counters since Start.
type Stats struct {
	Upgrades  int64 `json:"upgrades"`   // 101 responses sent
	Rejected  int64 `json:"rejected"`   // attempts refused: HTTP errors, bad key or beta closes
	Active    int64 `json:"active"`     // upgraded connections open now
	Sessions  int64 `json:"sessions"`   // sessions opened: session.created sent (xAI: conversation.created)
	FramesIn  int64 `json:"frames_in"`  // data frames read from clients
	FramesOut int64 `json:"frames_out"` // data frames sent to clients
	// AudioAppends counts input_audio_buffer.append events and AudioBytes
	// the PCM bytes they carried (decoded), so tests assert on the audio
	// that reached the upstream without a record per frame.
	AudioAppends int64 `json:"audio_appends"`
	AudioBytes   int64 `json:"audio_bytes"`
	// TraceBytes counts OTLP trace exports received (POST /v1/traces).
	TraceBytes int64 `json:"trace_bytes,omitempty"`
	// XAIPings counts the ping events sent to xAI sessions.
	XAIPings int64 `json:"xai_pings,omitempty"`
}

// Server is a running mock upstream. It is safe for concurrent use.
type Server struct {
	cfg      Config
	log      *slog.Logger
	ln       net.Listener
	http     *http.Server
	upgrader websocket.Upgrader
	certPEM  []byte
	// audioDelta is the base64 payload every output audio delta carries.
	audioDelta string

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup // serve loop and every realtime handler

	mu      sync.Mutex
	closed  bool
	conns   map[*websocket.Conn]struct{}
	records recordRing

	upgrades, rejected, active, sessions, framesIn, framesOut atomic.Int64
	audioAppends, audioBytes                                  atomic.Int64
	cuts                                                      atomic.Int64 // sessions Config.Cut chose
	traceBytes                                                atomic.Int64 // handleTraces
	xaiPings                                                  atomic.Int64 // session.xaiPing
	// firstAudio is the first-audio delay (ns) of connections that did not
	// set their own: Config.FirstAudioDelay until POST /mock/config.
	firstAudio atomic.Int64

	apps appState  // calls, sidebands and records
	live liveState // GPT-Live sessions
	xai  xaiState  // xAI's minted client secrets

	gemini geminiState // Gemini Live sessions and resumption handles
}

// Start listens on addr (like "127.0.0.1:0") and serves in the background until Close.
func Start(cfg Config, addr string) (*Server, error) {
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	if cfg.AudioDeltas == 0 {
		cfg.AudioDeltas = defaultAudioDeltas
	}
	if cfg.AudioDeltas < 0 {
		cfg.AudioDeltas = 0
	}
	if cfg.AudioDeltaBytes == 0 {
		cfg.AudioDeltaBytes = defaultAudioDeltaBytes
	}
	cfg.Live = cfg.Live.withDefaults()
	if cfg.XAIPingInterval == 0 {
		cfg.XAIPingInterval = defaultXAIPingInterval
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}

	s := &Server{
		cfg:        cfg,
		log:        logger,
		conns:      make(map[*websocket.Conn]struct{}),
		records:    recordRing{max: maxRecords},
		audioDelta: base64.StdEncoding.EncodeToString(PCMPattern(cfg.AudioDeltaBytes)),
	}
	s.firstAudio.Store(int64(cfg.FirstAudioDelay))
	s.upgrader = websocket.Upgrader{
		HandshakeTimeout: 10 * time.Second,
		// ReadBufferSize 0 reuses the HTTP server's 4 KiB reader; writes borrow a pooled
		// buffer only while writing, so an idle session holds no write buffer.
		WriteBufferSize: 4096,
		WriteBufferPool: &sync.Pool{},
		Subprotocols:    []string{"realtime"},
		// Browsers and relays send Origin; a fake upstream accepts any.
		CheckOrigin: func(*http.Request) bool { return true },
		Error: func(w http.ResponseWriter, _ *http.Request, status int, reason error) {
			writeHTTPError(w, status, "invalid_request_error", "websocket_upgrade_failed", reason.Error())
		},
	}

	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("mockai: listen %s: %w", addr, err)
	}
	if cfg.OneSegment {
		ln = heldListener{ln}
	}
	if cfg.TLS {
		cert, certPEM, err := SelfSignedCert()
		if err != nil {
			ln.Close()
			return nil, fmt.Errorf("mockai: %w", err)
		}
		if cfg.CertFile != "" {
			if err := writeFileAtomic(cfg.CertFile, certPEM); err != nil {
				ln.Close()
				return nil, fmt.Errorf("mockai: write cert: %w", err)
			}
		}
		s.certPEM = certPEM
		// HTTP/1.1 only: WebSocket upgrades here do not run over HTTP/2.
		ln = tls.NewListener(ln, &tls.Config{
			Certificates: []tls.Certificate{cert},
			NextProtos:   []string{"http/1.1"},
			MinVersion:   tls.VersionTLS12,
		})
	}
	s.ln = ln
	s.ctx, s.cancel = context.WithCancel(context.Background())

	mux := http.NewServeMux()
	for _, p := range []string{"/v1/realtime", "/openai/realtime", "/openai/v1/realtime"} {
		mux.HandleFunc(p, s.handleRealtime)
	}
	s.mountApps(mux)
	s.mountLive(mux)
	s.mountTranslation(mux)
	s.mountXAI(mux)
	s.mountGemini(mux)
	mux.HandleFunc("GET /mock/records", s.handleRecords)
	mux.HandleFunc("GET /mock/stats", s.handleStats)
	mux.HandleFunc("GET /mock/sessions/{id}/received", s.handleReceived)
	mux.HandleFunc("/mock/config", s.handleConfig)
	mux.HandleFunc("POST /v1/traces", s.handleTraces)
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeHTTPError(w, http.StatusNotFound, "invalid_request_error", "not_found", "no route for "+r.URL.Path)
	})
	s.http = &http.Server{
		Handler:           geminiPaths(mux), // lets @google/genai's "//ws/..." through
		ReadHeaderTimeout: 10 * time.Second,
		ConnContext:       withConn,
		// TLS handshake failures from untrusting clients are expected in tests: keep them quiet.
		ErrorLog: slog.NewLogLogger(logger.Handler(), slog.LevelDebug),
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		if err := s.http.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Error("mockai serve stopped", "err", err)
		}
	}()
	return s, nil
}

// Addr is the listening address, like "127.0.0.1:8089".
func (s *Server) Addr() string { return s.ln.Addr().String() }

// BaseURL is what a client (or the gateway, as its OpenAI API base) appends /realtime to:
// "ws://127.0.0.1:port/v1", or "wss://..." with TLS.
func (s *Server) BaseURL() string {
	scheme := "ws"
	if s.cfg.TLS {
		scheme = "wss"
	}
	return scheme + "://" + s.Addr() + "/v1"
}

// CertPEM is the server certificate in PEM form, nil without TLS.
func (s *Server) CertPEM() []byte { return s.certPEM }

// Records returns the most recent upgrade attempts (at most 10,000), oldest first.
func (s *Server) Records() []Record {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.records.list()
}

// Stats returns a snapshot of the counters.
func (s *Server) Stats() Stats {
	return Stats{
		Upgrades:  s.upgrades.Load(),
		Rejected:  s.rejected.Load(),
		Active:    s.active.Load(),
		Sessions:  s.sessions.Load(),
		FramesIn:  s.framesIn.Load(),
		FramesOut: s.framesOut.Load(),

		AudioAppends: s.audioAppends.Load(),
		AudioBytes:   s.audioBytes.Load(),
		TraceBytes:   s.traceBytes.Load(),
		XAIPings:     s.xaiPings.Load(),
	}
}

// Close stops the listener, closes every connection without a close frame, and waits
// for all connection goroutines to end. It is safe to call more than once.
func (s *Server) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	conns := make([]*websocket.Conn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()

	s.cancel()
	err := s.http.Close()
	for _, c := range conns {
		c.Close()
	}
	s.wg.Wait()
	if err != nil {
		return fmt.Errorf("mockai: close: %w", err)
	}
	return nil
}

// enter registers a handler goroutine with Close; false means the server is closing.
func (s *Server) enter() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.wg.Add(1)
	return true
}

// addConn tracks an upgraded connection so Close can end it; false means the server
// is closing and the caller must drop the connection.
func (s *Server) addConn(c *websocket.Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.conns[c] = struct{}{}
	return true
}

func (s *Server) removeConn(c *websocket.Conn) {
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
}

func (s *Server) addRecord(r *Record) {
	s.mu.Lock()
	s.records.add(r)
	s.mu.Unlock()
}

func (s *Server) setRecordSession(r *Record, id string) {
	s.mu.Lock()
	r.SessionID = id
	s.mu.Unlock()
}

// handleRealtime answers one upgrade attempt on a Realtime route.
func (s *Server) handleRealtime(w http.ResponseWriter, r *http.Request) {
	s.handleUpgrade(w, r, func() bool {
		q := r.URL.Query()
		if firstNonEmpty(q.Get("model"), q.Get("deployment")) == "" && q.Get("call_id") == "" && q.Get("intent") == "" {
			writeHTTPError(w, http.StatusBadRequest, "invalid_request_error", "missing_required_parameter",
				"missing required parameter: 'model'")
			return false
		}
		return true
	}, s.serveRealtime)
}

// handleUpgrade is what every WebSocket route (Realtime, Live, sidebands)
// shares: the record, the checks of admit (check is the route's own), the
// upgrade, and a goroutine that runs serve on the new session and ends the
// connection after it. A wrong key is refused there (error event, close
// 4000) without calling serve.
func (s *Server) handleUpgrade(w http.ResponseWriter, r *http.Request, check func() bool, serve func(*session, *Record)) {
	if !s.enter() {
		writeHTTPError(w, http.StatusServiceUnavailable, "server_error", "shutting_down", "the server is shutting down")
		return
	}
	defer s.wg.Done()
	rec := newRecord(r)
	s.addRecord(rec)
	cfg, badKey, ok := s.admit(w, r, rec, check)
	if !ok {
		return
	}
	ws, held, ok := s.upgradeConn(w, r)
	if !ok {
		return
	}
	// The session runs in its own goroutine so that this handler returns and the HTTP
	// server's per-request buffers are freed: at thousands of sessions that halves the
	// memory each one holds. This handler still holds its own wg count, so the Add
	// cannot race with Close's Wait.
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer func() {
			ws.Close()
			s.removeConn(ws)
			s.active.Add(-1)
		}()
		sess := newSession(s, ws, "")
		sess.cfg = cfg
		sess.held = held // holds the 101 until the session's first frame (OneSegment)
		defer sess.end()
		if badKey {
			s.rejected.Add(1)
			sess.fail("invalid_request_error", "invalid_api_key", "Incorrect API key provided.")
			return
		}
		serve(sess, rec)
	}()
}

// newRecord describes an upgrade attempt as it arrived.
func newRecord(r *http.Request) *Record {
	return &Record{
		Path:         r.URL.Path,
		Query:        r.URL.RawQuery,
		Header:       r.Header.Clone(),
		Subprotocols: websocket.Subprotocols(r),
		Key:          presentedKey(r),
		At:           time.Now(),
		Dialect:      dialectOfPath(r.URL.Path),
	}
}

// admit runs the checks every upgrade (Realtime and Live) goes through, in
// order: the StatusCode fault, the route's own check (nil: none; it answers
// the request itself when it returns false), a fault asked for in the query
// (FaultsFromQuery), and the key when RejectStatus refuses it over HTTP. It
// returns the connection's configuration and whether the key was wrong (to
// be refused after the upgrade); ok false means the request is answered.
func (s *Server) admit(w http.ResponseWriter, r *http.Request, rec *Record, check func() bool) (cfg *Config, badKey, ok bool) {
	if s.cfg.StatusCode != 0 {
		s.rejected.Add(1)
		typ, code := errorKind(s.cfg.StatusCode)
		writeHTTPError(w, s.cfg.StatusCode, typ, code, fmt.Sprintf("mock: configured to answer %d", s.cfg.StatusCode))
		return nil, false, false
	}
	if check != nil && !check() {
		s.rejected.Add(1)
		return nil, false, false
	}
	cfg = &s.cfg
	if s.cfg.FaultsFromQuery {
		qcfg, status, err := s.cfg.queryFault(r.URL.Query())
		switch {
		case err != nil:
			s.rejected.Add(1)
			writeHTTPError(w, http.StatusBadRequest, "invalid_request_error", "invalid_value", "mock: "+err.Error())
			return nil, false, false
		case status != 0:
			s.rejected.Add(1)
			typ, code := errorKind(status)
			writeHTTPError(w, status, typ, code, fmt.Sprintf("mock: fault=%d asked for in the query", status))
			return nil, false, false
		}
		if qcfg, err = qcfg.queryFirstAudio(r.URL.Query()); err != nil {
			s.rejected.Add(1)
			writeHTTPError(w, http.StatusBadRequest, "invalid_request_error", "invalid_value", "mock: "+err.Error())
			return nil, false, false
		}
		cfg = qcfg
	}
	badKey = !s.keyAccepted(rec.Path, rec.Key)
	if badKey && s.cfg.RejectStatus != 0 {
		s.rejected.Add(1)
		typ, code := errorKind(s.cfg.RejectStatus)
		writeHTTPError(w, s.cfg.RejectStatus, typ, code, "Incorrect API key provided.")
		return nil, false, false
	}
	return cfg, badKey, true
}

// upgradeConn waits UpgradeDelay, upgrades and tracks the connection; held
// is the held 101 with OneSegment. ok false means there is no connection
// (the upgrader has answered, or the server is closing).
func (s *Server) upgradeConn(w http.ResponseWriter, r *http.Request) (ws *websocket.Conn, held *heldConn, ok bool) {
	if !s.sleep(r.Context(), s.cfg.UpgradeDelay) {
		return nil, nil, false
	}
	// Counted before the 101 goes out, so a client that holds a connection always
	// finds it in Stats; undone if the upgrade fails.
	s.upgrades.Add(1)
	s.active.Add(1)
	held = heldConnOf(r.Context()) // nil unless OneSegment
	if held != nil {
		held.hold() // released by the session after its first frame
	}
	ws, err := s.upgrader.Upgrade(w, r, nil)
	if err != nil {
		if held != nil {
			_ = held.release()
		}
		s.upgrades.Add(-1)
		s.active.Add(-1)
		s.rejected.Add(1) // the upgrader has already answered with an HTTP error
		s.log.Debug("upgrade failed", "path", r.URL.Path, "err", err)
		return nil, nil, false
	}
	if !s.addConn(ws) {
		if held != nil {
			_ = held.release()
		}
		ws.Close()
		s.active.Add(-1)
		return nil, nil, false
	}
	return ws, held, true
}

// serveRealtime runs a Realtime session to its end.
func (s *Server) serveRealtime(sess *session, rec *Record) {
	q, _ := url.ParseQuery(rec.Query)
	sess.model = firstNonEmpty(q.Get("model"), q.Get("deployment"), "gpt-realtime")
	defer s.joinApps(rec.Query, sess)()
	beta := strings.EqualFold(strings.TrimSpace(rec.Header.Get("OpenAI-Beta")), "realtime=v1")
	for _, p := range rec.Subprotocols {
		beta = beta || p == "openai-beta.realtime-v1"
	}
	if beta {
		s.rejected.Add(1)
		sess.fail("invalid_request_error", "beta_api_shape_disabled",
			"The Realtime beta interface has been shut down; use the GA interface.")
		return
	}
	s.setRecordSession(rec, sess.id)
	sess.run()
}

// sleep waits d, or until the request or the server ends; false means give up.
func (s *Server) sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
	case <-s.ctx.Done():
	}
	return false
}

func (s *Server) handleRecords(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, s.Records())
}

func (s *Server) handleStats(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, s.Stats())
}

// presentedKey finds the API key a client offered, in the order OpenAI honours them.
func presentedKey(r *http.Request) string {
	if auth := r.Header.Get("Authorization"); len(auth) > 7 && strings.EqualFold(auth[:7], "bearer ") {
		return strings.TrimSpace(auth[7:])
	}
	if k := r.Header.Get("api-key"); k != "" {
		return k
	}
	for _, p := range websocket.Subprotocols(r) {
		if k, ok := strings.CutPrefix(p, "openai-insecure-api-key."); ok {
			return k
		}
	}
	return ""
}

// errorKind maps an HTTP status to the error type and code OpenAI uses for it.
func errorKind(status int) (typ, code string) {
	switch {
	case status == http.StatusUnauthorized:
		return "invalid_request_error", "invalid_api_key"
	case status == http.StatusForbidden:
		return "invalid_request_error", "insufficient_permissions"
	case status == http.StatusTooManyRequests:
		return "requests", "rate_limit_exceeded"
	case status >= 500:
		return "server_error", "server_error"
	default:
		return "invalid_request_error", "invalid_request"
	}
}

// writeHTTPError answers with OpenAI's JSON error shape.
func writeHTTPError(w http.ResponseWriter, status int, typ, code, msg string) {
	writeJSON(w, status, map[string]any{
		"error": map[string]any{"message": msg, "type": typ, "code": code, "param": nil},
	})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v) // the client may be gone; nothing useful to do about it
}

func firstNonEmpty(vals ...string) string {
	for _, v := range vals {
		if v != "" {
			return v
		}
	}
	return ""
}

// PCMPattern is n bytes of a quiet PCM16 sawtooth: recognisable, not
// silence. Every audio delta mockai sends carries it, so that a test can
// tell whether a delta arrived byte for byte.
func PCMPattern(n int) []byte {
	b := make([]byte, n)
	for i := 0; i+1 < n; i += 2 {
		v := int16((i/2)%200*50 - 5000)
		b[i], b[i+1] = byte(v), byte(uint16(v)>>8)
	}
	return b
}

// writeFileAtomic writes data so a reader never sees a half-written file.
func writeFileAtomic(path string, data []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".mockai-cert-*")
	if err != nil {
		return err
	}
	_, err = tmp.Write(data)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(tmp.Name(), 0o644)
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		os.Remove(tmp.Name())
	}
	return err
}

// recordRing keeps the newest max records in arrival order.
type recordRing struct {
	max   int
	buf   []*Record
	start int // index of the oldest record once buf is full
}

func (rr *recordRing) add(r *Record) {
	if len(rr.buf) < rr.max {
		rr.buf = append(rr.buf, r)
		return
	}
	rr.buf[rr.start] = r
	rr.start = (rr.start + 1) % rr.max
}

func (rr *recordRing) list() []Record {
	out := make([]Record, 0, len(rr.buf))
	for i := range rr.buf {
		r := *rr.buf[(rr.start+i)%len(rr.buf)]
		r.Header = r.Header.Clone()
		r.Subprotocols = append([]string(nil), r.Subprotocols...)
		out = append(out, r)
	}
	return out
}
