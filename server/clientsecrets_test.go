package server

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"rtgate/mockai"
	"rtgate/server/api"
	"rtgate/server/apps"
	"rtgate/server/redistest"
)

// upstreams are the two kinds every feature is tested against.
var upstreams = []struct {
	name string
	cfg  mockai.Config
}{{"ws", mockai.Config{}}, {"wss", mockai.Config{TLS: true}}}

// startAppGateway is a gateway in front of mock that trusts its certificate.
func startAppGateway(t *testing.T, mock *mockai.Server, mutate func(*Settings)) *gateway {
	t.Helper()
	return startGateway(t, mock, func(c *Settings) {
		if mock.CertPEM() != nil {
			c.UpstreamRoots = trustMock(t, mock)
		}
		if mutate != nil {
			mutate(c)
		}
	})
}

// post sends a POST to the gateway and returns status, headers and body.
func post(t testing.TB, g *gateway, path, key, contentType string, body []byte, h http.Header) (int, http.Header, []byte) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, "http://"+g.addr+path, bytes.NewReader(body))
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	req.Header.Set("Content-Type", contentType)
	for k, v := range h {
		req.Header[k] = v
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, b
}

// mint asks the gateway for a client secret.
func mint(t testing.TB, g *gateway, key string, req any) (string, map[string]any) {
	t.Helper()
	body, _ := json.Marshal(req)
	status, _, b := post(t, g, "/v1/realtime/client_secrets", key, "application/json", body, nil)
	if status != http.StatusOK {
		t.Fatalf("minting: HTTP %d: %s", status, b)
	}
	var out map[string]any
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	v, _ := out["value"].(string)
	if !strings.HasPrefix(v, "ek_") {
		t.Fatalf("minted value %.20q is not an ek_ secret", v)
	}
	return v, out
}

// dialSecret connects as a browser does: the key in a subprotocol.
func dialSecret(t *testing.T, g *gateway, ek, query string) (*websocket.Conn, *http.Response, error) {
	d := dialer()
	d.Subprotocols = []string{"realtime", "openai-insecure-api-key." + ek}
	c, resp, err := d.Dial(g.url(query), nil)
	if err == nil {
		t.Cleanup(func() { _ = c.Close() })
	}
	return c, resp, err
}

// TestClientSecretSessionStartsConfigured: a minted secret connects (by
// subprotocol and by Bearer, fresh dial and warm pool, ws and wss upstream);
// the client's first event is a session.created already carrying the
// secret's instructions, the upstream got the config as the first client
// event, and the client's own session.update passes verbatim.
func TestClientSecretSessionStartsConfigured(t *testing.T) {
	for _, up := range upstreams {
		for _, pool := range []int{0, 1} {
			for _, how := range []string{"subprotocol", "bearer"} {
				t.Run(up.name+"/pool="+string(rune('0'+pool))+"/"+how, func(t *testing.T) {
					mock := startMock(t, up.cfg)
					g := startAppGateway(t, mock, func(c *Settings) { c.Pool.Size = pool })
					if pool > 0 {
						waitFor(t, "a warm socket", func() bool { return mock.Stats().Sessions >= 1 })
					}
					ek, out := mint(t, g, testMasterKey, map[string]any{
						"session": map[string]any{"type": "realtime", "instructions": "Speak like a pirate."}})
					exp, _ := out["expires_at"].(float64)
					if d := int64(exp) - time.Now().Unix(); d < 590 || d > 601 {
						t.Fatalf("expires_at is %d s away, want the default 600", d)
					}
					var c *websocket.Conn
					if how == "subprotocol" {
						var resp *http.Response
						var err error
						c, resp, err = dialSecret(t, g, ek, "model=gpt-realtime")
						if err != nil {
							t.Fatalf("dial: %v", err)
						}
						if p := resp.Header.Get("Sec-WebSocket-Protocol"); p != "realtime" {
							t.Fatalf("subprotocol %q, want realtime", p)
						}
					} else {
						c = g.dial(t, "", bearer(ek))
					}
					first := read(t, c)
					if first.typ() != "session.created" || first.str("session", "instructions") != "Speak like a pirate." {
						t.Fatalf("first event %s with instructions %q, want session.created carrying the secret's", first.typ(), first.str("session", "instructions"))
					}
					send(t, c, map[string]any{"type": "session.update", "session": map[string]any{"type": "realtime", "instructions": "Now be brief."}})
					upd := read(t, c)
					if upd.typ() != "session.updated" || upd.str("session", "instructions") != "Now be brief." {
						t.Fatalf("reply %s %q, want the client's session.updated", upd.typ(), upd.str("session", "instructions"))
					}
					evs := mock.Events()
					var types []string
					for _, e := range evs {
						types = append(types, e.Type)
					}
					if len(evs) != 2 || evs[0].Type != "session.update" || !strings.Contains(string(evs[0].Event), "Speak like a pirate.") ||
						strings.Contains(string(evs[0].Event), `"model"`) {
						t.Fatalf("the upstream got %v, want the secret's session.update (no model) then the client's", types)
					}
					for _, r := range mock.Records() {
						if strings.HasPrefix(r.Key, "ek_") || r.Key != testUpstreamKey {
							t.Fatal("the upstream saw something other than the upstream key")
						}
					}
				})
			}
		}
	}
}

