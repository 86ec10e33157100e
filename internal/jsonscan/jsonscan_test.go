package jsonscan

import (
	"encoding/json"
	"testing"
)

func TestString(t *testing.T) {
	for _, tc := range []struct {
		p, key, want string
		ok           bool
	}{
		{`{"type":"x","delta":"hi there"}`, `"delta"`, "hi there", true},
		{`{"type": "x", "delta" : "a\"b\\"}`, `"delta"`, `a\"b\\`, true},
		{`{"instructions":"say \"delta\": no","delta":"yes"}`, `"delta"`, "yes", true},
		{`{"response":{"conversation":"none"}}`, `"conversation"`, "none", true},
		{`{"list":["delta","x"]}`, `"delta"`, "", false},
		{`{"delta":3}`, `"delta"`, "", false},
		{`{"delta":"open`, `"delta"`, "", false},
	} {
		got, ok := String([]byte(tc.p), tc.key)
		if ok != tc.ok || string(got) != tc.want {
			t.Errorf("String(%s, %s) = %q %v, want %q %v", tc.p, tc.key, got, ok, tc.want, tc.ok)
		}
	}
	if n, ok := Int([]byte(`{"type":"x","audio_end_ms": 1500,"item_id":"i"}`), `"audio_end_ms"`); !ok || n != 1500 {
		t.Errorf("Int = %d %v", n, ok)
	}
}

// TestAppendUnescaped: what encoding/json decodes, for every escape.
func TestAppendUnescaped(t *testing.T) {
	for _, s := range []string{`plain`, `a\"b\\c\/d`, `\b\f\n\r\t`, `caf\u00e9 \u20ac`, `\ud83d\ude00 ok`, `lone \ud83d x`, ``} {
		var want string
		if err := json.Unmarshal([]byte(`"`+s+`"`), &want); err != nil {
			t.Fatal(err)
		}
		got, ok := AppendUnescaped([]byte(">"), []byte(s))
		if !ok || string(got) != ">"+want {
			t.Errorf("AppendUnescaped(%s) = %q %v, want %q", s, got, ok, want)
		}
	}
	if got, ok := AppendUnescaped([]byte("keep"), []byte(`bad \x`)); ok || string(got) != "keep" {
		t.Errorf("a bad escape: %q %v", got, ok)
	}
}
