package server

import (
	"crypto/tls"
	"net/http"

	"rtgate/poller"
	"rtgate/server/frontdoor"
)

// The server as the front door's Handler: the front door reads a request,
// the server decides what it becomes (HandleRequest: health or a session;
// Route and HandleAPI: an API answer, server/api's).

var _ frontdoor.Handler = (*Server)(nil)

// refusal is every refusal the gateway answers over HTTP; the front door
// renders it.
type refusal = frontdoor.Refusal

// clientConn is an accepted connection as the server keeps it: the front
// door's Conn and, in the same allocation, the state a plain session
// keeps for its whole life, rather than four allocations of their own (each
// rounds up to a size class and is one more object for the collector). Only
// pointers to them are handed out (sess, the registry's *sessionInfo), and
// a clientConn is never copied. What outlives the client socket (a session
// still closing its upstream) keeps the whole struct alive, which costs
// nothing more: the connection's netpoll context holds it anyway.
type clientConn struct {
	frontdoor.Conn
	session poller.Session // sess, once upgraded
	info    sessionInfo
	watch   setupWatch
	cwatch  clientWatch // continuity's inspector on the client's frames (watchClient)
}

// NewConn implements Handler: the connection's one allocation.
func (s *Server) NewConn() *frontdoor.Conn {
	c := &clientConn{}
	c.SetOwner(c)
	return &c.Conn
}

// Route implements Handler: the API's endpoints (api.Endpoints.Route); ""
// for the rest (HandleRequest).
func (s *Server) Route(req *http.Request) (endpoint string, bodyLimit int) { return s.api.Route(req) }

// HandleAPI implements Handler: the API answers (api.Endpoints.HandleAPI).
func (s *Server) HandleAPI(c *frontdoor.Conn, req *http.Request, endpoint string, body []byte) {
	s.api.HandleAPI(c, req, endpoint, body)
}

// CORSHeaders implements Handler (ALLOWED_ORIGINS: api.Endpoints.CORSHeaders).
func (s *Server) CORSHeaders(req *http.Request) http.Header { return s.api.CORSHeaders(req) }

// ClientLeft implements Handler (clientLeft).
func (s *Server) ClientLeft(sess *poller.Session) { s.clientLeft(sess) }

// doorSettings maps the settings to the front door's.
func doorSettings(cfg Settings, tlsConfig *tls.Config) frontdoor.Config {
	return frontdoor.Config{MaxConnections: cfg.MaxConnections, MaxHandshakes: cfg.MaxHandshakes,
		HandshakeTimeout: cfg.HandshakeTimeout, WriteTimeout: cfg.WriteTimeout,
		MaxHeaderBytes: cfg.MaxHeaderBytes, MaxPending: cfg.MaxPending, TLS: tlsConfig}
}