// TestClientSecretRejectedConfig: a config the upstream refuses reaches the
// client as that error event, then a close 4000.
func TestClientSecretRejectedConfig(t *testing.T) {
	for _, up := range upstreams {
		t.Run(up.name, func(t *testing.T) {
			mock := startMock(t, up.cfg)
			g := startAppGateway(t, mock, nil)
			ek, _ := mint(t, g, testMasterKey, map[string]any{"session": map[string]any{"instructions": mockai.RejectInstructions}})
			c, _, err := dialSecret(t, g, ek, "")
			if err != nil {
				t.Fatal(err)
			}
			e := read(t, c)
			if e.typ() != "error" || e.str("error", "code") != "invalid_value" {
				t.Fatalf("got %s %s, want the upstream's error", e.typ(), e.str("error", "code"))
			}
			if ce := closeOf(t, c); ce.Code != 4000 || ce.Text != "invalid_request_error.invalid_value" {
				t.Fatalf("close %d %q", ce.Code, ce.Text)
			}
			waitFor(t, "the session to end", func() bool { return g.srv.SessionsOpen() == 0 })
		})
	}
}

// TestClientSecretRefused: forged, tampered, expired and malformed secrets
// get 401 with an OpenAI-shaped body, and no secret reaches the log.
func TestClientSecretRefused(t *testing.T) {
	mock := startMock(t, mockai.Config{})
	var logBuf syncBuffer
	g := startGatewayLog(t, mock, func(c *Settings) { c.ClientSecretKeys = []string{"key-one"} },
		slog.New(slog.NewTextHandler(&logBuf, &slog.HandlerOptions{Level: slog.LevelDebug})))
	other := startGateway(t, mock, func(c *Settings) { c.ClientSecretKeys = []string{"another-key"} })
	good, _ := mint(t, g, testMasterKey, map[string]any{})
	forged, _ := mint(t, other, testMasterKey, map[string]any{})
	dot := strings.LastIndexByte(good, '.')
	tampered := good[:dot-2] + string("AB"[good[dot-2]%2]) + good[dot-1:]
	expired := g.srv.sessions.Secrets().Sign(apps.Claims{Version: 1, ID: "x", Key: "master", Group: "gpt-realtime", Type: "realtime",
		Expires: time.Now().Add(-time.Second).Unix(), Digest: apps.DigestOf([]byte("{}")), Config: apps.Deflate([]byte("{}"))})
	for _, tc := range []struct{ name, ek, msg string }{
		{"forged", forged, "signature"},
		{"tampered", tampered, ""},
		{"expired", expired, "expired"},
		{"malformed", "ek_not-a-token", "malformed"},
		{"empty", "ek_", "malformed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, resp, err := dialSecret(t, g, tc.ek, "")
			if err == nil || resp == nil || resp.StatusCode != http.StatusUnauthorized {
				t.Fatalf("got %v, want HTTP 401", err)
			}
			var body struct {
				Error struct{ Type, Code, Message string }
			}
			if err := json.NewDecoder(resp.Body).Decode(&body); err != nil || body.Error.Code != "invalid_api_key" ||
				body.Error.Type != "invalid_request_error" || !strings.Contains(body.Error.Message, tc.msg) {
				t.Fatalf("body %+v (%v)", body, err)
			}
		})
	}
	logs := logBuf.String()
	for _, s := range []string{good, forged[:40], "key-one"} {
		if strings.Contains(logs, s) {
			t.Fatalf("a secret is in the log")
		}
	}
	if !strings.Contains(logs, "client secret refused") {
		t.Fatal("refusals are not logged")
	}
}

