package protocol

import (
	"strings"
	"testing"
)

func TestLiveSubPath(t *testing.T) {
	for _, c := range []struct {
		path, id, op string
		ok           bool
	}{
		{"/v1/live/sessions/live_abc-1/attach", "live_abc-1", "attach", true},
		{"/openai/v1/live/sessions/live_x/accept", "live_x", "accept", true},
		{"/live/sessions/live_x/content", "live_x", "content", true},
		{"/v1/live/sessions/live_x/fork", "live_x", "fork", true},
		{"/v1/live/sessions", "", "", false},
		{"/v1/live/sessions/live_x", "", "", false},
		{"/v1/live/sessions/live_x/explode", "", "", false},
		{"/v1/live/sessions/live%20x/hangup", "", "", false},
		{"/v1/live/sessions/a.b/hangup", "", "", false},
		{"/v1/live/sessions//hangup", "", "", false},
		{"/v1/realtime/calls/rtc_x/hangup", "", "", false},
	} {
		id, op, ok := LiveSubPath(c.path)
		if id != c.id || op != c.op || ok != c.ok {
			t.Errorf("LiveSubPath(%q) = %q, %q, %v; want %q, %q, %v", c.path, id, op, ok, c.id, c.op, c.ok)
		}
	}
}

func TestValidID(t *testing.T) {
	for id, want := range map[string]bool{"live_abc": true, "rtc_A-9": true, "": false, "a/b": false, "a b": false,
		"é": false, strings.Repeat("x", 128): true, strings.Repeat("x", 129): false} {
		if ValidID(id) != want {
			t.Errorf("ValidID(%q) = %v", id, !want)
		}
	}
}

func TestLiveSessionID(t *testing.T) {
	for body, want := range map[string]string{`{"session":{"id":"live_1"}}`: "live_1", `{"session":{"id":"../x"}}`: "",
		`{"session":{}}`: "", `not json`: ""} {
		if got := LiveSessionID([]byte(body)); got != want {
			t.Errorf("LiveSessionID(%s) = %q, want %q", body, got, want)
		}
	}
}

func TestIsLivePath(t *testing.T) {
	for p, want := range map[string]bool{"/v1/live/sessions": true, "/openai/v1/live/sessions": true, "/live/sessions": true,
		"/v1/live/sessions/": false, "/v1/live/sessions/live_x/attach": false, "/v1/realtime": false, "": false} {
		if IsLivePath(p) != want {
			t.Errorf("IsLivePath(%q) = %v", p, !want)
		}
	}
}
