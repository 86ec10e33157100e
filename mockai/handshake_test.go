package mockai_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	coder "github.com/coder/websocket"
	"github.com/gorilla/websocket"

	"rtgate/mockai"
)

const testKey = "sk-test-mockai-secret"

func TestAuth(t *testing.T) {
	t.Parallel()
	const wrongKey = "sk-wrong-key-4711"
	tests := []struct {
		name       string
		reject     int
		hdr        http.Header
		protos     []string
		wantStatus int    // non-zero: the upgrade is refused with this HTTP status
		wantClose  bool   // upgrade, then invalid_api_key error and close 4000
		wantKey    string // Record.Key
	}{
		{name: "bearer", hdr: bearer(testKey), wantKey: testKey},
		{name: "azure api-key", hdr: http.Header{"Api-Key": {testKey}}, wantKey: testKey},
		{name: "browser subprotocol", protos: []string{"realtime", "openai-insecure-api-key." + testKey}, wantKey: testKey},
		{name: "wrong key, close mode", hdr: bearer(wrongKey), wantClose: true, wantKey: wrongKey},
		{name: "no key, close mode", wantClose: true},
		{name: "wrong key, 401", reject: 401, hdr: bearer(wrongKey), wantStatus: 401, wantKey: wrongKey},
		{name: "wrong api-key, 403", reject: 403, hdr: http.Header{"Api-Key": {wrongKey}}, wantStatus: 403, wantKey: wrongKey},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := start(t, mockai.Config{Key: testKey, RejectStatus: tt.reject})
			c, resp, err := dial(t, realtimeURL(srv, "gpt-realtime"), tt.hdr, tt.protos)
			switch {
			case tt.wantStatus != 0:
				if err == nil || resp == nil || resp.StatusCode != tt.wantStatus {
					t.Fatalf("dial: %v, resp %v; want HTTP %d", err, resp, tt.wantStatus)
				}
				_, code, raw := httpErrorBody(t, resp)
				if code == "" || strings.Contains(raw, wrongKey) {
					t.Errorf("error body %s: want a code and no key", raw)
				}
			case tt.wantClose:
				if err != nil {
					t.Fatalf("dial: %v", err)
				}
				c.SetReadDeadline(time.Now().Add(ioTimeout))
				_, data, err := c.ReadMessage()
				if err != nil {
					t.Fatal(err)
				}
				var ev event
				json.Unmarshal(data, &ev)
				if ev.str("type") != "error" || ev.str("error.code") != "invalid_api_key" || ev.str("error.type") != "invalid_request_error" {
					t.Errorf("first event %s, want an invalid_api_key error", data)
				}
				if strings.Contains(string(data), wrongKey) {
					t.Errorf("error event leaks the key: %s", data)
				}
				expectClose(t, c, 4000, "invalid_request_error.invalid_api_key")
			default:
				if err != nil {
					t.Fatalf("dial: %v", err)
				}
				expect(t, c, "session.created")
			}
			recs := srv.Records()
			if len(recs) != 1 || recs[0].Key != tt.wantKey {
				t.Fatalf("records %+v, want one with key %q", recs, tt.wantKey)
			}
			if gotSession := recs[0].SessionID != ""; gotSession != (tt.wantStatus == 0 && !tt.wantClose) {
				t.Errorf("record session id %q", recs[0].SessionID)
			}
			rejected := int64(0)
			if tt.wantStatus != 0 || tt.wantClose {
				rejected = 1
			}
			if st := srv.Stats(); st.Rejected != rejected {
				t.Errorf("stats %+v, want %d rejected", st, rejected)
			}
		})
	}
}

// The shut-down beta interface is refused after the upgrade, as OpenAI does.
func TestBetaInterfaceClosed(t *testing.T) {
	t.Parallel()
	srv := start(t, mockai.Config{})
	for _, tt := range []struct {
		name   string
		hdr    http.Header
		protos []string
	}{
		{"header", http.Header{"Openai-Beta": {"realtime=v1"}}, nil},
		{"subprotocol", nil, []string{"realtime", "openai-beta.realtime-v1"}},
	} {
		c, _, err := dial(t, realtimeURL(srv, "gpt-realtime"), tt.hdr, tt.protos)
		if err != nil {
			t.Fatalf("%s: dial: %v", tt.name, err)
		}
		if ev := expect(t, c, "error"); ev.str("error.code") != "beta_api_shape_disabled" {
			t.Errorf("%s: error %v", tt.name, ev)
		}
		expectClose(t, c, 4000, "invalid_request_error.beta_api_shape_disabled")
	}
}

