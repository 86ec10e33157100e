package server

import (
	"bytes"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"rtgate/mockai"
	"rtgate/server/admin"
)

// adminRequest sends a request to the admin listener at addr with the
// given Host and headers; it returns the status and body.
func adminRequest(t *testing.T, method, addr, path, host string, h http.Header, body []byte) (int, []byte) {
	t.Helper()
	return httpRequest(t, method, "http://"+addr+path, host, h, body)
}

// httpRequest sends a request to url with the given Host ("" for url's)
// and headers; it returns the status and body.
func httpRequest(t testing.TB, method, url, host string, h http.Header, body []byte) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if host != "" {
		req.Host = host
	}
	for k, v := range h {
		req.Header[k] = v
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// TestAdminServesOnlyLoopbackHosts: against DNS rebinding, every admin
// path answers 421 to a Host that is not a loopback name or address, a name
// in ADMIN_HOSTS, or (IP literals cannot be rebound) the listener's own
// address.
func TestAdminServesOnlyLoopbackHosts(t *testing.T) {
	mock := startMock(t, mockai.Config{})
	g := startGateway(t, mock, func(c *Settings) { c.AdminHosts = []string{"gateway-admin.internal"} })
	addr := g.serveAdmin(t)
	_, port, _ := net.SplitHostPort(addr)
	cases := []struct {
		host string
		want int
	}{
		{addr, 200},
		{"localhost:" + port, 200},
		{"LOCALHOST", 200},
		{"ops.localhost:" + port, 200},
		{"[::1]:" + port, 200},
		{"127.0.0.2:" + port, 200},
		{"gateway-admin.internal:" + port, 200},
		{"evil.example", 421},
		{"evil.example:" + port, 421},
		{"127.0.0.1.evil.example:" + port, 421},
		{"localhost.evil.example", 421},
		{"10.1.2.3:" + port, 421}, // bound to loopback: another address is not this server
		{"gateway-admin.internal.evil.example", 421},
	}
	for _, path := range []string{"/status", "/status.json", "/playground", "/metrics"} {
		for _, c := range cases {
			if got, body := adminRequest(t, "GET", addr, path, c.host, nil, nil); got != c.want {
				t.Errorf("GET %s with Host %q: %d %.100s, want %d", path, c.host, got, body, c.want)
			}
		}
	}
	if got, _ := adminRequest(t, "POST", addr, "/playground/client_secret", "evil.example", nil, []byte(`{}`)); got != 421 {
		t.Errorf("mint with a foreign Host: %d, want 421", got)
	}
}

// TestAdminAcceptsIPHostsWhenBoundToAll: an admin listener on all addresses
// answers Hosts that are IP literals (a Prometheus scrape by address), still
// not foreign names.
func TestAdminAcceptsIPHostsWhenBoundToAll(t *testing.T) {
	mock := startMock(t, mockai.Config{})
	g := startGateway(t, mock, nil)
	g.waitServing(t)
	g.srv.admin.Listening(&net.TCPAddr{IP: net.IPv4zero, Port: 4002})
	for host, want := range map[string]bool{"10.1.2.3:4002": true, "[2001:db8::1]:4002": true, "evil.example:4002": false} {
		if got := g.srv.admin.HostAllowed(host); got != want {
			t.Errorf("adminHostAllowed(%q) = %v, want %v", host, got, want)
		}
	}
}

var pageTokenRE = regexp.MustCompile(`"token":"([^"]+)"`)

// playgroundToken loads the playground page and returns its token.
func playgroundToken(t *testing.T, addr string) string {
	t.Helper()
	page := httpGet(t, "http://"+addr+"/playground", nil)
	m := pageTokenRE.FindStringSubmatch(page)
	if m == nil {
		t.Fatal("no page token in the playground page")
	}
	if strings.Contains(page, testMasterKey) || strings.Contains(page, testUpstreamKey) {
		t.Fatal("the playground page holds a key")
	}
	return m[1]
}

// TestPlaygroundMintRequiresPageTokenAndOrigin: the mint endpoint answers
// 403 without the page's token, with a forged, tampered or expired one, and
// without the admin page's own Origin (or with a cross-site Sec-Fetch-Site);
// with both it mints a secret for the master key that lives at most 60 s,
// the answer holds no long-lived key, and the secret connects to the client
// port from the admin page's origin although ALLOWED_ORIGINS names another,
// while a foreign origin is still refused.
func TestPlaygroundMintRequiresPageTokenAndOrigin(t *testing.T) {
	mock := startMock(t, mockai.Config{})
	g := startGateway(t, mock, func(c *Settings) { c.AllowedOrigins = []string{"https://app.example"} })
	addr := g.serveAdmin(t)
	origin := "http://" + addr
	token := playgroundToken(t, addr)
	_, port, _ := net.SplitHostPort(addr)
	expired := g.srv.admin.PageToken(time.Now().Add(-admin.PageTokenTTL - time.Minute))
	body := []byte(`{"model":"gpt-realtime"}`)
	hdr := func(kv ...string) http.Header {
		h := http.Header{"Content-Type": {"application/json"}}
		for i := 0; i+1 < len(kv); i += 2 {
			h.Set(kv[i], kv[i+1])
		}
		return h
	}
	refused := []struct {
		name string
		h    http.Header
	}{
		{"no token", hdr("Origin", origin)},
		{"empty token", hdr("Origin", origin, admin.PageTokenHeader, "")},
		{"forged token", hdr("Origin", origin, admin.PageTokenHeader, "AAAA.AAAA")},
		{"tampered token", hdr("Origin", origin, admin.PageTokenHeader, "B"+token[1:])},
		{"expired token", hdr("Origin", origin, admin.PageTokenHeader, expired)},
		{"no Origin", hdr(admin.PageTokenHeader, token)},
		{"foreign Origin", hdr("Origin", "http://evil.example", admin.PageTokenHeader, token)},
		{"Origin of another port", hdr("Origin", "http://127.0.0.1:1", admin.PageTokenHeader, token)},
		{"Origin of another scheme", hdr("Origin", "https://"+addr, admin.PageTokenHeader, token)},
		{"null Origin", hdr("Origin", "null", admin.PageTokenHeader, token)},
		{"cross-site fetch", hdr("Origin", origin, admin.PageTokenHeader, token, "Sec-Fetch-Site", "cross-site")},
	}
	for _, c := range refused {
		status, b := adminRequest(t, "POST", addr, "/playground/client_secret", "", c.h, body)
		if status != http.StatusForbidden || strings.Contains(string(b), "ek_") {
			t.Errorf("%s: %d %s, want 403 without a secret", c.name, status, b)
		}
	}
	// A page served under another loopback name mints for that origin only.
	if status, _ := adminRequest(t, "POST", addr, "/playground/client_secret", "localhost:"+port,
		hdr("Origin", origin, admin.PageTokenHeader, token), body); status != http.StatusForbidden {
		t.Errorf("Origin %s for Host localhost: %d, want 403", origin, status)
	}

	before := time.Now().Unix()
	status, b := adminRequest(t, "POST", addr, "/playground/client_secret", "",
		hdr("Origin", origin, admin.PageTokenHeader, token, "Sec-Fetch-Site", "same-origin"), body)
	if status != http.StatusOK {
		t.Fatalf("mint with token and Origin: %d %s", status, b)
	}
	var minted struct {
		Value     string `json:"value"`
		ExpiresAt int64  `json:"expires_at"`
	}
	if err := json.Unmarshal(b, &minted); err != nil || !strings.HasPrefix(minted.Value, "ek_") {
		t.Fatalf("mint answer %s: %v", b, err)
	}
	if life := minted.ExpiresAt - before; life > admin.PlaygroundSecretTTL || life < admin.PlaygroundSecretTTL-2 {
		t.Fatalf("the secret lives %d s, want at most %d", life, admin.PlaygroundSecretTTL)
	}
	if strings.Contains(string(b), testMasterKey) || strings.Contains(string(b), testUpstreamKey) {
		t.Fatal("the mint answer holds a long-lived key")
	}

	d := dialer()
	d.Subprotocols = []string{"realtime", "openai-insecure-api-key." + minted.Value}
	c, resp, err := d.Dial(g.url("model=gpt-realtime"), http.Header{"Origin": {origin}})
	if err != nil {
		t.Fatalf("connect with the secret from the admin page's origin: %v (%v)", err, resp)
	}
	defer c.Close()
	if e := read(t, c); e.typ() != "session.created" {
		t.Fatalf("got %v, want session.created", e)
	}
	if _, resp, err := d.Dial(g.url("model=gpt-realtime"), http.Header{"Origin": {"http://evil.example"}}); err == nil || resp == nil || resp.StatusCode != 403 {
		t.Fatalf("connect from a foreign origin: %v, want 403", err)
	}
}

// TestIsAdminOrigin: only http(s) origins naming a Host the admin server
// answers to, on its port, are the admin page's.
func TestIsAdminOrigin(t *testing.T) {
	mock := startMock(t, mockai.Config{})
	g := startGateway(t, mock, nil)
	g.waitServing(t)
	if g.srv.admin.IsOrigin("http://127.0.0.1:4002") {
		t.Fatal("an admin origin before the admin listener exists")
	}
	g.srv.admin.Listening(&net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 4002})
	for origin, want := range map[string]bool{
		"http://127.0.0.1:4002":       true,
		"http://localhost:4002":       true,
		"https://localhost:4002":      true,
		"http://[::1]:4002":           true,
		"http://127.0.0.1:4003":       false,
		"http://127.0.0.1":            false,
		"http://evil.example:4002":    false,
		"ws://127.0.0.1:4002":         false,
		"null":                        false,
		"http://127.0.0.1:4002/x":     false,
		"http://user@127.0.0.1:4002x": false,
	} {
		if got := g.srv.admin.IsOrigin(origin); got != want {
			t.Errorf("isAdminOrigin(%q) = %v, want %v", origin, got, want)
		}
	}
	// Bound to all addresses, the Host check takes any IP literal, but an
	// origin must still be a loopback one: another machine's page on the
	// same port number is not the admin page.
	g.srv.admin.Listening(&net.TCPAddr{IP: net.IPv4zero, Port: 4002})
	if g.srv.admin.IsOrigin("http://10.1.2.3:4002") || !g.srv.admin.IsOrigin("http://127.0.0.1:4002") {
		t.Error("bound to all addresses: an IP origin other than loopback counts as the admin page's, or loopback does not")
	}
}

