package server

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/gorilla/websocket"

	"rtgate/mockai"
)

// Session continuity as a client sees it: its socket stays open across the
// loss of the upstream, the conversation goes on, and the fresh upstream
// session got the configuration and every item, in order, with their ids.

// userItem is a conversation.item.create of a user's text with id.
func userItem(id, text string) map[string]any {
	return map[string]any{"type": "conversation.item.create", "item": map[string]any{"id": id, "type": "message", "role": "user",
		"content": []any{map[string]any{"type": "input_text", "text": text}}}}
}

// converse sets the session up and has one turn: session.update, a user
// item, a response; it returns the assistant item's id.
func converse(t *testing.T, c *websocket.Conn) string {
	t.Helper()
	send(t, c, map[string]any{"type": "session.update", "session": map[string]any{"type": "realtime", "instructions": "be brief"}})
	if e, _ := readUntil(t, c, "session.updated"); e.str("session", "instructions") != "be brief" {
		t.Fatalf("session.updated %v", e)
	}
	send(t, c, userItem("item_user1", "hello"))
	readUntil(t, c, "conversation.item.done")
	send(t, c, map[string]any{"type": "response.create"})
	done, _ := readUntil(t, c, "response.done")
	out, _ := done["response"].(map[string]any)["output"].([]any)
	if len(out) != 1 {
		t.Fatalf("response.done output %v", out)
	}
	return out[0].(map[string]any)["id"].(string)
}

// secondTurn checks the session goes on after the resume.
func secondTurn(t *testing.T, c *websocket.Conn) {
	t.Helper()
	send(t, c, userItem("item_user2", "and then?"))
	if e, _ := readUntil(t, c, "conversation.item.done"); e.str("item", "id") != "item_user2" {
		t.Fatalf("item done %v", e)
	}
	send(t, c, map[string]any{"type": "response.create"})
	if done, _ := readUntil(t, c, "response.done"); done.str("response", "status") != "completed" {
		t.Fatalf("second response %v", done)
	}
}

// replayed is what the n-th upstream session received, as types (with the
// item id for item creates, and the instructions for session.update).
func replayed(t *testing.T, mock *mockai.Server, n int) []string {
	t.Helper()
	var ids []string
	for _, r := range mock.Records() {
		if r.SessionID != "" {
			ids = append(ids, r.SessionID)
		}
	}
	if len(ids) <= n {
		t.Fatalf("%d upstream sessions, want more than %d", len(ids), n)
	}
	var got []string
	for _, e := range mock.Received(ids[n]) {
		var ev struct {
			Item struct {
				ID      string `json:"id"`
				Role    string `json:"role"`
				Content []struct {
					Type string `json:"type"`
				} `json:"content"`
			} `json:"item"`
			Session struct {
				Instructions string `json:"instructions"`
			} `json:"session"`
		}
		_ = json.Unmarshal(e.Event, &ev)
		switch e.Type {
		case "conversation.item.create":
			got = append(got, e.Type+" "+ev.Item.ID+" "+ev.Item.Role+" "+ev.Item.Content[0].Type)
		case "session.update":
			got = append(got, e.Type+" "+ev.Session.Instructions)
		default:
			got = append(got, e.Type)
		}
	}
	return got
}

func TestResumeBetweenTurns(t *testing.T) {
	for _, tc := range []struct {
		name  string
		cut   mockai.Cut
		cause string
	}{
		{"dropped", mockai.Cut{Kind: mockai.CutDrop, AfterResponses: 1, Times: 1}, "upstream_lost"},
		{"closed 1012", mockai.Cut{Kind: mockai.CutClose, Code: 1012, AfterResponses: 1, Times: 1}, "upstream_closed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			overBoth(t, mockai.Config{AudioDeltas: 2, Cut: tc.cut}, func(t *testing.T, mock *mockai.Server, trust func(*Settings)) {
				g := startGateway(t, mock, trust)
				c := g.dial(t, "model=gpt-realtime", bearer(testMasterKey))
				read(t, c) // session.created
				assistant := converse(t, c)
				resumed, _ := readUntil(t, c, EventResumed)
				if resumed.str("cause") != tc.cause || resumed.str("replayed_items") != "2" || resumed.str("lost_response_id") != "" {
					t.Errorf("resumed event %v", resumed)
				}
				secondTurn(t, c)
				want := []string{"session.update be brief", "conversation.item.create item_user1 user input_text",
					"conversation.item.create " + assistant + " assistant output_text",
					"conversation.item.create item_user2 user input_text", "response.create"}
				if got := replayed(t, mock, 1); strings.Join(got, "\n") != strings.Join(want, "\n") {
					t.Errorf("the fresh upstream received\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
				}
				if err := c.WriteMessage(websocket.CloseMessage, websocket.FormatCloseMessage(1000, "bye")); err != nil {
					t.Fatal(err)
				}
				if ce := closeOf(t, c); ce.Code != 1000 {
					t.Errorf("close %v", ce)
				}
			})
		})
	}
}
