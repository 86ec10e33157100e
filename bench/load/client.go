package load

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/gorilla/websocket"
)

const (
	// readLimit bounds one incoming message. The API allows 15 MiB client
	// events; server events are smaller, so 32 MiB never cuts a real one.
	readLimit = 32 << 20
	// audioChunk is one input_audio_buffer.append: 20 ms of 24 kHz PCM16 mono.
	audioChunk      = 20 * time.Millisecond
	audioChunkBytes = 960
	// DefaultAudioLength is how much input audio a call streams with Config.Audio.
	DefaultAudioLength = time.Second
)

// Config says where calls go and how they behave.
type Config struct {
	// URL is the ws:// or wss:// endpoint (see BuildURL).
	URL string
	// Key is sent as "Authorization: Bearer <Key>" when not empty.
	Key string
	// Timeout bounds a whole call, from its start to the clean close.
	Timeout time.Duration
	// TLS configures wss:// (nil: system roots).
	TLS *tls.Config
	// SourceIPs, when set, are used round-robin as local addresses.
	SourceIPs []net.IP
	// Audio streams AudioLength of input audio before response.create.
	Audio       bool
	AudioLength time.Duration
	// Protocol is what calls speak (default Realtime). For Live the model
	// goes into session.start: Model (default gpt-live-1); for Gemini into
	// setup (default gemini-3.8-live, "models/" added), and Key goes in
	// x-goog-api-key instead of Authorization.
	Protocol Protocol
	Model    string
	// BufferSize is gorilla's per-connection read buffer and pooled write
	// buffer size (default 4 KiB). Hold mode uses 1 KiB to keep idle
	// sessions small.
	BufferSize int
	// Turns is the number of exchanges per call (0 or 1: one); VAD makes
	// them server-VAD turns with VADSilence (default 500 ms) as the
	// silence window. See Client.callTurns.
	Turns      int
	VAD        bool
	VADSilence time.Duration
	// vadUpdate is the session.update a VAD call sends.
	vadUpdate []byte
	// Flow is what each turn sends instead of turns.go's manual or VAD
	// turns (flows.go); Realtime only, without VAD or Audio.
	Flow Flow
}

// Client makes calls. It is safe for concurrent use.
type Client struct {
	cfg    Config
	dialer websocket.Dialer
	header http.Header
	nextIP atomic.Uint64
	// liveStart is the session.start of a Live call (nil otherwise).
	liveStart []byte
	// geminiSetup is the setup of a Gemini call (nil otherwise).
	geminiSetup []byte
}

// NewClient checks cfg and prepares a client.
func NewClient(cfg Config) (*Client, error) {
	if cfg.URL == "" {
		return nil, errors.New("load: no target URL")
	}
	if cfg.Timeout <= 0 {
		return nil, fmt.Errorf("load: call timeout must be positive, got %v", cfg.Timeout)
	}
	if cfg.Audio && cfg.AudioLength <= 0 {
		cfg.AudioLength = DefaultAudioLength
	}
	if cfg.BufferSize <= 0 {
		cfg.BufferSize = 4096
	}
	if err := checkTurns(&cfg); err != nil {
		return nil, err
	}
	if err := checkFlow(&cfg); err != nil {
		return nil, err
	}
	c := &Client{cfg: cfg, header: http.Header{}}
	switch cfg.Protocol {
	case "", ProtocolRealtime:
	case ProtocolLive:
		msg, err := liveStart(cfg.Model)
		if err != nil {
			return nil, fmt.Errorf("load: session.start: %w", err)
		}
		c.liveStart = msg
	case ProtocolGemini:
		msg, err := geminiSetup(cfg.Model)
		if err != nil {
			return nil, fmt.Errorf("load: gemini setup: %w", err)
		}
		c.geminiSetup = msg
	default:
		return nil, fmt.Errorf("load: unknown protocol %q", cfg.Protocol)
	}
	switch {
	case cfg.Key == "":
	case cfg.Protocol == ProtocolGemini:
		c.header.Set(geminiKeyHeader, cfg.Key)
	default:
		c.header.Set("Authorization", "Bearer "+cfg.Key)
	}
	c.dialer = websocket.Dialer{
		NetDialContext:  c.netDial,
		TLSClientConfig: cfg.TLS,
		ReadBufferSize:  cfg.BufferSize,
		WriteBufferSize: cfg.BufferSize,
		// Pooled write buffers: an idle connection holds none.
		WriteBufferPool: &sync.Pool{},
	}
	return c, nil
}