func TestSubprotocolSelection(t *testing.T) {
	t.Parallel()
	srv := start(t, mockai.Config{})
	for _, tt := range []struct {
		name   string
		offer  []string
		answer string
	}{
		{"none offered", nil, ""},
		{"browser set with unknown extras", []string{"realtime", "openai-insecure-api-key.sk-x", "openai-organization.org_1", "openai-agents-sdk.0.1.0"}, "realtime"},
		{"realtime offered last", []string{"openai-insecure-api-key.sk-x", "realtime"}, "realtime"},
		{"never the key", []string{"openai-insecure-api-key.sk-x"}, ""},
	} {
		c, resp, err := dial(t, realtimeURL(srv, "gpt-realtime"), nil, tt.offer)
		if err != nil {
			t.Fatalf("%s: dial: %v", tt.name, err)
		}
		if got := resp.Header.Get("Sec-WebSocket-Protocol"); got != tt.answer || c.Subprotocol() != tt.answer {
			t.Errorf("%s: answered %q, want %q", tt.name, got, tt.answer)
		}
		expect(t, c, "session.created")
	}
}

func TestStatusCode(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		status         int
		wantType, code string
	}{
		{429, "requests", "rate_limit_exceeded"},
		{500, "server_error", "server_error"},
		{503, "server_error", "server_error"},
		{400, "invalid_request_error", "invalid_request"},
	} {
		srv := start(t, mockai.Config{StatusCode: tt.status})
		_, resp, err := dial(t, realtimeURL(srv, "gpt-realtime"), bearer(testKey), nil)
		if !errors.Is(err, websocket.ErrBadHandshake) || resp.StatusCode != tt.status {
			t.Fatalf("status %d: dial err %v resp %v", tt.status, err, resp)
		}
		if typ, code, raw := httpErrorBody(t, resp); typ != tt.wantType || code != tt.code {
			t.Errorf("status %d: body %s, want type %q code %q", tt.status, raw, tt.wantType, tt.code)
		}
		if recs := srv.Records(); len(recs) != 1 || recs[0].Key != testKey || recs[0].SessionID != "" {
			t.Errorf("status %d: records %+v", tt.status, recs)
		}
	}
}

func TestTLS(t *testing.T) {
	t.Parallel()
	certFile := filepath.Join(t.TempDir(), "mockai.pem")
	srv := start(t, mockai.Config{TLS: true, CertFile: certFile})
	if !strings.HasPrefix(srv.BaseURL(), "wss://127.0.0.1:") {
		t.Fatalf("BaseURL %q", srv.BaseURL())
	}
	pemBytes, err := os.ReadFile(certFile)
	if err != nil || string(pemBytes) != string(srv.CertPEM()) {
		t.Fatalf("cert file: %v (matches CertPEM: %v)", err, string(pemBytes) == string(srv.CertPEM()))
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(pemBytes) {
		t.Fatal("cert file holds no certificate")
	}
	port := srv.Addr()[strings.LastIndex(srv.Addr(), ":")+1:]

	// gorilla, trusting the cert, by IP and by name.
	for _, host := range []string{"127.0.0.1", "localhost"} {
		d := websocket.Dialer{TLSClientConfig: &tls.Config{RootCAs: roots}, HandshakeTimeout: ioTimeout}
		c, _, err := d.Dial("wss://"+host+":"+port+"/v1/realtime?model=gpt-realtime", nil)
		if err != nil {
			t.Fatalf("%s: dial: %v", host, err)
		}
		expect(t, c, "session.created")
		c.Close()
	}

	// coder/websocket, an independent client, over the same TLS.
	ctx, cancel := context.WithTimeout(context.Background(), ioTimeout)
	defer cancel()
	httpc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}}}
	cc, _, err := coder.Dial(ctx, realtimeURL(srv, "gpt-realtime"), &coder.DialOptions{HTTPClient: httpc})
	if err != nil {
		t.Fatalf("coder dial: %v", err)
	}
	defer cc.CloseNow()
	_, data, err := cc.Read(ctx)
	if err != nil || !strings.Contains(string(data), `"type":"session.created"`) {
		t.Fatalf("coder read: %v %.80s", err, data)
	}
	cc.Close(coder.StatusNormalClosure, "")

	// Without trust the handshake fails on the certificate.
	_, _, err = dial(t, realtimeURL(srv, "gpt-realtime"), nil, nil)
	var unknown x509.UnknownAuthorityError
	if !errors.As(err, &unknown) {
		t.Errorf("untrusted dial: %v, want an unknown authority error", err)
	}
}

