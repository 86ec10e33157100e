package server

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// Admission at accept. A client connection costs a descriptor, netpoll's
// buffers and a timer from the moment it is accepted, long before its
// request says who it is, so the front door counts it from accept:
//
//   - A connection in its handshake (TLS handshake and HTTP request head,
//     from accept until its request is answered) holds one of the
//     MaxConnections slots, like a session. A connection accepted when
//     sessions and handshakes fill them is closed at once, before any byte
//     is read: the cheapest refusal there is, and one a flood cannot turn
//     into work. (The 503 too_many_connections of admit remains for a
//     connection that finds the sessions full when its request arrives.)
//   - A connection that has not finished its handshake costs no goroutine
//     (OnRequest only moves its bytes) and is closed at the handshake
//     timeout. Only a TLS handshake that is actually running (from a whole
//     ClientHello to the end of the handshake) has a goroutine; at most
//     MaxHandshakes run at once, and a ClientHello that completes beyond
//     that is closed at once (tlsaccept.go).
//
// Descriptors: sessions hold two each and handshakes one, so
// MaxConnections slots never need more than 2*MaxConnections + fdReserve.
type frontDoor struct {
	// handshaking counts connections from accept until their request is
	// answered (they become a session, are refused, or close).
	handshaking atomic.Int64
	// tlsRunning counts TLS handshake goroutines.
	tlsRunning atomic.Int64

	refused *prometheus.CounterVec // connections refused at once, by reason
}

func (f *frontDoor) init(reg prometheus.Registerer) {
	f.refused = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "rtgate_connections_refused_total",
		Help: "Client connections closed at once: at accept when sessions and handshakes filled MAX_CONNECTIONS " +
			"(connections), or on a whole ClientHello when MAX_HANDSHAKES TLS handshakes were running (handshakes)."},
		[]string{"reason"})
	for _, r := range []string{refusedHandshakes, refusedConnections} {
		f.refused.WithLabelValues(r)
	}
	reg.MustRegister(f.refused)
}

const (
	refusedHandshakes  = "handshakes"
	refusedConnections = "connections"
)

// accept counts a new connection, or refuses it (false). A connection
// accepted must later call leave exactly once.
func (s *Server) accept() bool {
	n := s.front.handshaking.Add(1)
	if max := s.cfg.MaxConnections; max > 0 && n+s.sessionsOpen.Load() > int64(max) {
		s.front.handshaking.Add(-1)
		s.front.refused.WithLabelValues(refusedConnections).Inc()
		return false
	}
	return true
}

// leave gives back a connection's handshake count.
func (s *Server) leave() { s.front.handshaking.Add(-1) }

// startTLSHandshake reserves one of the MaxHandshakes running handshakes, or
// refuses (false); endTLSHandshake gives it back.
func (s *Server) startTLSHandshake() bool {
	n := s.front.tlsRunning.Add(1)
	if max := s.cfg.MaxHandshakes; max > 0 && n > int64(max) {
		s.front.tlsRunning.Add(-1)
		s.front.refused.WithLabelValues(refusedHandshakes).Inc()
		return false
	}
	return true
}

func (s *Server) endTLSHandshake() { s.front.tlsRunning.Add(-1) }

// Handshaking is the number of client connections between accept and the
// answer to their request.
func (s *Server) Handshaking() int64 { return s.front.handshaking.Load() }

// TLSHandshakesRunning is the number of client TLS handshakes in progress
// (each with its goroutine).
func (s *Server) TLSHandshakesRunning() int64 { return s.front.tlsRunning.Load() }
