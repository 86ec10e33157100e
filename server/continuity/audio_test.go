package continuity

import (
	"encoding/base64"
	"fmt"
	"strings"
	"testing"
)

// appendEv is the client's append of b.
func appendEv(b []byte) string {
	return fmt.Sprintf(`{"type":"input_audio_buffer.append","audio":%q}`, base64.StdEncoding.EncodeToString(b))
}

// audioItemDone is the upstream's confirmation of a user's audio item.
func audioItemDone(id string) string {
	return `{"type":"conversation.item.done","item":{"id":"` + id + `","type":"message","role":"user","content":[{"type":"input_audio","transcript":null}]}}`
}

func TestKeepAudio(t *testing.T) {
	a, b := []byte(strings.Repeat("a", 300)), []byte(strings.Repeat("b", 200))
	both := append(append([]byte{}, a...), b...)
	turn := []ev{{'c', appendEv(a)}, {'c', appendEv(b)},
		{'u', `{"type":"input_audio_buffer.committed","item_id":"item_v"}`}, {'u', audioItemDone("item_v")},
		{'u', `{"type":"conversation.item.input_audio_transcription.completed","item_id":"item_v","transcript":"spoken"}`}}
	asText := `{"id":"item_v","type":"message","role":"user","content":[{"text":"spoken","type":"input_text"}]}`
	asAudio := func(audio []byte) string {
		return `{"id":"item_v","type":"message","role":"user","content":[{"audio":"` + base64.StdEncoding.EncodeToString(audio) + `","type":"input_audio"}]}`
	}
	older := []ev{{'u', `{"type":"conversation.item.done","item":{"id":"item_t","type":"message","role":"user","content":[{"type":"input_text","text":"` + strings.Repeat("t", 400) + `"}]}}`}}
	tests := []struct {
		name  string
		lim   Limits
		evs   []ev
		items []string // ids, or the item's JSON for item_v
	}{
		{name: "off: by its transcript", evs: turn, items: []string{asText}},
		{name: "on: its own audio", lim: Limits{KeepAudio: true}, evs: turn, items: []string{asAudio(both)}},
		{
			name:  "committed after the item is confirmed",
			lim:   Limits{KeepAudio: true},
			evs:   []ev{{'c', appendEv(a)}, {'u', audioItemDone("item_v")}, {'u', `{"type":"input_audio_buffer.committed","item_id":"item_v"}`}},
			items: []string{asAudio(a)},
		},
		{
			name:  "a clear drops what was appended before it",
			lim:   Limits{KeepAudio: true},
			evs:   append([]ev{{'c', appendEv(a)}, {'c', `{"type":"input_audio_buffer.clear"}`}}, turn[1:]...),
			items: []string{asAudio(b)},
		},
		{
			name:  "the oldest items make room for the audio",
			lim:   Limits{KeepAudio: true, MaxBytes: 1000},
			evs:   append(append([]ev{}, older...), turn...),
			items: []string{asAudio(both)},
		},
		{
			name:  "a turn that cannot fit alone is kept by its transcript, nothing dropped for it",
			lim:   Limits{KeepAudio: true, MaxBytes: 900},
			evs:   append(append([]ev{}, older...), append([]ev{{'c', appendEv(make([]byte, 1000))}}, turn[2:]...)...),
			items: []string{"item_t", asText},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var k Keeper
			tc.lim.Global = NewBudget(1 << 20)
			for _, e := range tc.evs {
				typ := []byte(e.json[len(`{"type":"`) : len(`{"type":"`)+strings.IndexByte(e.json[len(`{"type":"`):], '"')])
				switch {
				case e.side == 'c' && (ClientWants(typ) || (tc.lim.KeepAudio && AudioClientWants(typ))):
					k.Client([]byte(e.json), tc.lim, false)
				case e.side == 'u' && (UpstreamWants(typ) || (tc.lim.KeepAudio && AudioUpstreamWants(typ))):
					k.Upstream([]byte(e.json), tc.lim)
				}
			}
			snap := k.Snapshot()
			var got []string
			for i, it := range snap.Items {
				if snap.IDs[i] == "item_v" {
					got = append(got, string(it))
				} else {
					got = append(got, snap.IDs[i])
				}
			}
			if strings.Join(got, "\n") != strings.Join(tc.items, "\n") {
				t.Errorf("kept\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(tc.items, "\n"))
			}
			if max := tc.lim.MaxBytes; max > 0 && k.Bytes() > max {
				t.Errorf("keeps %d bytes, over its cap %d", k.Bytes(), max)
			}
			if tc.lim.Global.Used() != int64(k.Bytes()) {
				t.Errorf("global %d, session %d", tc.lim.Global.Used(), k.Bytes())
			}
			k.Release()
			if tc.lim.Global.Used() != 0 {
				t.Errorf("global %d after release", tc.lim.Global.Used())
			}
		})
	}
}
