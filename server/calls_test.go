package server

import (
	"bytes"
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"log/slog"
	"mime/multipart"
	"net/http"
	"net/url"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"

	"rtgate/mockai"
	"rtgate/server/internal/testhooks"
	"rtgate/server/redistest"
)

const (
	keyA   = "sk-app-a-test"
	keyB   = "sk-app-b-test"
	keyOps = "sk-ops-test"
)

// sdpOffer is a browser-like offer (audio plus a data channel).
const sdpOffer = "v=0\r\no=- 4611731400430051336 2 IN IP4 127.0.0.1\r\ns=-\r\nt=0 0\r\na=group:BUNDLE 0 1\r\n" +
	"m=audio 9 UDP/TLS/RTP/SAVPF 111\r\nc=IN IP4 0.0.0.0\r\na=mid:0\r\na=sendrecv\r\na=rtpmap:111 opus/48000/2\r\n" +
	"m=application 9 UDP/DTLS/SCTP webrtc-datachannel\r\nc=IN IP4 0.0.0.0\r\na=mid:1\r\na=sctp-port:5000\r\n"

// appsGateway is a gateway with three model groups on two mocks (realtime,
// realtime-mini on rt; a transcription group on tr) and keys app-a, app-b
// and ops (sideband: any).
func appsGateway(t *testing.T, up mockai.Config, mutate func(*Settings)) (g *gateway, rt, tr *mockai.Server) {
	t.Helper()
	rt, tr = startMock(t, up), startMock(t, up)
	return appsGatewayOn(t, rt, tr, mutate), rt, tr
}

// appsGatewayOn is appsGateway in front of given mocks.
func appsGatewayOn(t *testing.T, rt, tr *mockai.Server, mutate func(*Settings)) *gateway {
	t.Helper()
	t.Setenv("APP_A_KEY", keyA)
	t.Setenv("APP_B_KEY", keyB)
	t.Setenv("OPS_KEY", keyOps)
	entry := func(group, model string, m *mockai.Server) string {
		return "\n  - model_name: " + group + "\n    litellm_params:\n      model: openai/" + model +
			"\n      api_base: " + m.BaseURL() + "\n      api_key: os.environ/RTGATE_TEST_UPSTREAM"
	}
	path := writeConfig(t, "model_list:"+entry("gpt-realtime", "gpt-realtime", rt)+
		entry("gpt-realtime-mini", "gpt-realtime-mini-2025", rt)+entry("gpt-4o-transcribe", "gpt-4o-transcribe", tr)+configTail+appKeys)
	return startGateway(t, nil, func(c *Settings) {
		c.RoutesFile = path
		c.TranscriptionModel = "gpt-4o-transcribe"
		if rt.CertPEM() != nil {
			c.UpstreamRoots = trustMock(t, rt) // both mocks share mockai's certificate
			c.UpstreamRoots.AppendCertsFromPEM(tr.CertPEM())
		}
		if mutate != nil {
			mutate(c)
		}
	})
}

// appKeys are the keys app-a, app-b and ops (sideband: any) of a routes
// file, from APP_A_KEY, APP_B_KEY and OPS_KEY.
const appKeys = `
keys:
  - name: app-a
    key: os.environ/APP_A_KEY
  - name: app-b
    key: os.environ/APP_B_KEY
  - name: ops
    key: os.environ/OPS_KEY
    sideband: any
`

// multipartOffer is OpenAI's form: sdp and session parts.
func multipartOffer(t *testing.T, session map[string]any) (string, []byte) {
	var buf bytes.Buffer
	w := multipart.NewWriter(&buf)
	_ = w.WriteField("sdp", sdpOffer)
	sj, _ := json.Marshal(session)
	_ = w.WriteField("session", string(sj))
	_ = w.Close()
	return w.FormDataContentType(), buf.Bytes()
}

// tokens is rtgate_tokens_total{model_group, key, kind}.
func tokens(t *testing.T, g *gateway, group, key, kind string) float64 {
	t.Helper()
	return gatheredLabels(t, g.srv.reg, "rtgate_tokens_total", map[string]string{"model_group": group, "key": key, "kind": kind})
}