func TestRecordsAndHTTPEndpoints(t *testing.T) {
	t.Parallel()
	srv := start(t, mockai.Config{})
	hdr := bearer(testKey)
	hdr.Set("OpenAI-Organization", "org_123")
	hdr.Set("OpenAI-Project", "proj_456")
	protos := []string{"realtime", "openai-agents-sdk.0.1.0"}
	c, _, err := dial(t, realtimeURL(srv, "gpt-realtime-mini")+"&x=1", hdr, protos)
	if err != nil {
		t.Fatal(err)
	}
	created := expect(t, c, "session.created")
	send(t, c, map[string]any{"type": "input_audio_buffer.clear"})
	expect(t, c, "input_audio_buffer.cleared")

	check := func(src string, recs []mockai.Record) {
		if len(recs) != 1 {
			t.Fatalf("%s: %d records, want 1", src, len(recs))
		}
		r := recs[0]
		if r.Path != "/v1/realtime" || r.Query != "model=gpt-realtime-mini&x=1" || r.Key != testKey ||
			r.SessionID != created.str("session.id") || !slices.Equal(r.Subprotocols, protos) ||
			r.Header.Get("OpenAI-Organization") != "org_123" || r.Header.Get("OpenAI-Project") != "proj_456" ||
			r.Header.Get("Authorization") != "Bearer "+testKey || time.Since(r.At) > time.Minute {
			t.Errorf("%s: record %+v", src, r)
		}
	}
	check("Records", srv.Records())

	httpc := &http.Client{Timeout: ioTimeout}
	get := func(path string, v any) {
		resp, err := httpc.Get("http://" + srv.Addr() + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/json" {
			t.Fatalf("GET %s: %s %q", path, resp.Status, resp.Header.Get("Content-Type"))
		}
		if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
	}
	var recs []mockai.Record
	get("/mock/records", &recs)
	check("/mock/records", recs)

	var st mockai.Stats
	get("/mock/stats", &st)
	want := mockai.Stats{Upgrades: 1, Active: 1, Sessions: 1, FramesIn: 1, FramesOut: 2}
	if st != want || srv.Stats() != want {
		t.Errorf("stats %+v / %+v, want %+v", st, srv.Stats(), want)
	}
	var health map[string]string
	get("/health", &health)
	if health["status"] != "ok" {
		t.Errorf("health %v", health)
	}
	resp, err := httpc.Get("http://" + srv.Addr() + "/nope")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 404 {
		t.Errorf("unknown path: %s", resp.Status)
	}
}

func TestConfigValidation(t *testing.T) {
	t.Parallel()
	for _, cfg := range []mockai.Config{
		{RejectStatus: 500},
		{StatusCode: 42},
		{StatusCode: 101},
		{UpgradeDelay: -time.Second},
		{AudioDeltaBytes: -1},
		{AudioDeltaBytes: 4801},
		{CloseAfterFrames: -1},
		{CertFile: "x.pem"},
	} {
		srv, err := mockai.Start(cfg, "127.0.0.1:0")
		if !errors.Is(err, mockai.ErrConfig) {
			t.Errorf("Start(%+v) = %v, want ErrConfig", cfg, err)
		}
		if srv != nil {
			srv.Close()
		}
	}
	if _, err := mockai.Start(mockai.Config{}, "256.0.0.1:0"); err == nil {
		t.Error("Start on a bad address succeeded")
	}
}

// Close ends every connection, mid-response ones included, and leaves no goroutines.
func TestServerClose(t *testing.T) {
	before := runtime.NumGoroutine()
	srv, err := mockai.Start(mockai.Config{AudioDeltas: 100, AudioDeltaInterval: 50 * time.Millisecond}, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var conns []*websocket.Conn
	for i := 0; i < 3; i++ {
		c, _ := connect(t, srv, nil)
		conns = append(conns, c)
	}
	send(t, conns[0], map[string]any{"type": "response.create"})
	expect(t, conns[0], "response.created")
	if st := srv.Stats(); st.Active != 3 {
		t.Errorf("active %d, want 3", st.Active)
	}
	if err := srv.Close(); err != nil {
		t.Fatal(err)
	}
	if err := srv.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	for i, c := range conns {
		for {
			if _, err := tryRead(c); err != nil {
				var ce *websocket.CloseError
				if !errors.As(err, &ce) || ce.Code != websocket.CloseAbnormalClosure {
					t.Errorf("conn %d ended with %v, want abnormal closure", i, err)
				}
				break
			}
		}
		c.Close()
	}
	if st := srv.Stats(); st.Active != 0 {
		t.Errorf("active %d after Close", st.Active)
	}
	if _, _, err := dial(t, realtimeURL(srv, "gpt-realtime"), nil, nil); err == nil {
		t.Error("dial after Close succeeded")
	}
	deadline := time.Now().Add(ioTimeout)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before {
		t.Errorf("%d goroutines after Close, %d before", n, before)
	}
}
