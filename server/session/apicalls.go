package session

// What the API's endpoints take of the sessions' side (server/api's Deps):
// a call's admission, which the call's meter holds once the upstream has
// made the call, and the Origin check a connect makes.

import (
	"rtgate/server/admission"
	"rtgate/server/api"
	"rtgate/server/routes"
)

// AdmitCall admits a call or a GPT-Live WebRTC create through the gate
// (admission.Call), as the API holds it: given back, or handed to the
// meter of the call or GPT-Live session the upstream made.
func (m *Manager) AdmitCall(key *routes.ClientKey, table *routes.Table, group string, ds []*routes.Deployment) (api.Admission, *refusal) {
	adm, herr := m.gate.Admit(admission.Call, key, table, group, ds)
	if herr != nil {
		return nil, herr // a nil interface, not a nil *admission.Admission in one
	}
	return callAdmission{Admission: adm, meters: m.meters}, nil
}

// OriginAllowed is ALLOWED_ORIGINS's check (the admin page's own origin
// passes).
func (m *Manager) OriginAllowed(origin string) bool { return m.origins.allow(origin) }

// callAdmission is an admission through admission.Call as the API holds it
// (api.Admission).
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