// TestClientSecretRequestChecks: the GA bounds, types, keys and models.
func TestClientSecretRequestChecks(t *testing.T) {
	mock := startMock(t, mockai.Config{})
	g := startGateway(t, mock, nil)
	for _, tc := range []struct {
		name, key, body string
		status          int
		param           string
	}{
		{"too short", testMasterKey, `{"expires_after":{"anchor":"created_at","seconds":9}}`, 400, "expires_after.seconds"},
		{"too long", testMasterKey, `{"expires_after":{"anchor":"created_at","seconds":7201}}`, 400, "expires_after.seconds"},
		{"bad anchor", testMasterKey, `{"expires_after":{"anchor":"now","seconds":60}}`, 400, "expires_after.anchor"},
		{"bad type", testMasterKey, `{"session":{"type":"chat"}}`, 400, "session.type"},
		{"not json", testMasterKey, `{`, 400, ""},
		{"unknown model", testMasterKey, `{"session":{"type":"realtime","model":"nope"}}`, 404, ""},
		{"bad key", "sk-wrong", `{}`, 401, ""},
		{"a secret may not mint", "ek_x.y", `{}`, 401, ""},
		{"bounds ok", testMasterKey, `{"expires_after":{"anchor":"created_at","seconds":10}}`, 200, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, _, b := post(t, g, "/v1/realtime/client_secrets", tc.key, "application/json", []byte(tc.body), nil)
			if status != tc.status {
				t.Fatalf("HTTP %d, want %d: %s", status, tc.status, b)
			}
			if status != 200 {
				var body struct{ Error struct{ Param *string } }
				if err := json.Unmarshal(b, &body); err != nil {
					t.Fatalf("body not JSON: %s", b)
				}
				if tc.param != "" && (body.Error.Param == nil || *body.Error.Param != tc.param) {
					t.Fatalf("param %v, want %s", body.Error.Param, tc.param)
				}
			}
		})
	}
}

// TestClientSecretRotationAndRedis: a gateway with CLIENT_SECRET_KEY
// "new,old" accepts secrets another instance signed with "old"; a config too
// large for a token is kept in Redis and served by either instance.
func TestClientSecretRotationAndRedis(t *testing.T) {
	rd := redistest.Start(t)
	mock := startMock(t, mockai.Config{})
	oldGW := startGateway(t, mock, func(c *Settings) { c.ClientSecretKeys = []string{"old"}; c.RedisURL = rd.URL() })
	newGW := startGateway(t, mock, func(c *Settings) { c.ClientSecretKeys = []string{"new", "old"}; c.RedisURL = rd.URL() })

	small, _ := mint(t, oldGW, testMasterKey, map[string]any{"session": map[string]any{"instructions": "small"}})
	big := strings.Repeat("a long instruction that does not compress well ", 1) + randomText(12000)
	large, _ := mint(t, oldGW, testMasterKey, map[string]any{"session": map[string]any{"instructions": big}})
	if len(small) > apps.MaxInlineSecret || len(large) > 1024 {
		t.Fatalf("token sizes %d and %d: the small config should travel inline, the large one in Redis", len(small), len(large))
	}
	for name, tc := range map[string]struct{ ek, want string }{"inline": {small, "small"}, "redis": {large, big}} {
		t.Run(name, func(t *testing.T) {
			c, _, err := dialSecret(t, newGW, tc.ek, "")
			if err != nil {
				t.Fatal(err)
			}
			if e := read(t, c); e.str("session", "instructions") != tc.want {
				t.Fatalf("session.created instructions %.30q", e.str("session", "instructions"))
			}
		})
	}
	// Signed by a key no instance holds any more.
	gone := startGateway(t, mock, func(c *Settings) { c.ClientSecretKeys = []string{"retired"} })
	ek, _ := mint(t, gone, testMasterKey, map[string]any{})
	if _, resp, err := dialSecret(t, newGW, ek, ""); err == nil || resp.StatusCode != 401 {
		t.Fatalf("a secret of a retired key was accepted")
	}
}

