package xai_test

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/gobwas/ws"

	"rtgate/frames"
	"rtgate/server/eventtype"
	"rtgate/server/providers/xai"
)

// collectSink keeps a copy of everything written: the scanner reuses its
// buffers at the next Forward.
type collectSink struct{ b []byte }

func (c *collectSink) WriteBinary(p []byte) (int, error) {
	c.b = append(c.b, p...)
	return len(p), nil
}

// frame is one message the scanner wrote to the client.
type frame struct {
	op      ws.OpCode
	payload string
}

// relay drives a Normalizer as the gateway does, through a translating
// upstream scanner: each message goes in as one unmasked text frame, and
// what the client would get comes out, one slice of frames per message.
func relay(t testing.TB, n *xai.Normalizer, msgs ...string) [][]frame {
	t.Helper()
	s := frames.NewScanner(frames.UpstreamSide, 0)
	s.SetTranslator(n)
	var got [][]frame
	for _, m := range msgs {
		var sink collectSink
		in := frames.AppendFrame(nil, ws.OpText, []byte(m), false)
		if _, err := s.Forward(frames.NewByteSource(in), &sink); err != nil {
			t.Fatalf("Forward(%.60q): %v", m, err)
		}
		got = append(got, parseFrames(t, sink.b))
	}
	return got
}

// parseFrames splits what a scanner wrote into frames, checking each is a
// final, unmasked frame (the client's side).
func parseFrames(t testing.TB, b []byte) []frame {
	t.Helper()
	var out []frame
	for len(b) > 0 {
		h, hlen, ok, err := frames.ParseHeader(b)
		if err != nil || !ok {
			t.Fatalf("bad frame header in output: ok=%v err=%v", ok, err)
		}
		if !h.Fin || h.Masked {
			t.Fatalf("frame to the client: fin=%v masked=%v, want a final unmasked frame", h.Fin, h.Masked)
		}
		end := hlen + int(h.Length)
		if end > len(b) {
			t.Fatalf("frame of %d bytes cut short at %d", h.Length, len(b)-hlen)
		}
		out = append(out, frame{h.OpCode, string(b[hlen:end])})
		b = b[end:]
	}
	return out
}

// texts is the payloads of frames, which must all be text frames.
func texts(t testing.TB, fs []frame) []string {
	t.Helper()
	out := []string{}
	for _, f := range fs {
		if f.op != ws.OpText {
			t.Fatalf("frame opcode %v, want text", f.op)
		}
		out = append(out, f.payload)
	}
	return out
}

// The structs below mirror the members openai-node's realtime.d.ts (7.59)
// requires of the server events the normaliser repairs, and the enums it
// declares, with pointers where absent and zero differ. The Agents SDK's
// zod schemas (openaiRealtimeEvents.ts, 0.20) require the same members of
// these events.

type sdkEvent struct {
	Type         string           `json:"type"`
	EventID      *string          `json:"event_id"`
	ResponseID   *string          `json:"response_id"`
	ItemID       *string          `json:"item_id"`
	CallID       *string          `json:"call_id"`
	OutputIndex  *int             `json:"output_index"`
	ContentIndex *int             `json:"content_index"`
	Part         *sdkPart         `json:"part"`
	Item         *sdkItem         `json:"item"`
	Response     *sdkResponse     `json:"response"`
	Session      *sdkSession      `json:"session"`
	Conversation *sdkConversation `json:"conversation"`
}

type sdkPart struct {
	Type       string  `json:"type"` // 'text' | 'audio'
	Transcript *string `json:"transcript"`
	Text       *string `json:"text"`
}

type sdkItem struct {
	ID   string `json:"id"`
	Type string `json:"type"`
	Role string `json:"role"` // 'user' | 'assistant' | 'system'
}

type sdkResponse struct {
	ID            string     `json:"id"`
	Object        string     `json:"object"`
	Status        string     `json:"status"`
	StatusDetails *sdkStatus `json:"status_details"` // an object: a string fails to decode
	Output        []sdkItem  `json:"output"`
	Usage         *sdkUsage  `json:"usage"`
}

