package mockai

// GPT-Live, OpenAI's second voice protocol (../shared/live-protocol.md has
// the facts and their sources), as far as the gateway's tests need it. A
// Live session exists apart from any one socket: a WebSocket session has a
// primary socket, a WebRTC or SIP session has none (its media would flow
// between the browser or phone and OpenAI), and any session may have
// sidebands attached. So the session is a registry entry (liveSession) that
// sockets join and leave; it ends once, with one reason and one final usage,
// whatever ends it.
//
// Usage is what tests can predict: usage.seconds is the duration of the input
// audio the session received (decoded bytes over the input format's bytes per
// second). A WebRTC or SIP session's simulated media adds MediaChunk of
// audio (MediaInterval by default) per tick, as if someone were talking.
//
// Its parts:
//
//	liveState        this registry, the usage and media schedules, the end of a session
//	checkConfig      the strict session configuration (unknown_parameter)
//	handleLiveWS     WS /v1/live/sessions and WS …/{id}/fork: the primary socket
//	handleAttach     WS …/{id}/attach: sidebands and their reflected audio
//	mountLive        POST /v1/live/sessions (WebRTC), fork, content, call controls, /mock/live

import (
	"math"
	"sync"
	"time"

	"github.com/gorilla/websocket"
)

// LiveConfig is the Live side's schedule and its Live-only faults. The zero
// value is a well-behaved server. It holds only scalars so Configs compare.
type LiveConfig struct {
	// UsageInterval is the period of session.usage.updated (0: 1s; negative:
	// never, only session.closed reports usage).
	UsageInterval time.Duration
	// MediaInterval is the tick of a WebRTC or SIP session's simulated media:
	// each tick adds that much audio to the session's seconds and reflects one
	// input and one output chunk to its sidebands (0: 100ms).
	MediaInterval time.Duration
	// MediaChunk is the audio each media tick adds and reflects (0:
	// MediaInterval, as if in real time): larger, a session's seconds grow
	// faster than the wall clock (a test of billing past the 15 s floor).
	MediaChunk time.Duration
	// MaxDuration is how long a session may last: expires_at in
	// session.started, and then session.closed with reason "expired" (0: 1h).
	MaxDuration time.Duration
	// StartTimeout is how long an upgraded socket may wait for session.start
	// before it gets an error session_start_timeout and close 4000 (0: for
	// ever). How long OpenAI waits is not documented; a warm pool of
	// unstarted sockets is tested against this.
	StartTimeout time.Duration
	// StartCrossed is a fault: every session.start is answered, this long
	// after it came, with StartTimeout's error session_start_timeout and
	// close 4000, as when the upstream's start timer fired just as the
	// session.start was on its way (a warm pool of unstarted sockets must
	// not hand such a socket to a client).
	StartCrossed time.Duration
	// NoClosed is a fault: a session.close is answered by close 1000 without
	// session.closed, so the final usage is never confirmed (what a relay must
	// book as unconfirmed). Also fault=no_closed in the query.
	NoClosed bool
	// MaxSidebands, if positive, is how many sidebands a session may have
	// attached at once; one more is refused 409 too_many_sidebands (whether
	// OpenAI limits sidebands is not documented: a relay that attaches its
	// own metering sideband is tested against this). Negative refuses
	// every sideband.
	MaxSidebands int
	// ClientDelegations: each answer to input audio ends with a
	// session.delegation.created of target client (id del_…, offset_ms
	// at the answer's end), as when the model hands a task to the app,
	// in a session whose delegation is client (omitted, null or type
	// client). Its task is the turn's words (the event carries none).
	ClientDelegations bool
}

const (
	defaultLiveUsageInterval = time.Second
	defaultLiveMediaInterval = 100 * time.Millisecond
	defaultLiveMaxDuration   = time.Hour
	// reflectedBytesPerSec is what sidebands receive: PCM16 24 kHz mono.
	reflectedBytesPerSec = 48000
	// LiveTranscript is what every transcript delta carries.
	LiveTranscript = "Hello from mockai live."
)

