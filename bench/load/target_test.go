package load

import (
	"net"
	"strings"
	"testing"
)

func TestBuildURL(t *testing.T) {
	tests := []struct {
		name     string
		host     string
		insecure bool
		model    string
		want     string
		wantErr  string
	}{
		{"host and port, tls by default", "127.0.0.1:4000", false, "gpt-realtime", "wss://127.0.0.1:4000/v1/realtime?model=gpt-realtime", ""},
		{"insecure means plain ws", "127.0.0.1:4000", true, "gpt-realtime", "ws://127.0.0.1:4000/v1/realtime?model=gpt-realtime", ""},
		{"bare host", "localhost", true, "m", "ws://localhost/v1/realtime?model=m", ""},
		{"host with path keeps it", "localhost:80/custom/rt", true, "m", "ws://localhost:80/custom/rt?model=m", ""},
		{"full ws url gets path and model", "ws://127.0.0.1:9/", false, "gpt-realtime-mini", "ws://127.0.0.1:9/v1/realtime?model=gpt-realtime-mini", ""},
		{"full wss url wins over insecure", "wss://example.test/v1/realtime", true, "m", "wss://example.test/v1/realtime?model=m", ""},
		{"url model is kept", "ws://h:1/v1/realtime?model=gpt-realtime-2.1", false, "gpt-realtime", "ws://h:1/v1/realtime?model=gpt-realtime-2.1", ""},
		{"call_id needs no model", "ws://h:1/v1/realtime?call_id=rtc_1", false, "gpt-realtime", "ws://h:1/v1/realtime?call_id=rtc_1", ""},
		{"intent needs no model", "ws://h:1/v1/realtime?intent=transcription", false, "", "ws://h:1/v1/realtime?intent=transcription", ""},
		{"ipv6 literal", "[::1]:4000", true, "m", "ws://[::1]:4000/v1/realtime?model=m", ""},
		{"surrounding spaces", "  127.0.0.1:1 ", true, "m", "ws://127.0.0.1:1/v1/realtime?model=m", ""},
		{"empty", "", false, "m", "", "empty host"},
		{"http scheme refused", "http://127.0.0.1:4000", false, "m", "", "unsupported scheme"},
		{"bad port", "127.0.0.1:http0", true, "m", "", "port"},
		{"no host name", "ws://:4000/v1/realtime", false, "m", "", "missing host"},
		{"no model anywhere", "127.0.0.1:1", true, "", "", "no model"},
		{"user info refused", "ws://u:p@127.0.0.1:1", false, "m", "", "user info"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := BuildURL(tc.host, tc.insecure, tc.model)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("BuildURL(%q) error = %v, want one containing %q", tc.host, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("BuildURL(%q): %v", tc.host, err)
			}
			if got != tc.want {
				t.Errorf("BuildURL(%q) = %q, want %q", tc.host, got, tc.want)
			}
		})
	}
}

func TestBuildURLNeverEchoesPassword(t *testing.T) {
	_, err := BuildURL("ws://user:hunter2@127.0.0.1:1", false, "m")
	if err == nil || strings.Contains(err.Error(), "hunter2") {
		t.Fatalf("error %v should exist and not contain the password", err)
	}
}

func TestParseSourceIPs(t *testing.T) {
	tests := []struct {
		in      string
		want    []string
		wantErr string
	}{
		{"", nil, ""},
		{"127.0.0.5", []string{"127.0.0.5"}, ""},
		{"127.0.0.1-127.0.0.4", []string{"127.0.0.1", "127.0.0.2", "127.0.0.3", "127.0.0.4"}, ""},
		{"127.0.0.9,127.0.0.1-127.0.0.2", []string{"127.0.0.9", "127.0.0.1", "127.0.0.2"}, ""},
		{"127.0.0.255-127.0.1.1", []string{"127.0.0.255", "127.0.1.0", "127.0.1.1"}, ""},
		{"::1", []string{"::1"}, ""},
		{"127.0.0.4-127.0.0.1", nil, "ends before"},
		{"127.0.0.1-127.1.0.0", nil, "more than"},
		{"localhost", nil, "not an IP"},
		{"127.0.0.1-::1", nil, "two IPv4"},
		{",", nil, "no address"},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			got, err := ParseSourceIPs(tc.in)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error = %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tc.want) {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
			for i := range got {
				if !got[i].Equal(net.ParseIP(tc.want[i])) {
					t.Errorf("[%d] = %v, want %v", i, got[i], tc.want[i])
				}
			}
		})
	}
}
