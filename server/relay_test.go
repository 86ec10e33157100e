package server

import (
	"bytes"
	"encoding/base64"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"rtgate/mockai"
)

func TestFullSessionThroughGateway(t *testing.T) {
	overBoth(t, mockai.Config{AudioDeltas: 3, AudioDeltaBytes: 4800}, func(t *testing.T, mock *mockai.Server, trust func(*Settings)) {
		g := startGateway(t, mock, trust)
		c := g.dial(t, "model=gpt-realtime", bearer(testMasterKey))

		created := read(t, c)
		if created.typ() != "session.created" || !strings.HasPrefix(created.str("session", "id"), "sess_") {
			t.Fatalf("first event %v, want session.created with a sess_ id", created)
		}
		if created.str("session", "model") != "gpt-realtime" {
			t.Fatalf("session model %q", created.str("session", "model"))
		}

		send(t, c, map[string]any{"type": "session.update", "session": map[string]any{"type": "realtime", "instructions": "be brief"}})
		if e := read(t, c); e.typ() != "session.updated" || e.str("session", "instructions") != "be brief" {
			t.Fatalf("got %v, want session.updated with the new instructions", e)
		}

		// One second of audio: 48,000 bytes of PCM16 at 24 kHz, 100 input tokens.
		send(t, c, map[string]any{"type": "input_audio_buffer.append", "audio": base64.StdEncoding.EncodeToString(make([]byte, 48000))})
		send(t, c, map[string]any{"type": "response.create"})
		done, seen := readUntil(t, c, "response.done")
		deltas := 0
		for _, s := range seen {
			if s == "response.output_audio.delta" {
				deltas++
			}
		}
		if deltas != 3 {
			t.Fatalf("got %d audio deltas, want 3: %v", deltas, seen)
		}
		// mockai's usage: input audio 48000/480, output audio 3*4800/480.
		if got := done.str("response", "usage", "input_token_details", "audio_tokens"); got != "100" {
			t.Fatalf("input audio tokens %q, want 100", got)
		}
		if got := done.str("response", "usage", "output_token_details", "audio_tokens"); got != "30" {
			t.Fatalf("output audio tokens %q, want 30", got)
		}

		if err := c.WriteMessage(websocket.CloseMessage, websocket.FormatCloseMessage(1000, "done")); err != nil {
			t.Fatal(err)
		}
		if ce := closeOf(t, c); ce.Code != 1000 {
			t.Fatalf("close %d %q, want 1000 echoed", ce.Code, ce.Text)
		}
	})
}

func TestAuthStylesAndSubprotocolEcho(t *testing.T) {
	mock := startMock(t, mockai.Config{})
	g := startGateway(t, mock, nil)
	cases := []struct {
		name         string
		header       http.Header
		wantProtocol string
	}{
		{"bearer", bearer(testMasterKey), ""},
		{"bearer lower-case scheme", http.Header{"Authorization": {"bearer " + testMasterKey}}, ""},
		{"api-key header", http.Header{"Api-Key": {testMasterKey}}, ""},
		{"browser subprotocols", http.Header{"Sec-WebSocket-Protocol": {"realtime, openai-insecure-api-key." + testMasterKey}}, "realtime"},
		{"browser subprotocols with unknown extras", http.Header{"Sec-WebSocket-Protocol": {
			"realtime, openai-insecure-api-key." + testMasterKey + ", openai-agents-sdk.0.1.0, openai-organization.org_1"}}, "realtime"},
		{"bearer and realtime offered", http.Header{"Authorization": {"Bearer " + testMasterKey}, "Sec-WebSocket-Protocol": {"realtime"}}, "realtime"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, resp, err := dialer().Dial(g.url("model=gpt-realtime"), tc.header)
			if err != nil {
				t.Fatalf("dial: %v", err)
			}
			defer c.Close()
			if got := resp.Header.Get("Sec-WebSocket-Protocol"); got != tc.wantProtocol {
				t.Fatalf("answered subprotocol %q, want %q", got, tc.wantProtocol)
			}
			if e := read(t, c); e.typ() != "session.created" {
				t.Fatalf("got %v", e)
			}
		})
	}
	// What reached the upstream: the gateway's key, never the client's, and
	// no credential subprotocol.
	for _, r := range mock.Records() {
		if r.Key != testUpstreamKey {
			t.Fatalf("upstream saw a key other than the gateway's")
		}
		if got := r.Header.Get("Authorization"); got != "Bearer "+testUpstreamKey {
			t.Fatalf("upstream Authorization is not the gateway's key")
		}
		if r.Header.Get("Api-Key") != "" || len(r.Subprotocols) != 0 {
			t.Fatalf("client credentials reached the upstream: subprotocols %d", len(r.Subprotocols))
		}
		for _, v := range r.Header {
			for _, s := range v {
				if strings.Contains(s, testMasterKey) {
					t.Fatal("the client's key reached the upstream")
				}
			}
		}
	}
	if n := len(mock.Records()); n != len(cases) {
		t.Fatalf("upstream saw %d connects, want %d", n, len(cases))
	}
}

