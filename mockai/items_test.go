package mockai_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"rtgate/mockai"
)

// itemConn is a Realtime socket in either dialect; its reads skip xAI's
// pings, so one scenario runs against both.
type itemConn struct {
	t   *testing.T
	c   *websocket.Conn
	xai bool
}

// openItems opens a session in the dialect and reads its opening.
func openItems(t *testing.T, srv *mockai.Server, xai bool) *itemConn {
	t.Helper()
	if xai {
		c, _ := openXAI(t, srv)
		return &itemConn{t, c, true}
	}
	c, _ := connect(t, srv, nil)
	return &itemConn{t, c, false}
}

func (ic *itemConn) send(v map[string]any) {
	ic.t.Helper()
	send(ic.t, ic.c, v)
}

// next reads the next event that is not a ping.
func (ic *itemConn) next() event {
	ic.t.Helper()
	return nextNonPing(ic.t, ic.c)
}

// expect reads the next event (pings left out) and fails unless it has type typ.
func (ic *itemConn) expect(typ string) event {
	ic.t.Helper()
	ev := ic.next()
	if got := ev.str("type"); got != typ {
		ic.t.Fatalf("got event %q (%v), want %q", got, ev, typ)
	}
	return ev
}

// until reads events up to and including the first of type typ, and
// returns it; an error event on the way fails the test.
func (ic *itemConn) until(typ string) event {
	ic.t.Helper()
	for range maxEvents {
		ev := ic.next()
		switch ev.str("type") {
		case typ:
			return ev
		case "error":
			ic.t.Fatalf("error while waiting for %s: %v", typ, ev)
		}
	}
	ic.t.Fatalf("no %s in %d events", typ, maxEvents)
	return nil
}

// retrieve asks for item id and returns the answer (retrieved or error).
func (ic *itemConn) retrieve(id string) event {
	ic.t.Helper()
	ic.send(map[string]any{"type": "conversation.item.retrieve", "event_id": "evt_retrieve", "item_id": id})
	return ic.next()
}

// retrieved retrieves item id and fails unless the server has it.
func (ic *itemConn) retrieved(id string) event {
	ic.t.Helper()
	ev := ic.retrieve(id)
	if ev.str("type") != "conversation.item.retrieved" || ev.str("item.id") != id || ev.str("event_id") == "" {
		ic.t.Fatalf("retrieve %s: %v", id, ev)
	}
	return ev
}

// createText adds a user text item and returns its id.
func (ic *itemConn) createText(id, text string) string {
	ic.t.Helper()
	item := map[string]any{"type": "message", "role": "user",
		"content": []any{map[string]any{"type": "input_text", "text": text}}}
	if id != "" {
		item["id"] = id
	}
	ic.send(map[string]any{"type": "conversation.item.create", "item": item})
	added := ic.expect("conversation.item.added")
	ic.expect("conversation.item.done")
	return added.str("item.id")
}

// respond runs a response to its end and returns response.done.
func (ic *itemConn) respond(extra map[string]any) event {
	ic.t.Helper()
	ev := map[string]any{"type": "response.create"}
	if extra != nil {
		ev["response"] = extra
	}
	ic.send(ev)
	return ic.until("response.done")
}

// wantError fails unless ev is an invalid_request_error with code, a
// message containing msg and param (nil for "").
func wantError(t *testing.T, ev event, code, msg, param string) {
	t.Helper()
	if ev.str("type") != "error" || ev.str("error.type") != "invalid_request_error" || ev.str("error.code") != code {
		t.Fatalf("got %v, want invalid_request_error %s", ev, code)
	}
	if !strings.Contains(ev.str("error.message"), msg) {
		t.Errorf("error message %q, want it to contain %q", ev.str("error.message"), msg)
	}
	if got := ev.get("error.param"); (param == "" && got != nil) || (param != "" && got != param) {
		t.Errorf("error param %v, want %q", got, param)
	}
}

