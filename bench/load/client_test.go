package load

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"rtgate/bench/benchtest"
	"rtgate/mockai"
)

func newTestClient(t *testing.T, cfg Config) *Client {
	t.Helper()
	if cfg.Timeout == 0 {
		cfg.Timeout = 5 * time.Second
	}
	c, err := NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func realtimeURL(base string) string { return base + "/realtime?model=gpt-realtime" }

// checkNoLeak fails if goroutines started during the test are still around.
func checkNoLeak(t *testing.T, before int) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Second)
	for runtime.NumGoroutine() > before {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<16)
			t.Fatalf("goroutines: %d before, %d after:\n%s", before, runtime.NumGoroutine(), buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestCallClassification(t *testing.T) {
	const key = "sk-mock-correct-key"
	tests := []struct {
		name        string
		mock        mockai.Config
		key         string
		timeout     time.Duration
		audio       bool
		wantFailure string // "" = success
		wantReached Phase
	}{
		{"success", mockai.Config{AudioDeltas: 3}, "", 0, false, "", PhaseDone},
		{"success with key", mockai.Config{Key: key}, key, 0, false, "", PhaseDone},
		{"success with input audio", mockai.Config{}, "", 0, true, "", PhaseDone},
		{"handshake 429", mockai.Config{StatusCode: 429}, "", 0, false, "handshake_429", PhaseNone},
		{"handshake 500", mockai.Config{StatusCode: 500}, "", 0, false, "handshake_500", PhaseNone},
		{"handshake 503", mockai.Config{StatusCode: 503}, "", 0, false, "handshake_503", PhaseNone},
		{"bad key refused at upgrade", mockai.Config{Key: key, RejectStatus: 401}, "sk-wrong", 0, false, "handshake_401", PhaseNone},
		{"bad key as error event", mockai.Config{Key: key}, "sk-wrong-key-value", 0, false, "error_event_invalid_api_key", PhaseDial},
		{"close after session.created", mockai.Config{CloseAfterFrames: 1}, "", 0, false, "unexpected_close_1011", PhaseSession},
		{"close mid audio", mockai.Config{CloseAfterFrames: 4, AudioDeltas: 5}, "", 0, false, "unexpected_close_1011", PhaseFirstAudio},
		{"drop after session.created", mockai.Config{DropAfterFrames: 1}, "", 0, false, "unexpected_close_1006", PhaseSession},
		{"malformed frame", mockai.Config{MalformedAfterFrames: 1}, "", 0, false, "protocol", PhaseSession},
		{"timeout in dial", mockai.Config{UpgradeDelay: time.Second}, "", 200 * time.Millisecond, false, "timeout_dial", PhaseNone},
		{"timeout in session", mockai.Config{SessionDelay: time.Second}, "", 200 * time.Millisecond, false, "timeout_session", PhaseDial},
		{"timeout in first audio", mockai.Config{FirstAudioDelay: time.Second}, "", 200 * time.Millisecond, false, "timeout_first_audio", PhaseSession},
		{"timeout in done", mockai.Config{AudioDeltas: 10, AudioDeltaInterval: 100 * time.Millisecond}, "", 300 * time.Millisecond, false, "timeout_done", PhaseFirstAudio},
		{"server stops reading", mockai.Config{StopReading: true}, "", 200 * time.Millisecond, false, "timeout_first_audio", PhaseSession},
		{"no audio deltas", mockai.Config{AudioDeltas: -1}, "", 0, false, "no_audio", PhaseSession},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := runtime.NumGoroutine()
			srv := benchtest.Mockai(t, tc.mock)
			c := newTestClient(t, Config{URL: realtimeURL(srv.BaseURL()), Key: tc.key, Timeout: tc.timeout,
				Audio: tc.audio, AudioLength: 100 * time.Millisecond})
			s := c.Call(context.Background(), time.Now())
			if s.Failure != tc.wantFailure || s.Reached != tc.wantReached {
				t.Fatalf("got failure %q reached %d (%s), want %q reached %d", s.Failure, s.Reached, s.Detail, tc.wantFailure, tc.wantReached)
			}
			if tc.key != "" && strings.Contains(s.Detail, tc.key) {
				t.Errorf("detail leaks the key: %q", s.Detail)
			}
			if s.OK() {
				if s.Dial <= 0 || s.Session <= 0 || s.FirstAudio <= 0 || s.Total < s.Dial+s.Session {
					t.Errorf("implausible phases: %+v", s)
				}
			}
			if tc.audio {
				// 5 chunks of 20 ms, the commit and response.create reached the server.
				if got := srv.Stats().FramesIn; got < 7 {
					t.Errorf("server read %d frames, want at least 7", got)
				}
			}
			_ = srv.Close()
			checkNoLeak(t, before)
		})
	}
}

