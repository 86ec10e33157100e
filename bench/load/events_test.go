package load

import (
	"strings"
	"testing"
)

func TestEventType(t *testing.T) {
	tests := []struct {
		name, msg, want string
		wantErr         bool
	}{
		{"fast path", `{"type":"response.output_audio.delta","delta":"AAAA"}`, "response.output_audio.delta", false},
		{"leading space", " \n{\"type\":\"session.created\"}", "session.created", false},
		{"type not first", `{"event_id":"e1","session":{"type":"realtime"},"type":"session.created"}`, "session.created", false},
		{"spaced json", `{ "type" : "response.done" }`, "response.done", false},
		{"escaped type falls back", `{"type":"a\"b"}`, `a"b`, false},
		{"not json", `hello`, "", true},
		{"truncated json", `{"type":"x`, "", true},
		{"no type", `{"event_id":"e"}`, "", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := EventType([]byte(tc.msg))
			if (err != nil) != tc.wantErr || got != tc.want {
				t.Errorf("EventType(%q) = %q, %v; want %q, error %v", tc.msg, got, err, tc.want, tc.wantErr)
			}
		})
	}
}

func TestErrorEvent(t *testing.T) {
	const key = "sk-test-0123456789"
	tests := []struct {
		name, msg, wantClass string
	}{
		{"code", `{"type":"error","error":{"type":"invalid_request_error","code":"invalid_api_key","message":"Incorrect API key provided: sk-test-0123456789."}}`, "error_event_invalid_api_key"},
		{"type when no code", `{"type":"error","error":{"type":"server_error","code":null,"message":"boom"}}`, "error_event_server_error"},
		{"nothing", `{"type":"error","error":{}}`, "error_event"},
		{"odd code sanitized", `{"type":"error","error":{"code":"Rate Limit/Exceeded"}}`, "error_event_rate_limit_exceeded"},
		{"numeric code", `{"type":"error","error":{"code":429}}`, "error_event_429"},
		{"bad json", `{"type":"error",`, "protocol"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			class, detail := errorEvent([]byte(tc.msg), key)
			if class != tc.wantClass {
				t.Errorf("class = %q, want %q", class, tc.wantClass)
			}
			if strings.Contains(detail, key) || strings.Contains(detail, "sk-test") {
				t.Errorf("detail leaks the key: %q", detail)
			}
		})
	}
}

func TestRedactMaskedKeys(t *testing.T) {
	got := redact("Incorrect API key provided: sk-proj-abc***************xyz1. See ek_68af12.", "")
	if strings.Contains(got, "sk-proj") || strings.Contains(got, "ek_68") {
		t.Errorf("redact left a key: %q", got)
	}
}
