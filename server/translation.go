package server

// Realtime translation sessions (/v1/realtime/translations?model=…): the
// client names a translation model group (gpt-realtime-translate), the
// gateway routes it as a Realtime connect (the key's models, limits,
// budget, the group's deployments, hedged dials) to the deployment's
// /realtime/translations, and relays both ways. What differs from Realtime:
//
//   - the route and the group must agree: a translation group only on the
//     translation route, any other group only on /v1/realtime (OpenAI
//     rejects either mismatch too, after the upgrade; the gateway says so
//     before it, with a 400 naming the right route);
//   - never from the warm pool: a translation session is billed by the
//     minute of session, so a socket opened ahead would cost money idle;
//   - metered by wall clock (its events carry no usage): the record has
//     protocol "translation" and seconds the session's duration, priced at
//     the deployment's input_cost_per_second ($0.034 a minute built in);
//   - client secrets (POST /v1/realtime/translations/client_secrets, session
//     type "translation") connect only here, and are applied as a
//     session.update of the secret's audio settings.

import (
	"fmt"
	"net/http"
	"net/url"

	"rtgate/server/apps"
	"rtgate/server/routes"
)

// secretTypeTranslation is the Claims.Type of a translation client secret.
const secretTypeTranslation = "translation"

// isTranslationPath reports whether a WebSocket connect asks for a
// translation session.
func isTranslationPath(path string) bool {
	return path == "/v1/realtime/translations" || path == "/realtime/translations"
}

// translationAsk is what a translation connect must name: a model, unless a
// translation client secret names its group.
func translationAsk(q url.Values, grant *apps.Grant) *refusal {
	if grant == nil && q.Get("model") == "" {
		return &refusal{status: http.StatusBadRequest, errType: "invalid_request_error", code: "missing_required_parameter",
			message: "Missing required parameter: 'model' (a Realtime translation model, such as " + routes.TranslationModel + ").",
			param:   "model"}
	}
	return nil
}

// checkRoute refuses a connect whose route and model group do not agree, or
// whose client secret was minted for the other kind of session.
func checkRoute(table *routes.Table, u *upgrade) *refusal {
	wrong := func(msg string) *refusal {
		return &refusal{status: http.StatusBadRequest, errType: "invalid_request_error", code: "invalid_model", message: msg}
	}
	if u.grant != nil && (u.grant.Claims.Type == secretTypeTranslation) != u.translation {
		if u.translation {
			return wrong("This client secret is for a Realtime session: connect to /v1/realtime.")
		}
		return wrong("This client secret is for a Realtime translation session: connect to /v1/realtime/translations.")
	}
	switch isTr := table.IsTranslation(u.group); {
	case u.translation && !isTr:
		return wrong(fmt.Sprintf("The model '%s' is not a Realtime translation model; translation sessions use %s.", u.group, routes.TranslationModel))
	case !u.translation && isTr:
		return wrong(fmt.Sprintf("The model '%s' is a Realtime translation model: connect to /v1/realtime/translations.", u.group))
	}
	return nil
}

// translationSeconds is a translation session's billed time: its wall
// clock, from the client's upgrade to its end (0 for other sessions).
func translationSeconds(info *sessionInfo, durationMS int64) (protocol string, seconds float64) {
	if !info.translation {
		return "realtime", 0
	}
	return "translation", float64(durationMS) / 1000
}
