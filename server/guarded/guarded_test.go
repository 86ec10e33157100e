package guarded

import (
	"bytes"
	"encoding/json"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gobwas/ws"

	"rtgate/frames"
	"rtgate/server/eventtype"
	"rtgate/server/guardrail"
)

// relay records what a guarded session sends.
type relay struct {
	mu         sync.Mutex
	upstream   []string // the gateway's own client events
	client     []string // unmasked events sent or released to the client
	terminated bool
}

func (r *relay) SendUpstreamRaw(frame []byte) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.upstream = append(r.upstream, payloads(frame)...)
	return true
}

func (r *relay) ReleaseToClient(take func() [][]byte) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, p := range take() {
		r.client = append(r.client, string(p))
	}
	return true
}

func (r *relay) Terminate(ws.StatusCode, string, []byte) {
	r.mu.Lock()
	r.terminated = true
	r.mu.Unlock()
}

func (r *relay) snapshot() (up, client []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.upstream...), append([]string(nil), r.client...)
}

// payloads unframes frames (masked or not).
func payloads(b []byte) []string {
	var out []string
	rd := bytes.NewReader(b)
	for rd.Len() > 0 {
		h, err := ws.ReadHeader(rd)
		if err != nil {
			return out
		}
		p := make([]byte, h.Length)
		if _, err := io.ReadFull(rd, p); err != nil {
			return out
		}
		if h.Masked {
			ws.Cipher(p, h.Mask, 0)
		}
		out = append(out, string(p))
	}
	return out
}

// translate runs p through t and returns what it emitted for the other
// side and what it replied.
func translate(t frames.Translator, p string) (emitted, replied []string) {
	var out frames.Output
	t.Translate(ws.OpText, []byte(p), &out)
	return payloads(out.Take()), payloads(out.TakeReplies())
}

func filter(t *testing.T, name string, mode guardrail.Mode, words ...string) *guardrail.Guardrail {
	t.Helper()
	g, err := guardrail.New(guardrail.Spec{Name: name, Kind: guardrail.ContentFilter, Modes: []guardrail.Mode{mode}, BlockedWords: words}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func decode(t *testing.T, s string) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		t.Fatalf("%v: %s", err, s)
	}
	return m
}

// dig walks m by keys.
func dig(m map[string]any, keys ...string) any {
	var v any = m
	for _, k := range keys {
		mm, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = mm[k]
	}
	return v
}

// TestClientSessionUpdate: with an input guardrail, the client's
// session.update goes upstream with create_response false and input
// transcription on, in either dialect; what the client asked for is noted,
// and echoed back in the upstream's session.updated.
func TestClientSessionUpdate(t *testing.T) {
	for _, tc := range []struct {
		name       string
		update     string
		path       []string // where turn detection is
		trPath     []string // where transcription is
		wantAuto   bool
		wantTDNull bool
	}{
		{"GA server_vad, answers on by default",
			`{"type":"session.update","session":{"type":"realtime","audio":{"input":{"turn_detection":{"type":"server_vad"}}}}}`,
			[]string{"session", "audio", "input", "turn_detection"}, []string{"session", "audio", "input", "transcription"}, true, false},
		{"GA answers off",
			`{"type":"session.update","session":{"type":"realtime","audio":{"input":{"turn_detection":{"type":"semantic_vad","create_response":false}}}}}`,
			[]string{"session", "audio", "input", "turn_detection"}, []string{"session", "audio", "input", "transcription"}, false, false},
		{"GA no turn detection",
			`{"type":"session.update","session":{"type":"realtime","audio":{"input":{"turn_detection":null}}}}`,
			[]string{"session", "audio", "input", "turn_detection"}, []string{"session", "audio", "input", "transcription"}, false, true},
		{"beta",
			`{"type":"session.update","session":{"turn_detection":{"type":"server_vad","create_response":true},"input_audio_transcription":null}}`,
			[]string{"session", "turn_detection"}, []string{"session", "input_audio_transcription"}, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &relay{}
			s := New(Config{Relay: r, Guardrails: guardrail.Set{filter(t, "g", guardrail.InputTranscription, "secret")}})
			start(t, s)
			out, _ := translate(s.FromClient(), tc.update)
			if len(out) != 1 {
				t.Fatalf("emitted %v", out)
			}
			up := decode(t, out[0])
			td := dig(up, tc.path...)
			if tc.wantTDNull {
				if td != nil {
					t.Fatalf("turn detection %v, want null kept", td)
				}
			} else if cr, _ := dig(up, append(tc.path, "create_response")...).(bool); cr {
				t.Fatalf("create_response still on upstream: %s", out[0])
			}
			if dig(up, tc.trPath...) == nil {
				t.Fatalf("transcription not turned on: %s", out[0])
			}
			if s.listen.clientAuto != tc.wantAuto {
				t.Fatalf("client wants answers %v, want %v", s.listen.clientAuto, tc.wantAuto)
			}
			// The upstream's answer shows the client what it asked for.
			answer := strings.Replace(out[0], `"session.update"`, `"session.updated"`, 1)
			back, _ := translate(s.FromUpstream(), answer)
			if !tc.wantTDNull {
				if cr, _ := dig(decode(t, back[0]), append(tc.path, "create_response")...).(bool); cr != tc.wantAuto {
					t.Fatalf("the client sees create_response %v, want %v", cr, tc.wantAuto)
				}
			}
		})
	}
}

