package session

import (
	"net/url"
	"testing"

	"rtgate/server/admission"
	"rtgate/server/apps"
	"rtgate/server/protocol"
	"rtgate/server/routes"
)

// TestRealtimeKind: what a connect on a Realtime path opens, from its path,
// query and client secret.
func TestRealtimeKind(t *testing.T) {
	transcriptionSecret := &apps.Grant{Claims: apps.Claims{Type: "transcription"}}
	realtimeSecret := &apps.Grant{Claims: apps.Claims{Type: "realtime"}}
	for _, tc := range []struct {
		path, query string
		grant       *apps.Grant
		want        sessionKind
	}{
		{"/v1/realtime", "model=gpt-realtime", nil, kindRealtime},
		{"/v1/realtime", "model=gpt-realtime", realtimeSecret, kindRealtime},
		{"/v1/realtime", "intent=transcription", nil, kindTranscription},
		{"/v1/realtime", "intent=Transcription", nil, kindTranscription},
		{"/v1/realtime", "", transcriptionSecret, kindTranscription},
		{"/v1/realtime/translations", "model=gpt-realtime-translate", nil, kindTranslation},
		{"/realtime/translations", "model=gpt-realtime-translate", nil, kindTranslation},
		{"/v1/realtime", "call_id=rtc_1", nil, kindSideband},
		{"/v1/realtime", "call_id=rtc_1&intent=transcription", nil, kindSideband},
	} {
		q, _ := url.ParseQuery(tc.query)
		if got := realtimeKind(tc.path, q, tc.grant); got != tc.want {
			t.Errorf("%s?%s (secret %v): %v, want %v", tc.path, tc.query, tc.grant != nil, got, tc.want)
		}
	}
}

// TestSessionKindTraits: what each kind gets, as a user would notice it:
// the protocol of its errors and metrics, whether it may take a warm socket,
// whether the gateway follows it as a conversation (continuity, cancelled
// responses at its end), and what admission counts.
func TestSessionKindTraits(t *testing.T) {
	for _, tc := range []struct {
		kind                 sessionKind
		proto                protocol.Protocol
		label                string
		entry                admission.Entry
		conversation, pooled bool
		speaksLive           bool
	}{
		{kindRealtime, protocol.Realtime{}, routes.ProtocolRealtime, admission.Connect, true, true, false},
		{kindTranscription, protocol.Realtime{}, routes.ProtocolRealtime, admission.Connect, false, false, false},
		{kindTranslation, protocol.Realtime{}, routes.ProtocolTranslation, admission.Connect, false, false, false},
		{kindSideband, protocol.Realtime{}, routes.ProtocolRealtime, admission.Sideband, false, false, false},
		{kindLive, protocol.Live{}, routes.ProtocolLive, admission.Connect, false, true, true},
		{kindLiveSideband, protocol.Live{}, routes.ProtocolLive, admission.Sideband, false, false, true},
		{kindLiveFork, protocol.Live{}, routes.ProtocolLive, admission.Fork, false, false, true},
	} {
		tr := tc.kind.traits()
		if tr.proto != tc.proto || tr.label != tc.label || tr.entry != tc.entry || tr.conversation != tc.conversation ||
			tr.pooled != tc.pooled || tc.kind.isLive() != tc.speaksLive {
			t.Errorf("%v: %+v", tc.kind, tr)
		}
		info := &sessionInfo{kind: tc.kind}
		if info.protocol() != tc.label {
			t.Errorf("%v: the record and metrics say %q, want %q", tc.kind, info.protocol(), tc.label)
		}
	}
}
