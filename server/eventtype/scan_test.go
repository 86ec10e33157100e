package eventtype

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"
)

// sessionCreatedEvent is shaped like a GA session.created from the
// upstream: nested "type" members after the event's own, a quoted quote.
const sessionCreatedEvent = `{"type":"session.created","event_id":"event_C2y","session":{"type":"realtime",` +
	`"object":"realtime.session","id":"sess_C2y","model":"gpt-realtime","output_modalities":["audio"],` +
	`"instructions":"Say \"hello\" first.","tools":[],"tool_choice":"auto","max_output_tokens":"inf",` +
	`"audio":{"input":{"format":{"type":"audio/pcm","rate":24000},"transcription":null,"noise_reduction":null,` +
	`"turn_detection":{"type":"server_vad","threshold":0.5,"prefix_padding_ms":300,"silence_duration_ms":200}},` +
	`"output":{"format":{"type":"audio/pcm","rate":24000},"voice":"alloy","speed":1}},"expires_at":1756324625}}`

func TestOf(t *testing.T) {
	long := strings.Repeat("a", 300)
	for _, tc := range []struct {
		name, in, want string
		ok             bool
	}{
		{"plain", `{"type":"response.done","event_id":"e1"}`, "response.done", true},
		{"GA session.created", sessionCreatedEvent, "session.created", true},
		{"not first", `{"event_id":"e1","type":"session.created"}`, "session.created", true},
		{"whitespace", " \r\n\t{ \n\"type\" \t:\r\n \"error\" }", "error", true},
		{"empty type", `{"type":""}`, "", true},
		{"non-ASCII", `{"type":"é✓"}`, "é✓", true},
		{"escaped quote in a value before", `{"event_id":"a\"b\\","type":"response.created"}`, "response.created", true},
		{"braces inside strings before", `{"x":"}{][","y":["}",{"z":"]"}],"type":"t"}`, "t", true},
		{"scalars before", `{"a":1,"b":-2.5e+3,"c":true,"d":false,"e":null,"f":[],"g":{},"type":"t"}`, "t", true},
		// A nested "type" is never the event's.
		{"nested type before", `{"session":{"type":"realtime","audio":{"type":"audio/pcm"}},"type":"session.created"}`, "session.created", true},
		{"nested type in array before", `{"items":[{"type":"message"}],"type":"t"}`, "t", true},
		{"nested type only", `{"session":{"type":"realtime"}}`, "", false},
		{"nested type, top level beyond the scan", `{"session":{"type":"realtime","instructions":"` + long + `"},"type":"session.created"}`, "", false},
		{"type beyond the scan", `{"event_id":"` + long + `","type":"t"}`, "", false},
		{"type value cut by the scan", `{"event_id":"` + strings.Repeat("a", 230) + `","type":"response.output_audio.delta"}`, "", false},
		{"type first in a long event", `{"type":"response.output_audio.delta","delta":"` + long + `"}`, "response.output_audio.delta", true},
		{"empty", ``, "", false},
		{"empty object", `{}`, "", false},
		{"array", `[{"type":"t"}]`, "", false},
		{"string", `"type"`, "", false},
		{"type not a string", `{"type":5}`, "", false},
		{"type null", `{"type":null}`, "", false},
		{"type object", `{"type":{"type":"t"}}`, "", false},
		{"escaped type value", `{"type":"a\u0062c"}`, "", false},
		{"escaped key before", `{"\u0074ype":"x","type":"y"}`, "", false},
		{"key with escaped quote before", `{"a\"b":1,"type":"y"}`, "", false},
		{"invalid UTF-8 value", "{\"type\":\"a\xffb\"}", "", false},
		{"control character in value", "{\"type\":\"a\nb\"}", "", false},
		{"unterminated", `{"type":"response.done`, "", false},
		{"missing colon", `{"type" "t"}`, "", false},
		{"missing comma", `{"a":1 "type":"t"}`, "", false},
		{"missing value", `{"a":,"type":"t"}`, "", false},
		{"BOM", "\xef\xbb\xbf{\"type\":\"t\"}", "", false},
		{"similar keys", `{"types":"a","Type":"b","typ":"c","type":"d"}`, "d", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := Of([]byte(tc.in))
			if ok != tc.ok || string(got) != tc.want {
				t.Fatalf("Of(%.80q) = %q, %v; want %q, %v", tc.in, got, ok, tc.want, tc.ok)
			}
			if ok {
				checkAgainstJSON(t, []byte(tc.in), got)
			}
		})
	}
}

