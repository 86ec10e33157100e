package poller

import (
	"errors"
	"io"
	"sync"
	"sync/atomic"

	"github.com/gobwas/ws"
	"github.com/valyala/bytebufferpool"

	"rtgate/frames"
)

// upLink is the session's Owner for one upstream socket. A session can see
// two sockets in its life (a warm one that proved dead, then a fresh one), so
// each link names its socket, and events of a socket the session replaced are
// drained and ignored.
type upLink struct {
	s *Session
	h *Handle
	// ready is set once h is: a warm socket's close callback can run on
	// netpoll's hang-up goroutine while AdoptWarm is still taking it.
	ready    atomic.Bool
	goneSeen atomic.Bool // its close callback ran (UpstreamGone)
	goneOnce sync.Once
}

// current reports whether l's socket is the session's upstream now.
func (l *upLink) current() bool { return l.ready.Load() && l.s.upEP.Load() == l.h.ep }

// UpstreamReadable forwards what the upstream sent; it runs under the
// Handle's read lock.
func (l *upLink) UpstreamReadable() {
	s := l.s
	if !l.current() {
		_ = l.h.ep.Read(func(src frames.Source) error { return src.Skip(src.Len()) })
		return
	}
	s.lastActivity.Store(nowNano())
	if err := l.h.ep.ReadFrames(s.fromUpstreamFn, &s.u2c); err != nil {
		if errors.Is(err, io.EOF) && s.closing() {
			// A TLS close_notify after the close handshake: the upstream's
			// FIN follows. Closing now would make the gateway the first to
			// close (TIME_WAIT on its port); the close timer bounds the wait.
			return
		}
		l.h.ep.Drop()
	}
}

// closing reports whether the upstream's close handshake is complete.
func (s *Session) closing() bool {
	s.up.mu.Lock()
	defer s.up.mu.Unlock()
	return s.up.state == closeDone
}

// UpstreamGone is the upstream socket's close callback (and AdoptWarm's
// check for a socket that hung up while it was being taken). netpoll may run
// it while a read of the socket is still in progress on another goroutine:
// then that read forwards what it read first (a session.created sent just
// before the hang-up), and readEnded ends the socket after it. Otherwise the
// socket's last bytes are forwarded here, then it ends. Either way once.
func (l *upLink) UpstreamGone() {
	if !l.current() {
		return
	}
	l.goneSeen.Store(true)
	if !l.h.readMu.TryLock() {
		return // the read in progress (perhaps the one whose Close runs this) calls readEnded
	}
	l.drainLocked()
	l.h.readMu.Unlock()
	l.hangUp()
}

// readEnded runs after each read of the socket released the read lock: a
// hang-up seen during that read is acted on now.
func (l *upLink) readEnded() {
	if !l.goneSeen.Load() || !l.h.readMu.TryLock() {
		return // no hang-up yet, or another read is in progress and will call this
	}
	l.h.readMu.Unlock()
	l.hangUp()
}

// hangUp ends the upstream socket for the session, once: a fresh dial
// replaces a dead warm socket if it can, else the client learns it is gone.
func (l *upLink) hangUp() {
	l.goneOnce.Do(func() {
		if l.s.redial() || l.s.resume(l, Loss{}, nil) {
			return
		}
		l.s.gone(&l.s.up)
	})
}

// drainLocked forwards what the socket still holds as it closes: bytes in
// netpoll's buffer no read event announced yet, and over TLS records that
// crypto/tls already decrypted. Close callbacks run before netpoll frees the
// buffers. Callers hold the read lock.
func (l *upLink) drainLocked() {
	h := l.h
	if h.ep.closedByGateway() {
		return // the gateway closed it itself: nothing more is wanted from it
	}
	if !h.ep.byHandBegin() {
		return // its close callbacks ran already, the buffer freed with them
	}
	l.UpstreamReadable()
	h.ep.byHandEnd()
}