func TestUpstreamRequestShape(t *testing.T) {
	mock := startMock(t, mockai.Config{})
	g := startGateway(t, mock, nil)
	h := bearer(testMasterKey)
	h.Set("OpenAI-Beta", "realtime=v1")
	h.Set("OpenAI-Organization", "org-client")
	h.Set("OpenAI-Project", "proj-client")
	c := g.dial(t, "model=gpt-realtime&foo=bar", h)
	// The beta header is passed through and the upstream decides: today it
	// refuses the beta shape with 4000, which reaches the client unchanged.
	if e := read(t, c); e.typ() != "error" || e.str("error", "code") != "beta_api_shape_disabled" {
		t.Fatalf("got %v, want the upstream's beta error event", e)
	}
	ce := closeOf(t, c)
	if ce.Code != 4000 || ce.Text != "invalid_request_error.beta_api_shape_disabled" {
		t.Fatalf("close %d %q, want the upstream's 4000", ce.Code, ce.Text)
	}
	recs := mock.Records()
	if len(recs) != 1 {
		t.Fatalf("%d upstream connects", len(recs))
	}
	r := recs[0]
	if r.Path != "/v1/realtime" || !strings.Contains(r.Query, "model=gpt-realtime") || !strings.Contains(r.Query, "foo=bar") {
		t.Fatalf("upstream request %s?%s", r.Path, r.Query)
	}
	if r.Header.Get("OpenAI-Beta") != "realtime=v1" {
		t.Fatal("OpenAI-Beta not passed through")
	}
	if r.Header.Get("OpenAI-Organization") != "" || r.Header.Get("OpenAI-Project") != "" {
		t.Fatal("the client's organization or project reached the upstream")
	}
}

func TestRefusedRequests(t *testing.T) {
	mock := startMock(t, mockai.Config{})
	g := startGateway(t, mock, nil)
	upgrade := func(h http.Header) http.Header {
		h.Set("Connection", "Upgrade")
		h.Set("Upgrade", "websocket")
		h.Set("Sec-WebSocket-Version", "13")
		h.Set("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ==")
		return h
	}
	cases := []struct {
		name   string
		method string
		path   string
		header http.Header
		status int
		code   string
	}{
		{"no key", "GET", "/v1/realtime?model=gpt-realtime", upgrade(http.Header{}), 401, "invalid_api_key"},
		{"wrong key", "GET", "/v1/realtime?model=gpt-realtime", upgrade(bearer("sk-wrong")), 401, "invalid_api_key"},
		{"wrong key in subprotocol", "GET", "/v1/realtime?model=gpt-realtime", upgrade(http.Header{"Sec-WebSocket-Protocol": {"realtime, openai-insecure-api-key.nope"}}), 401, "invalid_api_key"},
		{"unknown model", "GET", "/v1/realtime?model=gpt-nonexistent", upgrade(bearer(testMasterKey)), 404, "model_not_found"},
		{"not an upgrade", "GET", "/v1/realtime?model=gpt-realtime", bearer(testMasterKey), 426, "upgrade_required"},
		{"unknown path", "GET", "/v1/chat", upgrade(bearer(testMasterKey)), 404, "not_found"},
		{"wrong method", "POST", "/v1/realtime", upgrade(bearer(testMasterKey)), 405, "method_not_allowed"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest(tc.method, "http://x"+tc.path, nil)
			req.Header = tc.header
			status, body := httpDo(t, g, req)
			if status != tc.status {
				t.Fatalf("status %d, want %d", status, tc.status)
			}
			e := event(body)
			if e.str("error", "code") != tc.code || e.str("error", "message") == "" {
				t.Fatalf("body %v, want an OpenAI-shaped error with code %s", body, tc.code)
			}
			if tc.code == "model_not_found" && !strings.Contains(e.str("error", "message"), "gpt-nonexistent") {
				t.Fatalf("404 message does not name the model: %v", body)
			}
		})
	}
	if n := len(mock.Records()); n != 0 {
		t.Fatalf("refused requests reached the upstream %d times", n)
	}
	req, _ := http.NewRequest("GET", "http://x/health", nil)
	if status, body := httpDo(t, g, req); status != 200 || body["status"] != "ok" {
		t.Fatalf("/health: %d %v", status, body)
	}
}