// TestStatusJSONCountsSessions: /status.json (the page's data) counts the
// live sessions by group and key while a gorilla client holds them, and
// the sample ring records them.
func TestStatusJSONCountsSessions(t *testing.T) {
	mock := startMock(t, mockai.Config{})
	g := startGateway(t, mock, nil)
	addr := g.serveAdmin(t)
	waitFor(t, "the first sample", func() bool {
		var r admin.Report
		if err := json.Unmarshal([]byte(httpGet(t, "http://"+addr+"/status.json", nil)), &r); err != nil {
			t.Fatal(err)
		}
		return len(r.History.Sessions) > 0
	})
	for range 3 {
		read(t, g.dial(t, "model=gpt-realtime", bearer(testMasterKey)))
	}
	var r admin.Report
	waitFor(t, "a sample with 3 sessions", func() bool {
		if err := json.Unmarshal([]byte(httpGet(t, "http://"+addr+"/status.json", nil)), &r); err != nil {
			t.Fatal(err)
		}
		h := r.History.Sessions
		return len(h) > 0 && h[len(h)-1] == 3
	})
	if r.Sessions != 3 || len(r.ByGroup) != 1 || r.ByGroup[0] != (admin.NamedCount{Name: "gpt-realtime", Count: 3}) ||
		len(r.ByKey) != 1 || r.ByKey[0] != (admin.NamedCount{Name: "master", Count: 3}) {
		t.Fatalf("status.json: %d sessions, groups %v, keys %v; want 3 on gpt-realtime for master", r.Sessions, r.ByGroup, r.ByKey)
	}
	if r.Connects1m != 3 {
		t.Fatalf("connects in the last minute: %v, want 3", r.Connects1m)
	}
	// The environment path serves GPT-Live (LIVE_MODEL) beside Realtime:
	// two deployments, the Realtime one with the sessions.
	if len(r.Deployments) != 2 || r.Deployments[1].Group != "gpt-realtime" || r.Deployments[1].Live != 3 ||
		r.Deployments[1].Dials != 3 || r.Deployments[1].DialMS == nil || r.Deployments[0].Group != "gpt-live-1" || r.Deployments[0].Live != 0 {
		t.Fatalf("deployments: %+v, want gpt-live-1 idle and gpt-realtime with 3 live sessions and 3 timed dials", r.Deployments)
	}
	if r.PoolEnabled || r.Draining || r.UptimeS <= 0 {
		t.Fatalf("pool %v, draining %v, uptime %v", r.PoolEnabled, r.Draining, r.UptimeS)
	}
}

