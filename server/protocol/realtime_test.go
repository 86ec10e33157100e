package protocol

import (
	"encoding/json"
	"net/url"
	"strings"
	"testing"

	"github.com/gobwas/ws"

	"rtgate/frames"
)

// event decodes one whole frame (masked or not) as a JSON event.
func event(t *testing.T, frame []byte, masked bool) map[string]any {
	t.Helper()
	h, hlen, ok, err := frames.ParseHeader(frame)
	if err != nil || !ok || h.Masked != masked || h.OpCode != ws.OpText || len(frame) != hlen+int(h.Length) {
		t.Fatalf("frame %q: header %+v ok %v err %v, want one whole text frame masked=%v", frame, h, ok, err, masked)
	}
	payload := append([]byte(nil), frame[hlen:]...)
	if h.Masked {
		ws.Cipher(payload, h.Mask, 0)
	}
	var ev map[string]any
	if err := json.Unmarshal(payload, &ev); err != nil {
		t.Fatalf("payload %q: %v", payload, err)
	}
	return ev
}

func TestRealtime(t *testing.T) {
	var p Protocol = Realtime{}
	if m, first := p.Model(url.Values{"model": {"gpt-realtime"}}); m != "gpt-realtime" || first {
		t.Fatalf("Model = %q, %v", m, first)
	}
	if !p.Warm([]byte(`{"type":"session.created","event_id":"e"}`)) || p.Warm([]byte(`{"type":"error"}`)) {
		t.Fatal("Warm: session.created and only it")
	}

	prime := event(t, p.Prime([]byte(`{"model":"m","id":"sess_1","object":"realtime.session","expires_at":1,"instructions":"hi"}`)), true)
	session, _ := prime["session"].(map[string]any)
	if prime["type"] != "session.update" || session["instructions"] != "hi" || len(session) != 1 ||
		!strings.HasPrefix(prime["event_id"].(string), "event_gw_") {
		t.Fatalf("Prime: %v", prime)
	}

	ref := event(t, p.Refusal("upstream_unavailable", "no upstream", 503), false)
	e, _ := ref["error"].(map[string]any)
	if ref["type"] != "error" || e["type"] != "server_error" || e["code"] != "upstream_unavailable" ||
		e["message"] != "no upstream" || e["status"] != 503.0 {
		t.Fatalf("Refusal: %v", ref)
	}

	for typ, want := range map[string]bool{"response.done": true,
		"conversation.item.input_audio_transcription.completed": true, "response.output_audio.delta": false} {
		if p.UsageEvent([]byte(typ)) != want {
			t.Errorf("UsageEvent(%s) = %v", typ, !want)
		}
	}
	for typ, want := range map[string]TurnMark{"response.created": TurnStart, "input_audio_buffer.speech_stopped": SpeechEnd,
		"input_audio_buffer.committed": NotTurn, "session.created": TurnConfig, "response.audio.delta": FirstOutput,
		"response.output_audio.delta": FirstOutput, "response.output_text.delta": FirstOutput,
		"response.done": TurnEnd, "session.updated": TurnConfig, "response.output_audio_transcript.delta": NotTurn} {
		if got := p.Turn([]byte(typ)); got != want {
			t.Errorf("Turn(%s) = %v, want %v", typ, got, want)
		}
	}
	if p.End() != nil {
		t.Fatal("Realtime ends with a close frame only")
	}

	out := p.Rebuild([]byte(`{"instructions":"hi"}`), [][]byte{[]byte(`{"type":"message","role":"user"}`), []byte(`{"type":"message","role":"assistant"}`)})
	if len(out) != 3 || event(t, out[0], true)["type"] != "session.update" {
		t.Fatalf("Rebuild gave %d frames", len(out))
	}
	for i, role := range []string{"user", "assistant"} {
		ev := event(t, out[i+1], true)
		item, _ := ev["item"].(map[string]any)
		if ev["type"] != "conversation.item.create" || item["role"] != role {
			t.Fatalf("Rebuild frame %d: %v", i+1, ev)
		}
	}
}

// TestAnswersGateway: an upstream error whose error.event_id is one the
// gateway made for its own sake (NewOwnEventID) answers the gateway; one
// standing in for the client's (NewEventID), the client's own, an error
// without one, and the gateway's id elsewhere in an event do not.
func TestAnswersGateway(t *testing.T) {
	gw, standIn := NewOwnEventID(), NewEventID()
	for _, tc := range []struct {
		name, payload, code string
		ok                  bool
	}{
		{"the gateway's cancel", `{"type":"error","event_id":"event_1","error":{"type":"invalid_request_error","code":"response_cancel_not_active","message":"Cancellation failed: no active response found.","param":null,"event_id":"` + gw + `"}}`, "response_cancel_not_active", true},
		{"a stand-in for the client's event", `{"type":"error","event_id":"event_1","error":{"type":"invalid_request_error","code":"invalid_value","message":"m","param":null,"event_id":"` + standIn + `"}}`, "", false},
		{"the client's cancel", `{"type":"error","event_id":"event_1","error":{"type":"invalid_request_error","code":"response_cancel_not_active","message":"m","param":null,"event_id":"evt_client"}}`, "", false},
		{"no event id", `{"type":"error","event_id":"event_1","error":{"type":"server_error","code":"x","message":"m","param":null,"event_id":null}}`, "", false},
		{"the prefix in the message only", `{"type":"error","event_id":"event_1","error":{"type":"invalid_request_error","code":"x","message":"` + gw + `","param":null,"event_id":"evt_client"}}`, "", false},
		{"the gateway's own event id at the top", `{"type":"error","event_id":"` + gw + `","error":{"type":"server_error","code":"x","message":"m"}}`, "", false},
		{"not JSON", `{"type":"error",` + gw, "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, ok := Realtime{}.AnswersGateway([]byte(tc.payload))
			if code != tc.code || ok != tc.ok {
				t.Errorf("AnswersGateway = %q, %v; want %q, %v", code, ok, tc.code, tc.ok)
			}
		})
	}
	if !strings.HasPrefix(gw, OwnEventPrefix) || !strings.HasPrefix(standIn, GatewayEventPrefix) || strings.HasPrefix(standIn, OwnEventPrefix) {
		t.Errorf("NewOwnEventID %q, NewEventID %q: want the marks %q and %q only", gw, standIn, OwnEventPrefix, GatewayEventPrefix)
	}
}
