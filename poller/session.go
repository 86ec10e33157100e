package poller

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cloudwego/netpoll"
	"github.com/gobwas/ws"

	"rtgate/frames"
)

// Side names the two sockets of a session.
type Side uint8

const (
	ClientSide Side = iota
	UpstreamSide
)

func (s Side) String() string {
	if s == ClientSide {
		return "client"
	}
	return "upstream"
}

// SessionConfig holds the limits every session of a gateway shares.
type SessionConfig struct {
	// MaxMessage bounds one client message's payload; 0 means no limit.
	MaxMessage int64
	// MaxPending bounds the client bytes held while the upstream connects.
	MaxPending int
	// CloseTimeout is how long a socket may take to answer our close frame
	// before it is closed anyway.
	CloseTimeout time.Duration
	// OnEnd, if set, runs once when both sockets are closed.
	OnEnd func(*Session)
	// OnFirstUpstreamFrame, if set, runs once the first upstream frame
	// (session.created) has been sent to the client.
	OnFirstUpstreamFrame func(*Session)
}

// upstream connection states, guarded by the upstream endpoint's mu.
const (
	upConnecting = iota
	upReady
	upFailed
)

// Session relays one client WebSocket to one upstream WebSocket.
//
// Frames pass through verbatim. Each socket runs its own close handshake: a
// socket is closed once a close frame has gone to it and one has come from it
// (or CloseTimeout after ours went, or when it drops). A close frame from one
// side is forwarded to the other, so close codes and reasons pass through;
// when one side drops without a close frame, the other gets 1011 (upstream
// lost) or 1001 (client gone) from the gateway.
//
// Locking: each Endpoint's mu guards writes to that socket and its close
// state; the upstream's mu also guards upState and the pending queue. No code
// holds both at once.
type Session struct {
	cfg    *SessionConfig
	client *Endpoint
	up     *Endpoint

	c2u frames.Scanner // driven only from the client's OnRequest
	u2c frames.Scanner // driven from the dialer once, then the upstream's OnRequest

	// upReadMu serialises reading the upstream: attaching (which forwards
	// the frames that came with the socket) and OnRequest.
	upReadMu   sync.Mutex
	upState    int
	pending    *netpoll.LinkBuffer // client frames that arrived before the upstream
	pendingLen int

	clientGone atomic.Bool
	endOnce    sync.Once

	// Bound once so that the read path does not allocate a method value per
	// call.
	fromClientFn   func(frames.Source) error
	fromUpstreamFn func(frames.Source) error

	// Start is when the client's upgrade completed.
	Start time.Time
	// PoolHit says the upstream came from the warm pool. The server sets it
	// before any upstream event can run.
	PoolHit bool

	firstFrameSent bool // guarded by upReadMu (the upstream read path)

	// For the server's watchdog, which reads them without locks: when
	// either side last sent anything, and since when a flush to each side
	// has been blocked (0 when none is in progress).
	lastActivity     atomic.Int64
	clientFlushSince atomic.Int64
	upFlushSince     atomic.Int64
	upConn           atomic.Value // netpoll.Connection of the upstream, once attached
	terminating      atomic.Bool  // Terminate or Abort ran

	infoMu    sync.Mutex
	close     frames.Close // the first close of the session
	closeFrom Side
	closeSeen bool
}

// NewSession starts relaying for an upgraded client. The upstream is attached
// later with AttachUpstream (or DialFailed); frames the client sends until then
// are queued in order.
func NewSession(cfg *SessionConfig, client *Endpoint) *Session {
	s := &Session{cfg: cfg, client: client, up: &Endpoint{}, Start: time.Now()}
	s.lastActivity.Store(s.Start.UnixNano())
	s.c2u.Init(frames.FromClient, cfg.MaxMessage)
	s.u2c.Init(frames.FromServer, 0)
	s.fromClientFn = s.fromClient
	s.fromUpstreamFn = s.fromUpstream
	return s
}

