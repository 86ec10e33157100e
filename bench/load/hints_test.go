package load

import (
	"strings"
	"testing"
	"time"
)

func TestHint(t *testing.T) {
	for _, tt := range []struct {
		target, class, detail string
		want                  string // substring; "" means no hint
	}{
		{"wss://127.0.0.1:4001/v1/realtime", "dial", "tls: first record does not look like a TLS handshake", "add -insecure"},
		{"wss://127.0.0.1:4001/v1/realtime", "timeout_dial", "i/o timeout", "add -insecure"},
		{"ws://127.0.0.1:4001/v1/realtime", "handshake_400", "upgrade answered 400 Bad Request", "drop -insecure"},
		{"ws://127.0.0.1:4001/v1/realtime", "timeout_dial", "i/o timeout", "drop -insecure"},
		{"ws://127.0.0.1:4001/v1/realtime", "dial", "dial tcp 127.0.0.1:4001: connect: connection refused", "nothing listens on 127.0.0.1:4001"},
		{"wss://gw:443/v1/realtime", "dial", "tls: failed to verify certificate: x509: certificate signed by unknown authority", "-ca"},
		{"ws://gw/v1/realtime", "handshake_401", "upgrade answered 401 Unauthorized", "-key"},
		{"ws://gw/v1/realtime", "handshake_403", "upgrade answered 403 Forbidden", "check -m"},
		{"ws://gw/v1/realtime", "handshake_404", "upgrade answered 404 Not Found", "adds /v1/realtime"},
		{"ws://gw/v1/realtime", "handshake_429", "upgrade answered 429 Too Many Requests", "MAX_SESSIONS_PER_KEY"},
		{"ws://gw/v1/realtime", "handshake_503", "upgrade answered 503 Service Unavailable", "MAX_CONNECTIONS or draining"},
		{"ws://gw/v1/realtime", "overload", "", "-max-inflight"},
		// The error text is read before the class.
		{"wss://gw/v1/realtime", "handshake_403", "x509: certificate has expired", "-ca"},
		{"ws://gw/v1/realtime", "unexpected_close_1011", "closed during session", ""},
	} {
		got := Hint(tt.target, tt.class, tt.detail)
		if (tt.want == "") != (got == "") || !strings.Contains(got, tt.want) {
			t.Errorf("Hint(%s, %s, %q) = %q, want %q", tt.target, tt.class, tt.detail, got, tt.want)
		}
	}
}

func TestFirstFailures(t *testing.T) {
	samples := []Sample{
		{Failure: "timeout_dial", Detail: "first timeout"},
		{Reached: PhaseDone, Total: time.Second},
		{Failure: "dial", Detail: "first dial"},
		{Failure: "timeout_dial", Detail: "second timeout"},
	}
	got := FirstFailures("wss://127.0.0.1:4001/v1/realtime", samples)
	if len(got) != 2 || got[0].Class != "timeout_dial" || got[0].Count != 2 || got[0].Detail != "first timeout" ||
		got[0].Hint == "" || got[1].Class != "dial" || got[1].Detail != "first dial" {
		t.Fatalf("got %+v", got)
	}
}
