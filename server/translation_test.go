package server

import (
	"encoding/base64"
	"encoding/json"
	"math"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"rtgate/mockai"
	"rtgate/server/usage"
)

// translationGateway is a gateway with a Realtime group (gpt-realtime) and a
// translation group (gpt-realtime-translate) on mock, a key "rt-only" that
// may use only gpt-realtime, USAGE_LOG at the returned path, and the warm
// pool on (one socket per key), so that a test sees translation never use
// it.
func translationGateway(t *testing.T, mock *mockai.Server) (*gateway, string) {
	t.Helper()
	t.Setenv("RT_ONLY_KEY", "sk-rt-only-test")
	entry := func(group, model string) string {
		return "\n  - model_name: " + group + "\n    litellm_params:\n      model: openai/" + model +
			"\n      api_base: " + mock.BaseURL() + "\n      api_key: os.environ/RTGATE_TEST_UPSTREAM"
	}
	path := writeConfig(t, "model_list:"+entry("gpt-realtime", "gpt-realtime")+
		entry("gpt-realtime-translate", "gpt-realtime-translate")+configTail+`
keys:
  - name: rt-only
    key: os.environ/RT_ONLY_KEY
    models: [gpt-realtime]
`)
	logPath := filepath.Join(t.TempDir(), "usage.jsonl")
	g := startAppGateway(t, mock, func(c *Settings) {
		c.RoutesFile, c.UsageLog = path, logPath
		c.Pool.Size = 1
	})
	return g, logPath
}

// translationURL is the gateway's translation route.
func (g *gateway) translationURL(query string) string {
	u := "ws://" + g.addr + "/v1/realtime/translations"
	if query != "" {
		u += "?" + query
	}
	return u
}

// TestTranslationSession: a translation session through the gateway (ws and
// wss upstream, the pool on): routed to the translation deployment's
// /v1/realtime/translations with the deployment's key and model, relayed both
// ways, never from the warm pool, and billed its wall clock at $0.034 a
// minute with protocol "translation".
func TestTranslationSession(t *testing.T) {
	for _, up := range upstreams {
		t.Run(up.name, func(t *testing.T) {
			mock := startMock(t, up.cfg)
			g, logPath := translationGateway(t, mock)
			c := dialWith(t, dialer(), g.translationURL("model=gpt-realtime-translate"), bearer(testMasterKey))
			created := read(t, c)
			if created.typ() != "session.created" || created.str("session", "type") != "translation" ||
				created.str("session", "model") != "gpt-realtime-translate" {
				t.Fatalf("first event %v, want a translation session.created", created)
			}
			send(t, c, map[string]any{"type": "session.update", "session": map[string]any{"audio": map[string]any{"output": map[string]any{"language": "fr"}}}})
			if e := read(t, c); e.typ() != "session.updated" || e.str("session", "audio", "output", "language") != "fr" {
				t.Fatalf("after session.update: %v", e)
			}
			audio := base64.StdEncoding.EncodeToString(mockai.PCMPattern(4800))
			send(t, c, map[string]any{"type": "session.input_audio_buffer.append", "audio": audio})
			if _, seen := readUntil(t, c, "session.output_audio.delta"); !strings.Contains(strings.Join(seen, " "), "session.output_transcript.delta") {
				t.Fatalf("events after an append: %v", seen)
			}
			send(t, c, map[string]any{"type": "session.close"})
			readUntil(t, c, "session.closed")
			_ = c.WriteMessage(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""))
			waitFor(t, "the session to end", func() bool { return g.srv.SessionsOpen() == 0 })

			var tr []mockai.Record
			for _, r := range mock.Records() {
				if strings.HasSuffix(r.Path, "/translations") {
					tr = append(tr, r)
				}
			}
			if len(tr) != 1 {
				t.Fatalf("%d upgrades reached the translation route, want 1 (the client's: none pooled)", len(tr))
			}
			if q, _ := url.ParseQuery(tr[0].Query); tr[0].Path != "/v1/realtime/translations" || q.Get("model") != "gpt-realtime-translate" || tr[0].Key != testUpstreamKey {
				t.Fatalf("upstream got %s?%s (key the upstream's: %v)", tr[0].Path, tr[0].Query, tr[0].Key == testUpstreamKey)
			}

			rec := oneRecord(t, g, logPath)
			if rec.Protocol != "translation" || rec.ModelGroup != "gpt-realtime-translate" || rec.PoolHit {
				t.Fatalf("record: protocol %q group %q pool_hit %v", rec.Protocol, rec.ModelGroup, rec.PoolHit)
			}
			if want := float64(rec.DurationMS) / 1000; rec.Seconds <= 0 || math.Abs(rec.Seconds-want) > 1e-9 {
				t.Fatalf("record seconds %v, want the session's wall clock %v", rec.Seconds, want)
			}
			if want := rec.Seconds * 0.034 / 60; math.Abs(rec.CostUSD-want) > 1e-12 {
				t.Fatalf("record cost %.9f USD, want %.9f ($0.034 a minute of %.3f s)", rec.CostUSD, want, rec.Seconds)
			}
		})
	}
}

// oneRecord shuts g down (so USAGE_LOG is flushed) and returns its one
// session record.
func oneRecord(t *testing.T, g *gateway, logPath string) usage.Record {
	t.Helper()
	ctx, cancel := contextWithTimeout(5 * time.Second)
	defer cancel()
	_ = g.srv.Shutdown(ctx)
	recs := readRecords(t, logPath)
	if len(recs) != 1 {
		t.Fatalf("%d records, want 1", len(recs))
	}
	return recs[0]
}