// TestCallsForwardedAndMetered: raw application/sdp and multipart offers,
// authenticated by a key or a client secret, routed by the session part's
// model, the model query or the default; the answer, 201 and Location come
// back unchanged; the upstream got the deployment's model and key; the
// gateway's own sideband meters response.done against the key.
func TestCallsForwardedAndMetered(t *testing.T) {
	for _, up := range upstreams {
		t.Run(up.name, func(t *testing.T) {
			g, rt, _ := appsGateway(t, up.cfg, func(c *Settings) { c.Pool.Size = 1 })
			ek, _ := mint(t, g, keyA, map[string]any{"session": map[string]any{"instructions": "From the secret."}})
			mpType, mpBody := multipartOffer(t, map[string]any{"type": "realtime", "model": "gpt-realtime-mini", "instructions": "From the form."})
			for _, tc := range []struct {
				name, key, path, ctype string
				body                   []byte
				wantModel, wantInstr   string
			}{
				{"raw sdp, default model", keyA, "/v1/realtime/calls", "application/sdp", []byte(sdpOffer), "gpt-realtime", ""},
				{"raw sdp, model query", keyA, "/v1/realtime/calls?model=gpt-realtime-mini", "application/sdp", []byte(sdpOffer), "gpt-realtime-mini-2025", ""},
				{"multipart session model", keyA, "/v1/realtime/calls", mpType, mpBody, "gpt-realtime-mini-2025", "From the form."},
				{"client secret", ek, "/v1/realtime/calls", "application/sdp", []byte(sdpOffer), "gpt-realtime", "From the secret."},
			} {
				t.Run(tc.name, func(t *testing.T) {
					status, h, body := post(t, g, tc.path, tc.key, tc.ctype, tc.body, nil)
					if status != http.StatusCreated || !strings.HasPrefix(h.Get("Location"), "/v1/realtime/calls/rtc_") ||
						h.Get("Content-Type") != "application/sdp" || !strings.HasPrefix(string(body), "v=0\r\n") {
						t.Fatalf("HTTP %d, Location %q, type %q, body %.40q", status, h.Get("Location"), h.Get("Content-Type"), body)
					}
					calls := rt.Calls()
					last := calls[len(calls)-1]
					var sess map[string]any
					_ = json.Unmarshal(last.Session, &sess)
					if last.Key != testUpstreamKey || last.Offer != sdpOffer || sess["model"] != tc.wantModel ||
						(tc.wantInstr != "" && sess["instructions"] != tc.wantInstr) || "/v1/realtime/calls/"+last.ID != h.Get("Location") {
						t.Fatalf("the upstream got key ok=%v, offer ok=%v, session %v", last.Key == testUpstreamKey, last.Offer == sdpOffer, sess)
					}
				})
			}

			// Metering: the gateway's own sideband to the last call.
			calls := rt.Calls()
			id := calls[len(calls)-1].ID
			waitFor(t, "the metering sideband", func() bool {
				for _, r := range rt.Records() {
					if strings.Contains(r.Query, "call_id="+id) && r.SessionID != "" {
						return true
					}
				}
				return false
			})
			// A client's own sideband to the call, through the gateway:
			// it sees the call's events, but the usage is counted once,
			// by the gateway's metering sideband.
			sb := g.dial(t, "call_id="+id, bearer(keyA))
			if e := read(t, sb); e.typ() != "session.created" {
				t.Fatalf("sideband's first event %s", e.typ())
			}
			var resp *http.Response
			var err error
			if rt.CertPEM() != nil {
				hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: trustMock(t, rt)}}}
				resp, err = hc.Post("https://"+rt.Addr()+"/mock/calls/"+id+"/respond", "", nil)
			} else {
				resp, err = http.Post("http://"+rt.Addr()+"/mock/calls/"+id+"/respond", "", nil)
			}
			if err != nil {
				t.Fatal(err)
			}
			var n struct{ Sidebands int }
			_ = json.NewDecoder(resp.Body).Decode(&n)
			resp.Body.Close()
			if n.Sidebands != 2 {
				t.Fatalf("%d sidebands on the call, want the gateway's and the client's", n.Sidebands)
			}
			readUntil(t, sb, "response.done")
			_ = sb.Close()
			waitFor(t, "the call's usage counted against app-a", func() bool {
				return tokens(t, g, "gpt-realtime", "app-a", "input_audio") == 100
			})
			waitFor(t, "the client's sideband to end", func() bool { return g.srv.SessionsOpen() == 0 })
			if got := tokens(t, g, "gpt-realtime", "app-a", "input_audio"); got != 100 {
				t.Fatalf("the call's usage counted %v times 100 tokens, want once", got/100)
			}
		})
	}
}

