package admission

// Which model group a request goes to: part of the way in, since the group
// decides what is counted and where, and asked the same way by a connect,
// a call, a GPT-Live create and a client secret.

import (
	"fmt"
	"net/http"

	"rtgate/server/apps"
	"rtgate/server/frontdoor"
	"rtgate/server/routes"
)

// GroupAsk is what a request says of the model group it wants.
type GroupAsk struct {
	Grant *apps.Grant // a client secret: the group it was minted for
	Model string      // a model the request names ("" for none)
	// Transcription: Model is a transcription model (or ""), which may
	// not be a group: TRANSCRIPTION_MODEL's group then, else the default.
	Transcription bool
	// Protocol is the protocol the route speaks (routes.ProtocolLive for
	// the GPT-Live routes; "" for Realtime): a group of the other
	// protocol is refused (400 invalid_model), as OpenAI refuses a Live
	// model on /v1/realtime.
	Protocol string
}

// PickGroup is the one place a model group is chosen, for a connect, a
// call and a client secret alike: the secret's group, else the
// transcription routing, else the model named, else the default group. It
// must exist (404 model_not_found) and, when key is given, key must be
// allowed it (403 model_not_allowed).
func (g *Gate) PickGroup(table *routes.Table, key *routes.ClientKey, ask GroupAsk) (string, *frontdoor.Refusal) {
	var group string
	switch {
	case ask.Grant != nil:
		group = ask.Grant.Claims.Group
	case ask.Transcription:
		group = transcriptionGroup(table, g.cfg.TranscriptionModel, ask.Model)
	case ask.Model != "":
		group = ask.Model
	default:
		group = table.Default
	}
	if _, ok := table.Groups[group]; !ok {
		return "", &frontdoor.Refusal{Status: http.StatusNotFound, Type: "invalid_request_error", Code: "model_not_found",
			Message: fmt.Sprintf("The model '%s' does not exist or you do not have access to it.", group)}
	}
	if herr := wrongProtocol(table, group, ask.Protocol); herr != nil {
		return "", herr
	}
	if key != nil && !key.Allows(group) {
		return "", ModelNotAllowed(group)
	}
	return group, nil
}

// wrongProtocol refuses group g on a route of protocol want ("" is
// Realtime) when its deployments speak the other protocol, saying where the
// model is served.
func wrongProtocol(table *routes.Table, g, want string) *frontdoor.Refusal {
	if want == "" {
		want = routes.ProtocolRealtime
	}
	switch have := table.Protocol(g); {
	case have == want:
		return nil
	case have == routes.ProtocolTranslation:
		return &frontdoor.Refusal{Status: http.StatusBadRequest, Type: "invalid_request_error", Code: "invalid_model",
			Message: fmt.Sprintf("The model '%s' is a Realtime translation model: connect to /v1/realtime/translations?model=%s.", g, g)}
	case want == routes.ProtocolTranslation:
		return &frontdoor.Refusal{Status: http.StatusBadRequest, Type: "invalid_request_error", Code: "invalid_model",
			Message: fmt.Sprintf("The model '%s' is not a Realtime translation model; translation sessions use %s.", g, routes.TranslationModel)}
	case have == routes.ProtocolLive:
		return &frontdoor.Refusal{Status: http.StatusBadRequest, Type: "invalid_request_error", Code: "invalid_model",
			Message: fmt.Sprintf("The model '%s' is a GPT-Live model: open a session at /v1/live/sessions (its session.start names the model).", g)}
	default:
		return &frontdoor.Refusal{Status: http.StatusBadRequest, Type: "invalid_request_error", Code: "invalid_model",
			Message: fmt.Sprintf("The model '%s' is a Realtime model: connect to /v1/realtime?model=%s.", g, g)}
	}
}

// transcriptionGroup picks the model group of a transcription session whose
// transcription model is model ("" when unknown): that model when it is a
// group, else configured (TRANSCRIPTION_MODEL), else the default group.
func transcriptionGroup(table *routes.Table, configured, model string) string {
	if _, ok := table.Groups[model]; ok && model != "" {
		return model
	}
	if configured != "" {
		return configured
	}
	return table.Default
}