type sdkStatus struct {
	Type   string `json:"type"`
	Reason string `json:"reason"`
	Error  *struct {
		Type    string `json:"type"`
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

type sdkUsage struct {
	TotalTokens        *int            `json:"total_tokens"`
	InputTokens        *int            `json:"input_tokens"`
	OutputTokens       *int            `json:"output_tokens"`
	InputTokenDetails  *map[string]any `json:"input_token_details"`
	OutputTokenDetails *map[string]any `json:"output_token_details"`
}

type sdkSession struct {
	Type             string   `json:"type"` // required: 'realtime'
	Object           string   `json:"object"`
	ID               string   `json:"id"`
	Model            string   `json:"model"`
	OutputModalities []string `json:"output_modalities"`
	Audio            struct {
		Input struct {
			Format struct {
				Type string `json:"type"`
				Rate int    `json:"rate"`
			} `json:"format"`
		} `json:"input"`
		Output struct {
			Format struct {
				Type string `json:"type"`
				Rate int    `json:"rate"`
			} `json:"format"`
			Voice string `json:"voice"`
		} `json:"output"`
	} `json:"audio"`
}

type sdkConversation struct {
	ID     string `json:"id"`
	Object string `json:"object"`
}

// conform decodes an event the client gets and checks what the SDK types
// require of its type; with typeFirst it also checks the type is still
// where the gateway's usage meter reads it (eventtype.Of: the first 256
// bytes), which no repair may change.
func conform(t *testing.T, raw string, typeFirst bool) sdkEvent {
	t.Helper()
	var ev sdkEvent
	if err := json.Unmarshal([]byte(raw), &ev); err != nil {
		t.Fatalf("event does not decode as the SDK declares it: %v\n%s", err, raw)
	}
	if typ, ok := eventtype.Of([]byte(raw)); typeFirst && (!ok || string(typ) != ev.Type) {
		t.Errorf("eventtype.Of = %q, %v; want %q: the type must stay first\n%.300s", typ, ok, ev.Type, raw)
	}
	var missing []string
	need := func(name string, ok bool) {
		if !ok {
			missing = append(missing, name)
		}
	}
	switch ev.Type {
	case "ping", "response.audio.delta", "response.audio.done", "response.audio_transcript.delta",
		"response.audio_transcript.done", "response.text.delta", "response.text.done":
		t.Errorf("a %s reached the client: GA clients do not know it", ev.Type)
	default:
		if !strings.HasPrefix(ev.Type, "response.") && !strings.HasPrefix(ev.Type, "session.") &&
			!strings.HasPrefix(ev.Type, "conversation.") {
			break // not one of the events checked here
		}
		need("event_id", ev.EventID != nil)
	}
	switch ev.Type {
	case "response.output_audio.delta", "response.output_audio.done",
		"response.output_audio_transcript.delta", "response.output_audio_transcript.done",
		"response.output_text.delta", "response.output_text.done",
		"response.content_part.added", "response.content_part.done":
		need("response_id", ev.ResponseID != nil)
		need("item_id", ev.ItemID != nil)
		need("output_index", ev.OutputIndex != nil)
		need("content_index", ev.ContentIndex != nil)
		if strings.HasPrefix(ev.Type, "response.content_part.") {
			need("part", ev.Part != nil)
			if ev.Part != nil && ev.Part.Type != "audio" && ev.Part.Type != "text" {
				t.Errorf("part.type %q, want audio or text", ev.Part.Type)
			}
		}
	case "response.function_call_arguments.delta", "response.function_call_arguments.done":
		need("response_id", ev.ResponseID != nil)
		need("item_id", ev.ItemID != nil)
		need("call_id", ev.CallID != nil)
		need("output_index", ev.OutputIndex != nil)
	case "response.output_item.added", "response.output_item.done":
		need("response_id", ev.ResponseID != nil)
		need("output_index", ev.OutputIndex != nil)
		need("item", ev.Item != nil)
	case "conversation.item.added", "conversation.item.done":
		need("item", ev.Item != nil)
	case "response.created", "response.done":
		need("response", ev.Response != nil)
		if ev.Type == "response.done" && ev.Response != nil {
			// The types leave usage and its counts optional; the
			// normaliser promises the usage object (the Agents SDK
			// reads its counts, and a missing one reads as nothing).
			need("response.usage", ev.Response.Usage != nil)
		}
	case "session.created", "session.updated":
		need("session", ev.Session != nil)
		if ev.Session != nil && ev.Session.Type != "realtime" {
			t.Errorf("session.type %q, want realtime", ev.Session.Type)
		}
	case "conversation.created":
		need("conversation", ev.Conversation != nil)
	case "conversation.item.input_audio_transcription.completed":
		need("item_id", ev.ItemID != nil)
		need("content_index", ev.ContentIndex != nil)
	}
	if len(missing) > 0 {
		t.Errorf("%s lacks %s, which the SDK types require\n%.300s", ev.Type, strings.Join(missing, ", "), raw)
	}
	roles := []sdkItem{}
	if ev.Item != nil {
		roles = append(roles, *ev.Item)
	}
	if ev.Response != nil {
		roles = append(roles, ev.Response.Output...)
	}
	for _, it := range roles {
		switch it.Role {
		case "", "user", "assistant", "system":
		default:
			t.Errorf("item %s has role %q, which no SDK item type allows", it.ID, it.Role)
		}
	}
	return ev
}

// sameJSON reports whether two JSON texts hold the same value.
func sameJSON(t *testing.T, got, want string) bool {
	t.Helper()
	var g, w any
	if err := json.Unmarshal([]byte(got), &g); err != nil {
		t.Fatalf("output is not JSON: %v\n%s", err, got)
	}
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatalf("the test's want is not JSON: %v\n%s", err, want)
	}
	return reflect.DeepEqual(g, w)
}

const (
	respCreated = `{"type":"response.created","event_id":"ev_rc","response":{"id":"resp_1","object":"realtime.response","status":"in_progress","output":[],"usage":{}}}`
	itemAdded   = `{"type":"response.output_item.added","event_id":"ev_ia","response_id":"resp_1","item":{"id":"item_a","type":"message","role":"assistant","content":[]}}`
	partAdded   = `{"type":"response.content_part.added","event_id":"ev_pa","response_id":"resp_1","item_id":"item_a","part":{"type":"audio","transcript":""}}`
	zeroUsage   = `{"total_tokens":0,"input_tokens":0,"output_tokens":0,"input_token_details":{"text_tokens":0,"audio_tokens":0,"image_tokens":0,"cached_tokens":0,"cached_tokens_details":{"text_tokens":0,"audio_tokens":0,"image_tokens":0}},"output_token_details":{"text_tokens":0,"audio_tokens":0}}`
)

// TestNormalizerRepairs: each deviation of xAI's events comes out as the GA
// event the SDK types describe; what needs no repair comes out byte for
// byte. prior events set the session's state (their output is checked for
// conformance too); in is the event under test, want what the client gets
// for it (compared as JSON values, or byte for byte with exact).
func TestNormalizerRepairs(t *testing.T) {
	audio := strings.Repeat("AAAA", 300) // past eventtype.Of's 256 bytes
	tests := []struct {
		name  string
		prior []string
		in    string
		want  []string
		exact bool
		// typeLate: xAI put the type past the first 256 bytes, and the
		// output keeps it there.
		typeLate bool
	}{
		{name: "ping is dropped",
			in:   `{"type":"ping","event_id":"ev_p","timestamp":1760000000000}`,
			want: []string{}},
		{name: "an event GA knows and nothing here touches passes as is",
			in:    `{"type":"input_audio_buffer.speech_started","event_id":"ev_s","item_id":"item_u","audio_start_ms":120}`,
			want:  []string{`{"type":"input_audio_buffer.speech_started","event_id":"ev_s","item_id":"item_u","audio_start_ms":120}`},
			exact: true},
		{name: "an event of a type nobody knows passes as is",
			in:    `{"type":"xai.something_new", "odd": [1, {"a":"b"}]}`,
			want:  []string{`{"type":"xai.something_new", "odd": [1, {"a":"b"}]}`},
			exact: true},
		{name: "text that is not JSON passes as is",
			in:    `not json {"type":"response.output_audio.delta"`,
			want:  []string{`not json {"type":"response.output_audio.delta"`},
			exact: true},
		{name: "an audio delta with its indexes passes as is",
			prior: []string{respCreated, itemAdded},
			in:    `{"type":"response.output_audio.delta","event_id":"ev_d","response_id":"resp_1","item_id":"item_a","output_index":0,"content_index":0,"delta":"` + audio + `"}`,
			want:  []string{`{"type":"response.output_audio.delta","event_id":"ev_d","response_id":"resp_1","item_id":"item_a","output_index":0,"content_index":0,"delta":"` + audio + `"}`},
			exact: true},
		{name: "an audio delta without indexes gets its item's",
			prior: []string{respCreated, itemAdded, partAdded},
			in:    `{"type":"response.output_audio.delta","event_id":"ev_d","response_id":"resp_1","item_id":"item_a","delta":"` + audio + `"}`,
			want:  []string{`{"type":"response.output_audio.delta","event_id":"ev_d","response_id":"resp_1","item_id":"item_a","delta":"` + audio + `","output_index":0,"content_index":0}`},
			exact: true},
		{name: "a second item of the response is output_index 1",
			prior: []string{respCreated, itemAdded, partAdded,
				`{"type":"response.output_item.added","event_id":"ev_ib","response_id":"resp_1","item":{"id":"item_b","type":"message","role":"assistant","content":[]}}`,
				`{"type":"response.content_part.added","event_id":"ev_pb","response_id":"resp_1","item_id":"item_b","part":{"type":"audio","transcript":""}}`},
			in:   `{"type":"response.output_audio_transcript.delta","event_id":"ev_t","response_id":"resp_1","item_id":"item_b","delta":"Hi"}`,
			want: []string{`{"type":"response.output_audio_transcript.delta","event_id":"ev_t","response_id":"resp_1","item_id":"item_b","delta":"Hi","output_index":1,"content_index":0}`}},
		{name: "an item's second content part is content_index 1",
			prior: []string{respCreated, itemAdded, partAdded, partAdded},
			in:    `{"type":"response.output_audio.done","event_id":"ev_ad","response_id":"resp_1","item_id":"item_a"}`,
			want:  []string{`{"type":"response.output_audio.done","event_id":"ev_ad","response_id":"resp_1","item_id":"item_a","output_index":0,"content_index":1}`}},
		{name: "an index xAI sends is kept and counted on from",
			prior: []string{respCreated,
				`{"type":"response.output_item.added","event_id":"ev_ia","response_id":"resp_1","output_index":3,"item":{"id":"item_a","type":"message","role":"assistant","content":[]}}`},
			in:   `{"type":"response.output_item.added","event_id":"ev_ib","response_id":"resp_1","item":{"id":"item_b","type":"function_call","name":"f","arguments":"","call_id":"c1"}}`,
			want: []string{`{"type":"response.output_item.added","event_id":"ev_ib","response_id":"resp_1","item":{"id":"item_b","type":"function_call","name":"f","arguments":"","call_id":"c1"},"output_index":4}`}},
		{name: "function call arguments get their item's output_index",
			prior: []string{respCreated, itemAdded,
				`{"type":"response.output_item.added","event_id":"ev_ib","response_id":"resp_1","item":{"id":"item_f","type":"function_call","name":"f","arguments":"","call_id":"c1"}}`},
			in:   `{"type":"response.function_call_arguments.done","event_id":"ev_f","response_id":"resp_1","item_id":"item_f","call_id":"c1","name":"f","arguments":"{}"}`,
			want: []string{`{"type":"response.function_call_arguments.done","event_id":"ev_f","response_id":"resp_1","item_id":"item_f","call_id":"c1","name":"f","arguments":"{}","output_index":1}`}},
		{name: "a delta naming an item nothing announced registers it",
			prior: []string{respCreated, itemAdded},
			in:    `{"type":"response.output_text.delta","event_id":"ev_x","response_id":"resp_1","item_id":"item_new","delta":"a"}`,
			want:  []string{`{"type":"response.output_text.delta","event_id":"ev_x","response_id":"resp_1","item_id":"item_new","delta":"a","output_index":1,"content_index":0}`}},
		{name: "a missing response_id is the response in progress",
			prior: []string{respCreated, itemAdded},
			in:    `{"type":"response.output_audio.delta","event_id":"ev_d","item_id":"item_a","output_index":0,"content_index":0,"delta":"AAAA"}`,
			want:  []string{`{"type":"response.output_audio.delta","event_id":"ev_d","item_id":"item_a","output_index":0,"content_index":0,"delta":"AAAA","response_id":"resp_1"}`}},
		{name: "a new response counts its items from 0",
			prior: []string{respCreated, itemAdded,
				`{"type":"response.output_item.added","event_id":"ev_ib","response_id":"resp_1","item":{"id":"item_b","type":"message","role":"assistant","content":[]}}`,
				`{"type":"response.created","event_id":"ev_rc2","response":{"id":"resp_2","object":"realtime.response","status":"in_progress","output":[]}}`},
			in:   `{"type":"response.output_item.added","event_id":"ev_ic","response_id":"resp_2","item":{"id":"item_c","type":"message","role":"assistant","content":[]}}`,
			want: []string{`{"type":"response.output_item.added","event_id":"ev_ic","response_id":"resp_2","item":{"id":"item_c","type":"message","role":"assistant","content":[]},"output_index":0}`}},
		{name: "a beta-named audio delta gets the GA name",
			prior: []string{respCreated, itemAdded, partAdded},
			in:    `{"type":"response.audio.delta","event_id":"ev_d","response_id":"resp_1","item_id":"item_a","delta":"AAAA"}`,
			want:  []string{`{"type":"response.output_audio.delta","event_id":"ev_d","response_id":"resp_1","item_id":"item_a","delta":"AAAA","output_index":0,"content_index":0}`}},
		{name: "a beta-named text done gets the GA name",
			prior: []string{respCreated, itemAdded},
			in:    `{"type":"response.text.done","event_id":"ev_td","response_id":"resp_1","item_id":"item_a","output_index":0,"content_index":0,"text":"hi"}`,
			want:  []string{`{"type":"response.output_text.done","event_id":"ev_td","response_id":"resp_1","item_id":"item_a","output_index":0,"content_index":0,"text":"hi"}`}},
		{name: "content_part.added without a part gets an empty audio part",
			prior: []string{respCreated, itemAdded},
			in:    `{"type":"response.content_part.added","event_id":"ev_pa","response_id":"resp_1","item_id":"item_a"}`,
			want:  []string{`{"type":"response.content_part.added","event_id":"ev_pa","response_id":"resp_1","item_id":"item_a","output_index":0,"content_index":0,"part":{"type":"audio","transcript":""}}`}},
		{name: "content_part.added in a text-only response gets a text part",
			prior: []string{`{"type":"response.created","event_id":"ev_rc","response":{"id":"resp_1","object":"realtime.response","status":"in_progress","output_modalities":["text"],"output":[]}}`, itemAdded},
			in:    `{"type":"response.content_part.added","event_id":"ev_pa","response_id":"resp_1","item_id":"item_a","output_index":0,"content_index":0,"part":null}`,
			want:  []string{`{"type":"response.content_part.added","event_id":"ev_pa","response_id":"resp_1","item_id":"item_a","output_index":0,"content_index":0,"part":{"type":"text","text":""}}`}},
		{name: "content_part.done without a part gets the finished transcript",
			prior: []string{respCreated, itemAdded, partAdded,
				`{"type":"response.output_audio_transcript.done","event_id":"ev_td","response_id":"resp_1","item_id":"item_a","transcript":"Hello \"there\"\n"}`},
			in:   `{"type":"response.content_part.done","event_id":"ev_pd","response_id":"resp_1","item_id":"item_a"}`,
			want: []string{`{"type":"response.content_part.done","event_id":"ev_pd","response_id":"resp_1","item_id":"item_a","output_index":0,"content_index":0,"part":{"type":"audio","transcript":"Hello \"there\"\n"}}`}},
		{name: "content_part.done of a text part gets the finished text",
			prior: []string{respCreated, itemAdded, partAdded,
				`{"type":"response.output_text.done","event_id":"ev_td","response_id":"resp_1","item_id":"item_a","output_index":0,"content_index":0,"text":"fine"}`},
			in:   `{"type":"response.content_part.done","event_id":"ev_pd","response_id":"resp_1","item_id":"item_a","output_index":0,"content_index":0}`,
			want: []string{`{"type":"response.content_part.done","event_id":"ev_pd","response_id":"resp_1","item_id":"item_a","output_index":0,"content_index":0,"part":{"type":"text","text":"fine"}}`}},
		{name: "response.done with usage {} gets zero usage",
			prior: []string{respCreated},
			in:    `{"type":"response.done","event_id":"ev_rd","response":{"id":"resp_1","object":"realtime.response","status":"completed","output":[],"usage":{}}}`,
			want:  []string{`{"type":"response.done","event_id":"ev_rd","response":{"id":"resp_1","object":"realtime.response","status":"completed","output":[],"usage":` + zeroUsage + `}}`}},
		{name: "response.done with usage null gets zero usage",
			in:   `{"type":"response.done","event_id":"ev_rd","response":{"id":"resp_1","status":"completed","usage":null}}`,
			want: []string{`{"type":"response.done","event_id":"ev_rd","response":{"id":"resp_1","status":"completed","usage":` + zeroUsage + `}}`}},
		{name: "response.done without usage gets zero usage",
			in:   `{"type":"response.done","event_id":"ev_rd","response":{"id":"resp_1","status":"completed"}}`,
			want: []string{`{"type":"response.done","event_id":"ev_rd","response":{"id":"resp_1","status":"completed","usage":` + zeroUsage + `}}`}},
		{name: "response.done takes xAI's top-level usage when the response's is empty",
			in:   `{"type":"response.done","event_id":"ev_rd","response":{"id":"resp_1","status":"completed","usage":{}},"usage":{"total_tokens":30,"input_tokens":10,"output_tokens":20}}`,
			want: []string{`{"type":"response.done","event_id":"ev_rd","response":{"id":"resp_1","status":"completed","usage":{"total_tokens":30,"input_tokens":10,"output_tokens":20}},"usage":{"total_tokens":30,"input_tokens":10,"output_tokens":20}}`}},
		{name: "response.done with usage passes as is",
			in:    `{"type":"response.done","event_id":"ev_rd","response":{"id":"resp_1","status":"completed","usage":{"total_tokens":3,"input_tokens":1,"output_tokens":2}}}`,
			want:  []string{`{"type":"response.done","event_id":"ev_rd","response":{"id":"resp_1","status":"completed","usage":{"total_tokens":3,"input_tokens":1,"output_tokens":2}}}`},
			exact: true},
		{name: "response.done without a response gets one",
			prior: []string{respCreated},
			in:    `{"type":"response.done","event_id":"ev_rd"}`,
			want:  []string{`{"type":"response.done","event_id":"ev_rd","response":{"object":"realtime.response","id":"resp_1","output":[],"usage":` + zeroUsage + `}}`}},
		{name: "a string status_details that is a reason becomes the object",
			in:   `{"type":"response.done","event_id":"ev_rd","response":{"id":"resp_1","status":"incomplete","status_details":"turn_detected","usage":{"total_tokens":0}}}`,
			want: []string{`{"type":"response.done","event_id":"ev_rd","response":{"id":"resp_1","status":"incomplete","status_details":{"type":"incomplete","reason":"turn_detected"},"usage":{"total_tokens":0}}}`}},
		{name: "a failed response's string status_details becomes the error's message",
			in:   `{"type":"response.done","event_id":"ev_rd","response":{"id":"resp_1","status":"failed","status_details":"upstream overloaded","usage":{"total_tokens":0,"input_tokens":0,"output_tokens":0}}}`,
			want: []string{`{"type":"response.done","event_id":"ev_rd","response":{"id":"resp_1","status":"failed","status_details":{"type":"failed","error":{"message":"upstream overloaded"}},"usage":{"total_tokens":0,"input_tokens":0,"output_tokens":0}}}`}},
		{name: "role tool in response.done's output becomes assistant",
			in:   `{"type":"response.done","event_id":"ev_rd","response":{"id":"resp_1","status":"completed","output":[{"id":"item_a","type":"message","role":"assistant"},{"id":"item_f","type":"function_call","role":"tool","name":"f","arguments":"{}"}],"usage":{"total_tokens":0,"input_tokens":0,"output_tokens":0}}}`,
			want: []string{`{"type":"response.done","event_id":"ev_rd","response":{"id":"resp_1","status":"completed","output":[{"id":"item_a","type":"message","role":"assistant"},{"id":"item_f","type":"function_call","role":"assistant","name":"f","arguments":"{}"}],"usage":{"total_tokens":0,"input_tokens":0,"output_tokens":0}}}`}},
		{name: "role tool on conversation.item.added becomes assistant",
			in:   `{"type":"conversation.item.added","event_id":"ev_ca","previous_item_id":null,"item":{"id":"item_f","type":"function_call","role":"tool","name":"f","call_id":"c1","arguments":"{}"}}`,
			want: []string{`{"type":"conversation.item.added","event_id":"ev_ca","previous_item_id":null,"item":{"id":"item_f","type":"function_call","role":"assistant","name":"f","call_id":"c1","arguments":"{}"}}`}},
		{name: "role tool on response.output_item.done becomes assistant",
			prior: []string{respCreated, itemAdded},
			in:    `{"type":"response.output_item.done","event_id":"ev_id","response_id":"resp_1","output_index":0,"item":{"id":"item_a","type":"function_call","role":"tool","name":"f","call_id":"c1","arguments":"{}"}}`,
			want:  []string{`{"type":"response.output_item.done","event_id":"ev_id","response_id":"resp_1","output_index":0,"item":{"id":"item_a","type":"function_call","role":"assistant","name":"f","call_id":"c1","arguments":"{}"}}`}},
		{name: "an input transcription without content_index gets 0",
			in:   `{"type":"conversation.item.input_audio_transcription.completed","event_id":"ev_it","item_id":"item_u","transcript":"hello"}`,
			want: []string{`{"type":"conversation.item.input_audio_transcription.completed","event_id":"ev_it","item_id":"item_u","transcript":"hello","content_index":0}`}},
		{name: "session.updated without session.type gets it first",
			in:   `{"type":"session.updated","event_id":"ev_su","session":{"voice":"Eve","audio":{"output":{"format":{"type":"audio/pcm","rate":24000}}}}}`,
			want: []string{`{"type":"session.updated","event_id":"ev_su","session":{"type":"realtime","voice":"Eve","audio":{"output":{"format":{"type":"audio/pcm","rate":24000}}}}}`}},
		{name: "session.updated without a session gets one of type realtime",
			in:   `{"type":"session.updated","event_id":"ev_su"}`,
			want: []string{`{"type":"session.updated","event_id":"ev_su","session":{"type":"realtime"}}`}},
		{name: "an event whose type comes after a long member is still repaired",
			prior:    []string{respCreated, itemAdded, partAdded},
			in:       `{"delta":"` + audio + `","event_id":"ev_d","response_id":"resp_1","item_id":"item_a","type":"response.output_audio.delta"}`,
			want:     []string{`{"delta":"` + audio + `","event_id":"ev_d","response_id":"resp_1","item_id":"item_a","type":"response.output_audio.delta","output_index":0,"content_index":0}`},
			typeLate: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			n := xai.NewNormalizer("grok-voice-latest")
			out := relay(t, n, append(tc.prior, tc.in)...)
			for _, fs := range out {
				for _, ev := range texts(t, fs) {
					if json.Valid([]byte(ev)) {
						conform(t, ev, !tc.typeLate)
					}
				}
			}
			got := texts(t, out[len(out)-1])
			if len(got) != len(tc.want) {
				t.Fatalf("got %d events, want %d:\n%s", len(got), len(tc.want), strings.Join(got, "\n"))
			}
			for i := range got {
				if tc.exact && got[i] != tc.want[i] {
					t.Errorf("event %d changed; want it byte for byte:\n got %.400s\nwant %.400s", i, got[i], tc.want[i])
				}
				if !tc.exact && !sameJSON(t, got[i], tc.want[i]) {
					t.Errorf("event %d:\n got %.600s\nwant %.600s", i, got[i], tc.want[i])
				}
			}
		})
	}
}