// TestInner: the type of the event a wrapper carries in a top-level field,
// under Of's rules and within the same bound, the wrapper's own type and a
// nested field of the same name never taken for it.
func TestInner(t *testing.T) {
	for _, tc := range []struct {
		name, in, want string
		ok             bool
	}{
		{"wrapped", `{"type":"response.event","event":{"type":"response.completed","response":{}}}`, "response.completed", true},
		{"wrapper after other keys", `{"type":"response.event","x":[{"event":{"type":"no"}}],"event":{"id":"r","type":"t"}}`, "t", true},
		{"no wrapped event", `{"type":"response.event"}`, "", false},
		{"wrapped not an object", `{"type":"response.event","event":"t"}`, "", false},
		{"wrapped type beyond the scan", `{"type":"response.event","x":"` + strings.Repeat("a", 300) + `","event":{"type":"t"}}`, "", false},
		{"wrapped type cut by the scan", `{"event":{"x":"` + strings.Repeat("a", 240) + `","type":"response.completed"}}`, "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := Inner([]byte(tc.in), "event")
			if ok != tc.ok || string(got) != tc.want {
				t.Fatalf("Inner(%.80q) = %q, %v; want %q, %v", tc.in, got, ok, tc.want, tc.ok)
			}
		})
	}
}

func TestOfDoesNotAllocate(t *testing.T) {
	events := [][]byte{
		[]byte(sessionCreatedEvent),
		[]byte(`{"event_id":"e","session":{"type":"realtime"},"type":"session.created"}`),
		[]byte(`{"type":"response.output_audio.delta","delta":"` + strings.Repeat("A", 4096) + `"}`),
		[]byte(`{"x":"` + strings.Repeat("a", 1000) + `"}`),
	}
	allocs := testing.AllocsPerRun(200, func() {
		for _, ev := range events {
			Of(ev)
		}
	})
	if allocs != 0 {
		t.Errorf("Of allocates %.1f times per call set, want 0", allocs)
	}
}

// firstTopLevelType is the reference: the first top-level "type" that
// encoding/json's tokenizer finds (the realtime protocol never repeats a key;
// for duplicates Of documents first-wins). found is false when there
// is none; isString is false when it is not a string.
func firstTopLevelType(p []byte) (typ string, found, isString bool) {
	dec := json.NewDecoder(bytes.NewReader(p))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return "", false, false
	}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return "", false, false
		}
		var val json.RawMessage
		if err := dec.Decode(&val); err != nil {
			return "", false, false
		}
		if tok == "type" {
			var s string
			if err := json.Unmarshal(val, &s); err != nil {
				return "", true, false
			}
			return s, true, true
		}
	}
	return "", false, false
}

// checkAgainstJSON asserts that a type Of found in valid JSON is the
// one encoding/json finds.
func checkAgainstJSON(t *testing.T, p, got []byte) {
	t.Helper()
	if !json.Valid(p) {
		return
	}
	want, found, isString := firstTopLevelType(p)
	if !found || !isString || want != string(got) {
		t.Fatalf("Of(%q) = %q, but encoding/json finds %q (found %v, string %v)", p, got, want, found, isString)
	}
}

func FuzzOf(f *testing.F) {
	for _, s := range []string{
		sessionCreatedEvent,
		`{"type":"session.created","event_id":"e","session":{"type":"realtime"}}`,
		`{"session":{"type":"realtime"},"type":"session.created"}`,
		`{"event_id":"a\"b","type":"t"}`,
		`{"\u0074ype":"x","type":"y"}`,
		`{"type":"a\u0062c"}`,
		`{"a":[1,{"b":"]"}],"type":"t"}`,
		`{"type":"t","type":"u"}`,
		"{\"type\":\"\xff\"}",
		` {"a":-0.5e-3 , "type" : "t" } `,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, p []byte) {
		got, ok := Of(p)
		if !ok {
			if got != nil {
				t.Fatalf("Of(%q) = %q with ok false", p, got)
			}
			// Completeness where the scan has no excuse: a short, valid,
			// escape-free event whose top-level type is a string.
			if len(p) <= scanBound && json.Valid(p) && utf8.Valid(p) && !bytes.ContainsRune(p, '\\') {
				if typ, found, isString := firstTopLevelType(p); found && isString {
					t.Fatalf("Of(%q) found nothing; encoding/json finds %q", p, typ)
				}
			}
			return
		}
		if !utf8.Valid(got) || !bytes.Contains(p[:min(len(p), scanBound)], got) {
			t.Fatalf("Of(%q) = %q: not valid UTF-8 or not from the first %d bytes", p, got, scanBound)
		}
		checkAgainstJSON(t, p, got)
	})
}

func BenchmarkOf(b *testing.B) {
	ev := []byte(`{"type":"response.output_audio.delta","event_id":"event_C2x","response_id":"resp_C2x","item_id":"item_C2x",` +
		`"output_index":0,"content_index":0,"delta":"` + strings.Repeat("A", 8192) + `"}`)
	b.SetBytes(int64(len(ev)))
	for b.Loop() {
		if _, ok := Of(ev); !ok {
			b.Fatal("no type")
		}
	}
}
