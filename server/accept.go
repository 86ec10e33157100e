package server

import (
	"bytes"
	"net/http"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// Admission at accept. A client connection costs a descriptor, netpoll's
// buffers and a timer from the moment it is accepted, long before its
// request says who it is, so the front door counts it from accept:
//
//   - At most MaxHandshakes connections may be in their handshake at once
//     (TLS handshake and HTTP request head, from accept until the request is
//     answered). Beyond that a new connection is closed at once, before any
//     byte is read: the cheapest refusal there is, and the only one that
//     cannot be turned into work by a flood.
//   - A connection in its handshake holds one of the MaxConnections slots,
//     like a session. One accepted while sessions and handshakes already fill
//     them is still served its handshake (bounded by MaxHandshakes and the
//     handshake timeout) so that its request gets the 503 with Retry-After
//     that the README promises, rather than a bare close; it never becomes a
//     session. Health checks on such a connection are answered as usual.
//
// Descriptors: sessions hold two each and handshakes one, so the process
// needs 2*MaxConnections + MaxHandshakes + fdReserve; the default
// MaxConnections is sized for that (config.go).
type frontDoor struct {
	// handshaking counts connections from accept until their request is
	// answered (they become a session, are refused, or close).
	handshaking atomic.Int64

	refused *prometheus.CounterVec // connections refused at accept, by reason
}

func (f *frontDoor) init(reg prometheus.Registerer) {
	f.refused = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "rtgate_connections_refused_total",
		Help: "Client connections closed at accept (handshakes: MAX_HANDSHAKES in flight) or answered 503 " +
			"because sessions and handshakes filled MAX_CONNECTIONS when they were accepted (connections)."},
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

// admission is the verdict on a new connection.
type admission int

const (
	admitted  admission = iota
	overLimit           // served its handshake only to be told 503
	refuseNow           // closed at once
)

// accept counts a new connection and says what to do with it. Every
// connection that is not refused must later call leave exactly once.
func (s *Server) accept() admission {
	n := s.front.handshaking.Add(1)
	if max := s.cfg.MaxHandshakes; max > 0 && n > int64(max) {
		s.front.handshaking.Add(-1)
		s.front.refused.WithLabelValues(refusedHandshakes).Inc()
		return refuseNow
	}
	if max := s.cfg.MaxConnections; max > 0 && n+s.sessionsOpen.Load() > int64(max) {
		return overLimit
	}
	return admitted
}

// leave gives back a connection's handshake count.
func (s *Server) leave() { s.front.handshaking.Add(-1) }

// Handshaking is the number of client connections between accept and the
// answer to their request.
func (s *Server) Handshaking() int64 { return s.front.handshaking.Load() }

// tooManyConnections is the refusal at MaxConnections.
func tooManyConnections() *httpError {
	return &httpError{status: http.StatusServiceUnavailable, errType: "server_error", code: "too_many_connections",
		message: "this gateway instance is at its connection limit; try again shortly", header: http.Header{"Retry-After": {"1"}}}
}

// isUpgradePath reports whether a request head asks for a realtime session
// (rather than, say, a health check), from its request line alone.
func isUpgradePath(head []byte) bool {
	line, _, _ := bytes.Cut(head, []byte("\r\n"))
	_, rest, ok := bytes.Cut(line, []byte(" "))
	if !ok {
		return false
	}
	target, _, _ := bytes.Cut(rest, []byte(" "))
	path, _, _ := bytes.Cut(target, []byte("?"))
	return string(path) == "/v1/realtime" || string(path) == "/realtime"
}