// TestSessionCreatedExactlyOnce: whichever of conversation.created and a
// real session.created xAI sends first, the client gets exactly one
// session.created, as its first event, and the real configuration is not
// lost.
func TestSessionCreatedExactlyOnce(t *testing.T) {
	convCreated := `{"type":"conversation.created","event_id":"ev_c","conversation":{"id":"conv_1","object":"realtime.conversation"}}`
	realCreated := `{"type":"session.created","event_id":"ev_s","session":{"voice":"Ara","instructions":"be brief"}}`
	updated := `{"type":"session.updated","event_id":"ev_u","session":{"type":"realtime","voice":"Rex"}}`
	tests := []struct {
		name      string
		in        []string
		wantTypes []string
	}{
		{"conversation.created first (xAI's documented start)",
			[]string{`{"type":"ping","event_id":"ev_p","timestamp":1}`, convCreated, updated},
			[]string{"session.created", "conversation.created", "session.updated"}},
		{"session.created first: none synthesised",
			[]string{realCreated, convCreated, updated},
			[]string{"session.created", "conversation.created", "session.updated"}},
		{"session.created after conversation.created: relabelled session.updated",
			[]string{convCreated, realCreated, updated},
			[]string{"session.created", "conversation.created", "session.updated", "session.updated"}},
		{"conversation.created twice",
			[]string{convCreated, convCreated},
			[]string{"session.created", "conversation.created", "conversation.created"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out := relay(t, xai.NewNormalizer("grok-voice-think-fast-1.0"), tc.in...)
			var types []string
			var events []sdkEvent
			var raws []string
			for _, fs := range out {
				for _, raw := range texts(t, fs) {
					ev := conform(t, raw, true)
					types = append(types, ev.Type)
					events = append(events, ev)
					raws = append(raws, raw)
				}
			}
			if !reflect.DeepEqual(types, tc.wantTypes) {
				t.Fatalf("client got %v, want %v", types, tc.wantTypes)
			}
			if tc.in[0] == convCreated {
				// The synthesised one: GA-shaped, xAI's defaults.
				want := sdkSession{Type: "realtime", Object: "realtime.session", ID: "sess_conv_1",
					Model: "grok-voice-think-fast-1.0", OutputModalities: []string{"audio"}}
				want.Audio.Input.Format.Type, want.Audio.Input.Format.Rate = "audio/pcm", 24000
				want.Audio.Output.Format.Type, want.Audio.Output.Format.Rate = "audio/pcm", 24000
				want.Audio.Output.Voice = "eve"
				if !reflect.DeepEqual(*events[0].Session, want) {
					t.Errorf("synthesised session %+v, want %+v", *events[0].Session, want)
				}
				if id := *events[0].EventID; id == "" || id == "ev_c" {
					t.Errorf("synthesised event_id %q: want one of its own", id)
				}
			}
			// The real session.created, wherever it went, keeps its
			// configuration.
			for i, ev := range events {
				if *ev.EventID != "ev_s" {
					continue
				}
				var got struct{ Session map[string]any }
				if err := json.Unmarshal([]byte(raws[i]), &got); err != nil {
					t.Fatal(err)
				}
				if got.Session["voice"] != "Ara" || got.Session["instructions"] != "be brief" {
					t.Errorf("xAI's session.created lost its configuration: %v", got.Session)
				}
			}
		})
	}
}