func (c *Client) netDial(ctx context.Context, network, addr string) (net.Conn, error) {
	d := net.Dialer{}
	if n := len(c.cfg.SourceIPs); n > 0 {
		ip := c.cfg.SourceIPs[(c.nextIP.Add(1)-1)%uint64(n)]
		d.LocalAddr = &net.TCPAddr{IP: ip}
		d.Control = bindNoPort
	}
	return d.DialContext(ctx, network, addr)
}

// session is an open Realtime session: upgraded and session.created seen.
type session struct {
	conn     *websocket.Conn
	deadline time.Time
	buf      []byte
	// audio receives the input-audio writer's result (nil without audio).
	audio     chan error
	audioSeen bool
	audioErr  error
	stopCall  func() bool
}

// Call runs one complete call that was meant to start at start. ctx
// cancels it (class "cancelled"); it never takes longer than the timeout.
func (c *Client) Call(ctx context.Context, start time.Time) Sample {
	return c.CallFor(ctx, start, 0)
}

// CallFor is Call for a call of the given length (see Length): once its
// exchange is done, the call keeps its session open until length has
// passed since start, then closes it. A length past the call's timeout
// ends in timeout_done.
func (c *Client) CallFor(ctx context.Context, start time.Time, length time.Duration) Sample {
	var s Sample
	switch {
	case c.liveStart != nil:
		s = c.callLive(ctx, start, length)
	case c.geminiSetup != nil:
		s = c.callGemini(ctx, start, length)
	case c.cfg.Turns > 1 || c.cfg.VAD || c.cfg.Flow != FlowTurns:
		s = c.callTurns(ctx, start, length)
	default:
		var sess *session
		if sess, s = c.open(ctx, start, c.cfg.Audio, callReadBuffer); sess != nil {
			c.respond(ctx, sess, &s, length)
			sess.close()
		}
	}
	s.Length = length
	return s
}

// openIdle dials and waits for session.created, for hold mode. On failure
// it returns a nil session and the failed sample; otherwise the caller owns
// the connection. The per-call deadline stops applying once it returns.
func (c *Client) openIdle(ctx context.Context, start time.Time) (*session, Sample) {
	if c.liveStart != nil || c.geminiSetup != nil {
		return nil, Sample{Start: start, Failure: "protocol", Detail: "hold and voice modes speak the Realtime protocol only"}
	}
	sess, s := c.open(ctx, start, false, openReadBuffer)
	if sess != nil {
		sess.stopCall()
		_ = sess.conn.NetConn().SetDeadline(time.Time{})
		sess.buf = nil
	}
	return sess, s
}

// Open dials one session and waits for session.created, as hold mode does,
// for callers that drive the session themselves (the peer comparison's echo
// loads): the caller owns the connection, which has no deadline set. A
// failed open returns nil and the sample naming its failure class.
func (c *Client) Open(ctx context.Context) (*websocket.Conn, Sample) {
	sess, s := c.openIdle(ctx, time.Now())
	if sess == nil {
		return nil, s
	}
	return sess.conn, s
}

// Initial capacity of a call's message buffer: an audio delta of 100 ms is
// about 6.5 KB of JSON, so calls start at 8 KiB; hold mode only reads
// session.created (about 1.5 KB) and keeps memory per session small.
const (
	callReadBuffer = 8 << 10
	openReadBuffer = 2 << 10
)

func (c *Client) open(ctx context.Context, start time.Time, audio bool, bufSize int) (*session, Sample) {
	sess, s := c.dial(ctx, start, bufSize)
	if sess == nil {
		return nil, s
	}
	upgraded := time.Now()
	if audio {
		sess.streamAudio(c.cfg.AudioLength, msgAudioAppend, msgAudioCommit)
	}
	for {
		msg, err := sess.read()
		if err != nil {
			s.Failure, s.Detail = classifyRead(ctx, err, s.Reached)
			sess.close()
			return nil, s
		}
		typ, err := EventType(msg)
		if err != nil {
			s.Failure, s.Detail = "protocol", err.Error()
			sess.close()
			return nil, s
		}
		switch typ {
		case evSessionCreated:
			s.Session = time.Since(upgraded)
			s.Reached = PhaseSession
			return sess, s
		case evError:
			s.Failure, s.Detail = errorEvent(msg, c.cfg.Key)
			sess.close()
			return nil, s
		}
	}
}