// TestCallsRefused: bad keys, bad media types, a model the key may not
// use, a body without sdp.
func TestCallsRefused(t *testing.T) {
	g, _, _ := appsGateway(t, mockai.Config{}, nil)
	for _, tc := range []struct {
		name, key, ctype, body string
		status                 int
	}{
		{"no key", "", "application/sdp", sdpOffer, 401},
		{"forged secret", "ek_abc.def", "application/sdp", sdpOffer, 401},
		{"json body", keyA, "application/json", `{}`, 415},
		{"unknown model", keyA, "application/sdp", sdpOffer, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := "/v1/realtime/calls"
			if tc.status == 0 {
				path += "?model=nope"
				tc.status = 404
			}
			status, _, body := post(t, g, path, tc.key, tc.ctype, []byte(tc.body), nil)
			var e struct{ Error struct{ Code string } }
			if status != tc.status || json.Unmarshal(body, &e) != nil || e.Error.Code == "" {
				t.Fatalf("HTTP %d %s, want %d with an OpenAI error", status, body, tc.status)
			}
		})
	}
}

// TestSidebandAccess: a call's sideband is relayed for the key that made it
// (a secret only to the calls made with it: TestSecretSidebandReachesOnlyItsCalls),
// 403 for other keys; calls the gateway did not
// make are relayed for the master key and sideband: any keys only; a
// sideband is never taken from the warm pool.
func TestSidebandAccess(t *testing.T) {
	for _, up := range upstreams {
		t.Run(up.name, func(t *testing.T) {
			g, rt, _ := appsGateway(t, up.cfg, func(c *Settings) { c.Pool.Size = 1 })
			id := placeCall(t, g, keyA, "call")
			ekA, _ := mint(t, g, keyA, map[string]any{})
			ekB, _ := mint(t, g, keyB, map[string]any{})
			for _, tc := range []struct {
				name, key, call string
				want            int
			}{
				{"maker", keyA, id, 101},
				{"maker's secret: not the call it made", ekA, id, 403}, // issue 32 item 6
				{"other key", keyB, id, 403},
				{"other key's secret", ekB, id, 403},
				{"master on another's call", testMasterKey, id, 403},
				{"foreign call, plain key", keyB, "rtc_sip_foreign", 403},
				{"foreign call, master", testMasterKey, "rtc_sip_foreign", 101},
				{"foreign call, sideband any", keyOps, "rtc_sip_foreign", 101},
			} {
				t.Run(tc.name, func(t *testing.T) {
					before := rt.Stats().Upgrades
					c, resp, err := dialer().Dial(g.url("call_id="+url.QueryEscape(tc.call)), bearer(tc.key))
					if tc.want == 403 {
						if err == nil || resp == nil || resp.StatusCode != 403 {
							t.Fatalf("got %v, want 403", err)
						}
						return
					}
					if err != nil {
						t.Fatalf("dial: %v", err)
					}
					defer c.Close()
					if e := read(t, c); e.typ() != "session.created" {
						t.Fatalf("first event %s", e.typ())
					}
					recs := rt.Records()
					last := recs[len(recs)-1]
					if rt.Stats().Upgrades <= before || !strings.Contains(last.Query, "call_id="+tc.call) || strings.Contains(last.Query, "model=") {
						t.Fatalf("the sideband did not get a fresh upstream connect of its own: %q", last.Query)
					}
				})
			}
		})
	}
}