// transcription turns input transcription on (what makes mockai send
// conversation.item.input_audio_transcription.completed).
var transcription = map[string]any{"type": "session.update", "session": map[string]any{
	"audio": map[string]any{"input": map[string]any{"transcription": map[string]any{"model": "whisper-1"}}}}}

// mockTranscript is what mockai transcribes and says.
const mockTranscript = "Hello from mockai."

func TestConversationItems(t *testing.T) {
	t.Parallel()
	tools := []any{map[string]any{"type": "function", "name": "get_weather", "parameters": map[string]any{"type": "object"}}}
	tests := []struct {
		name string
		cfg  mockai.Config
		run  func(t *testing.T, ic *itemConn)
	}{
		{"a created item is retrieved as announced; an unknown one is an error", mockai.Config{}, func(t *testing.T, ic *itemConn) {
			id := ic.createText("item_client1", "hi there")
			ev := ic.retrieved(id)
			if ev.str("item.role") != "user" || ev.str("item.status") != "completed" || ev.str("item.object") != "realtime.item" {
				t.Errorf("retrieved item %v", ev.get("item"))
			}
			if parts, _ := ev.get("item.content").([]any); len(parts) != 1 || event(parts[0].(map[string]any)).str("text") != "hi there" {
				t.Errorf("retrieved content %v", ev.get("item.content"))
			}
			missing := ic.retrieve("item_nope")
			wantError(t, missing, "item_retrieve_invalid_item_id",
				"Error retrieving item: the item with id 'item_nope' does not exist.", "")
			if missing.str("error.event_id") != "evt_retrieve" {
				t.Errorf("error.event_id %v, want the client's evt_retrieve", missing.get("error.event_id"))
			}
			ic.send(map[string]any{"type": "conversation.item.retrieve"})
			wantError(t, ic.next(), "missing_required_parameter", "'item_id'", "item_id")
			ic.retrieved(id) // the session goes on
		}},
		{"a committed audio item, with its transcript once transcribed", mockai.Config{}, func(t *testing.T, ic *itemConn) {
			appendChunks(t, ic.c, speech, 5)
			ic.send(map[string]any{"type": "input_audio_buffer.commit"})
			plain := ic.expect("input_audio_buffer.committed").str("item_id")
			ev := ic.retrieved(plain)
			if ev.str("item.role") != "user" || ev.str("item.type") != "message" {
				t.Errorf("committed item %v, want a user message", ev.get("item"))
			}
			part := itemPart(t, ev)
			if part.str("type") != "input_audio" || part.get("transcript") != nil {
				t.Errorf("untranscribed audio item content %v, want input_audio with transcript null", part)
			}

			ic.send(transcription)
			ic.expect("session.updated")
			appendChunks(t, ic.c, speech, 5)
			ic.send(map[string]any{"type": "input_audio_buffer.commit"})
			heard := ic.expect("input_audio_buffer.committed").str("item_id")
			done := ic.expect("conversation.item.input_audio_transcription.completed")
			// What @openai/agents-realtime does next.
			ev = ic.retrieved(done.str("item_id"))
			if ev.str("item.id") != heard || ev.str("item.role") != "user" {
				t.Errorf("retrieved %v, want the committed user item %s", ev.get("item"), heard)
			}
			if part := itemPart(t, ev); part.str("type") != "input_audio" || part.str("transcript") != mockTranscript {
				t.Errorf("transcribed audio item content %v, want transcript %q", part, mockTranscript)
			}
		}},
		{"the assistant's message once the response is done", mockai.Config{}, func(t *testing.T, ic *itemConn) {
			done := ic.respond(nil)
			id := outputID(t, done)
			ev := ic.retrieved(id)
			if ev.str("item.role") != "assistant" || ev.str("item.type") != "message" || ev.str("item.status") != "completed" {
				t.Errorf("retrieved assistant item %v", ev.get("item"))
			}
			part := itemPart(t, ev)
			wantType := "output_audio"
			if ic.xai {
				wantType = "audio" // as the xAI dialect's response.done says
			}
			if part.str("type") != wantType || part.str("transcript") != mockTranscript {
				t.Errorf("assistant content %v, want %s with transcript %q", part, wantType, mockTranscript)
			}
		}},
		{"a function call with its arguments, then the client's output", mockai.Config{}, func(t *testing.T, ic *itemConn) {
			ic.send(map[string]any{"type": "session.update", "session": map[string]any{"tools": tools, "tool_choice": "required"}})
			ic.expect("session.updated")
			done := ic.respond(nil)
			call := outputItem(t, done)
			ev := ic.retrieved(call.str("id"))
			if ev.str("item.type") != "function_call" || ev.str("item.arguments") != "{}" || ev.str("item.name") != "get_weather" ||
				ev.str("item.call_id") != call.str("call_id") || ev.str("item.status") != "completed" {
				t.Errorf("retrieved call %v, want the completed get_weather call %s with arguments {}", ev.get("item"), call.str("call_id"))
			}
			ic.send(map[string]any{"type": "conversation.item.create", "item": map[string]any{
				"type": "function_call_output", "call_id": call.str("call_id"), "output": `{"temp":21}`}})
			out := ic.expect("conversation.item.added").str("item.id")
			ic.expect("conversation.item.done")
			ev = ic.retrieved(out)
			if ev.str("item.type") != "function_call_output" || ev.str("item.output") != `{"temp":21}` {
				t.Errorf("retrieved output %v", ev.get("item"))
			}
		}},
		{"an out-of-band response adds no item", mockai.Config{}, func(t *testing.T, ic *itemConn) {
			done := ic.respond(map[string]any{"conversation": "none"})
			id := outputID(t, done)
			wantError(t, ic.retrieve(id), "item_retrieve_invalid_item_id", "does not exist", "")
		}},
		{"truncate after the response: transcript gone, audio_end_ms bounded by the audio", mockai.Config{}, func(t *testing.T, ic *itemConn) {
			done := ic.respond(nil)
			id := outputID(t, done)
			// 5 deltas of 4,800 bytes: 500 ms of audio.
			ic.send(map[string]any{"type": "conversation.item.truncate", "item_id": id, "content_index": 0, "audio_end_ms": 501})
			wantError(t, ic.next(), "invalid_value", "Audio content of 500ms is already shorter than 501ms", "audio_end_ms")
			if itemPart(t, ic.retrieved(id)).str("transcript") != mockTranscript {
				t.Error("a refused truncate changed the item")
			}
			ic.send(map[string]any{"type": "conversation.item.truncate", "item_id": id, "content_index": 0, "audio_end_ms": 500})
			tr := ic.expect("conversation.item.truncated")
			if tr.str("item_id") != id || tr.num("content_index") != 0 || tr.num("audio_end_ms") != 500 || tr.str("event_id") == "" {
				t.Errorf("truncated %v", tr)
			}
			// What @openai/agents-realtime does next.
			if part := itemPart(t, ic.retrieved(id)); part.str("transcript") != "" {
				t.Errorf("after truncate the content is %v, want an empty transcript", part)
			}
		}},
		{"truncate while the response runs: its transcript stays gone", mockai.Config{AudioDeltas: 3, AudioDeltaInterval: 50 * time.Millisecond},
			func(t *testing.T, ic *itemConn) {
				ic.send(map[string]any{"type": "response.create"})
				delta := ic.until("response.output_audio.delta")
				ic.send(map[string]any{"type": "conversation.item.truncate", "item_id": delta.str("item_id"), "content_index": 0, "audio_end_ms": 50})
				// The truncate's answer, among the response's events.
				seenTruncated := false
				for range maxEvents {
					ev := ic.next()
					if ev.str("type") == "conversation.item.truncated" {
						seenTruncated = true
					}
					if ev.str("type") == "error" {
						t.Fatalf("truncate refused: %v", ev)
					}
					if ev.str("type") == "response.done" {
						break
					}
				}
				if !seenTruncated {
					t.Fatal("no conversation.item.truncated before response.done")
				}
				if part := itemPart(t, ic.retrieved(delta.str("item_id"))); part.str("transcript") != "" {
					t.Errorf("truncated item after its response %v, want an empty transcript", part)
				}
			}},
		{"truncate refusals", mockai.Config{}, func(t *testing.T, ic *itemConn) {
			user := ic.createText("", "hello")
			done := ic.respond(nil)
			asst := outputID(t, done)
			truncate := func(id string, contentIndex, endMs any) event {
				ev := map[string]any{"type": "conversation.item.truncate", "item_id": id}
				if contentIndex != nil {
					ev["content_index"] = contentIndex
				}
				if endMs != nil {
					ev["audio_end_ms"] = endMs
				}
				ic.send(ev)
				return ic.next()
			}
			wantError(t, truncate("item_nope", 0, 10), "item_truncate_invalid_item_id",
				"Error truncating item: the item with id 'item_nope' does not exist.", "")
			wantError(t, truncate(user, 0, 10), "invalid_value", "Only assistant messages", "item_id")
			wantError(t, truncate(asst, 1, 10), "invalid_value", "content_index", "content_index")
			wantError(t, truncate(asst, 0, -1), "invalid_value", "audio_end_ms", "audio_end_ms")
			wantError(t, truncate(asst, 0, nil), "missing_required_parameter", "'audio_end_ms'", "audio_end_ms")
			wantError(t, truncate(asst, nil, 10), "missing_required_parameter", "'content_index'", "content_index")
			if itemPart(t, ic.retrieved(asst)).str("transcript") != mockTranscript {
				t.Error("a refused truncate changed the item")
			}
		}},
		{"delete: deleted, then unknown; the next item chains to the one before", mockai.Config{}, func(t *testing.T, ic *itemConn) {
			a := ic.createText("item_a", "A")
			b := ic.createText("item_b", "B")
			ic.send(map[string]any{"type": "conversation.item.delete", "item_id": b})
			if ev := ic.expect("conversation.item.deleted"); ev.str("item_id") != b || ev.str("event_id") == "" {
				t.Errorf("deleted %v", ev)
			}
			wantError(t, ic.retrieve(b), "item_retrieve_invalid_item_id", "does not exist", "")
			ic.send(map[string]any{"type": "conversation.item.delete", "item_id": b})
			wantError(t, ic.next(), "item_delete_invalid_item_id",
				"Error deleting item: the item with id 'item_b' does not exist.", "")
			ic.retrieved(a)
			ic.send(map[string]any{"type": "conversation.item.create", "item": map[string]any{"type": "message", "role": "user"}})
			if ev := ic.expect("conversation.item.added"); ev.str("previous_item_id") != a {
				t.Errorf("previous_item_id %v after deleting the newest item, want %s", ev.get("previous_item_id"), a)
			}
			ic.expect("conversation.item.done")
		}},
		{"the newest 64 items are kept", mockai.Config{}, func(t *testing.T, ic *itemConn) {
			for i := range 65 {
				ic.createText(fmt.Sprintf("item_%02d", i), "x")
			}
			wantError(t, ic.retrieve("item_00"), "item_retrieve_invalid_item_id", "does not exist", "")
			ic.retrieved("item_01")
			ic.retrieved("item_64")
		}},
		{"a failed response adds no item", mockai.Config{FailResponses: true}, func(t *testing.T, ic *itemConn) {
			ic.createText("item_before", "x")
			done := ic.respond(nil)
			if done.str("response.status") != "failed" {
				t.Fatalf("status %q, want failed", done.str("response.status"))
			}
			// Its item is nowhere to be seen; what was there before stays.
			ic.retrieved("item_before")
		}},
	}
	for _, tc := range tests {
		for _, xai := range []bool{false, true} {
			name := tc.name + "/openai"
			if xai {
				name = tc.name + "/xai"
			}
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				srv := start(t, tc.cfg)
				tc.run(t, openItems(t, srv, xai))
			})
		}
	}
}