func TestNoMasterKeyRefusesEveryone(t *testing.T) {
	mock := startMock(t, mockai.Config{})
	g := startGateway(t, mock, func(c *Settings) { c.MasterKey = "" })
	for _, h := range []http.Header{{}, bearer(""), bearer("anything")} {
		_, resp, err := dialer().Dial(g.url("model=gpt-realtime"), h)
		if err == nil || resp == nil || resp.StatusCode != 401 {
			t.Fatalf("with no master key set, a connect got through (err %v)", err)
		}
	}
}

func TestUpstreamFailuresBecomeErrorEvents(t *testing.T) {
	closed := func() string {
		// A port nothing listens on: bind one, then free it.
		m := startMock(t, mockai.Config{})
		u := m.BaseURL()
		_ = m.Close()
		return u
	}()
	cases := []struct {
		name       string
		mock       *mockai.Config
		base       string
		wantStatus string
	}{
		{"refused", nil, closed, ""},
		{"HTTP 401", &mockai.Config{RejectStatus: 401, Key: "sk-other"}, "", "401"},
		{"HTTP 429", &mockai.Config{StatusCode: 429}, "", "429"},
		{"HTTP 500", &mockai.Config{StatusCode: 500}, "", "500"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var mock *mockai.Server
			if tc.mock != nil {
				mock = startMock(t, *tc.mock)
			}
			g := startGateway(t, mock, func(c *Settings) {
				if tc.base != "" {
					c.APIBase, _ = ParseAPIBase(tc.base)
				}
			})
			c := g.dial(t, "model=gpt-realtime", bearer(testMasterKey))
			e := read(t, c)
			if e.typ() != "error" || e.str("error", "code") != "upstream_unavailable" || e.str("error", "type") != "server_error" {
				t.Fatalf("got %v, want an upstream_unavailable error event", e)
			}
			if tc.wantStatus != "" && (e.str("error", "status") != tc.wantStatus || !strings.Contains(e.str("error", "message"), tc.wantStatus)) {
				t.Fatalf("error event %v does not carry the upstream's HTTP %s", e, tc.wantStatus)
			}
			if ce := closeOf(t, c); ce.Code != 1011 {
				t.Fatalf("close %d, want 1011", ce.Code)
			}
		})
	}
}

func TestUpstreamInvalidKeyEventPassesThrough(t *testing.T) {
	mock := startMock(t, mockai.Config{Key: "sk-something-else"}) // the upstream rejects the gateway's key after the upgrade
	g := startGateway(t, mock, nil)
	c := g.dial(t, "model=gpt-realtime", bearer(testMasterKey))
	if e := read(t, c); e.typ() != "error" || e.str("error", "code") != "invalid_api_key" {
		t.Fatalf("got %v, want the upstream's invalid_api_key event", e)
	}
	if ce := closeOf(t, c); ce.Code != 4000 || ce.Text != "invalid_request_error.invalid_api_key" {
		t.Fatalf("close %d %q, want the upstream's 4000", ce.Code, ce.Text)
	}
}