func (c LiveConfig) withDefaults() LiveConfig {
	if c.UsageInterval == 0 {
		c.UsageInterval = defaultLiveUsageInterval
	}
	if c.MediaInterval == 0 {
		c.MediaInterval = defaultLiveMediaInterval
	}
	if c.MediaChunk == 0 {
		c.MediaChunk = c.MediaInterval
	}
	if c.MaxDuration == 0 {
		c.MaxDuration = defaultLiveMaxDuration
	}
	return c
}

// Transports of a Live session.
const (
	transportWebSocket = "websocket"
	transportWebRTC    = "webrtc"
	transportSIP       = "sip"
)

// States of a Live session: a SIP session rings until accept or reject.
const (
	liveRinging = "ringing"
	liveActive  = "active"
	liveClosed  = "closed"
)

// LiveSessionRecord is what /mock/live/sessions and Server.LiveSessions show
// of a Live session. It holds the key: test data, never logged.
type LiveSessionRecord struct {
	ID        string  `json:"id"`
	Transport string  `json:"transport"` // websocket, webrtc or sip
	Model     string  `json:"model"`
	Key       string  `json:"key"`
	Store     bool    `json:"store"`
	ForkedOf  string  `json:"forked_of,omitempty"`
	State     string  `json:"state"`            // ringing, active or closed
	Reason    string  `json:"reason,omitempty"` // session.closed reason, or connection_lost / rejected
	Seconds   float64 `json:"seconds"`
	// Closed says whether session.closed was sent (false: usage unconfirmed).
	ClosedSent bool      `json:"closed_sent"`
	Sidebands  int       `json:"sidebands"` // attached now
	Created    time.Time `json:"created"`
	// Actions are the call controls it received, in order (accept, refer ...).
	Actions []string `json:"actions,omitempty"`
}

// liveSession is one Live session. mu guards the mutable fields; the
// sockets it writes to serialize their own frames (session.write).
type liveSession struct {
	srv       *Server
	id        string
	transport string
	key       string
	forkedOf  string
	created   time.Time
	expiresAt time.Time
	// done is closed when the session ends.
	done chan struct{}

	mu        sync.Mutex
	state     string
	model     string
	config    map[string]any // the session configuration as started
	store     bool
	backend   string  // delegation.responses.model, "" without Responses delegation
	inBytes   int64   // input audio received (or simulated)
	inRate    float64 // input audio bytes per second
	outMs     int64   // output timeline, for reflected start_ms/end_ms
	turns     int     // input audio appends so far: each is a turn, answered (scripted texts' index)
	reason    string
	seconds   float64 // final, once closed
	closedOut bool
	primary   *session
	sidebands map[*sideband]struct{}
	actions   []string
}

// liveState is the Server's registry of Live sessions.
type liveState struct {
	mu       sync.Mutex
	sessions map[string]*liveSession
	order    []string // creation order, bounded by maxAppRecords
}

// newLive registers a session. Ended sessions stay (for fork and content)
// until maxAppRecords newer ones push them out.
func (s *Server) newLive(transport, key, model string, config map[string]any) *liveSession {
	now := time.Now()
	ls := &liveSession{
		srv: s, id: newID("live_"), transport: transport, key: key, created: now,
		expiresAt: now.Add(s.cfg.Live.MaxDuration), done: make(chan struct{}),
		state: liveActive, model: model, inRate: reflectedBytesPerSec,
		sidebands: map[*sideband]struct{}{},
	}
	ls.configure(config)
	st := &s.live
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.sessions == nil {
		st.sessions = map[string]*liveSession{}
	}
	if len(st.order) >= maxAppRecords {
		delete(st.sessions, st.order[0])
		st.order = st.order[1:]
	}
	st.sessions[ls.id] = ls
	st.order = append(st.order, ls.id)
	return ls
}

