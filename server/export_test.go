package server

// Test-only views of the server's state.

import (
	"net/url"

	"rtgate/upstream"
)

// Handshaking is the number of client connections between accept and the
// answer to their request.
func (s *Server) Handshaking() int64 { return s.front.Unanswered() }

// TLSHandshakesRunning is the number of client TLS handshakes in progress
// (each with its goroutine).
func (s *Server) TLSHandshakesRunning() int64 { return s.front.TLSHandshakesRunning() }

// defaultTarget is the upstream a plain connect to the default group's
// first deployment maps to (what the pool warms before any client comes).
func (s *Server) defaultTarget() upstream.Target {
	r := s.routes.Load()
	return target(r.Groups[r.Default][0], url.Values{}, nil)
}