// TestNonTextPassesAsIs: a binary message is not xAI's JSON; it goes on as
// it came, binary.
func TestNonTextPassesAsIs(t *testing.T) {
	s := frames.NewScanner(frames.UpstreamSide, 0)
	s.SetTranslator(xai.NewNormalizer(""))
	payload := []byte{0, 1, 2, 0xff}
	var sink collectSink
	if _, err := s.Forward(frames.NewByteSource(frames.AppendFrame(nil, ws.OpBinary, payload, false)), &sink); err != nil {
		t.Fatal(err)
	}
	got := parseFrames(t, sink.b)
	if len(got) != 1 || got[0].op != ws.OpBinary || got[0].payload != string(payload) {
		t.Errorf("got %+v, want the binary message as it came", got)
	}
}

// TestAudioDeltaDoesNotAllocate: the hot path (an audio delta that needs
// nothing, or only its indexes) allocates nothing once the pooled buffers
// have grown, translation's framing included.
func TestAudioDeltaDoesNotAllocate(t *testing.T) {
	if raceEnabled {
		t.Skip("-race makes sync.Pool drop buffers, so the pooled buffers allocate")
	}
	delta := strings.Repeat("AAAA", 1024)
	for _, tc := range []struct{ name, msg string }{
		{"complete", `{"type":"response.output_audio.delta","event_id":"ev_d","response_id":"resp_1","item_id":"item_a","output_index":0,"content_index":0,"delta":"` + delta + `"}`},
		{"without indexes", `{"type":"response.output_audio.delta","event_id":"ev_d","response_id":"resp_1","item_id":"item_a","delta":"` + delta + `"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := xai.NewNormalizer("grok-voice-latest")
			s := frames.NewScanner(frames.UpstreamSide, 0)
			s.SetTranslator(n)
			src := frames.NewByteSource(nil)
			for _, m := range []string{respCreated, itemAdded, partAdded} {
				src.Reset(frames.AppendFrame(nil, ws.OpText, []byte(m), false))
				if _, err := s.Forward(src, discardSink{}); err != nil {
					t.Fatal(err)
				}
			}
			in := frames.AppendFrame(nil, ws.OpText, []byte(tc.msg), false)
			var sink countSink
			allocs := testing.AllocsPerRun(200, func() {
				src.Reset(in)
				if _, err := s.Forward(src, &sink); err != nil {
					t.Fatal(err)
				}
			})
			if allocs != 0 {
				t.Errorf("%v allocations per audio delta, want 0", allocs)
			}
			if sink.n == 0 {
				t.Error("nothing reached the client")
			}
		})
	}
}

type discardSink struct{}

func (discardSink) WriteBinary(p []byte) (int, error) { return len(p), nil }

// countSink counts what reaches the client without keeping it.
type countSink struct{ n int }

func (c *countSink) WriteBinary(p []byte) (int, error) {
	c.n += len(p)
	return len(p), nil
}

// TestRepairKeepsTheRestOfTheMessage: a repair inserts or replaces only what
// it repairs; every byte of the delta, escapes included, is as xAI sent it.
func TestRepairKeepsTheRestOfTheMessage(t *testing.T) {
	n := xai.NewNormalizer("")
	in := `{ "type" : "response.output_audio_transcript.delta" , "event_id":"ev\"1", "response_id":"resp_1", "item_id":"item_a", "delta":"a \\\" \u00e9 } ] {" }`
	out := relay(t, n, respCreated, itemAdded, in)
	got := texts(t, out[2])
	if len(got) != 1 {
		t.Fatalf("got %d events, want 1", len(got))
	}
	want := in[:len(in)-1] + `,"output_index":0,"content_index":0}`
	if got[0] != want {
		t.Errorf("got  %s\nwant %s", got[0], want)
	}
	if !bytes.Contains([]byte(got[0]), []byte(`"delta":"a \\\" \u00e9 } ] {"`)) {
		t.Error("the delta changed")
	}
}
