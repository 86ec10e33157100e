package load

import "testing"

func TestStringField(t *testing.T) {
	tests := []struct {
		name, obj, key string
		want           string
		found, wantErr bool
	}{
		{"first", `{"type":"a","x":1}`, "type", "a", true, false},
		{"last after nesting", `{"session":{"type":"realtime","audio":{"a":[1,{"type":"x"}]}},"type":"session.created"}`, "type", "session.created", true, false},
		{"nested key is not top level", `{"session":{"status":"x"}}`, "status", "", false, false},
		{"braces inside strings", `{"instructions":"say } and ] and \" quote {","type":"t"}`, "type", "t", true, false},
		{"escaped value", `{"type":"a\u0062"}`, "type", "ab", true, false},
		{"literals and numbers", `{"a":null,"b":true,"c":-1.5e3,"d":[],"type":"t"}`, "type", "t", true, false},
		{"whitespace", " {\n \"a\" : 1 ,\t\"type\" : \"t\" } \n", "type", "t", true, false},
		{"empty object", `{}`, "type", "", false, false},
		{"first occurrence wins", `{"type":"a","type":"b"}`, "type", "a", true, false},
		{"not a string", `{"type":7}`, "type", "", true, true},
		{"not an object", `["type","a"]`, "type", "", false, true},
		{"plain text", `hello`, "type", "", false, true},
		{"truncated", `{"type":"a","b":{"c":1}`, "type", "", false, true},
		{"unterminated string", `{"a":"xyz`, "type", "", false, true},
		{"mismatched brackets", `{"a":[1,2},"type":"t"}`, "type", "", false, true},
		{"missing colon", `{"type" "t"}`, "type", "", false, true},
		{"missing value", `{"type":}`, "type", "", false, true},
		{"trailing garbage", `{"type":"t"} x`, "type", "", false, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, found, err := stringField([]byte(tc.obj), tc.key)
			if (err != nil) != tc.wantErr {
				t.Fatalf("error = %v, want error %v", err, tc.wantErr)
			}
			if err == nil && (got != tc.want || found != tc.found) {
				t.Errorf("got %q found %v, want %q found %v", got, found, tc.want, tc.found)
			}
		})
	}
}

func TestResponseStatus(t *testing.T) {
	tests := []struct {
		msg, want string
		wantErr   bool
	}{
		{`{"event_id":"e","response":{"id":"r","object":"realtime.response","status":"completed","output":[{"status":"x"}]},"type":"response.done"}`, "completed", false},
		{`{"response":{"status":"failed"},"type":"response.done"}`, "failed", false},
		{`{"type":"response.done"}`, "", false},
		{`{"type":"response.done","response":`, "", true},
	}
	for _, tc := range tests {
		got, err := responseStatus([]byte(tc.msg))
		if got != tc.want || (err != nil) != tc.wantErr {
			t.Errorf("responseStatus(%s) = %q, %v; want %q, error %v", tc.msg, got, err, tc.want, tc.wantErr)
		}
	}
}