// InspectUpstream offers the upstream's text frames to insp (usage
// accounting); call it before an upstream is attached.
func (s *Session) InspectUpstream(insp frames.Inspector) { s.u2c.SetInspector(insp) }

// Counters returns frames and bytes relayed each way so far.
func (s *Session) Counters() (framesIn, bytesIn, framesOut, bytesOut uint64) {
	return s.c2u.Frames, s.c2u.Bytes, s.u2c.Frames, s.u2c.Bytes
}

// ClientReadable forwards what the client sent. The server calls it from the
// client connection's OnRequest.
func (s *Session) ClientReadable() {
	s.lastActivity.Store(time.Now().UnixNano())
	if err := s.client.read(s.fromClientFn); err != nil {
		s.client.closeNow()
	}
}

// ClientBytes forwards bytes the client sent that the server already holds:
// frames that arrived in the same read as the HTTP upgrade request.
func (s *Session) ClientBytes(b []byte) {
	if err := s.fromClient(frames.NewByteSource(b)); err != nil {
		s.client.closeNow()
	}
}

// ClientGone is the client socket's close callback.
func (s *Session) ClientGone() {
	s.clientGone.Store(true)
	s.gone(s.client)
}

func (s *Session) fromClient(src frames.Source) error {
	for src.Len() > 0 {
		s.up.mu.Lock()
		var dst frames.Sink
		queued := false
		switch {
		case s.up.closeSent || s.up.closed || s.upState == upFailed:
			// nowhere to go: the frames are still scanned, for the
			// client's close frame
		case s.upState == upConnecting:
			dst, queued = pendingSink{s}, true
		default:
			dst = s.up.sink()
		}
		cl, err := s.c2u.Forward(src, dst)
		if cl != nil && dst != nil {
			s.markCloseSent(s.up)
		}
		var werr error
		if dst != nil && !queued {
			s.upFlushSince.Store(s.lastActivity.Load())
			werr = s.up.flush()
			s.upFlushSince.Store(0)
		}
		overflow := queued && s.pendingLen > s.cfg.MaxPending
		s.up.mu.Unlock()

		if werr != nil {
			s.up.closeNow()
		}
		if overflow && err == nil {
			err = &frames.ProtocolError{Code: ws.StatusMessageTooBig, Reason: "too much data before the upstream connected"}
			s.c2u.Reset()
		}
		if pe, ok := err.(*frames.ProtocolError); ok { // not errors.As: no allocation per read
			s.clientProtocolError(pe)
			continue // the scanner now discards the rest
		}
		if err != nil {
			return err
		}
		if cl != nil {
			s.noteClose(*cl, ClientSide)
			s.markCloseRecv(s.client)
		}
	}
	return nil
}

func (s *Session) fromUpstream(src frames.Source) error {
	for src.Len() > 0 {
		s.client.mu.Lock()
		var dst frames.Sink
		if !s.client.closeSent && !s.client.closed {
			dst = s.client.sink()
		}
		cl, err := s.u2c.Forward(src, dst)
		if cl != nil && dst != nil {
			s.markCloseSent(s.client)
		}
		var werr error
		if dst != nil {
			// A flush blocks while the client does not read; the
			// watchdog (Stalled) looks at how long.
			s.clientFlushSince.Store(s.lastActivity.Load())
			werr = s.client.flush()
			s.clientFlushSince.Store(0)
		}
		s.client.mu.Unlock()
		if !s.firstFrameSent && s.u2c.Frames > 0 && werr == nil {
			s.firstFrameSent = true
			if s.cfg.OnFirstUpstreamFrame != nil {
				s.cfg.OnFirstUpstreamFrame(s)
			}
		}

		if werr != nil {
			s.client.closeNow()
		}
		if pe, ok := err.(*frames.ProtocolError); ok {
			s.upstreamProtocolError(pe)
			continue
		}
		if err != nil {
			return err
		}
		if cl != nil {
			s.noteClose(*cl, UpstreamSide)
			s.markCloseRecv(s.up)
		}
	}
	return nil
}