// TestAPIRequestBounds: bodies over 64 KiB get 413, CORS preflights follow
// ALLOWED_ORIGINS, answers to an allowed origin carry its CORS headers.
func TestAPIRequestBounds(t *testing.T) {
	mock := startMock(t, mockai.Config{})
	g := startGateway(t, mock, func(c *Settings) { c.AllowedOrigins = []string{"https://app.example"} })
	status, _, _ := post(t, g, "/v1/realtime/client_secrets", testMasterKey, "application/json", bytes.Repeat([]byte(" "), api.MaxBody+1), nil)
	if status != http.StatusRequestEntityTooLarge {
		t.Fatalf("oversized body: HTTP %d", status)
	}
	for _, path := range []string{"/v1/realtime/client_secrets", "/v1/realtime/calls"} {
		for origin, want := range map[string]int{"https://app.example": 204, "https://evil.example": 403} {
			req, _ := http.NewRequest(http.MethodOptions, "http://"+g.addr+path, nil)
			req.Header.Set("Origin", origin)
			req.Header.Set("Access-Control-Request-Method", "POST")
			req.Header.Set("Access-Control-Request-Headers", "authorization,content-type,x-stainless-os")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != want {
				t.Fatalf("preflight %s from %s: HTTP %d, want %d", path, origin, resp.StatusCode, want)
			}
			if want == 204 && (resp.Header.Get("Access-Control-Allow-Methods") == "" ||
				!strings.Contains(resp.Header.Get("Access-Control-Allow-Headers"), "x-stainless-os")) {
				t.Fatalf("preflight headers %v", resp.Header)
			}
		}
	}
	status, h, _ := post(t, g, "/v1/realtime/client_secrets", testMasterKey, "application/json", []byte(`{}`),
		http.Header{"Origin": {"https://app.example"}})
	if status != 200 || h.Get("Access-Control-Allow-Origin") != "https://app.example" {
		t.Fatalf("HTTP %d, CORS %q", status, h.Get("Access-Control-Allow-Origin"))
	}
	status, _, _ = post(t, g, "/v1/realtime/client_secrets", testMasterKey, "application/json", []byte(`{}`),
		http.Header{"Origin": {"https://evil.example"}})
	if status != http.StatusForbidden {
		t.Fatalf("disallowed origin: HTTP %d", status)
	}
}

// randomText is n characters that deflate cannot shrink much.
func randomText(n int) string {
	b := make([]byte, n/2)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// TestAPIBodyArrivesInPieces: a body sent slowly in pieces, a chunked body,
// and Expect: 100-continue all get their answer (the body is collected
// read by read, without a goroutine waiting on the client).
func TestAPIBodyArrivesInPieces(t *testing.T) {
	mock := startMock(t, mockai.Config{})
	g := startGateway(t, mock, nil)
	body := `{"session":{"type":"realtime","instructions":"in pieces"}}`
	head := "POST /v1/realtime/client_secrets HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + testMasterKey +
		"\r\nContent-Type: application/json\r\n"
	chunked := ""
	for i := 0; i < len(body); i += 10 {
		part := body[i:min(i+10, len(body))]
		chunked += strconv.FormatInt(int64(len(part)), 16) + "\r\n" + part + "\r\n"
	}
	chunked += "0\r\n\r\n"
	for _, tc := range []struct {
		name   string
		pieces []string
	}{
		{"content-length, slowly", []string{head + "Content-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n", body[:7], body[7:30], body[30:]}},
		{"expect 100-continue", []string{head + "Expect: 100-continue\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n", body}},
		{"chunked", []string{head + "Transfer-Encoding: chunked\r\n\r\n", chunked[:25], chunked[25:]}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := g.rawDial(t)
			for _, p := range tc.pieces {
				if _, err := io.WriteString(c, p); err != nil {
					t.Fatal(err)
				}
				time.Sleep(50 * time.Millisecond)
			}
			_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
			resp, err := io.ReadAll(c)
			if err != nil {
				t.Fatal(err)
			}
			got := string(resp)
			if strings.Contains(tc.name, "100") && !strings.HasPrefix(got, "HTTP/1.1 100 Continue\r\n\r\n") {
				t.Fatalf("no 100 Continue: %.60q", got)
			}
			if !strings.Contains(got, "HTTP/1.1 200 OK") || !strings.Contains(got, `"instructions":"in pieces"`) {
				t.Fatalf("answer %.200q", got)
			}
		})
	}
}

// TestClientSecretCountsAgainstIssuingKey: a secret's session takes a slot
// of the key that minted it.
func TestClientSecretCountsAgainstIssuingKey(t *testing.T) {
	mock := startMock(t, mockai.Config{})
	g := startGateway(t, mock, func(c *Settings) { c.MaxSessionsPerKey = 1 })
	ek, _ := mint(t, g, testMasterKey, map[string]any{})
	c := g.dial(t, "", bearer(testMasterKey))
	read(t, c)
	if _, resp, err := dialSecret(t, g, ek, ""); err == nil || resp == nil || resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("a secret of a key at its limit connected (%v)", err)
	}
	_ = c.Close()
	waitFor(t, "the slot to free", func() bool { return g.srv.SessionsOpen() == 0 })
	c2, _, err := dialSecret(t, g, ek, "")
	if err != nil {
		t.Fatal(err)
	}
	read(t, c2)
}
