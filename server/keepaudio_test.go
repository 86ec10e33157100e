package server

import (
	"encoding/base64"
	"encoding/json"
	"testing"

	"github.com/gorilla/websocket"

	"rtgate/mockai"
	"rtgate/server/session"
)

// TestResumeKeepsUserAudio: a user's audio turn carried across a resume.
// With the opt-in (CONTINUITY_KEEP_AUDIO, or a key's continuity_keep_audio)
// the fresh upstream gets the user item with an input_audio part carrying
// the very bytes the client appended; without it, the item by its
// transcript (input_text).
func TestResumeKeepsUserAudio(t *testing.T) {
	for _, tc := range []struct {
		name string
		on   func(*Settings, *mockai.Server, *testing.T)
		key  string
		part string
	}{
		{"opted in", func(c *Settings, _ *mockai.Server, _ *testing.T) { c.ContinuityKeepAudio = true }, testMasterKey, "input_audio"},
		{"opted in by the key", func(c *Settings, m *mockai.Server, t *testing.T) {
			c.RoutesFile = liveConfig(t, m, "", "\n    continuity_keep_audio: true")
		}, "sk-team-a-test", "input_audio"},
		{"the key opts out", func(c *Settings, m *mockai.Server, t *testing.T) {
			c.ContinuityKeepAudio = true
			c.RoutesFile = liveConfig(t, m, "", "\n    continuity_keep_audio: false")
		}, "sk-team-a-test", "input_text"},
		{"default", func(*Settings, *mockai.Server, *testing.T) {}, testMasterKey, "input_text"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			overBoth(t, mockai.Config{AudioItems: true, Cut: mockai.Cut{Kind: mockai.CutDrop, AfterResponses: 1, Times: 1}},
				func(t *testing.T, mock *mockai.Server, trust func(*Settings)) {
					g := startGateway(t, mock, func(c *Settings) { trust(c); tc.on(c, mock, t) })
					c := g.dial(t, "model=gpt-realtime", bearer(tc.key))
					read(t, c) // session.created
					send(t, c, map[string]any{"type": "session.update", "session": map[string]any{"type": "realtime",
						"audio": map[string]any{"input": map[string]any{"transcription": map[string]any{"model": "gpt-4o-transcribe"}}}}})
					readUntil(t, c, "session.updated")
					var spoken []byte
					for i := range 3 {
						chunk := make([]byte, 480)
						for j := range chunk {
							chunk[j] = byte(i*7 + j)
						}
						spoken = append(spoken, chunk...)
						// "type" first, as the SDKs write it: the gateway finds an
						// event's type in its first 256 bytes.
						if err := c.WriteMessage(websocket.TextMessage, []byte(`{"type":"input_audio_buffer.append","audio":"`+
							base64.StdEncoding.EncodeToString(chunk)+`"}`)); err != nil {
							t.Fatal(err)
						}
					}
					send(t, c, map[string]any{"type": "input_audio_buffer.commit"})
					committed, _ := readUntil(t, c, "input_audio_buffer.committed")
					readUntil(t, c, "conversation.item.input_audio_transcription.completed")
					send(t, c, map[string]any{"type": "response.create"})
					readUntil(t, c, "response.done")
					readUntil(t, c, session.EventResumed)
					secondTurn(t, c)

					item := replayedItem(t, mock, committed.str("item_id"))
					if item.Role != "user" || len(item.Content) != 1 || item.Content[0].Type != tc.part {
						t.Fatalf("replayed user item %+v, want one %s part", item, tc.part)
					}
					switch tc.part {
					case "input_audio":
						if got, _ := base64.StdEncoding.DecodeString(item.Content[0].Audio); string(got) != string(spoken) {
							t.Errorf("replayed audio: %d bytes, want the %d the client appended, unchanged", len(got), len(spoken))
						}
					default:
						if item.Content[0].Text == "" || item.Content[0].Audio != "" {
							t.Errorf("replayed by transcript %+v", item.Content[0])
						}
					}
				})
		})
	}
}

// replayedItem is the conversation.item.create of item id the second
// upstream session received.
func replayedItem(t *testing.T, mock *mockai.Server, id string) (item struct {
	Role    string `json:"role"`
	Content []struct {
		Type  string `json:"type"`
		Text  string `json:"text"`
		Audio string `json:"audio"`
	} `json:"content"`
}) {
	t.Helper()
	var ids []string
	for _, r := range mock.Records() {
		if r.SessionID != "" {
			ids = append(ids, r.SessionID)
		}
	}
	if len(ids) < 2 {
		t.Fatalf("%d upstream sessions, want 2", len(ids))
	}
	for _, e := range mock.Received(ids[1]) {
		var ev struct {
			Item struct {
				ID string `json:"id"`
			} `json:"item"`
		}
		if e.Type != "conversation.item.create" || json.Unmarshal(e.Event, &ev) != nil || ev.Item.ID != id {
			continue
		}
		var wrap struct {
			Item json.RawMessage `json:"item"`
		}
		_ = json.Unmarshal(e.Event, &wrap)
		if err := json.Unmarshal(wrap.Item, &item); err != nil {
			t.Fatal(err)
		}
		return item
	}
	t.Fatalf("the second upstream session received no item %s", id)
	return item
}
