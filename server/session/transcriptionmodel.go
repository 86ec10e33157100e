package session

// The transcription model a client asks for. A Realtime session's input
// transcription runs on the model its session.update names
// (session.audio.input.transcription.model), which the gateway pays for
// (transcriptionCost): the key's models list applies to it. The meter reads the
// model in force from the upstream's session.created and session.updated;
// one the key may not use is replaced at once by the gateway's own
// session.update (the client sees a second session.updated), per the key's
// transcription_model:
//
//	rewrite (default)  the group TRANSCRIPTION_MODEL names, its deployment's
//	                   model, when the key may use it; else transcription off
//	refuse             the same, and an error event model_not_allowed tells
//	                   the client its choice was refused
//
// What was transcribed before the replacement took effect is billed at its
// own model's prices, or flagged unpriced. The gateway's session.update is
// answered to the client as any configuration change is (the session.updated
// tells it the transcription in force); an error the upstream answers it
// with is the gateway's, never the client's: logged and counted
// (holdGatewayAnswer).

import (
	"encoding/json"

	"github.com/gobwas/ws"

	"rtgate/frames"
	"rtgate/poller"
	"rtgate/server/protocol"
	"rtgate/server/routes"
)

// checkTranscriptionModel arms the check on a Realtime conversation
// session of a key with a models list.
func (m *Manager) checkTranscriptionModel(sess *poller.Session, info *sessionInfo) {
	key := info.key
	if key == nil || key.Allows("*") || len(key.Models) == 0 {
		return
	}
	info.meter.OnTranscriptionModel = func(model string) {
		if model == "" || key.Allows(model) {
			return
		}
		go m.replaceTranscriptionModel(sess, key, model)
	}
}

// replaceTranscriptionModel puts the allowed transcription model (or none)
// in place of model, telling the client when the key refuses.
func (m *Manager) replaceTranscriptionModel(sess *poller.Session, key *routes.ClientKey, model string) {
	var tr any // null: transcription off
	if g := m.cfg.TranscriptionModel; g != "" && key.Allows(g) {
		if ds := m.routes().Groups[g]; len(ds) > 0 {
			tr = map[string]string{"model": ds[0].Model}
		}
	}
	body, _ := json.Marshal(map[string]any{"type": "session.update", "event_id": protocol.NewOwnEventID(),
		"session": map[string]any{"type": "realtime", "audio": map[string]any{"input": map[string]any{"transcription": tr}}}})
	if key.TranscriptionModel == routes.TranscriptionRefuse { // first: before the update's answer
		sess.SendClient(protocol.ErrorEvent("invalid_request_error", "model_not_allowed",
			"This key may not use the transcription model '"+model+"'; the session's input transcription was set back.", ""))
	}
	sess.SendUpstream(frames.AppendFrame(nil, ws.OpText, body, true))
}