// configure takes the settings mockai acts on from a validated configuration.
func (ls *liveSession) configure(config map[string]any) {
	if config == nil {
		config = map[string]any{}
	}
	ls.config = config
	ls.store, _ = config["store"].(bool)
	ls.inRate = inputBytesPerSec(config)
	ls.backend = ""
	if d, _ := config["delegation"].(map[string]any); d != nil && d["type"] == "responses" {
		r, _ := d["responses"].(map[string]any)
		ls.backend, _ = r["model"].(string)
	}
}

// lookupLive finds a session by id (nil if unknown).
func (s *Server) lookupLive(id string) *liveSession {
	s.live.mu.Lock()
	defer s.live.mu.Unlock()
	return s.live.sessions[id]
}

// LiveSessions returns the Live sessions known, oldest first.
func (s *Server) LiveSessions() []LiveSessionRecord {
	s.live.mu.Lock()
	list := make([]*liveSession, 0, len(s.live.order))
	for _, id := range s.live.order {
		list = append(list, s.live.sessions[id])
	}
	s.live.mu.Unlock()
	out := make([]LiveSessionRecord, 0, len(list))
	for _, ls := range list {
		out = append(out, ls.record())
	}
	return out
}

func (ls *liveSession) record() LiveSessionRecord {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	return LiveSessionRecord{
		ID: ls.id, Transport: ls.transport, Model: ls.model, Key: ls.key, Store: ls.store, ForkedOf: ls.forkedOf,
		State: ls.state, Reason: ls.reason, Seconds: ls.secondsLocked(), ClosedSent: ls.closedOut,
		Sidebands: len(ls.sidebands), Created: ls.created, Actions: append([]string(nil), ls.actions...),
	}
}

// secondsLocked is the cumulative usage: input audio duration, rounded to
// milliseconds. ls.mu is held.
func (ls *liveSession) secondsLocked() float64 {
	if ls.state == liveClosed {
		return ls.seconds
	}
	return math.Round(float64(ls.inBytes)/ls.inRate*1000) / 1000
}

// resource is the session object of session.started, session.updated and
// session.closed: the configuration plus id, model, status and expires_at.
func (ls *liveSession) resource() map[string]any {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	return ls.resourceLocked()
}

// resourceLocked is resource with ls.mu held.
func (ls *liveSession) resourceLocked() map[string]any {
	obj := make(map[string]any, len(ls.config)+4)
	for k, v := range ls.config {
		obj[k] = v
	}
	obj["id"] = ls.id
	obj["model"] = ls.model
	obj["status"] = "active" // always, even in session.closed (the SDK's SessionResource)
	if !ls.srv.cfg.NoExpiresAt {
		obj["expires_at"] = ls.expiresAt.Unix()
	}
	return obj
}

// sockets returns the primary (nil if none) and the sidebands, to write to
// without holding ls.mu.
func (ls *liveSession) sockets() (*session, []*sideband) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	sbs := make([]*sideband, 0, len(ls.sidebands))
	for sb := range ls.sidebands {
		sbs = append(sbs, sb)
	}
	return ls.primary, sbs
}

// broadcast sends ev to the primary socket and every sideband.
func (ls *liveSession) broadcast(ev map[string]any) {
	p, sbs := ls.sockets()
	if p != nil {
		_ = p.send(ev)
	}
	for _, sb := range sbs {
		_ = sb.sess.send(ev)
	}
}

// reflect sends sidebands a chunk of input or output audio with its place on
// the session's timeline, as OpenAI reflects audio to sidebands.
func (ls *liveSession) reflect(typ, field, audio string, startMs, endMs int64) {
	_, sbs := ls.sockets()
	for _, sb := range sbs {
		_ = sb.sess.send(map[string]any{"type": typ, field: audio, "start_ms": startMs, "end_ms": endMs})
	}
}

// usageEvent is session.usage.updated with the cumulative seconds so far.
func (ls *liveSession) usageEvent() map[string]any {
	ls.mu.Lock()
	secs := ls.secondsLocked()
	ls.mu.Unlock()
	return map[string]any{"type": "session.usage.updated", "event_id": newID("event_"),
		"usage": map[string]any{"seconds": secs}, "context_window": map[string]any{"usage_ratio": 0.01}}
}