// start runs an upstream's session.created through s, and waits until the
// client's events go on.
func start(t *testing.T, s *Session) {
	t.Helper()
	translate(s.FromUpstream(), `{"type":"session.created","session":{"type":"realtime","audio":{"input":{"turn_detection":{"type":"server_vad"},"transcription":null}}}}`)
	waitUntil(t, func() bool { s.mu.Lock(); defer s.mu.Unlock(); return !s.text.holding })
}

// TestUpstreamSessionCreated: the first session.created makes the gateway
// turn answers off and transcription on upstream (once), and the client
// sees the session as it was. The client's events sent before it (a turn
// committed at once) wait, and reach the upstream after the gateway's
// update: else that turn would be answered unchecked.
func TestUpstreamSessionCreated(t *testing.T) {
	r := &relay{}
	s := New(Config{Relay: r, Guardrails: guardrail.Set{filter(t, "g", guardrail.InputTranscription, "secret")}})
	early, _ := translate(s.FromClient(), `{"type":"input_audio_buffer.commit"}`)
	if len(early) != 0 {
		t.Fatalf("a commit before the session's start went on: %v", early)
	}
	created := `{"type":"session.created","session":{"type":"realtime","audio":{"input":{"turn_detection":{"type":"server_vad","create_response":true},"transcription":null}}}}`
	out, _ := translate(s.FromUpstream(), created)
	if len(out) != 1 {
		t.Fatalf("emitted %v", out)
	}
	if cr := dig(decode(t, out[0]), "session", "audio", "input", "turn_detection", "create_response"); cr != true {
		t.Fatalf("the client sees create_response %v", cr)
	}
	waitUntil(t, func() bool { u, _ := r.snapshot(); return len(u) == 2 })
	up, _ := r.snapshot()
	own := decode(t, up[0])
	if own["type"] != "session.update" || !strings.HasPrefix(own["event_id"].(string), "event_gw_own_") ||
		dig(own, "session", "audio", "input", "turn_detection", "create_response") != false ||
		dig(own, "session", "audio", "input", "transcription", "model") != DefaultTranscriptionModel {
		t.Fatalf("the gateway's update %s", up[0])
	}
	if decode(t, up[1])["type"] != "input_audio_buffer.commit" {
		t.Fatalf("upstream got %v, want the gateway's update, then the client's commit", up)
	}
	waitUntil(t, func() bool { s.mu.Lock(); defer s.mu.Unlock(); return !s.text.holding })
	if later, _ := translate(s.FromClient(), `{"type":"input_audio_buffer.commit"}`); len(later) != 1 {
		t.Fatalf("a commit after the start was held: %v", later)
	}
	translate(s.FromUpstream(), created)
	time.Sleep(20 * time.Millisecond) // a second update would go on its own goroutine
	if up, _ := r.snapshot(); len(up) != 2 {
		t.Fatalf("a second session.created got another update: %v", up[2:])
	}
}