// AttachUpstream connects the session to a freshly dialed upstream socket:
// queued client frames go first, then bytes the upstream sent with its 101
// response (preface; that is usually where session.created is), then the
// socket is handed to the reactor with the session as its owner.
func (s *Session) AttachUpstream(h *Handle, preface []byte) {
	// Attaching may close the socket (a client that left meanwhile gets its
	// close answered at once): be told of it.
	h.SetOwner(s)
	h.WatchClose()
	s.upReadMu.Lock()
	s.attachLocked(h.ep, preface)
	s.upReadMu.Unlock()
	h.Start(s)
}

// AdoptWarm tries to take an upstream socket that is already connected and
// past session.created. take must make the session the socket's owner (with
// Handle.SetOwner) atomically with taking it, and return the socket with the
// frames it holds (session.created), or nil on a miss. Until AdoptWarm
// returns, upstream events wait, so nothing overtakes the held frames.
func (s *Session) AdoptWarm(take func(Owner) (*Handle, []byte)) bool {
	s.upReadMu.Lock()
	defer s.upReadMu.Unlock()
	h, held := take(s)
	if h == nil {
		return false
	}
	s.attachLocked(h.ep, held)
	return true
}

// attachLocked installs the upstream socket. Callers hold upReadMu.
func (s *Session) attachLocked(up *Endpoint, preface []byte) {
	s.up.mu.Lock()
	s.up.conn, s.up.tls, s.up.nb = up.conn, up.tls, up.nb
	s.upState = upReady
	s.up.mu.Unlock()
	s.up.guard(up.conn)
	s.upConn.Store(up.conn)
	s.up.mu.Lock()
	var werr error
	if s.pending != nil {
		werr = s.flushPending()
	}
	if s.up.closeSent {
		s.markCloseSent(s.up) // a close queued while dialing: start its clock now
	}
	s.up.mu.Unlock()

	if werr != nil {
		s.up.closeNow()
		return
	}
	// An upstream that already closed may still have sent frames first
	// (session.created, then a close): forward what it sent before its
	// close callback tells the client it is gone.
	if s.clientGone.Load() {
		s.tellGone(s.up, ClientSide)
	}
	if len(preface) > 0 {
		if err := s.fromUpstream(frames.NewByteSource(preface)); err != nil {
			s.up.closeNow()
			return
		}
	}
	// Read by hand once before netpoll takes over: a TLS connection may
	// hold decrypted bytes that netpoll will never announce.
	if err := s.up.read(s.fromUpstreamFn); err != nil {
		s.up.closeNow()
	}
}

// UpstreamReadable forwards what the upstream sent; it is the upstream
// socket's OnRequest (through its Handle).
func (s *Session) UpstreamReadable() {
	s.lastActivity.Store(time.Now().UnixNano())
	s.upReadMu.Lock()
	defer s.upReadMu.Unlock()
	if err := s.up.read(s.fromUpstreamFn); err != nil {
		s.up.closeNow()
	}
}

// UpstreamGone is the upstream socket's close callback.
func (s *Session) UpstreamGone() { s.gone(s.up) }

// flushPending sends the queued client frames upstream. Callers hold up.mu.
func (s *Session) flushPending() error {
	p := s.pending
	s.pending, s.pendingLen = nil, 0
	if p.Len() == 0 {
		return p.Close()
	}
	if s.up.tls != nil {
		b, err := p.Next(p.Len())
		if err == nil {
			_, err = s.up.tls.Write(b)
		}
		_ = p.Close()
		return err
	}
	w := s.up.conn.Writer()
	if err := w.Append(p); err != nil {
		return err
	}
	return w.Flush()
}

