package session

import (
	"net/url"
	"strings"

	"rtgate/server/admission"
	"rtgate/server/apps"
	"rtgate/server/protocol"
	"rtgate/server/routes"
)

// sessionKind is what a WebSocket connect opens, decided once from its path,
// query and credentials (Manager.decide) and read by every phase after it
// (admit, open, startApp, primed, the record) through its row of
// sessionKind.traits: one table instead of flags each phase combined its
// own way.
//
// The kind says what the client speaks and how the gateway serves it; the
// upstream is the deployment's. So a provider that speaks another wire
// protocol (issue 35) is a column beside it (kind × provider), not a new
// kind.
//
// A resume is not a kind: it is an event in the life of a Realtime or
// GPT-Live session whose key has continuity on (keepContinuity, keepLive),
// and the resumed session keeps its kind.
type sessionKind uint8

const (
	kindRealtime      sessionKind = iota // a Realtime conversation: /v1/realtime?model=
	kindTranscription                    // ?intent=transcription, or a transcription client secret
	kindTranslation                      // /v1/realtime/translations
	kindSideband                         // ?call_id=: a second socket to a WebRTC or SIP call's session
	kindLive                             // GPT-Live: /v1/live/sessions, its model from session.start
	kindLiveSideband                     // /v1/live/sessions/{id}/attach: a sideband to a GPT-Live session
	kindLiveFork                         // /v1/live/sessions/{id}/fork over WebSocket: a Live session of its own
)

// kindTraits is a kind's row of the table.
type kindTraits struct {
	name string
	// proto is what the client speaks: its error events, its model, its
	// warm sockets' first event.
	proto protocol.Protocol
	// label is the protocol label of the metrics and the record
	// (rtgate_sessions_open{protocol}, sessionInfo.protocol).
	label string
	// entry is the admission's way in (its rule in server/admission): a session slot and the
	// deployment's slot, or neither for a sideband.
	entry admission.Entry
	// conversation: a Realtime conversation the gateway follows closely:
	// the responses in flight (keepFlights, cancelled at the end), the
	// client's events on the turn clock, the answers to the gateway's own
	// events held (holdGatewayAnswer), continuity when the key has it on.
	conversation bool
	// pooled: may take a warm socket of its protocol's pool (the Realtime
	// pool; GPT-Live's, LIVE_POOL_SIZE).
	pooled bool
}

// traits is k's row.
func (k sessionKind) traits() kindTraits {
	return [...]kindTraits{
		kindRealtime:      {"realtime", protocol.Realtime{}, routes.ProtocolRealtime, admission.Connect, true, true},
		kindTranscription: {"transcription", protocol.Realtime{}, routes.ProtocolRealtime, admission.Connect, false, false},
		kindTranslation:   {"translation", protocol.Realtime{}, routes.ProtocolTranslation, admission.Connect, false, false},
		kindSideband:      {"sideband", protocol.Realtime{}, routes.ProtocolRealtime, admission.Sideband, false, false},
		kindLive:          {"live", protocol.Live{}, routes.ProtocolLive, admission.Connect, false, true},
		kindLiveSideband:  {"live sideband", protocol.Live{}, routes.ProtocolLive, admission.Sideband, false, false},
		kindLiveFork:      {"live fork", protocol.Live{}, routes.ProtocolLive, admission.Fork, false, false},
	}[k]
}

// realtimeKind is the kind of a connect on one of the Realtime paths: a
// sideband when it names a call, then by its path, its intent (in any case)
// and its client secret's type.
func realtimeKind(path string, q url.Values, grant *apps.Grant) sessionKind {
	switch {
	case q.Get("call_id") != "":
		return kindSideband
	case isTranslationPath(path):
		return kindTranslation
	case strings.EqualFold(q.Get("intent"), "transcription"), grant != nil && grant.Claims.Type == "transcription":
		return kindTranscription
	}
	return kindRealtime
}

// isLive reports whether the kind speaks GPT-Live's protocol.
func (k sessionKind) isLive() bool { return k.traits().label == routes.ProtocolLive }

func (k sessionKind) String() string { return k.traits().name }

// proto is what the session's client speaks (its kind's).
func (i *sessionInfo) proto() protocol.Protocol { return i.kind.traits().proto }
