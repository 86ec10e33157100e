package session

// Realtime translation sessions (/v1/realtime/translations?model=…): the
// client names a translation model group (gpt-realtime-translate), the
// gateway routes it as a Realtime connect (the key's models, limits,
// budget, the group's deployments, hedged dials) to the deployment's
// /realtime/translations, and relays both ways. What differs from Realtime:
//
//   - the route and the group must agree (admission.Gate.PickGroup's
//     protocol): a translation group (routes.ProtocolTranslation) only on the
//     translation route, any other group only on its own route (OpenAI
//     rejects a mismatch too, after the upgrade; the gateway says so before
//     it, with a 400 invalid_model naming the right route);
//   - never from the warm pool: a translation session is billed by the
//     minute of session, so a socket opened ahead would cost money idle;
//   - metered by wall clock (its events carry no usage): the record has
//     protocol "translation" and seconds the session's duration, priced at
//     the deployment's input_cost_per_second ($0.034 a minute built in);
//   - client secrets (POST /v1/realtime/translations/client_secrets, session
//     type "translation") connect only here, and are applied as a
//     session.update of the secret's audio settings.

import (
	"net/http"
	"net/url"

	"rtgate/server/apps"
	"rtgate/server/routes"
)

// isTranslationPath reports whether a WebSocket connect asks for a
// translation session.
func isTranslationPath(path string) bool {
	return path == "/v1/realtime/translations" || path == "/realtime/translations"
}

// translationAsk is what a translation connect must name: a model, unless a
// translation client secret names its group.
func translationAsk(q url.Values, grant *apps.Grant) *refusal {
	if grant == nil && q.Get("model") == "" {
		return &refusal{Status: http.StatusBadRequest, Type: "invalid_request_error", Code: "missing_required_parameter",
			Message: "Missing required parameter: 'model' (a Realtime translation model, such as " + routes.TranslationModel + ").",
			Param:   "model"}
	}
	return nil
}