// DialFailed reports that the upstream could not be reached. The client gets
// an OpenAI-shaped error event and close 1011.
func (s *Session) DialFailed(status int) {
	s.up.mu.Lock()
	s.upState = upFailed
	if s.pending != nil {
		_ = s.pending.Close()
		s.pending, s.pendingLen = nil, 0
	}
	s.up.closed, s.up.gone = true, true
	s.up.mu.Unlock()

	msg := "the upstream could not be reached"
	if status != 0 {
		msg = fmt.Sprintf("the upstream refused the connection with HTTP %d", status)
	}
	s.sendClientError("upstream_unavailable", msg, status, ws.StatusInternalServerError, "upstream unavailable")
	s.maybeEnd()
}

// Cancel ends a session that will never get an upstream (its client left
// before the upgrade completed); it ends once the client socket is gone.
func (s *Session) Cancel() {
	s.up.mu.Lock()
	s.upState = upFailed
	s.up.closed, s.up.gone = true, true
	s.up.mu.Unlock()
	s.maybeEnd()
}

// clientProtocolError answers a frame the client must not have sent: close
// with the scanner's code to the client, and 1001 to the upstream.
func (s *Session) clientProtocolError(pe *frames.ProtocolError) {
	s.client.mu.Lock()
	if !s.client.closeSent && !s.client.closed {
		_ = s.client.writeFrame(frames.AppendClose(nil, pe.Code, pe.Reason, false))
		s.markCloseSent(s.client)
	}
	s.client.mu.Unlock()
	s.noteClose(frames.Close{Code: pe.Code, Reason: pe.Reason}, ClientSide)
	s.closeUpstream(ws.StatusGoingAway, "client protocol error")
}

// upstreamProtocolError handles a frame the upstream must not have sent: the
// client hears about it as an error event and 1011.
func (s *Session) upstreamProtocolError(pe *frames.ProtocolError) {
	s.sendClientError("upstream_protocol_error", "the upstream sent an invalid frame: "+pe.Reason, 0, ws.StatusInternalServerError, "upstream protocol error")
	s.noteClose(frames.Close{Code: pe.Code, Reason: pe.Reason}, UpstreamSide)
	s.closeUpstream(pe.Code, pe.Reason)
}

// closeUpstream sends the upstream a close frame of the gateway's own, or
// queues it if the upstream is still connecting.
func (s *Session) closeUpstream(code ws.StatusCode, reason string) {
	s.up.mu.Lock()
	if s.up.closeSent || s.up.closed || s.upState == upFailed {
		s.up.mu.Unlock()
		return
	}
	frame := frames.AppendClose(nil, code, reason, true)
	abort := false
	switch {
	case s.upState == upConnecting:
		_, _ = pendingSink{s}.WriteBinary(frame)
		s.up.closeSent = true
	case s.c2u.MidFrame():
		// Half a client frame went upstream; a close frame now would be
		// read as its payload.
		abort = true
	default:
		_ = s.up.writeFrame(frame)
		s.markCloseSent(s.up)
	}
	s.up.mu.Unlock()
	if abort {
		s.up.closeNow()
	}
}

// sendClientError sends the client an OpenAI-shaped error event and a close
// frame, unless a close frame already went to it.
func (s *Session) sendClientError(code, message string, status int, closeCode ws.StatusCode, closeReason string) {
	ev := errorEvent{Type: "error", EventID: newEventID()}
	ev.Error.Type = "server_error"
	ev.Error.Code = code
	ev.Error.Message = message
	ev.Error.Status = status
	body, _ := json.Marshal(ev)
	frame := frames.AppendFrame(nil, ws.OpText, body, false)
	frame = frames.AppendClose(frame, closeCode, closeReason, false)

	s.client.mu.Lock()
	sent := false
	if !s.client.closeSent && !s.client.closed && !s.u2c.MidFrame() {
		_ = s.client.writeFrame(frame)
		s.markCloseSent(s.client)
		sent = true
	}
	recv := s.client.closeRecv
	s.client.mu.Unlock()
	if sent {
		s.noteClose(frames.Close{Code: closeCode, Reason: closeReason}, UpstreamSide)
	}
	if recv {
		s.client.closeNow()
	}
}

