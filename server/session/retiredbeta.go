package session

import (
	"log/slog"
	"strings"

	"rtgate/server/usage"
)

// betaShutDown is the close reason OpenAI gives a client of the retired beta
// interface.
const betaShutDown = "invalid_request_error.beta_api_shape_disabled"

// explainBeta says what a beta_api_shape_disabled close means. The gateway
// keeps forwarding what the client sent (OpenAI-Beta: realtime=v1, the
// openai-beta.realtime-v1 subprotocol): it is the client that must change.
func explainBeta(log *slog.Logger, rec usage.Record) {
	if rec.CloseCode != 4000 || !strings.HasSuffix(rec.CloseReason, "beta_api_shape_disabled") {
		return
	}
	log.Warn("upstream refused the retired Realtime beta interface (beta_api_shape_disabled): the client sent "+
		"OpenAI-Beta: realtime=v1 or the openai-beta.realtime-v1 subprotocol, which OpenAI shut down in May 2026; "+
		"drop them and use the GA interface (session.update needs session.type; GA event names such as "+
		"response.output_audio.delta)", "key", rec.KeyName, "model_group", rec.ModelGroup)
}