// TestWithoutItems: a blocked item's events are dropped, response.done
// loses it from its output, other events pass untouched.
func TestWithoutItems(t *testing.T) {
	blocked := map[string]bool{"item_bad": true}
	for _, tc := range []struct{ in, want string }{
		{`{"type":"response.function_call_arguments.delta","item_id":"item_bad","delta":"{"}`, ""},
		{`{"type":"response.output_item.added","item":{"id":"item_bad","type":"function_call"}}`, ""},
		{`{"type":"response.output_item.added","item":{"id":"item_ok","type":"message"}}`,
			`{"type":"response.output_item.added","item":{"id":"item_ok","type":"message"}}`},
		{`{"type":"response.done","response":{"id":"r","output":[{"id":"item_ok"},{"id":"item_bad"}]}}`,
			`{"type":"response.done","response":{"id":"r","output":[{"id":"item_ok"}]}}`}, // type first: the accounting reads it there
	} {
		got := string(withoutItems([]byte(tc.in), blocked))
		if got != tc.want {
			t.Errorf("%s\n got %s\nwant %s", tc.in, got, tc.want)
		}
	}
}

// outputEvents is a response that says text, a word per audio delta.
func outputEvents(words ...string) []string {
	out := []string{`{"type":"response.created","response":{"id":"resp_1"}}`}
	for _, w := range words {
		out = append(out,
			`{"type":"response.output_audio.delta","response_id":"resp_1","item_id":"item_1","delta":"`+strings.Repeat("A", 640)+`"}`,
			`{"type":"response.output_audio_transcript.delta","response_id":"resp_1","item_id":"item_1","delta":"`+w+` "}`)
	}
	return out
}

// TestOutputHold: audio goes once the text that covers it has passed;
// a banned word cuts the rest, the client gets the error, and the upstream
// a cancel and a truncate at the audio the client got. A clean response
// goes whole, in order.
func TestOutputHold(t *testing.T) {
	for _, tc := range []struct {
		name      string
		words     []string
		wantAudio int // audio deltas the client gets
		wantCut   bool
	}{
		{"clean", []string{"hello", "there", "friend"}, 3, false},
		{"banned third word", []string{"the", "code", "zebra", "now"}, 2, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &relay{}
			s := New(Config{Relay: r, Guardrails: guardrail.Set{filter(t, "no-zebra", guardrail.OutputTranscription, "zebra")}})
			up := s.FromUpstream()
			var direct []string
			for _, ev := range append(outputEvents(tc.words...), `{"type":"response.done","response":{"id":"resp_1","output":[{"id":"item_1"}]}}`) {
				out, _ := translate(up, ev)
				direct = append(direct, out...)
				// Each check runs on its own goroutine: let it land, as
				// the next event would come later in a real call.
				waitUntil(t, func() bool { s.mu.Lock(); defer s.mu.Unlock(); return !s.output.checking })
			}
			waitUntil(t, func() bool { s.mu.Lock(); defer s.mu.Unlock(); return len(s.output.queue) == 0 })
			upstream, released := r.snapshot()
			all := append(direct, released...)
			var audio int
			var violation, done bool
			for _, p := range all {
				m := decode(t, p)
				switch m["type"] {
				case "response.output_audio.delta":
					audio++
				case "response.output_audio_transcript.delta":
					if strings.Contains(p, "zebra") {
						t.Fatalf("the banned word reached the client: %s", p)
					}
				case "error":
					violation = dig(m, "error", "type") == "guardrail_violation"
				case "response.done":
					done = true
				}
			}
			if audio != tc.wantAudio || violation != tc.wantCut || !done {
				t.Fatalf("audio %d (want %d), violation %v (want %v), response.done %v: %v", audio, tc.wantAudio, violation, tc.wantCut, done, all)
			}
			if !tc.wantCut {
				return
			}
			waitUntil(t, func() bool { u, _ := r.snapshot(); return len(u) == 2 })
			upstream, _ = r.snapshot()
			if decode(t, upstream[0])["type"] != "response.cancel" {
				t.Fatalf("upstream %v", upstream)
			}
			tr := decode(t, upstream[1])
			if tr["type"] != "conversation.item.truncate" || tr["item_id"] != "item_1" || tr["audio_end_ms"] != float64(2*640*3/4/48) {
				t.Fatalf("truncate %v, want item_1 at %d ms", tr, 2*640*3/4/48)
			}
		})
	}
}

