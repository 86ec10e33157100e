package server

import (
	"context"
	"time"

	"github.com/gobwas/ws"
)

// Drain takes the instance out of service without cutting a call short. It
// runs in three steps:
//
//	grace    /health answers 503, so load balancers (HAProxy's checks, a
//	         Kubernetes readiness probe) stop sending clients, while connects
//	         that still arrive are served normally; lasts DrainGrace.
//	stopped  the listener stops accepting once netpoll has taken everything
//	         queued (frontdoor.Door.StopAccepting); the warm pool's sockets
//	         are closed (close 1000); live sessions continue until they end
//	         or timeout passes.
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
		for _, l := range s.sessions.Live() {
			go l.End(ws.StatusGoingAway, "gateway shutting down", "server_shutting_down",
				"The gateway is restarting; reconnect to continue.")
		}
		s.waitSessions(s.cfg.CloseTimeout + time.Second)
	}
	// Connections accepted before the listener stopped may still be in
	// their handshake; netpoll's Shutdown would close them unanswered. Each
	// is answered or closed by its handshake deadline.
	answered, stop := context.WithDeadline(context.Background(), stopped.Add(s.cfg.HandshakeTimeout))
	s.front.WaitConns(answered)
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
func (s *Server) StopAccepting() { s.front.StopAccepting() }

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
