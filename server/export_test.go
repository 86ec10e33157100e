package server

// Test-only views of the server's state.

import (
	"context"
	"net/url"

	"rtgate/server/internal/testhooks"
	"rtgate/upstream"
)

// Handshaking is the number of client connections between accept and the
// answer to their request, as the metrics show it.
func (s *Server) Handshaking() int64 { return s.gauge("rtgate_client_handshakes") }

// TLSHandshakesRunning is the number of client TLS handshakes in progress
// (each with its goroutine), as the metrics show it.
func (s *Server) TLSHandshakesRunning() int64 { return s.gauge("rtgate_client_tls_handshakes_running") }

// gauge is the value of the gauge name in the server's metrics; -1 when it
// cannot be read (no wait for a count is met by that).
func (s *Server) gauge(name string) int64 {
	fams, err := s.reg.Gather()
	if err != nil {
		return -1
	}
	for _, f := range fams {
		if f.GetName() == name && len(f.GetMetric()) == 1 {
			return int64(f.GetMetric()[0].GetGauge().GetValue())
		}
	}
	return -1
}

// testContext is what a test's server derives its life from: it carries
// the slot for the front door's hooks (setDoorHooks).
func testContext() context.Context {
	ctx := testhooks.With(context.Background(), new(testhooks.Slot))
	return testhooks.WithSession(ctx, new(testhooks.SessionSlot))
}

// setSessionHooks puts h's pauses into the session path (nil: none). The
// server must have been made with testContext.
func (s *Server) setSessionHooks(h *testhooks.Session) {
	if s.hooks == nil {
		panic("setSessionHooks: the server was not made with testContext")
	}
	s.hooks.Store(h)
}

// setDoorHooks puts h's pauses into the front door (nil: none). The server
// must have been made with testContext (newTestServer does).
func (s *Server) setDoorHooks(h *testhooks.Door) {
	slot := testhooks.From(s.ctx)
	if slot == nil {
		panic("setDoorHooks: the server was not made with testContext")
	}
	slot.Store(h)
}

// defaultTarget is the upstream a plain connect to the default group's
// first deployment maps to (what the pool warms before any client comes).
func (s *Server) defaultTarget() upstream.Target {
	r := s.routes.Load()
	u, h := r.Groups[r.Default][0].Address(url.Values{"model": {r.Default}})
	return upstream.Target{URL: u, Header: h}
}