// AttachUpstream connects the session to a freshly dialed upstream socket:
// queued client frames go first, then bytes the upstream sent with its 101
// response (preface; that is usually where session.created is), then the
// socket is read once by hand and handed to the reactor, all under the
// Handle's read lock, so nothing overtakes anything.
func (s *Session) AttachUpstream(h *Handle, preface []byte) {
	l := &upLink{s: s, h: h}
	l.ready.Store(true)
	h.Start(l, func() { s.attach(l, preface) })
}

// AdoptWarm tries to take an upstream socket that is already connected and
// past session.created. take must hand the socket to the given owner with
// Handle.TryHandOver atomically with taking it from the pool, and return it
// with the frames it holds (session.created), or nil on a miss. The held
// frames are forwarded first, then whatever the socket received meanwhile,
// before any read event reaches the session.
func (s *Session) AdoptWarm(take func(Owner) (*Handle, []byte)) bool {
	return s.adopt(take, true)
}

// adopt is AdoptWarm's and AdoptResumed's work; warm says the socket came
// from the pool (a dead one may be redialed).
func (s *Session) adopt(take func(Owner) (*Handle, []byte), warm bool) bool {
	l := &upLink{s: s}
	h, held := take(l)
	if h == nil {
		return false
	}
	l.h = h
	l.ready.Store(true)
	s.up.mu.Lock()
	s.warm = warm
	s.up.mu.Unlock()
	s.attach(l, held)
	h.FinishHandOver()
	if !h.ep.Conn().IsActive() {
		// It hung up while being taken: its close callback may have run
		// before the session knew the socket, and runs only once.
		l.UpstreamGone()
	}
	return true
}

// attach installs l's socket as the upstream. Callers hold l's read lock.
func (s *Session) attach(l *upLink, preface []byte) {
	up := &s.up
	ep := l.h.ep
	up.mu.Lock()
	if s.upState == upFailed {
		// Cancelled meanwhile: nobody will relay on this socket.
		up.mu.Unlock()
		ep.Drop()
		return
	}
	up.ep, s.handle, s.cur = ep, l.h, l
	s.upEP.Store(ep)
	if s.skipNext {
		s.skipFirst, s.skip, s.skipNext = true, frameSkipper{}, false
	}
	var werr error
	if s.pending != nil {
		if len(s.pending.B) > 0 {
			werr = ep.Send(s.pending.B)
			s.wroteUp = true
		}
		bytebufferpool.Put(s.pending)
		s.pending = nil
	}
	s.upState = upReady // published only now: nothing overtook the queue
	act := actNone
	if s.queuedStop {
		act = s.step(up, evSend) // a close queued while connecting: its clock starts now
	}
	up.mu.Unlock()
	s.run(up, act)

	if werr != nil {
		ep.Drop()
		return
	}
	// An upstream that already closed may still have sent frames first
	// (session.created, then a close): forward what it sent before its
	// close callback tells the client it is gone.
	if s.clientGone.Load() {
		s.tellGone(up, frames.ClientSide)
	}
	if len(preface) > 0 {
		if err := s.fromUpstream(frames.NewByteSource(preface)); err != nil {
			ep.Drop()
		}
	}
}

// redial replaces a warm upstream that proved dead before the client sent it
// anything: the session goes back to connecting (client frames queue again),
// and the server dials a fresh upstream whose first frame (its own
// session.created) is consumed, since the client has one already. It
// reports whether a redial started. Runs in the dead socket's close callback.
func (s *Session) redial() bool {
	if s.cfg.Redial == nil || !s.clientOpen() {
		return false
	}
	up := &s.up
	up.mu.Lock()
	ok := s.warm && !s.wroteUp && s.redials == 0 && s.upState == upReady &&
		up.state == closeOpen && !s.u2c.MidFrame()
	if ok {
		s.redials++
		s.skipNext = true
		s.warm = false
		s.upState = upConnecting
		up.ep, s.handle = nil, nil
		s.upEP.Store(nil)
	}
	up.mu.Unlock()
	if !ok {
		return false
	}
	if !s.cfg.Redial(s) {
		s.DialFailed(nil)
	}
	return true
}