// markCloseSent records that a close frame went to e and starts the clock on
// its answer. Callers hold e.mu.
func (s *Session) markCloseSent(e *Endpoint) {
	e.closeSent = true
	if !e.closeRecv && e.timer == nil && s.cfg.CloseTimeout > 0 {
		e.timer = time.AfterFunc(s.cfg.CloseTimeout, e.closeNow)
	}
}

// markCloseRecv records a close frame from e, closing e if ours went already.
func (s *Session) markCloseRecv(e *Endpoint) {
	e.mu.Lock()
	e.closeRecv = true
	done := e.closeSent
	e.mu.Unlock()
	if done {
		e.closeNow()
	}
}

// gone is the close callback of either socket: nothing more will come from
// it. The other side learns of it, and the session ends when both are gone.
func (s *Session) gone(e *Endpoint) {
	e.mu.Lock()
	already := e.gone
	e.gone, e.closed = true, true
	if e.timer != nil {
		e.timer.Stop()
	}
	e.mu.Unlock()
	if already {
		return
	}
	if e == s.client {
		s.tellGone(s.up, ClientSide)
	} else {
		s.tellGone(s.client, UpstreamSide)
	}
	s.maybeEnd()
}

// tellGone tells socket o that the socket on side lost went away: a close
// frame of the gateway's own if o has not had one yet, then o is closed once
// it answers.
func (s *Session) tellGone(o *Endpoint, lost Side) {
	o.mu.Lock()
	if o.conn == nil || o.gone {
		o.mu.Unlock()
		return // an upstream still dialing; the dialer sees clientGone
	}
	abort := false
	if !o.closeSent && !o.closed {
		var frame []byte
		if lost == ClientSide {
			if s.c2u.MidFrame() {
				abort = true
			} else {
				frame = frames.AppendClose(nil, ws.StatusGoingAway, "client went away", true)
			}
		} else {
			if s.u2c.MidFrame() {
				abort = true
			} else if o.closeRecv {
				// The client started the close; answer it as the
				// upstream would have.
				c, _, _ := s.FirstClose()
				frame = frames.AppendClose(nil, c.Code, c.Reason, false)
				if c.Code == ws.StatusNoStatusRcvd {
					frame = frames.AppendFrame(nil, ws.OpClose, nil, false)
				}
			} else {
				frame = frames.AppendClose(nil, ws.StatusInternalServerError, "upstream connection lost", false)
			}
		}
		if frame != nil {
			_ = o.writeFrame(frame)
			s.markCloseSent(o)
		}
	}
	closeNow := abort || o.closeRecv
	o.mu.Unlock()
	if lost == UpstreamSide {
		s.noteClose(frames.Close{Code: ws.StatusAbnormalClosure, Reason: "upstream connection lost"}, UpstreamSide)
	} else {
		s.noteClose(frames.Close{Code: ws.StatusAbnormalClosure, Reason: "client connection lost"}, ClientSide)
	}
	if closeNow {
		o.closeNow()
	}
}

// maybeEnd ends the session once both sockets are gone.
func (s *Session) maybeEnd() {
	s.client.mu.Lock()
	cg := s.client.gone
	s.client.mu.Unlock()
	s.up.mu.Lock()
	ug := s.up.gone
	s.up.mu.Unlock()
	if !cg || !ug {
		return
	}
	s.endOnce.Do(func() {
		s.c2u.Reset()
		s.u2c.Reset()
		if s.cfg.OnEnd != nil {
			s.cfg.OnEnd(s)
		}
	})
}

// Idle returns how long neither side has sent anything.
func (s *Session) Idle(now time.Time) time.Duration {
	return time.Duration(now.UnixNano() - s.lastActivity.Load())
}