// What @openai/agents-realtime does against the OpenAI dialect in a
// spoken turn with transcription: server VAD commits, the transcript comes,
// the SDK retrieves the user item; the answer is interrupted by speech,
// the SDK truncates it and retrieves it again. Each retrieve is answered.
func TestAgentsSDKTurnRetrieves(t *testing.T) {
	t.Parallel()
	srv := start(t, mockai.Config{AudioDeltas: 4, AudioDeltaInterval: 20 * time.Millisecond})
	ic := openItems(t, srv, false)
	upd := vadUpdate(nil)
	upd["session"].(map[string]any)["audio"].(map[string]any)["input"].(map[string]any)["transcription"] = map[string]any{"model": "whisper-1"}
	ic.send(upd)
	ic.expect("session.updated")
	appendChunks(t, ic.c, speech, 5)
	appendChunks(t, ic.c, silence, 5)
	user := ic.until("input_audio_buffer.committed").str("item_id")
	tr := ic.until("conversation.item.input_audio_transcription.completed")
	ic.send(map[string]any{"type": "conversation.item.retrieve", "item_id": tr.str("item_id")})
	// The automatic response's events come too; the retrieve's answer is among them.
	var asst string
	for range maxEvents {
		ev := ic.next()
		switch ev.str("type") {
		case "error":
			t.Fatalf("error: %v", ev)
		case "response.output_audio.delta":
			asst = ev.str("item_id")
		case "conversation.item.retrieved":
			if ev.str("item.id") != user || itemPart(t, ev).str("transcript") != mockTranscript {
				t.Errorf("retrieved %v, want user item %s with its transcript", ev.get("item"), user)
			}
			user = "" // seen
		}
		if user == "" && asst != "" {
			break
		}
	}
	if user != "" || asst == "" {
		t.Fatalf("no retrieved user item (%q left) or no audio delta (%q)", user, asst)
	}
	// Barge-in: speech cancels the answer; the SDK truncates what was played.
	appendChunks(t, ic.c, speech, 1)
	ic.send(map[string]any{"type": "conversation.item.truncate", "item_id": asst, "content_index": 0, "audio_end_ms": 100})
	truncated := false
	for range maxEvents {
		ev := ic.next()
		if ev.str("type") == "error" {
			t.Fatalf("error: %v", ev)
		}
		if ev.str("type") == "conversation.item.truncated" {
			truncated = true
			ic.send(map[string]any{"type": "conversation.item.retrieve", "item_id": ev.str("item_id")})
		}
		if ev.str("type") == "conversation.item.retrieved" {
			if !truncated || ev.str("item.id") != asst || ev.str("item.role") != "assistant" {
				t.Errorf("retrieved %v, want the truncated assistant item %s", ev.get("item"), asst)
			}
			return
		}
	}
	t.Fatal("no conversation.item.retrieved after the truncate")
}

// itemPart is the retrieved item's first content part.
func itemPart(t *testing.T, ev event) event {
	t.Helper()
	parts, _ := ev.get("item.content").([]any)
	if len(parts) == 0 {
		t.Fatalf("item without content: %v", ev.get("item"))
	}
	m, _ := parts[0].(map[string]any)
	return event(m)
}

// outputID is the id of a response.done's only output item.
func outputID(t *testing.T, done event) string {
	t.Helper()
	return outputItem(t, done).str("id")
}

// outputItem is a response.done's only output item.
func outputItem(t *testing.T, done event) event {
	t.Helper()
	outs, _ := done.get("response.output").([]any)
	if len(outs) != 1 {
		t.Fatalf("response.done output %v, want one item", done.get("response.output"))
	}
	m, _ := outs[0].(map[string]any)
	return event(m)
}