// TestTranscriptionSessions: ?intent=transcription routes to
// TRANSCRIPTION_MODEL's group (or the model query's), and a transcription
// secret's session starts configured; usage comes from the transcription
// completed events.
func TestTranscriptionSessions(t *testing.T) {
	for _, up := range upstreams {
		t.Run(up.name, func(t *testing.T) {
			g, rt, tr := appsGateway(t, up.cfg, nil)
			audio := base64.StdEncoding.EncodeToString(make([]byte, 48000)) // 1 s: 100 audio tokens
			talk := func(t *testing.T, key, query string, update bool) {
				c := g.dial(t, query, bearer(key))
				if e := read(t, c); e.typ() != "session.created" {
					t.Fatalf("first event %s", e.typ())
				}
				if update {
					send(t, c, map[string]any{"type": "session.update", "session": map[string]any{"type": "transcription"}})
					readUntil(t, c, "session.updated")
				}
				send(t, c, map[string]any{"type": "input_audio_buffer.append", "audio": audio})
				send(t, c, map[string]any{"type": "input_audio_buffer.commit"})
				e, _ := readUntil(t, c, "conversation.item.input_audio_transcription.completed")
				if e.str("transcript") == "" {
					t.Fatal("no transcript")
				}
				_ = c.Close()
				waitFor(t, "the session to end", func() bool { return g.srv.SessionsOpen() == 0 })
			}
			t.Run("configured group", func(t *testing.T) {
				n := len(tr.Records())
				talk(t, keyA, "intent=transcription", true)
				recs := tr.Records()
				if len(recs) != n+1 || recs[n].Query != "intent=transcription" {
					t.Fatalf("the transcription group's upstream did not get the connect")
				}
				if got := tokens(t, g, "gpt-4o-transcribe", "app-a", "input_audio"); got != 100 {
					t.Fatalf("input audio tokens %v, want 100", got)
				}
			})
			t.Run("model query", func(t *testing.T) {
				n := len(rt.Records())
				talk(t, keyB, "intent=transcription&model=gpt-realtime", true)
				if len(rt.Records()) != n+1 {
					t.Fatal("the model query did not route")
				}
				if got := tokens(t, g, "gpt-realtime", "app-b", "input_audio"); got != 100 {
					t.Fatalf("input audio tokens %v, want 100", got)
				}
			})
			t.Run("transcription secret", func(t *testing.T) {
				ek, _ := mint(t, g, keyA, map[string]any{"session": map[string]any{"type": "transcription",
					"audio": map[string]any{"input": map[string]any{"transcription": map[string]any{"model": "gpt-4o-transcribe"}}}}})
				n := len(tr.Events())
				talk(t, ek, "", false)
				evs := tr.Events()[n:]
				if len(evs) == 0 || evs[0].Type != "session.update" || !strings.Contains(string(evs[0].Event), `"type":"transcription"`) ||
					evs[0].Intent != "transcription" {
					t.Fatalf("the upstream's first event was not the secret's transcription config: %+v", evs)
				}
				if got := tokens(t, g, "gpt-4o-transcribe", "app-a", "input_audio"); got != 200 {
					t.Fatalf("input audio tokens %v, want 200 (two sessions of app-a)", got)
				}
			})
		})
	}
}

// TestBetaDialectExplained: a beta client's header still goes upstream, the
// upstream's beta_api_shape_disabled error and 4000 close reach the client,
// and the gateway's log says what that means and what to change.
func TestBetaDialectExplained(t *testing.T) {
	mock := startMock(t, mockai.Config{})
	var logBuf syncBuffer
	g := startGatewayLog(t, mock, nil, slog.New(slog.NewTextHandler(&logBuf, nil)))
	h := bearer(testMasterKey)
	h.Set("OpenAI-Beta", "realtime=v1")
	c := g.dial(t, "", h)
	if e := read(t, c); e.typ() != "error" || e.str("error", "code") != "beta_api_shape_disabled" {
		t.Fatalf("got %s %s", e.typ(), e.str("error", "code"))
	}
	if ce := closeOf(t, c); ce.Code != 4000 || ce.Text != "invalid_request_error.beta_api_shape_disabled" {
		t.Fatalf("close %d %q", ce.Code, ce.Text)
	}
	recs := mock.Records()
	if recs[len(recs)-1].Header.Get("OpenAI-Beta") != "realtime=v1" {
		t.Fatal("the beta header was not forwarded")
	}
	waitFor(t, "the explanation in the log", func() bool {
		return strings.Contains(logBuf.String(), "retired Realtime beta interface") &&
			strings.Contains(logBuf.String(), "use the GA interface")
	})
}