func TestCallDialRefused(t *testing.T) {
	addr := benchtest.RefusedAddr(t)
	c := newTestClient(t, Config{URL: "ws://" + addr + "/v1/realtime?model=m"})
	if s := c.Call(context.Background(), time.Now()); s.Failure != "dial" {
		t.Fatalf("failure = %q (%s), want dial", s.Failure, s.Detail)
	}
}

func TestCallCancelled(t *testing.T) {
	srv := benchtest.Mockai(t, mockai.Config{FirstAudioDelay: 5 * time.Second})
	c := newTestClient(t, Config{URL: realtimeURL(srv.BaseURL()), Timeout: 10 * time.Second})
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(200*time.Millisecond, cancel)
	start := time.Now()
	s := c.Call(ctx, start)
	if s.Failure != "cancelled" {
		t.Fatalf("failure = %q (%s), want cancelled", s.Failure, s.Detail)
	}
	if time.Since(start) > 4*time.Second {
		t.Errorf("cancel did not interrupt the call")
	}
}

func TestCallTLS(t *testing.T) {
	srv := benchtest.Mockai(t, mockai.Config{TLS: true})
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(srv.CertPEM()) {
		t.Fatal("bad mock certificate")
	}
	url := realtimeURL(srv.BaseURL())
	if !strings.HasPrefix(url, "wss://") {
		t.Fatalf("mock TLS URL %q", url)
	}
	trusted := newTestClient(t, Config{URL: url, TLS: &tls.Config{RootCAs: pool}})
	if s := trusted.Call(context.Background(), time.Now()); !s.OK() {
		t.Fatalf("trusted wss call failed: %s %s", s.Failure, s.Detail)
	}
	untrusted := newTestClient(t, Config{URL: url})
	if s := untrusted.Call(context.Background(), time.Now()); s.Failure != "dial" {
		t.Fatalf("untrusted wss call: failure %q, want dial", s.Failure)
	}
}

// scripted serves one scripted conversation per connection, for what
// mockai does not do (beta event names, failed responses, binary frames).
func scripted(t *testing.T, script func(c *websocket.Conn)) string {
	t.Helper()
	up := websocket.Upgrader{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := up.Upgrade(w, r, nil)
		if err != nil {
			return
		}
		defer c.Close()
		script(c)
	}))
	t.Cleanup(srv.Close)
	return "ws" + strings.TrimPrefix(srv.URL, "http") + "/v1/realtime?model=m"
}

func send(c *websocket.Conn, v map[string]any) {
	b, _ := json.Marshal(v)
	_ = c.WriteMessage(websocket.TextMessage, b)
}

// finish answers the client's close and waits for the socket to end.
func finish(c *websocket.Conn) {
	_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
	for {
		if _, _, err := c.ReadMessage(); err != nil {
			return
		}
	}
}