// schedule runs the session's clock until it ends: session.usage.updated
// every UsageInterval, expiry at expires_at, and for a WebRTC or SIP session
// its simulated media every MediaInterval. It holds a count of the Server's
// WaitGroup, so Close waits for it.
func (ls *liveSession) schedule() {
	defer ls.srv.wg.Done()
	cfg := ls.srv.cfg.Live
	expire := time.NewTimer(time.Until(ls.expiresAt))
	defer expire.Stop()
	var usage, media <-chan time.Time
	if cfg.UsageInterval > 0 {
		t := time.NewTicker(cfg.UsageInterval)
		defer t.Stop()
		usage = t.C
	}
	if ls.transport != transportWebSocket {
		t := time.NewTicker(cfg.MediaInterval)
		defer t.Stop()
		media = t.C
	}
	chunk := PCMPattern(int(cfg.MediaChunk.Milliseconds()) * bytesPerMilli)
	audio := encodeAudio(chunk)
	for {
		select {
		case <-ls.done:
			return
		case <-ls.srv.ctx.Done():
			return
		case <-expire.C:
			ls.end("expired", true)
			return
		case <-usage:
			ls.mu.Lock()
			active := ls.state == liveActive
			ls.mu.Unlock()
			if active {
				ls.broadcast(ls.usageEvent())
			}
		case <-media:
			ls.mu.Lock()
			if ls.state != liveActive {
				ls.mu.Unlock()
				continue
			}
			start := int64(float64(ls.inBytes) / ls.inRate * 1000)
			ls.inBytes += int64(len(chunk))
			end := int64(float64(ls.inBytes) / ls.inRate * 1000)
			ls.outMs = end
			ls.mu.Unlock()
			ls.reflect("session.input_audio.append", "audio", audio, start, end)
			ls.reflect("session.output_audio.delta", "delta", audio, start, end)
		}
	}
}

// start makes the session run its schedule (from session.started on).
func (ls *liveSession) start() bool {
	if !ls.srv.enter() {
		return false
	}
	go ls.schedule()
	return true
}

// end closes the session once: every socket gets session.closed with the
// reason and final usage (unless announce is false: the fault NoClosed, or a
// lost primary), then the primary is closed 1000 and each sideband closed
// 1000 (graceful_close) or dropped. Later calls do nothing.
func (ls *liveSession) end(reason string, announce bool) {
	ls.mu.Lock()
	if ls.state == liveClosed {
		ls.mu.Unlock()
		return
	}
	ls.seconds = ls.secondsLocked()
	ls.state, ls.reason, ls.closedOut = liveClosed, reason, announce
	ls.mu.Unlock()
	close(ls.done)
	p, sbs := ls.sockets()
	if announce {
		ev := map[string]any{"type": "session.closed", "event_id": newID("event_"), "reason": reason,
			"session": ls.resource(), "usage": map[string]any{"seconds": ls.seconds}}
		if p != nil {
			_ = p.send(ev)
		}
		for _, sb := range sbs {
			_ = sb.sess.send(ev)
		}
	}
	// Only a stored session's configuration is needed later (by a fork):
	// drop the others', so long runs do not keep every session's instructions.
	ls.mu.Lock()
	if !ls.store {
		ls.config = nil
	}
	ls.mu.Unlock()
	if p != nil {
		p.closeNormal("session closed")
	}
	for _, sb := range sbs {
		if sb.graceful {
			sb.sess.closeNormal("session closed")
		} else {
			sb.sess.drop()
		}
	}
}

// closeNormal sends close 1000 (the peer's answer ends the read loop).
func (s *session) closeNormal(reason string) {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	s.writeClose(websocket.CloseNormalClosure, reason)
}

// drop ends the connection without a close frame.
func (s *session) drop() {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	s.stopped = true
	_ = s.ws.UnderlyingConn().Close()
}