// waitUntil polls cond for up to 5 s.
func waitUntil(t *testing.T, cond func() bool) {
	t.Helper()
	for range 500 {
		if cond() {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatal("condition not met in 5 s")
}

// TestManualTurnWaitsForItsCheck: a client that commits its turns and asks
// for each answer itself (no turn detection) sends response.create right
// behind its commit, before the upstream has said committed: the create
// waits for the turn's transcript check, then goes on; on a block it is
// dropped and the model is asked for the warning instead; after a commit of
// an empty buffer (the upstream's error) it goes on at once.
func TestManualTurnWaitsForItsCheck(t *testing.T) {
	for _, tc := range []struct {
		name, transcript string
		empty            bool
		want             []string // the types the upstream gets from the gateway after the start
	}{
		{"clean", "what is the weather", false, []string{"response.create"}},
		{"blocked", "my secret is out", false, []string{"response.cancel", "conversation.item.delete", "conversation.item.create", "response.create"}},
		{"empty buffer", "", true, []string{"response.create"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &relay{}
			s := New(Config{Relay: r, Guardrails: guardrail.Set{filter(t, "g", guardrail.InputTranscription, "secret")}})
			start(t, s)
			translate(s.FromClient(), `{"type":"session.update","session":{"type":"realtime","audio":{"input":{"turn_detection":null}}}}`)
			before, _ := r.snapshot()
			if out, _ := translate(s.FromClient(), `{"type":"input_audio_buffer.commit"}`); len(out) != 1 {
				t.Fatalf("the commit: %v", out)
			}
			if out, _ := translate(s.FromClient(), `{"type":"response.create","event_id":"mine"}`); len(out) != 0 {
				t.Fatalf("the response.create went on before the turn's check: %v", out)
			}
			up := s.FromUpstream()
			if tc.empty {
				translate(up, `{"type":"error","error":{"type":"invalid_request_error","code":"input_audio_buffer_commit_empty"}}`)
			} else {
				translate(up, `{"type":"input_audio_buffer.committed","item_id":"item_u1"}`)
				translate(up, `{"type":"conversation.item.input_audio_transcription.completed","item_id":"item_u1","transcript":"`+tc.transcript+`"}`)
			}
			waitUntil(t, func() bool { u, _ := r.snapshot(); return len(u)-len(before) == len(tc.want) })
			after, _ := r.snapshot()
			var got []string
			for _, p := range after[len(before):] {
				got = append(got, decode(t, p)["type"].(string))
			}
			if strings.Join(got, ",") != strings.Join(tc.want, ",") {
				t.Fatalf("upstream got %v, want %v", got, tc.want)
			}
			if !tc.empty && tc.name == "clean" && decode(t, after[len(before)])["event_id"] != "mine" {
				t.Fatalf("the client's own response.create was not the one sent: %s", after[len(before)])
			}
		})
	}
}

// TestRebuiltEventsKeepTheirTypeFirst: every event the guards rebuild or
// make has its type within the first 256 bytes, where the relay's
// accounting reads it (a response.done with a long output, a session with
// long instructions).
func TestRebuiltEventsKeepTheirTypeFirst(t *testing.T) {
	long := strings.Repeat("x", 600)
	done := withoutItems([]byte(`{"event_id":"e","response":{"id":"r","instructions":"`+long+`","output":[{"id":"a"},{"id":"b"}]},"type":"response.done"}`),
		map[string]bool{"b": true})
	s := New(Config{Relay: &relay{}, Guardrails: guardrail.Set{filter(t, "g", guardrail.InputTranscription, "secret")}})
	created, _, _ := s.upstreamSession([]byte(`{"event_id":"e","session":{"instructions":"` + long +
		`","audio":{"input":{"turn_detection":{"type":"server_vad"}}}},"type":"session.created"}`))
	for _, p := range [][]byte{done, created, ownEvent("conversation.item.create", map[string]any{"item": map[string]any{"text": long}}),
		violationError("g", long, "evt")} {
		if typ, ok := eventtype.Of(p); !ok || len(typ) == 0 {
			t.Fatalf("no type in the first 256 bytes of %.80s…", p)
		}
	}
}
