package server

import (
	"crypto/tls"
	"net/http"

	"rtgate/poller"
	"rtgate/server/frontdoor"
)

// The server as the front door's Handler: the front door reads a request,
// the server hands it on. An API request (Route, HandleAPI) goes to
// server/api; the rest (health and the WebSocket connects: HandleRequest)
// to server/session, which also makes each connection (NewConn) and hears
// when its client leaves (ClientLeft).

var _ frontdoor.Handler = (*Server)(nil)

// NewConn implements Handler: the connection's one allocation, the
// session's (session.Manager.NewConn).
func (s *Server) NewConn() *frontdoor.Conn { return s.sessions.NewConn() }

// HandleRequest implements Handler: health and the WebSocket connects
// (session.Manager.HandleRequest).
func (s *Server) HandleRequest(c *frontdoor.Conn, req *http.Request, rest []byte) {
	s.sessions.HandleRequest(c, req, rest)
}

// ClientLeft implements Handler (session.Manager.ClientLeft).
func (s *Server) ClientLeft(sess *poller.Session) { s.sessions.ClientLeft(sess) }

// Route implements Handler: the API's endpoints (api.Endpoints.Route); ""
// for the rest (HandleRequest).
func (s *Server) Route(req *http.Request) (endpoint string, bodyLimit int) { return s.api.Route(req) }

// HandleAPI implements Handler: the API answers (api.Endpoints.HandleAPI).
func (s *Server) HandleAPI(c *frontdoor.Conn, req *http.Request, endpoint string, body []byte) {
	s.api.HandleAPI(c, req, endpoint, body)
}

// CORSHeaders implements Handler (ALLOWED_ORIGINS: api.Endpoints.CORSHeaders).
func (s *Server) CORSHeaders(req *http.Request) http.Header { return s.api.CORSHeaders(req) }

// doorSettings maps the settings to the front door's.
func doorSettings(cfg Settings, tlsConfig *tls.Config) frontdoor.Config {
	return frontdoor.Config{MaxConnections: cfg.MaxConnections, MaxHandshakes: cfg.MaxHandshakes,
		HandshakeTimeout: cfg.HandshakeTimeout, WriteTimeout: cfg.WriteTimeout,
		MaxHeaderBytes: cfg.MaxHeaderBytes, MaxPending: cfg.MaxPending, TLS: tlsConfig}
}