// dial opens the call's socket (the dial phase): on failure a nil session
// and the failed sample. The session's deadline is the call's.
func (c *Client) dial(ctx context.Context, start time.Time, bufSize int) (*session, Sample) {
	s := Sample{Start: start}
	deadline := start.Add(c.cfg.Timeout)
	dctx, cancel := context.WithDeadline(ctx, deadline)
	conn, resp, err := c.dialer.DialContext(dctx, c.cfg.URL, c.header)
	cancel()
	if resp != nil && resp.Body != nil {
		_ = resp.Body.Close()
	}
	if err != nil {
		s.Failure, s.Detail = classifyDial(ctx, err, resp)
		return nil, s
	}
	s.Dial = time.Since(start)
	s.Reached = PhaseDial

	conn.SetReadLimit(readLimit)
	_ = conn.NetConn().SetDeadline(deadline)
	sess := &session{conn: conn, deadline: deadline, buf: make([]byte, 0, bufSize)}
	// Ctrl-C: pull the deadline in so a blocked read returns at once.
	sess.stopCall = context.AfterFunc(ctx, func() { _ = conn.NetConn().SetDeadline(time.Unix(1, 0)) })
	return sess, s
}

// streamAudio starts the input-audio writer: length of real-time appends
// (each the message appendMsg), then commit unless it is nil.
func (sess *session) streamAudio(length time.Duration, appendMsg, commit []byte) {
	sess.audio = make(chan error, 1)
	go func() { sess.audio <- streamAudio(sess.conn, length, appendMsg, commit) }()
}

// respond asks for a response and follows it to a clean close, which
// waits until length has passed since the call's start.
func (c *Client) respond(ctx context.Context, sess *session, s *Sample, length time.Duration) {
	fail := func(class, detail string) { s.Failure, s.Detail = class, detail }
	if err := sess.waitAudio(); err != nil {
		fail(classifyRead(ctx, err, s.Reached))
		return
	}
	if err := sess.conn.WriteMessage(websocket.TextMessage, msgResponseCreate); err != nil {
		fail(classifyRead(ctx, err, s.Reached))
		return
	}
	asked := time.Now()
	for {
		msg, err := sess.read()
		if err != nil {
			fail(classifyRead(ctx, err, s.Reached))
			return
		}
		typ, err := EventType(msg)
		if err != nil {
			fail("protocol", err.Error())
			return
		}
		switch typ {
		case evAudioDeltaGA, evAudioDeltaBeta:
			if s.Reached < PhaseFirstAudio {
				s.FirstAudio = time.Since(asked)
				s.Reached = PhaseFirstAudio
			}
		case evError:
			fail(errorEvent(msg, c.cfg.Key))
			return
		case evResponseDone:
			status, err := responseStatus(msg)
			switch {
			case err != nil:
				fail("protocol", err.Error())
			case status != "" && status != "completed":
				fail("response_"+sanitizeClass(status), "response.done status "+status)
			case s.Reached < PhaseFirstAudio:
				fail("no_audio", "response.done without an audio delta")
			}
			if s.Failure != "" {
				return
			}
			if err := sess.hold(ctx, s.Start.Add(length), &s.Held); err != nil {
				fail(classifyRead(ctx, err, s.Reached))
				return
			}
			if err := sess.closeHandshake(); err != nil {
				fail(classifyRead(ctx, err, s.Reached))
				return
			}
			s.Total = time.Since(s.Start)
			s.Reached = PhaseDone
			return
		}
	}
}

// read returns the next text message, reusing the session's buffer.
func (sess *session) read() ([]byte, error) { return sess.readMessage(false) }

// readMessage returns the next data message, reusing the session's buffer:
// text, or binary too when binaryOK (Gemini sends its JSON in binary frames).
func (sess *session) readMessage(binaryOK bool) ([]byte, error) {
	mt, r, err := sess.conn.NextReader()
	if err != nil {
		return nil, err
	}
	if mt != websocket.TextMessage && (!binaryOK || mt != websocket.BinaryMessage) {
		return nil, errBinary
	}
	buf := sess.buf[:0]
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
	}
	sess.buf = buf
	return buf, nil
}