// Stalled reports a side that has not taken what the gateway is writing to
// it for longer than grace, and how many bytes from the other side wait
// behind that write (netpoll keeps reading them). The server's watchdog
// uses it to bound a stalled client's cost. It takes no locks.
func (s *Session) Stalled(now time.Time, grace time.Duration) (side Side, waiting int, stalled bool) {
	n := now.UnixNano()
	if since := s.clientFlushSince.Load(); since != 0 && time.Duration(n-since) > grace {
		if c, ok := s.upConn.Load().(netpoll.Connection); ok {
			return ClientSide, c.Reader().Len(), true
		}
		return ClientSide, 0, true
	}
	if since := s.upFlushSince.Load(); since != 0 && time.Duration(n-since) > grace {
		return UpstreamSide, s.client.conn.Reader().Len(), true
	}
	return 0, 0, false
}

// Terminate ends the session on the gateway's initiative (idle timeout,
// maximum duration, shutdown): the client gets an OpenAI-shaped error event
// and a close frame with code and reason, the upstream a close frame too;
// each socket closes once it answers, or after CloseTimeout.
func (s *Session) Terminate(code ws.StatusCode, reason, errCode, message string) {
	s.terminating.Store(true)
	s.sendClientError(errCode, message, 0, code, reason)
	s.closeUpstream(code, reason)
}

// Terminating reports whether the gateway already started ending the
// session.
func (s *Session) Terminating() bool { return s.terminating.Load() }

// Abort drops the socket on side at once, closing it under whatever write
// is blocked on it (no close frame could get through a side that stopped
// reading). The other side gets a close frame as if the socket had dropped.
// It may wait for the other side's write lock: run it off any shared
// goroutine.
func (s *Session) Abort(side Side, reason string) {
	s.terminating.Store(true)
	s.noteClose(frames.Close{Code: ws.StatusPolicyViolation, Reason: reason}, side)
	if side == ClientSide {
		_ = s.client.conn.Close()
		s.closeUpstream(ws.StatusGoingAway, reason)
		return
	}
	if c, ok := s.upConn.Load().(netpoll.Connection); ok {
		_ = c.Close()
	}
}

// UpstreamUnavailable reports whether the upstream could not be reached.
func (s *Session) UpstreamUnavailable() bool {
	s.up.mu.Lock()
	defer s.up.mu.Unlock()
	return s.upState == upFailed
}

// noteClose remembers the first close of the session, for its record.
func (s *Session) noteClose(c frames.Close, from Side) {
	s.infoMu.Lock()
	if !s.closeSeen {
		s.close, s.closeFrom, s.closeSeen = c, from, true
	}
	s.infoMu.Unlock()
}

// FirstClose returns the first close of the session (a close frame that
// passed, or one the gateway sent) and which side it concerned; ok is false if
// there was none, as when a socket simply dropped.
func (s *Session) FirstClose() (c frames.Close, from Side, ok bool) {
	s.infoMu.Lock()
	defer s.infoMu.Unlock()
	return s.close, s.closeFrom, s.closeSeen
}

func newEventID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return "event_gw_" + hex.EncodeToString(b[:])
}

// pendingSink queues client frames while the upstream connects. It copies:
// the client's input buffer is released as soon as the read returns.
type pendingSink struct{ s *Session }

func (p pendingSink) WriteBinary(b []byte) (int, error) {
	s := p.s
	if s.pending == nil {
		s.pending = netpoll.NewLinkBuffer()
	}
	buf, err := s.pending.Malloc(len(b))
	if err != nil {
		return 0, err
	}
	copy(buf, b)
	s.pendingLen += len(b)
	return len(b), s.pending.Flush()
}

// errorEvent is the shape of an OpenAI Realtime error event.
type errorEvent struct {
	Type    string `json:"type"`
	EventID string `json:"event_id"`
	Error   struct {
		Type    string  `json:"type"`
		Code    string  `json:"code"`
		Message string  `json:"message"`
		Param   *string `json:"param"`
		EventID *string `json:"event_id"`
		Status  int     `json:"status,omitempty"`
	} `json:"error"`
}
