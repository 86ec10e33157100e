package poller

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/bytebufferpool"

	"rtgate/frames"
)

// SessionConfig holds the limits and callbacks every session of a gateway
// shares.
type SessionConfig struct {
	// MaxMessage bounds one client message's payload; 0 means no limit.
	MaxMessage int64
	// MaxPending bounds the client bytes held while the upstream connects.
	MaxPending int
	// CloseTimeout is how long a socket may take to answer our close frame
	// (and, for an upstream, to close its TCP connection after the close
	// handshake) before it is closed anyway.
	CloseTimeout time.Duration
	// OnEnd, if set, runs once when both sockets are closed.
	OnEnd func(*Session)
	// UpstreamInvalid, if set, builds the frame the client gets before
	// close 1011 when the upstream sent a frame that must not be relayed
	// (an error event in the upstream's protocol); reason says what was
	// wrong. Without it the client gets the close frame only.
	UpstreamInvalid func(reason string) []byte
	// Redial, if set, is asked for a fresh upstream when a warm socket the
	// session took proved dead before any client frame was forwarded on it.
	// It must not block: it dials elsewhere and then calls AttachUpstream
	// (or DialFailed). It returns false to let the session end instead.
	Redial func(*Session) bool
	// SameFirstFrame, with Redial, says whether the first frame of a
	// redialed upstream (its payload) is one the client already has from
	// the dead warm socket (session.created), so that it is consumed rather
	// than forwarded.
	SameFirstFrame func(payload []byte) bool
	// Resume, if set, is asked to carry the session onto a fresh upstream
	// after a Loss (Session.resume). It must not block: it dials elsewhere and
	// then calls AdoptResumed (or ResumeFailed). It returns false to end
	// the session as without it.
	Resume func(*Session, Loss) bool
	// MidFrameLost, if set, is told that an upstream was lost while a frame
	// towards the client was half sent, which no resume can repair.
	MidFrameLost func(*Session)
}

// upstream connection states, guarded by the upstream side's mu.
const (
	upConnecting = iota
	upReady
	upFailed
)

// side is one socket of a session: its endpoint, where its close handshake
// stands (closeState, closeTable), and the timer that bounds it.
type side struct {
	mu    sync.Mutex
	ep    *Endpoint // nil while the upstream connects
	state closeState
	which frames.Side  // beside state: one word for both (two sides per session)
	got   frames.Close // the close frame that came from the socket
	timer *time.Timer
}

// Session relays one client WebSocket to one upstream WebSocket.
//
// Frames pass through verbatim. Each socket runs its own close handshake
// (closeTable): a close frame from one side is forwarded to the other, so close
// codes and reasons pass through; when one side drops without a close frame,
// the other gets 1011 (upstream lost) or 1001 (client gone) from the gateway.
//
// Locking: each side's mu guards its close state and every write to its
// socket (writes never block, see Endpoint.sendLocked); the upstream side's mu also
// guards upState, the pending queue and the redial state. No code holds both
// sides' locks at once. Reads of the upstream run under its Handle's read
// lock, reads of the client in the client's OnRequest.
type Session struct {
	cfg    *SessionConfig
	client side
	up     side
	handle *Handle // the upstream socket's, once attached

	c2u frames.Scanner // driven only from the client's OnRequest
	u2c frames.Scanner // driven under the upstream Handle's read lock

	// guarded by up.mu
	upState    int
	pending    *bytebufferpool.ByteBuffer // client frames that arrived before the upstream
	warm       bool                       // the upstream came from the warm pool
	wroteUp    bool                       // a client byte went to this upstream socket
	skipFirst  bool                       // consume the next upstream's first frame
	skipNext   bool                       // a redial: the next upstream attached skips its first frame
	cur        *upLink                    // the upstream's link, once attached
	resumes    int                        // upstreams let go of to resume (Session.resume)
	queuedStop bool                       // a close frame is queued behind pending
	resumable  bool                       // kept for continuity (HoldUpstream): set before the relay starts
	redials    int                        // fresh upstreams dialed after a dead warm one
	skip       frameSkipper               // under the Handle's read lock
	hold       func(msg []byte)           // takes the client's first message (HoldFirst)

	fw *farewell // the protocol's graceful end (SetFarewell); nil for none

	clientGone atomic.Bool
	endOnce    sync.Once

	// Bound once so that the read path does not allocate a method value per
	// call.
	fromClientFn   func(frames.Source) error
	fromUpstreamFn func(frames.Source) error

	// For the server's watchdog, which reads them without locks.
	lastActivity atomic.Int64
	upEP         atomic.Pointer[Endpoint] // the upstream's endpoint, once attached
	terminating  atomic.Bool              // Terminate or Abort ran

	infoMu    sync.Mutex
	close     frames.Close // the first close of the session
	closeFrom frames.Side
	closeSeen bool
}