// TestTranslationRefusals: what the gateway refuses before the upgrade, with
// an independent client: the route and the model must agree, the model is
// required, and the key's models apply.
func TestTranslationRefusals(t *testing.T) {
	mock := startMock(t, mockai.Config{})
	g, _ := translationGateway(t, mock)
	for _, tc := range []struct {
		name, url, key string
		status         int
		code           string
	}{
		{"no model", g.translationURL(""), testMasterKey, http.StatusBadRequest, "missing_required_parameter"},
		{"a Realtime model", g.translationURL("model=gpt-realtime"), testMasterKey, http.StatusBadRequest, "invalid_model"},
		{"the translation model on /v1/realtime", g.url("model=gpt-realtime-translate"), testMasterKey, http.StatusBadRequest, "invalid_model"},
		{"unknown model", g.translationURL("model=gpt-nope"), testMasterKey, http.StatusNotFound, "model_not_found"},
		{"a key without the group", g.translationURL("model=gpt-realtime-translate"), "sk-rt-only-test", http.StatusForbidden, "model_not_allowed"},
		{"no key", g.translationURL("model=gpt-realtime-translate"), "", http.StatusUnauthorized, "invalid_api_key"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, resp, err := dialer().Dial(tc.url, bearer(tc.key))
			if err == nil {
				t.Fatal("admitted")
			}
			if httpStatus(resp) != tc.status {
				t.Fatalf("HTTP %d, want %d", httpStatus(resp), tc.status)
			}
			var body struct {
				Error struct{ Code string } `json:"error"`
			}
			_ = json.NewDecoder(resp.Body).Decode(&body)
			if body.Error.Code != tc.code {
				t.Fatalf("code %q, want %q", body.Error.Code, tc.code)
			}
		})
	}
	if n := len(mock.Records()); n > 1 { // the pool's one warm Realtime socket at most
		t.Fatalf("%d upgrades reached the upstream for refused connects", n)
	}
}

// TestTranslationClientSecret: POST /v1/realtime/translations/client_secrets
// mints an ek_ secret for a translation session; connecting with it starts
// the session configured (the secret's language in the client's
// session.created; the upstream got it as a session.update without type or
// model first). A translation secret does not open a Realtime session, nor a
// Realtime secret a translation one.
func TestTranslationClientSecret(t *testing.T) {
	for _, up := range upstreams {
		t.Run(up.name, func(t *testing.T) {
			mock := startMock(t, up.cfg)
			g, _ := translationGateway(t, mock)
			body, _ := json.Marshal(map[string]any{"session": map[string]any{"model": "gpt-realtime-translate",
				"audio": map[string]any{"output": map[string]any{"language": "de"}}}})
			status, _, b := post(t, g, "/v1/realtime/translations/client_secrets", testMasterKey, "application/json", body, nil)
			var minted struct {
				Value   string         `json:"value"`
				Session map[string]any `json:"session"`
			}
			if status != http.StatusOK || json.Unmarshal(b, &minted) != nil || !strings.HasPrefix(minted.Value, "ek_") ||
				minted.Session["type"] != "translation" || minted.Session["model"] != "gpt-realtime-translate" {
				t.Fatalf("minting: HTTP %d %s", status, b)
			}
			d := dialer()
			d.Subprotocols = []string{"realtime", "openai-insecure-api-key." + minted.Value}
			c := dialWith(t, d, g.translationURL(""), nil)
			if e := read(t, c); e.typ() != "session.created" || e.str("session", "audio", "output", "language") != "de" {
				t.Fatalf("first event %v, want a session.created in the secret's language", e)
			}
			evs := mock.Events()
			if len(evs) == 0 || evs[0].Type != "session.update" || strings.Contains(string(evs[0].Event), `"type":"translation"`) ||
				strings.Contains(string(evs[0].Event), `"model"`) {
				t.Fatalf("the upstream's first client event: %+v", evs)
			}
			if _, resp, err := d.Dial(g.url("model=gpt-realtime"), nil); err == nil || httpStatus(resp) != http.StatusBadRequest {
				t.Fatalf("a translation secret on /v1/realtime: HTTP %d, want 400", httpStatus(resp))
			}
			rt, _ := mint(t, g, testMasterKey, map[string]any{"session": map[string]any{"type": "realtime", "model": "gpt-realtime"}})
			d.Subprotocols = []string{"realtime", "openai-insecure-api-key." + rt}
			if _, resp, err := d.Dial(g.translationURL(""), nil); err == nil || httpStatus(resp) != http.StatusBadRequest {
				t.Fatalf("a Realtime secret on the translation route: HTTP %d, want 400", httpStatus(resp))
			}
			for _, bad := range []map[string]any{
				{"session": map[string]any{"model": "gpt-realtime"}},
				{"session": map[string]any{"type": "realtime", "model": "gpt-realtime-translate"}},
				{"session": map[string]any{}},
			} {
				body, _ := json.Marshal(bad)
				if status, _, b := post(t, g, "/v1/realtime/translations/client_secrets", testMasterKey, "application/json", body, nil); status != http.StatusBadRequest {
					t.Fatalf("minting %v: HTTP %d %s, want 400", bad, status, b)
				}
			}
		})
	}
}