// waitServing returns once the client port answers /health. A test that
// ends before Serve has installed its event loop would leave Shutdown
// nothing to stop (Serve then never returns).
func (g *gateway) waitServing(t *testing.T) {
	t.Helper()
	httpGet(t, "http://"+g.addr+"/health", nil)
}

// TestAdminHostsFromEnv: ADMIN_HOSTS is a comma-separated list of names,
// compared without case.
func TestAdminHostsFromEnv(t *testing.T) {
	env := map[string]string{"LITELLM_MASTER_KEY": testMasterKey, "OPENAI_API_KEY": testUpstreamKey,
		"ADMIN_HOSTS": " Ops.Internal , gateway-admin ,"}
	cfg, err := FromEnv(func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(cfg.AdminHosts, "|") != "ops.internal|gateway-admin" {
		t.Fatalf("AdminHosts %q", cfg.AdminHosts)
	}
}

// TestStatusShowsDraining: once Drain starts, /status.json says so (the
// page shows a red "draining").
func TestStatusShowsDraining(t *testing.T) {
	mock := startMock(t, mockai.Config{})
	g := startGateway(t, mock, func(c *Settings) { c.DrainGrace = 2 * time.Second })
	g.waitServing(t)
	addr := g.serveAdmin(t)
	draining := func() bool {
		var r admin.Report
		if err := json.Unmarshal([]byte(httpGet(t, "http://"+addr+"/status.json", nil)), &r); err != nil {
			t.Fatal(err)
		}
		return r.Draining
	}
	if draining() {
		t.Fatal("draining before Drain")
	}
	done := make(chan struct{})
	go func() { g.srv.Drain(time.Second); close(done) }()
	waitFor(t, "status.json to say draining", draining)
	<-done
}