var errBinary = errors.New("unexpected binary frame")

// hold keeps the session open until until (a call's length) or ctx ends,
// and adds the time it waited to held. It reads nothing meanwhile: a late
// event waits in the socket and the close handshake drains it; a server
// that closed meanwhile fails that handshake.
func (sess *session) hold(ctx context.Context, until time.Time, held *time.Duration) error {
	began := time.Now()
	d := until.Sub(began)
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	defer func() { *held += time.Since(began) }()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// closeHandshake sends close 1000 and waits for the server's close frame.
func (sess *session) closeHandshake() error {
	msg := websocket.FormatCloseMessage(websocket.CloseNormalClosure, "")
	if err := sess.conn.WriteControl(websocket.CloseMessage, msg, sess.deadline); err != nil {
		return err
	}
	for {
		_, r, err := sess.conn.NextReader()
		if err != nil {
			var ce *websocket.CloseError
			if errors.As(err, &ce) && (ce.Code == websocket.CloseNormalClosure || ce.Code == websocket.CloseNoStatusReceived) {
				return nil
			}
			return err
		}
		// Late events after response.done are drained, not judged.
		if _, err := io.Copy(io.Discard, r); err != nil {
			return err
		}
	}
}

func (sess *session) close() {
	if sess.stopCall != nil {
		sess.stopCall()
	}
	// Pull the deadline in so an audio writer blocked on a full socket
	// returns, then wait for it so no goroutine outlives the call.
	if sess.audio != nil && !sess.audioSeen {
		_ = sess.conn.NetConn().SetDeadline(time.Unix(1, 0))
		_ = sess.waitAudio()
	}
	_ = sess.conn.Close()
}

// waitAudio waits for the input-audio writer (if any) and returns its error.
func (sess *session) waitAudio() error {
	if sess.audio == nil {
		return nil
	}
	if !sess.audioSeen {
		sess.audioErr = <-sess.audio
		sess.audioSeen = true
	}
	return sess.audioErr
}

// streamAudio sends appendMsg (20 ms of silence) for length in real time,
// then commit unless it is nil.
func streamAudio(conn *websocket.Conn, length time.Duration, appendMsg, commit []byte) error {
	chunks := int((length + audioChunk - 1) / audioChunk)
	tick := time.NewTicker(audioChunk)
	defer tick.Stop()
	for i := range chunks {
		if i > 0 {
			<-tick.C
		}
		if err := conn.WriteMessage(websocket.TextMessage, appendMsg); err != nil {
			return err
		}
	}
	if commit == nil {
		return nil
	}
	return conn.WriteMessage(websocket.TextMessage, commit)
}

// classifyDial names a failed dial+upgrade.
func classifyDial(ctx context.Context, err error, resp *http.Response) (class, detail string) {
	switch {
	case ctx.Err() != nil:
		return "cancelled", "run interrupted"
	case errors.Is(err, websocket.ErrBadHandshake) && resp != nil:
		return fmt.Sprintf("handshake_%d", resp.StatusCode), "upgrade answered " + resp.Status
	case isTimeout(err):
		return "timeout_dial", err.Error()
	default:
		return "dial", err.Error()
	}
}

// classifyRead names a failure while reading or writing after the upgrade;
// reached is the last phase completed.
func classifyRead(ctx context.Context, err error, reached Phase) (class, detail string) {
	var ce *websocket.CloseError
	switch {
	case ctx.Err() != nil:
		return "cancelled", "run interrupted"
	case errors.As(err, &ce):
		return fmt.Sprintf("unexpected_close_%d", ce.Code), fmt.Sprintf("closed during %s: %v", reached, err)
	case isTimeout(err):
		return "timeout_" + reached.String(), err.Error()
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE),
		errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, net.ErrClosed):
		return "unexpected_close_1006", fmt.Sprintf("connection lost during %s: %v", reached, err)
	default:
		return "protocol", err.Error()
	}
}

func isTimeout(err error) bool {
	if errors.Is(err, os.ErrDeadlineExceeded) || errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