func TestCallScripted(t *testing.T) {
	untilCreate := func(c *websocket.Conn) {
		for {
			_, m, err := c.ReadMessage()
			if err != nil || strings.Contains(string(m), "response.create") {
				return
			}
		}
	}
	tests := []struct {
		name        string
		script      func(c *websocket.Conn)
		wantFailure string
	}{
		{"beta audio name counts", func(c *websocket.Conn) {
			send(c, map[string]any{"type": "session.created"})
			untilCreate(c)
			send(c, map[string]any{"type": "response.audio.delta", "delta": "AAAA"})
			send(c, map[string]any{"type": "response.done", "response": map[string]any{"status": "completed"}})
			finish(c)
		}, ""},
		{"events before session.created are skipped", func(c *websocket.Conn) {
			send(c, map[string]any{"type": "rate_limits.updated"})
			send(c, map[string]any{"type": "session.created"})
			untilCreate(c)
			send(c, map[string]any{"type": "response.output_audio.delta", "delta": "AAAA"})
			send(c, map[string]any{"type": "response.done", "response": map[string]any{"status": "completed"}})
			finish(c)
		}, ""},
		{"failed response", func(c *websocket.Conn) {
			send(c, map[string]any{"type": "session.created"})
			untilCreate(c)
			send(c, map[string]any{"type": "response.output_audio.delta", "delta": "AAAA"})
			send(c, map[string]any{"type": "response.done", "response": map[string]any{"status": "failed"}})
			finish(c)
		}, "response_failed"},
		{"error event mid response", func(c *websocket.Conn) {
			send(c, map[string]any{"type": "session.created"})
			untilCreate(c)
			send(c, map[string]any{"type": "error", "error": map[string]any{"type": "server_error", "code": "upstream_overloaded"}})
			finish(c)
		}, "error_event_upstream_overloaded"},
		{"binary frame", func(c *websocket.Conn) {
			_ = c.WriteMessage(websocket.BinaryMessage, []byte{1, 2, 3})
			finish(c)
		}, "protocol"},
		{"non-json text", func(c *websocket.Conn) {
			_ = c.WriteMessage(websocket.TextMessage, []byte("not json"))
			finish(c)
		}, "protocol"},
		{"close 4000 before session", func(c *websocket.Conn) {
			_ = c.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(4000, "invalid_request_error.beta_api_shape_disabled"), time.Now().Add(time.Second))
			finish(c)
		}, "unexpected_close_4000"},
		{"server never answers close", func(c *websocket.Conn) {
			send(c, map[string]any{"type": "session.created"})
			untilCreate(c)
			send(c, map[string]any{"type": "response.output_audio.delta", "delta": "AAAA"})
			send(c, map[string]any{"type": "response.done", "response": map[string]any{"status": "completed"}})
			c.SetCloseHandler(func(int, string) error { return nil })
			finish(c)
			time.Sleep(600 * time.Millisecond)
		}, "timeout_done"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := newTestClient(t, Config{URL: scripted(t, tc.script), Timeout: 500 * time.Millisecond})
			s := c.Call(context.Background(), time.Now())
			if s.Failure != tc.wantFailure {
				t.Fatalf("failure = %q (%s), want %q", s.Failure, s.Detail, tc.wantFailure)
			}
		})
	}
}

func TestSourceIPsRoundRobin(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	seen := make(chan string, 4)
	go func() {
		for range 4 {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			seen <- c.RemoteAddr().(*net.TCPAddr).IP.String()
			c.Close()
		}
	}()
	ips, _ := ParseSourceIPs("127.0.0.2-127.0.0.3")
	c := newTestClient(t, Config{URL: "ws://x/", SourceIPs: ips})
	for range 4 {
		conn, err := c.netDial(context.Background(), "tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		conn.Close()
	}
	want := []string{"127.0.0.2", "127.0.0.3", "127.0.0.2", "127.0.0.3"}
	for i, w := range want {
		if got := <-seen; got != w {
			t.Errorf("connection %d came from %s, want %s", i, got, w)
		}
	}
}

func TestNewClientRejectsBadConfig(t *testing.T) {
	for _, cfg := range []Config{{}, {URL: "ws://x/", Timeout: -1}, {URL: "ws://x/"}} {
		if _, err := NewClient(cfg); err == nil {
			t.Errorf("NewClient(%+v) accepted a bad config", cfg)
		}
	}
}