func TestLargeAndFragmentedMessages(t *testing.T) {
	overBoth(t, mockai.Config{}, func(t *testing.T, mock *mockai.Server, trust func(*Settings)) {
		g := startGateway(t, mock, trust)
		c := g.dial(t, "model=gpt-realtime", bearer(testMasterKey))
		c.SetReadLimit(32 << 20)
		read(t, c) // session.created

		// A 5 MiB append streams through; mockai counts its audio.
		audio := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{1, 2}, 5<<20/2))
		send(t, c, map[string]any{"type": "input_audio_buffer.append", "audio": audio[:len(audio)-len(audio)%4]})

		// A fragmented session.update: gorilla fragments writes larger than its
		// write buffer.
		d := dialer()
		d.WriteBufferSize = 64
		fc := dialWith(t, d, g.url("model=gpt-realtime"), bearer(testMasterKey))
		read(t, fc)
		instr := strings.Repeat("fragmented ", 100)
		send(t, fc, map[string]any{"type": "session.update", "session": map[string]any{"type": "realtime", "instructions": instr}})
		if e := read(t, fc); e.typ() != "session.updated" || e.str("session", "instructions") != instr {
			t.Fatalf("fragmented update: got %v", e.typ())
		}

		send(t, c, map[string]any{"type": "response.create"})
		done, _ := readUntil(t, c, "response.done")
		want := (5 << 20) * 3 / 4 / 480 // decoded bytes of the truncated base64 / 480
		if got := done.str("response", "usage", "input_token_details", "audio_tokens"); got == "" || got == "0" {
			t.Fatalf("the 5 MiB append did not arrive: audio tokens %q (want about %d)", got, want)
		}
	})
}

func TestFramesBeforeUpstreamReadyArriveInOrder(t *testing.T) {
	overBoth(t, mockai.Config{UpgradeDelay: 300 * time.Millisecond}, func(t *testing.T, mock *mockai.Server, trust func(*Settings)) {
		g := startGateway(t, mock, trust)
		c := g.dial(t, "model=gpt-realtime", bearer(testMasterKey))
		// Sent while the gateway is still waiting for the upstream's 101.
		for i := range 5 {
			send(t, c, map[string]any{"type": "session.update", "session": map[string]any{"type": "realtime", "instructions": "n" + string(rune('0'+i))}})
		}
		if e := read(t, c); e.typ() != "session.created" {
			t.Fatalf("first event %v", e.typ())
		}
		for i := range 5 {
			e := read(t, c)
			if e.typ() != "session.updated" || e.str("session", "instructions") != "n"+string(rune('0'+i)) {
				t.Fatalf("update %d: got %v %q", i, e.typ(), e.str("session", "instructions"))
			}
		}
	})
}

func TestTooMuchBeforeUpstreamReadyCloses1009(t *testing.T) {
	overBoth(t, mockai.Config{UpgradeDelay: time.Second}, func(t *testing.T, mock *mockai.Server, trust func(*Settings)) {
		g := startGateway(t, mock, func(c *Settings) { trust(c); c.MaxPending = 64 << 10 })
		c := g.dial(t, "model=gpt-realtime", bearer(testMasterKey))
		big := base64.StdEncoding.EncodeToString(make([]byte, 96<<10))
		send(t, c, map[string]any{"type": "input_audio_buffer.append", "audio": big})
		if ce := closeOf(t, c); ce.Code != 1009 {
			t.Fatalf("close %d %q, want 1009", ce.Code, ce.Text)
		}
	})
}

// expectScriptedEcho opens a session on a gateway in front of a
// scriptedUpstream: session.created, then the upstream's echo of an update.
func expectScriptedEcho(t *testing.T, g *gateway) *websocket.Conn {
	t.Helper()
	c := g.dial(t, "model=gpt-realtime", bearer(testMasterKey))
	if e := read(t, c); e.typ() != "session.created" {
		t.Fatalf("first event %v, want session.created", e.typ())
	}
	send(t, c, map[string]any{"type": "session.update"})
	if e := read(t, c); e.typ() != "echo" {
		t.Fatalf("got %v, want the upstream's echo", e.typ())
	}
	return c
}

// TestWarmPoolFillsWhenSessionCreatedTrailsThe101: the upstream sends the 101
// and session.created in one TCP segment (over TLS as separate records, so
// that session.created sits decrypted inside crypto/tls once the upgrade has
// read the 101). Every warm socket must reach ready. Before this change the
// pool's read handler was installed before the 101's trailing bytes were fed
// and crypto/tls was never drained, so over TLS the sockets waited out the
// dial timeout (3, 1 and 5 of 16 warm after 4 s were measured).
func TestWarmPoolFillsWhenSessionCreatedTrailsThe101(t *testing.T) {
	upstreamVariants(t, func(t *testing.T, up *scriptedUpstream) {
		g := startGateway(t, nil, withPool(8, func(c *Settings) { up.config(c); c.DialTimeout = 10 * time.Second }))
		waitFor(t, "8 of 8 warm sockets", func() bool { return g.srv.Pool().Warm(g.srv.defaultTarget()) == 8 })
		expectScriptedEcho(t, g)
	})
}