// clientOpen reports whether the client is there and no close passed it
// yet: an upstream lost then may be replaced (redial, resume).
func (s *Session) clientOpen() bool {
	if s.clientGone.Load() {
		return false
	}
	s.client.mu.Lock()
	defer s.client.mu.Unlock()
	return s.client.state == closeOpen
}

// Redials returns how many fresh upstreams replaced a dead warm one.
func (s *Session) Redials() int {
	s.up.mu.Lock()
	defer s.up.mu.Unlock()
	return s.redials
}

// DialFailed reports that the upstream could not be reached. The client gets
// notice (the server's error event, may be nil) and close 1011.
func (s *Session) DialFailed(notice []byte) {
	s.failUpstream(notice, ws.StatusInternalServerError, "upstream unavailable")
}

// failUpstream ends a session left without an upstream: the client gets
// notice (may be nil) and a close frame with code and reason.
func (s *Session) failUpstream(notice []byte, code ws.StatusCode, reason string) {
	s.up.mu.Lock()
	s.upState = upFailed
	if s.pending != nil {
		bytebufferpool.Put(s.pending)
		s.pending = nil
	}
	s.up.state = closeGone
	s.up.mu.Unlock()
	s.sendClientNotice(notice, code, reason)
	s.maybeEnd()
}

// Cancel ends a session that will never get an upstream (its client left
// before the upgrade completed); it ends once the client socket is gone.
func (s *Session) Cancel() {
	s.up.mu.Lock()
	s.upState = upFailed
	s.up.state = closeGone
	s.up.mu.Unlock()
	s.maybeEnd()
}

// maxFirstFrame bounds what is held of a redialed upstream's first frame
// while deciding whether the client already has it; a longer frame is not a
// session.created and is forwarded.
const maxFirstFrame = 64 << 10

// skipFirstFrame collects the first frame of a redialed upstream and
// consumes it if SessionConfig.SameFirstFrame says the client already has it
// (session.created: only the session id differs); otherwise it is forwarded
// like any frame. Runs under the read lock.
func (s *Session) skipFirstFrame(src frames.Source) error {
	done, err := s.skip.collect(src)
	if err != nil || !done {
		return err
	}
	s.skipFirst = false
	held := s.skip.buf
	s.skip.buf = nil
	defer bytebufferpool.Put(held)
	if s.skip.complete && s.cfg.SameFirstFrame != nil && s.cfg.SameFirstFrame(held.B[s.skip.hlen:]) {
		return nil
	}
	return s.fromUpstream(frames.NewByteSource(held.B))
}

// frameSkipper holds the first frame of a byte stream that may arrive in
// pieces, up to maxFirstFrame.
type frameSkipper struct {
	buf      *bytebufferpool.ByteBuffer
	hlen     int
	want     int // header plus payload, once the header parsed
	complete bool
}

// collect takes bytes of the first frame from src; done once the frame is
// whole (complete) or known to be too long.
func (f *frameSkipper) collect(src frames.Source) (done bool, err error) {
	if f.buf == nil {
		f.buf = bytebufferpoolGet()
	}
	for src.Len() > 0 {
		n := 1 // header bytes one at a time (at most 14, once per redial)
		if f.want > 0 {
			n = min(src.Len(), f.want-len(f.buf.B))
		}
		p, err := src.Next(n)
		if err != nil {
			return false, err
		}
		f.buf.B = append(f.buf.B, p...)
		if f.want == 0 {
			h, hlen, ok, perr := frames.ParseHeader(f.buf.B)
			if perr != nil {
				return true, nil // let the scanner report it
			}
			if !ok {
				continue
			}
			if h.Length > maxFirstFrame || !h.Fin {
				return true, nil
			}
			f.hlen, f.want = hlen, hlen+int(h.Length)
		}
		if len(f.buf.B) == f.want {
			f.complete = true
			return true, nil
		}
	}
	return false, nil
}

func bytebufferpoolGet() *bytebufferpool.ByteBuffer {
	b := bytebufferpool.Get()
	b.B = b.B[:0]
	return b
}
