package server

// The server's side of server/api: the Deps its endpoints get, made of what
// the sessions' side already has. The endpoints decide nothing of their own
// about groups, admission or budgets: they ask what a WebSocket connect
// asks (admission.Gate.PickGroup, the gate's Admit through
// session.Manager.AdmitCall, the budgets' check), so an API request and a
// connect are governed alike.

import (
	"rtgate/server/api"
)

// newEndpoints makes the API's endpoints; New calls it once the balancer
// and the sessions' manager exist.
func newEndpoints(s *Server) *api.Endpoints {
	m := s.sessions
	return api.New(api.Config{DialTimeout: s.cfg.DialTimeout}, api.Deps{
		Context:       s.ctx,
		Log:           s.log,
		Routes:        s.routes.Load,
		OriginAllowed: m.OriginAllowed,
		PickGroup:     m.Gate().PickGroup,
		Admit:         m.AdmitCall,
		CheckBudget:   m.CheckBudget,
		LiveEnded:     m.LiveEnded,
		Balancer:      s.balancer,
		Owners:        m.Calls(),
		Secrets:       m.Secrets(),
		HTTPClient:    m.HTTPClient(),
	})
}