// NewSession starts relaying for an upgraded client. The upstream is attached
// later with AttachUpstream or AdoptWarm (or DialFailed); frames the client
// sends until then are queued in order.
func NewSession(cfg *SessionConfig, client *Endpoint) *Session {
	s := new(Session)
	s.Init(cfg, client)
	return s
}

// Init does NewSession's work on a Session the caller allocated, for a caller
// that keeps the session inside its own per-connection state so that a
// session is one allocation rather than several (server/session's clientConn).
// s must be zero, and must not be copied afterwards: its locks, and the read
// callbacks bound to it, live at that address.
func (s *Session) Init(cfg *SessionConfig, client *Endpoint) {
	s.cfg = cfg
	s.client.ep, s.client.which = client, frames.ClientSide
	s.up.which = frames.UpstreamSide
	s.lastActivity.Store(time.Now().UnixNano())
	s.c2u.Init(frames.ClientSide, cfg.MaxMessage)
	s.u2c.Init(frames.UpstreamSide, 0)
	s.fromClientFn = s.fromClient
	s.fromUpstreamFn = s.fromUpstream
}

// InspectUpstream offers the upstream's text frames to insp (usage
// accounting); call it before an upstream is attached.
func (s *Session) InspectUpstream(insp frames.Inspector) { s.u2c.SetInspector(insp) }

// TranslateUpstream makes the session hand the upstream's messages to t and
// relay what it emits (a provider whose protocol is not the client's:
// frames.Translator); call it before an upstream is attached. What t sends
// back (Output.Reply) goes to the upstream.
//
// A session resumed or redialed onto a fresh upstream gets a fresh
// Translator for it (the new upstream starts its protocol afresh); the
// client's lock orders the change against a relay of the old one.
func (s *Session) TranslateUpstream(t frames.Translator) {
	s.client.mu.Lock()
	defer s.client.mu.Unlock()
	s.u2c.SetTranslator(t)
}

// TranslateClient makes the session hand the client's messages to t and
// relay what it emits upstream; call it before the session relays. What t
// sends back (Output.Reply: an error event for an event the provider has
// no counterpart of) goes to the client.
func (s *Session) TranslateClient(t frames.Translator) { s.c2u.SetTranslator(t) }

// Counters returns frames and bytes relayed each way so far.
func (s *Session) Counters() (framesIn, bytesIn, framesOut, bytesOut uint64) {
	return s.c2u.Frames, s.c2u.Bytes, s.u2c.Frames, s.u2c.Bytes
}

// noteClose remembers the first close of the session, for its record.
func (s *Session) noteClose(c frames.Close, from frames.Side) {
	s.infoMu.Lock()
	if !s.closeSeen {
		s.close, s.closeFrom, s.closeSeen = c, from, true
	}
	s.infoMu.Unlock()
}

// FirstClose returns the first close of the session (a close frame that
// passed, or one the gateway sent) and which side it concerned; ok is false if
// there was none, as when a socket simply dropped.
func (s *Session) FirstClose() (c frames.Close, from frames.Side, ok bool) {
	s.infoMu.Lock()
	defer s.infoMu.Unlock()
	return s.close, s.closeFrom, s.closeSeen
}

// maybeEnd ends the session once both sockets are gone.
func (s *Session) maybeEnd() {
	s.client.mu.Lock()
	cg := s.client.state == closeGone
	s.client.mu.Unlock()
	s.up.mu.Lock()
	ug := s.up.state == closeGone
	s.up.mu.Unlock()
	if !cg || !ug {
		return
	}
	s.endOnce.Do(func() {
		// The scanners are not Reset here (which would hand their pooled
		// buffers back): a read by hand of the upstream (Handle.Start,
		// FinishHandOver, drainLocked) or the client bytes handed in with
		// the request (ClientBytes) may still be using them on another
		// goroutine, without the lock of the side whose close got here, and
		// a buffer back in the pool while a read writes into it would reach
		// another session. The garbage collector takes them with the
		// session.
		if s.cfg.OnEnd != nil {
			s.cfg.OnEnd(s)
		}
	})
}
