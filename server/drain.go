package server

import (
	"context"
	"fmt"
	"log/slog"
	"runtime/debug"
	"time"

	"github.com/cloudwego/netpoll"
	"github.com/gobwas/ws"
	"golang.org/x/sys/unix"
)

// Drain takes the instance out of service without cutting a call short. It
// runs in three steps:
//
//	grace    /health answers 503, so load balancers (HAProxy's checks, a
//	         Kubernetes readiness probe) stop sending clients, while connects
//	         that still arrive are served normally; lasts DrainGrace.
//	stopped  the listener stops accepting once netpoll has taken everything
//	         queued (frontDoor); the warm pool's sockets are closed (close
//	         1000); live sessions continue until they end or timeout passes.
//	closing  sessions still open get an error event and close 1001, new
//	         upgrades on connections accepted earlier get 503, and Drain waits
//	         for the close handshakes before it shuts the reactor down.
//
// It returns true if every session ended by itself. Connections accepted
// before the listener stopped and still in their handshake are answered
// before the reactor shuts down (each has HandshakeTimeout). The whole drain
// takes at most DrainGrace + timeout + CloseTimeout + about 3 s (with
// timeout at least HandshakeTimeout).
func (s *Server) Drain(timeout time.Duration) bool {
	s.draining.Store(true)
	s.log.Info("draining: /health reports 503, connects are still served", "grace", s.cfg.DrainGrace,
		"sessions", s.SessionsOpen())
	time.Sleep(s.cfg.DrainGrace)

	s.StopAccepting()
	stopped := time.Now()
	if s.pool != nil {
		s.pool.Close()
	}
	s.log.Info("draining: not accepting; waiting for live sessions", "sessions", s.SessionsOpen(), "timeout", timeout)
	clean := s.waitSessions(timeout)
	if !clean {
		s.stopping.Store(true)
		for _, l := range s.liveSessions() {
			go terminate(s.proto, l.sess, ws.StatusGoingAway, "gateway shutting down", "server_shutting_down",
				"The gateway is restarting; reconnect to continue.")
		}
		s.waitSessions(s.cfg.CloseTimeout + time.Second)
	}
	// Connections accepted before the listener stopped may still be in
	// their handshake; netpoll's Shutdown would close them unanswered. Each
	// is answered or closed by its handshake deadline.
	answered, stop := context.WithDeadline(context.Background(), stopped.Add(s.cfg.HandshakeTimeout))
	s.waitConns(answered)
	stop()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = s.Shutdown(ctx)
	s.log.Info("drained", "clean", clean, "sessions_left", s.SessionsOpen())
	return clean
}

// StopAccepting stops the client listener (after netpoll has accepted what
// the kernel had queued, waiting up to a second for that); connections
// already accepted carry on. Safe to call more than once.
func (s *Server) StopAccepting() {
	s.mu.Lock()
	l := s.listener
	s.mu.Unlock()
	if l == nil || l.stopped.Load() {
		return
	}
	queued, err := l.stop(time.Second)
	if err != nil || queued > 0 {
		s.log.Warn("stopping the listener", "err", err, "still_queued", queued)
	}
}

// waitSessions waits until no session is open, or timeout passes.
func (s *Server) waitSessions(timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for s.SessionsOpen() > 0 {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
	return true
}

// Ending client connections without netpoll's Close.
//
// Under inline handlers a netpoll Close that lands while the connection's
// handler task runs on its poller spins that poller forever (package poller's doc,
// the inline invariant). A connection that may be relaying is therefore
// ended by a hang-up: shutdown(2) on its descriptor, which the poller
// reports at its next wait and answers by closing the connection itself,
// outside any task. Every accepted connection has its read handler from
// accept, so the hang-up always reaches someone who closes it.
//
// A descriptor number is reused once netpoll closes it, which it does after
// the connection's close callbacks; onClose takes c.mu (through answered)
// and the server's connsMu, so a hang-up made under either while the
// connection is known open reaches this connection and no other.

// hangUp shuts conn down both ways: the poller closes it. Both ways, not
// only the reading side as the relay's closes do (poller's closeConn):
// netpoll closes a hung-up socket only on an event that reads nothing, and
// a client that keeps sending would keep it open; the FIN makes the client
// stop. Nothing more is written to a connection ended this way.
func hangUp(conn netpoll.Connection) {
	if fc, ok := conn.(netpoll.Conn); ok {
		_ = unix.Shutdown(fc.Fd(), unix.SHUT_RDWR)
	}
}

// hangUpClients hangs up every accepted client connection, for Shutdown.
func (s *Server) hangUpClients() {
	s.connsMu.Lock()
	defer s.connsMu.Unlock()
	for c := range s.conns {
		hangUp(c.conn)
	}
}

// waitConns waits until every accepted client socket is closed, or ctx
// ends.
func (s *Server) waitConns(ctx context.Context) {
	for s.clientConns.Load() > 0 && ctx.Err() == nil {
		time.Sleep(5 * time.Millisecond)
	}
}

// handshakeExpired is the handshake timer: the connection did not finish
// its handshake in HandshakeTimeout. A timer that fired just as the request
// was answered (Stop cannot stop a running timer function) finds the timer
// gone and leaves the new session alone; otherwise the connection is hung
// up, under c.mu so that it is still open (onClose waits for c.mu).
func (c *clientConn) handshakeExpired() {
	if h := c.srv.hooks.Load(); h != nil && h.handshakeTimer != nil {
		h.handshakeTimer()
		if h.handshakeTimerDone != nil {
			defer h.handshakeTimerDone()
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.timer == nil {
		return // answered or closed meanwhile
	}
	hangUp(c.conn)
}

// recoverRequest ends a read handler of an accepted connection that
// panicked; onRequest defers it. The panic is logged with its stack, the
// connection's buffered input discarded (netpoll calls the handler again at
// once while input remains) and the connection hung up: a panic that left
// the handler would make netpoll Close the socket from the poller (a spin
// under inline handlers) or, on the poller goroutine, end the process.
func recoverRequest(log *slog.Logger, conn netpoll.Connection) {
	r := recover()
	if r == nil {
		return
	}
	log.Error("request handler panicked; dropping the connection", "remote", conn.RemoteAddr().String(),
		"panic", fmt.Sprint(r), "stack", string(debug.Stack()))
	rd := conn.Reader()
	_ = rd.Skip(rd.Len())
	_ = rd.Release()
	hangUp(conn) // inside the handler: netpoll closes only after it returns
}
