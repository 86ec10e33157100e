package admission

import (
	"testing"

	"rtgate/server/apps"
	"rtgate/server/routes"
)

// TestPickGroup: the group a request goes to, and the refusals of a group
// that is missing, of the other protocol, or not the key's.
func TestPickGroup(t *testing.T) {
	group := func(name, protocol string) []*routes.Deployment {
		return []*routes.Deployment{{Name: name + "-d", Group: name, Protocol: protocol}}
	}
	table := &routes.Table{Default: "rt", Groups: map[string][]*routes.Deployment{
		"rt":      group("rt", routes.ProtocolRealtime),
		"whisper": group("whisper", routes.ProtocolRealtime),
		"tr-rt":   group("tr-rt", routes.ProtocolRealtime),
		"live":    group("live", routes.ProtocolLive),
		"tl":      group("tl", routes.ProtocolTranslation),
	}}
	g := New(Config{TranscriptionModel: "tr-rt"}, Deps{})
	onlyRT := &routes.ClientKey{Name: "k", Models: []string{"rt"}}
	for _, tc := range []struct {
		name      string
		key       *routes.ClientKey
		ask       GroupAsk
		want      string
		refusedAs string
	}{
		{"the default group", nil, GroupAsk{}, "rt", ""},
		{"the model named", nil, GroupAsk{Model: "whisper"}, "whisper", ""},
		{"a client secret's group over the model named", nil,
			GroupAsk{Grant: &apps.Grant{Claims: apps.Claims{Group: "whisper"}}, Model: "rt"}, "whisper", ""},
		{"a transcription model that is a group", nil, GroupAsk{Transcription: true, Model: "whisper"}, "whisper", ""},
		{"a transcription model that is not: TRANSCRIPTION_MODEL", nil, GroupAsk{Transcription: true, Model: "gpt-4o-transcribe"}, "tr-rt", ""},
		{"no such group", nil, GroupAsk{Model: "gpt-nope"}, "", "model_not_found"},
		{"a GPT-Live group on the Realtime route", nil, GroupAsk{Model: "live"}, "", "invalid_model"},
		{"a Realtime group on the GPT-Live route", nil, GroupAsk{Model: "rt", Protocol: routes.ProtocolLive}, "", "invalid_model"},
		{"a translation group on the Realtime route", nil, GroupAsk{Model: "tl"}, "", "invalid_model"},
		{"a translation group on its route", nil, GroupAsk{Model: "tl", Protocol: routes.ProtocolTranslation}, "tl", ""},
		{"a group the key may use", onlyRT, GroupAsk{Model: "rt"}, "rt", ""},
		{"a group the key may not use", onlyRT, GroupAsk{Model: "whisper"}, "", "model_not_allowed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, herr := g.PickGroup(table, tc.key, tc.ask)
			if got != tc.want || code(herr) != tc.refusedAs {
				t.Fatalf("got %q refused %q, want %q refused %q", got, code(herr), tc.want, tc.refusedAs)
			}
		})
	}
}
