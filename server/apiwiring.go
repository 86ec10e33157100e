package server

// The server's side of server/api: the Deps its endpoints get, made of what
// the session side already has. The endpoints decide nothing of their own
// about groups, admission or budgets: they ask what a WebSocket connect
// asks (admission.Gate.PickGroup and Admit, budgets.check), so an API request
// and a connect are governed alike.

import (
	"rtgate/server/admission"
	"rtgate/server/api"
	"rtgate/server/routes"
)

// newEndpoints makes the API's endpoints; New calls it once the balancer,
// the budgets, the gate and the app state exist.
func newEndpoints(s *Server) *api.Endpoints {
	return api.New(api.Config{DialTimeout: s.cfg.DialTimeout}, api.Deps{
		Context:       s.ctx,
		Log:           s.log,
		Routes:        s.routes.Load,
		OriginAllowed: s.origins.allow,
		PickGroup:     s.gate.PickGroup,
		Admit: func(key *routes.ClientKey, table *routes.Table, group string, ds []*routes.Deployment) (api.Admission, *refusal) {
			adm, herr := s.gate.Admit(admission.Call, key, table, group, ds)
			if herr != nil {
				return nil, herr // a nil interface, not a nil *admission.Admission in one
			}
			return callAdmission{Admission: adm, meters: s.meters}, nil
		},
		CheckBudget: s.budgets.check,
		LiveEnded:   s.meters.endedByRequest,
		Balancer:    s.balancer,
		Owners:      s.calls,
		Secrets:     s.secrets,
		HTTPClient:  s.httpClient,
	})
}

// callAdmission is an admission through admission.Call as the API holds it
// (api.Admission): given back, or handed to the meter of the call or
// GPT-Live session the upstream made.
type callAdmission struct {
	*admission.Admission
	meters *callMeters
}

func (a callAdmission) MeterCall(key *routes.ClientKey, group string, d *routes.Deployment, callID string) {
	a.meters.start(key, group, d, callID, a.Admission)
}

func (a callAdmission) MeterLive(key *routes.ClientKey, d *routes.Deployment, id string) {
	a.meters.startLive(key, d, id, a.Admission)
}