// TestDeadWarmSocketIsRedialed: a warm socket that dies after a client took
// it, before the client sent anything on it, is replaced by a fresh dial. The
// client keeps the session.created it already has (the fresh one's is
// consumed) and the session carries on. Before this change the client got
// session.created and then 1011.
func TestDeadWarmSocketIsRedialed(t *testing.T) {
	upstreamVariants(t, func(t *testing.T, up *scriptedUpstream) {
		g := startGateway(t, nil, withPool(1, up.config))
		waitWarm(t, g, 1)
		c := g.dial(t, "model=gpt-realtime", bearer(testMasterKey))
		first := read(t, c)
		if first.typ() != "session.created" || first.str("session", "id") != "sess_1" {
			t.Fatalf("first event %v %s, want the warm socket's session.created", first.typ(), first.str("session", "id"))
		}
		before := up.connections()
		up.cut(1) // the warm socket the client holds dies, no close frame
		waitFor(t, "a fresh upstream dial", func() bool {
			return metricSum(t, g, "rtgate_pool_warm_redials_total") == 1 && up.connections() > before
		})
		send(t, c, map[string]any{"type": "session.update"})
		e := read(t, c)
		if e.typ() != "echo" || e.str("conn") == "1" {
			t.Fatalf("got %v from conn %s, want an echo from a fresh upstream (no second session.created)", e.typ(), e.str("conn"))
		}
		_ = c.WriteMessage(websocket.CloseMessage, websocket.FormatCloseMessage(1000, "done"))
		if ce := closeOf(t, c); ce.Code != 1000 {
			t.Fatalf("close %d, want 1000 echoed by the fresh upstream", ce.Code)
		}
	})
}

// TestDeadWarmSocketAfterClientFramesIsNotRedialed: once a client frame went
// to the warm socket, a redial would lose it: without session continuity
// the client gets 1011 as before (with it, the session resumes instead).
func TestDeadWarmSocketAfterClientFramesIsNotRedialed(t *testing.T) {
	up := startScriptedUpstream(t, false)
	g := startGateway(t, nil, withPool(1, func(c *Settings) { up.config(c); c.Continuity = false }))
	waitWarm(t, g, 1)
	c := g.dial(t, "model=gpt-realtime", bearer(testMasterKey))
	read(t, c)
	send(t, c, map[string]any{"type": "session.update"})
	if e := read(t, c); e.typ() != "echo" {
		t.Fatalf("got %v, want an echo", e.typ())
	}
	up.cut(1)
	if ce := closeOf(t, c); ce.Code != 1011 {
		t.Fatalf("close %d, want 1011", ce.Code)
	}
	if n := metricSum(t, g, "rtgate_pool_warm_redials_total"); n != 0 {
		t.Fatalf("%v redials, want none", n)
	}
}

// overBoth runs f against a plain (ws://) and a TLS (wss://) mockai built
// from cfg; trust is the gateway option that trusts the TLS one (a no-op for
// plain). The production upstream is wss://, so every relay behaviour is
// checked over TLS too.
func overBoth(t *testing.T, cfg mockai.Config, f func(t *testing.T, mock *mockai.Server, trust func(*Settings))) {
	for _, secure := range []bool{false, true} {
		name := "ws"
		if secure {
			name = "wss"
		}
		t.Run(name, func(t *testing.T) {
			c := cfg
			c.TLS = secure
			mock := startMock(t, c)
			trust := func(*Settings) {}
			if secure {
				roots := trustMock(t, mock)
				trust = func(c *Settings) { c.UpstreamRoots = roots }
			}
			f(t, mock, trust)
		})
	}
}

// TestFreshDialSessionCreatedTrailsThe101 is the same without the pool: the
// fresh dial's session.created, decrypted inside crypto/tls with the 101,
// reaches the client at once.
func TestFreshDialSessionCreatedTrailsThe101(t *testing.T) {
	upstreamVariants(t, func(t *testing.T, up *scriptedUpstream) {
		g := startGateway(t, nil, up.config)
		for range 5 {
			c := expectScriptedEcho(t, g)
			_ = c.Close()
		}
	})
}