// placeCall makes a WebRTC call as key and returns its call id; what names
// the call in a failure.
func placeCall(t *testing.T, g *gateway, key, what string) string {
	t.Helper()
	status, h, _ := post(t, g, "/v1/realtime/calls", key, "application/sdp", []byte(sdpOffer), nil)
	if status != 201 {
		t.Fatalf("%s: HTTP %d", what, status)
	}
	return strings.TrimPrefix(h.Get("Location"), "/v1/realtime/calls/")
}

// expectAttachRefused expects key's sideband connect with query q to get
// 403; what says what a success would mean.
func expectAttachRefused(t *testing.T, g *gateway, q, key, what string) {
	t.Helper()
	if _, resp, err := dialer().Dial(g.url(q), bearer(key)); err == nil || httpStatus(resp) != 403 {
		t.Fatalf("%s (%v)", what, err)
	}
}

// TestSidebandOwnerAcrossInstances: with REDIS_URL, an instance that did not
// make the call knows whose it is. It asks Redis off netpoll's read handler
// (issue 20, item 3: the lookup used to run inside it, holding a handler,
// or with inline handlers possibly a poller, for up to REDIS_TIMEOUT_MS).
func TestSidebandOwnerAcrossInstances(t *testing.T) {
	rd := redistest.Start(t)
	g1, rt, tr := appsGateway(t, mockai.Config{}, func(c *Settings) { c.RedisURL = rd.URL() })
	g2 := appsGatewayOn(t, rt, tr, func(c *Settings) { c.RedisURL = rd.URL() })
	var lookups, inHandler atomic.Int32
	g2.srv.setSessionHooks(&testhooks.Session{SidebandLookup: func() {
		lookups.Add(1)
		buf := make([]byte, 64<<10)
		if strings.Contains(string(buf[:runtime.Stack(buf, false)]), "(*Door).onRequest") {
			inHandler.Add(1)
		}
	}})
	defer func() {
		if lookups.Load() == 0 || inHandler.Load() != 0 {
			t.Errorf("%d Redis lookups of the call's owner, %d of them in netpoll's read handler; want some, none there",
				lookups.Load(), inHandler.Load())
		}
	}()
	q := "call_id=" + placeCall(t, g1, keyA, "call")
	expectAttachRefused(t, g2, q, keyB, "another key attached on the other instance")
	expectAttachRefused(t, g2, q, testMasterKey, "the master key attached to app-a's call on the other instance")
	c := g2.dial(t, q, bearer(keyA))
	if e := read(t, c); e.typ() != "session.created" {
		t.Fatalf("first event %s", e.typ())
	}
}

// TestAppsWithRedisDown: with Redis gone, secrets that carry their config
// still mint and connect, calls are still made and their owner known to
// this instance; only a config too large for a token cannot be minted
// (503, nothing half-stored). No secret reaches the metrics.
func TestAppsWithRedisDown(t *testing.T) {
	rd := redistest.Start(t)
	g, _, _ := appsGateway(t, mockai.Config{}, func(c *Settings) { c.RedisURL = rd.URL() })
	rd.Stop()
	ek, _ := mint(t, g, keyA, map[string]any{"session": map[string]any{"instructions": "Redis is down."}})
	c, _, err := dialSecret(t, g, ek, "")
	if err != nil {
		t.Fatal(err)
	}
	if e := read(t, c); e.str("session", "instructions") != "Redis is down." {
		t.Fatalf("session.created %v", e)
	}
	q := "call_id=" + placeCall(t, g, keyA, "call with Redis down")
	expectAttachRefused(t, g, q, keyB, "another key attached with Redis down")
	sb := g.dial(t, q, bearer(keyA))
	read(t, sb)
	body, _ := json.Marshal(map[string]any{"session": map[string]any{"instructions": randomText(12000)}})
	if status, _, b := post(t, g, "/v1/realtime/client_secrets", keyA, "application/json", body, nil); status != 503 {
		t.Fatalf("large config with Redis down: HTTP %d %s", status, b)
	}
	mfs, err := g.srv.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if s := mf.String(); strings.Contains(s, "ek_") || strings.Contains(s, keyA) {
			t.Fatalf("a secret is in metric %s", mf.GetName())
		}
	}
}
