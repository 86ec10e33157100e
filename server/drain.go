package server

import (
	"context"
	"time"

	"github.com/gobwas/ws"
)

// Drain takes the instance out of service without cutting calls short:
// /health answers 503 so a load balancer stops sending clients, new
// upgrades get 503 with Retry-After, the warm pool's sockets are closed at
// once (close 1000), and live sessions continue until they end or timeout
// passes. Sessions still open then get close 1001 with a reason (and an
// error event), and Drain waits for their close handshakes before it shuts
// the reactor down. It returns true if every session ended by itself.
func (s *Server) Drain(timeout time.Duration) bool {
	s.draining.Store(true)
	if s.pool != nil {
		s.pool.Close()
	}
	s.log.Info("draining", "sessions", s.SessionsOpen(), "timeout", timeout)
	clean := s.waitSessions(timeout)
	if !clean {
		for _, sess := range s.liveSessions() {
			go s.terminate(sess, ws.StatusGoingAway, "gateway shutting down", "server_shutting_down",
				"The gateway is restarting; reconnect to continue.")
		}
		s.waitSessions(s.cfg.CloseTimeout + time.Second)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = s.Shutdown(ctx)
	s.log.Info("drained", "clean", clean, "sessions_left", s.SessionsOpen())
	return clean
}

// Draining reports whether Drain has started.
func (s *Server) Draining() bool { return s.draining.Load() }

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
