package server

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"rtgate/server/spenddb/pgtest"
)

// xaiGateway is a gateway (TLS to the client, for the SDK) with the group
// grok-voice on mockai's xAI dialect (its /xai/v1 root) over scheme, the
// warm pool on, and USAGE_LOG at the returned path.
func xaiGateway(t *testing.T, scheme string, mutate ...func(*Settings)) (*gateway, listenerCert, string) {
	t.Helper()
	return xaiGatewayOn(t, scheme, nil, mutate...)
}

// xaiGatewayOn is xaiGateway with mockai's extra flags mockArgs.
func xaiGatewayOn(t *testing.T, scheme string, mockArgs []string, mutate ...func(*Settings)) (*gateway, listenerCert, string) {
	t.Helper()
	g, lc, logPath, _, _ := providerGateway(t, scheme, mockArgs, func(root string) string {
		return `
  - model_name: grok-voice
    litellm_params:
      model: xai/grok-voice-latest
      api_base: ` + root + `/xai/v1
      api_key: os.environ/RTGATE_TEST_UPSTREAM`
	}, mutate...)
	return g, lc, logPath
}

// providerGateway starts mockai over scheme, with answers of about a
// second (50 deltas 20 ms apart, so that a cancel after the first audio
// lands mid-answer) and mockArgs, and a gateway in front of it: TLS to the
// client (lc), a pool of 2, USAGE_LOG at logPath, and model_list the
// entries entries(mockai's root URL) writes. It returns mockai too, and the
// roots its certificate is trusted by (wss).
func providerGateway(t *testing.T, scheme string, mockArgs []string, entries func(root string) string,
	mutate ...func(*Settings)) (g *gateway, lc listenerCert, logPath string, mock *mockaiProcess, roots *x509.CertPool) {
	t.Helper()
	mock, roots = mockaiOver(t, scheme, append([]string{"-deltas", "50", "-delta-interval", "20ms"}, mockArgs...)...)
	path := writeConfig(t, "model_list:"+entries(strings.TrimSuffix(mock.baseURL, "/v1"))+configTail)
	logPath = filepath.Join(t.TempDir(), "usage.jsonl")
	lc = newListenerCert(t)
	g = startGateway(t, nil, func(c *Settings) {
		c.RoutesFile, c.UsageLog = path, logPath
		c.UpstreamRoots = roots
		c.TLSCert, c.TLSKey = lc.certFile, lc.keyFile
		c.Pool.Size = 2
		for _, m := range mutate {
			m(c)
		}
	})
	return g, lc, logPath, mock, roots
}

// TestXAIBehindTheRealtimeAPI: a client of the Realtime API reaches an xai/
// deployment (ws and wss upstream) and sees OpenAI's protocol: the session
// starts with session.created naming the deployment's model (xAI sends
// conversation.created first), xAI's ping events never reach it, and
// response.done carries a usage object. The deployment is never warmed
// (xAI bills connection time), and the session is billed its wall clock at
// xAI's $0.05 a minute.
func TestXAIBehindTheRealtimeAPI(t *testing.T) {
	for _, up := range []string{"ws", "wss"} {
		t.Run(up, func(t *testing.T) {
			g, lc, logPath := xaiGateway(t, up)
			d := dialer()
			d.TLSClientConfig = &tls.Config{RootCAs: lc.roots, MinVersion: tls.VersionTLS12}
			c := dialWith(t, d, "wss://"+g.addr+"/v1/realtime?model=grok-voice", bearer(testMasterKey))
			first := read(t, c)
			if first.typ() != "session.created" || first.str("session", "model") != "grok-voice-latest" {
				t.Fatalf("first event %v, want session.created for grok-voice-latest", first)
			}
			send(t, c, map[string]any{"type": "response.create"})
			var types []string
			var done event
			for deadline := time.Now().Add(10 * time.Second); done == nil && time.Now().Before(deadline); {
				e := read(t, c)
				types = append(types, e.typ())
				if e.typ() == "response.done" {
					done = e
				}
			}
			switch {
			case done == nil:
				t.Fatalf("no response.done; events %v", types)
			case slices.Contains(types, "ping"):
				t.Fatalf("xAI's ping reached the client: %v", types)
			case !slices.Contains(types, "conversation.created"):
				t.Fatalf("xAI's conversation.created was lost: %v", types)
			}
			if _, ok := done["response"].(map[string]any)["usage"].(map[string]any); !ok {
				t.Fatalf("response.done without a usage object: %v", done)
			}
			time.Sleep(1100 * time.Millisecond) // a second of connection to bill
			_ = c.WriteMessage(websocket.CloseMessage, websocket.FormatCloseMessage(1000, "done"))
			_ = c.Close()
			waitFor(t, "the session to end", func() bool { return g.srv.SessionsOpen() == 0 })
			rec := oneRecord(t, g, logPath)
			if rec.PoolHit {
				t.Fatal("an xAI session came from the warm pool: a warm xAI socket bills by the minute")
			}
			wall := float64(rec.DurationMS) / 1000
			if rec.Seconds < 1 || math.Abs(rec.Seconds-wall) > 0.01 {
				t.Fatalf("record seconds %v, want the session's wall clock %v", rec.Seconds, wall)
			}
			if want := rec.Seconds * 0.05 / 60; math.Abs(rec.CostUSD-want) > 1e-9 {
				t.Fatalf("cost %v, want %v (%.2f s at $0.05 a minute)", rec.CostUSD, want, rec.Seconds)
			}
		})
	}
}

// TestNodeSDKsWithXAI: the official openai SDK's OpenAIRealtimeWS and
// @openai/agents-realtime's transport, unchanged, hold a voice session with
// an xAI deployment through the gateway (ws and wss upstream): audio in,
// audio and a transcript out, a tool call and its output, an interruption.
// The agents transport emits turn_done only for a response.done that passes
// its schema, so every response counts there.
func TestNodeSDKsWithXAI(t *testing.T) {
	for _, up := range []string{"ws", "wss"} {
		for _, client := range []string{"openai", "agents"} {
			t.Run(up+"/"+client, func(t *testing.T) {
				g, lc, _ := xaiGateway(t, up)
				out := runNode(t, "providers.mjs", "CLIENT="+client, "MODEL=grok-voice",
					"GATEWAY_BASE=https://"+g.addr+"/v1", "GATEWAY_URL=wss://"+g.addr+"/v1/realtime?model=grok-voice",
					"GATEWAY_KEY="+testMasterKey, "NODE_EXTRA_CA_CERTS="+lc.certFile)
				checkProviderRun(t, out, client, "grok-voice-latest")
			})
		}
	}
}

// geminiGateway is a gateway (TLS to the client, for the SDK) with the group
// gemini-voice on mockai's Gemini Live over scheme, priced per modality as
// model_info says, and USAGE_LOG at the returned path.
func geminiGateway(t *testing.T, scheme string, mutate ...func(*Settings)) (*gateway, listenerCert, string) {
	t.Helper()
	g, lc, logPath, _, _ := geminiGatewayOn(t, scheme, nil, mutate...)
	return g, lc, logPath
}

// geminiGatewayOn is geminiGateway with mockai's extra flags mockArgs; it
// returns mockai too, and the roots its certificate is trusted by (wss).
func geminiGatewayOn(t *testing.T, scheme string, mockArgs []string, mutate ...func(*Settings)) (*gateway, listenerCert, string, *mockaiProcess, *x509.CertPool) {
	t.Helper()
	return providerGateway(t, scheme, mockArgs, func(root string) string {
		return `
  - model_name: gemini-voice
    litellm_params:
      model: gemini/gemini-3.8-live
      api_base: ` + root + `
      api_key: os.environ/RTGATE_TEST_UPSTREAM
    model_info:
      input_cost_per_token: 0.0000005
      input_cost_per_audio_token: 0.000003
      output_cost_per_token: 0.000002
      output_cost_per_audio_token: 0.000012`
	}, mutate...)
}

// eventsUntil reads events until one of type typ, returning all of them.
func eventsUntil(t *testing.T, c *websocket.Conn, typ string) []event {
	t.Helper()
	var got []event
	for range 500 {
		e := read(t, c)
		got = append(got, e)
		if e.typ() == typ {
			return got
		}
	}
	t.Fatalf("no %s in 500 events", typ)
	return nil
}

// TestGeminiBehindTheRealtimeAPI: a Realtime API client talks to a gemini/
// deployment (ws and wss upstream) in OpenAI's protocol: session.created at
// once, session.updated once Gemini took the setup, a text turn answered
// with audio, its transcript and response.done carrying Gemini's usage per
// modality; a later session.update that would change what Gemini fixed at
// setup gets an error event naming it and the session goes on; the record
// holds the usage and its cost at the deployment's audio and text prices.
func TestGeminiBehindTheRealtimeAPI(t *testing.T) {
	for _, up := range []string{"ws", "wss"} {
		t.Run(up, func(t *testing.T) {
			g, lc, logPath := geminiGateway(t, up)
			d := dialer()
			d.TLSClientConfig = &tls.Config{RootCAs: lc.roots, MinVersion: tls.VersionTLS12}
			c := dialWith(t, d, "wss://"+g.addr+"/v1/realtime?model=gemini-voice", bearer(testMasterKey))
			if e := read(t, c); e.typ() != "session.created" || e.str("session", "model") != "gemini-3.8-live" {
				t.Fatalf("first event %v, want session.created for gemini-3.8-live", e)
			}
			send(t, c, map[string]any{"type": "session.update", "session": map[string]any{"type": "realtime", "instructions": "Be brief."}})
			if e := eventsUntil(t, c, "session.updated"); e[len(e)-1].str("session", "instructions") != "Be brief." {
				t.Fatalf("session.updated %v", e[len(e)-1])
			}
			send(t, c, map[string]any{"type": "conversation.item.create", "item": map[string]any{"type": "message", "role": "user",
				"content": []any{map[string]any{"type": "input_text", "text": "hello"}}}})
			send(t, c, map[string]any{"type": "response.create"})
			turn := eventsUntil(t, c, "response.done")
			var deltas int
			var transcript string
			for _, e := range turn {
				switch e.typ() {
				case "response.output_audio.delta":
					deltas++
				case "response.output_audio_transcript.delta":
					transcript += e.str("delta")
				case "error":
					t.Fatalf("error event %v", e)
				}
			}
			done := turn[len(turn)-1]
			u, _ := done["response"].(map[string]any)["usage"].(map[string]any)
			outAudio, _ := u["output_token_details"].(map[string]any)["audio_tokens"].(float64)
			if deltas == 0 || transcript == "" || done.str("response", "status") != "completed" || outAudio == 0 {
				t.Fatalf("%d audio deltas, transcript %q, response.done %v", deltas, transcript, done)
			}
			send(t, c, map[string]any{"type": "session.update", "session": map[string]any{"instructions": "Be long."}})
			if e := eventsUntil(t, c, "error"); e[len(e)-1].str("error", "code") != "unsupported_mid_session_update" ||
				!strings.Contains(e[len(e)-1].str("error", "message"), "instructions") {
				t.Fatalf("a mid-session change got %v", e[len(e)-1])
			}
			_ = c.WriteMessage(websocket.CloseMessage, websocket.FormatCloseMessage(1000, "done"))
			_ = c.Close()
			waitFor(t, "the session to end", func() bool { return g.srv.SessionsOpen() == 0 })
			rec := oneRecord(t, g, logPath)
			if rec.PoolHit || rec.Usage.OutputTokenDetails.AudioTokens != int64(outAudio) || rec.CostUSD <= 0 {
				t.Fatalf("record: pool hit %v, output audio tokens %d (response.done said %v), cost %v",
					rec.PoolHit, rec.Usage.OutputTokenDetails.AudioTokens, outAudio, rec.CostUSD)
			}
			if want := float64(rec.Usage.OutputTokenDetails.AudioTokens) * 0.000012; rec.CostUSD < want {
				t.Fatalf("cost %v is below the output audio alone (%v): audio output billed at another rate", rec.CostUSD, want)
			}
		})
	}
}

// TestNodeSDKsWithGemini: the official openai SDK's OpenAIRealtimeWS and
// @openai/agents-realtime's transport, unchanged, hold a voice session with
// a Gemini Live deployment through the gateway (ws and wss upstream): audio
// in, audio and transcripts out, a tool call (Gemini has no per-response
// tool_choice: the user asks for the weather) and its output, an
// interruption.
func TestNodeSDKsWithGemini(t *testing.T) {
	for _, up := range []string{"ws", "wss"} {
		for _, client := range []string{"openai", "agents"} {
			t.Run(up+"/"+client, func(t *testing.T) {
				g, lc, _ := geminiGateway(t, up)
				runProviderSDK(t, g, lc, client, "gemini-voice")
			})
			// Vertex AI's route and OAuth token (a service account's key
			// file, its token_uri on loopback), the same translation.
			t.Run(up+"/"+client+"/vertex", func(t *testing.T) {
				g, lc, _, _, _ := providerGateway(t, up, []string{"-key", "tok-good"}, func(root string) string {
					return `
  - model_name: vertex-voice
    litellm_params:
      model: vertex_ai/gemini-3.8-live
      vertex_location: us-central1
      vertex_credentials: ` + vertexKeyFile(t, "tok-good") + `
      api_base: ` + root
				})
				runProviderSDK(t, g, lc, client, "vertex-voice")
			})
		}
	}
}

// runProviderSDK runs providers.mjs's voice session with client (openai or
// agents) through g to group, a Gemini model, and checks what it saw.
func runProviderSDK(t *testing.T, g *gateway, lc listenerCert, client, group string) {
	t.Helper()
	out := runNode(t, "providers.mjs", "CLIENT="+client, "MODEL="+group, "TOOL_BY=text",
		"GATEWAY_BASE=https://"+g.addr+"/v1", "GATEWAY_URL=wss://"+g.addr+"/v1/realtime?model="+group,
		"GATEWAY_KEY="+testMasterKey, "NODE_EXTRA_CA_CERTS="+lc.certFile)
	checkProviderRun(t, out, client, "gemini-3.8-live")
}

// checkProviderRun asserts what providers.mjs saw of a session through
// client (openai or agents): session.created first naming model, no event
// the provider has and OpenAI has not, three answers and a cancelled one,
// audio and a transcript, the tool call; with the agents transport, every
// response.done passed its schema.
func checkProviderRun(t *testing.T, out []byte, client, model string) {
	t.Helper()
	var got struct {
		Events      []string          `json:"events"`
		Statuses    []string          `json:"statuses"`
		TurnsDone   int               `json:"turns_done"`
		AudioDeltas int               `json:"audio_deltas"`
		Transcript  string            `json:"transcript"`
		ToolCall    map[string]string `json:"tool_call"`
		FirstEvent  string            `json:"first_event"`
		Created     string            `json:"created_model"`
		Error       string            `json:"error"`
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("providers.mjs printed %q: %v", out, err)
	}
	want := []string{"completed", "completed", "completed", "cancelled"}
	switch {
	case got.Error != "":
		t.Fatalf("the SDK failed: %s; events %v", got.Error, got.Events)
	case got.FirstEvent != "session.created" || got.Created != model:
		t.Fatalf("first event %q for model %q, want session.created for %s", got.FirstEvent, got.Created, model)
	case slices.Contains(got.Events, "ping") || slices.Contains(got.Events, "error"):
		t.Fatalf("an event OpenAI has not reached the SDK: %v", got.Events)
	case !slices.Equal(got.Statuses, want):
		t.Fatalf("responses ended %v, want %v; events %v", got.Statuses, want, got.Events)
	case got.AudioDeltas == 0 || strings.TrimSpace(got.Transcript) == "":
		t.Fatalf("%d audio deltas, transcript %q", got.AudioDeltas, got.Transcript)
	case got.ToolCall["name"] != "get_weather" || got.ToolCall["call_id"] == "":
		t.Fatalf("tool call %v", got.ToolCall)
	case client == "agents" && got.TurnsDone != len(want):
		t.Fatalf("turn_done %d times for %d responses: a response.done failed the SDK's schema", got.TurnsDone, len(want))
	}
}

// TestWebRTCCallsRefusedForProvidersWithout: a WebRTC call for a group
// served by xAI or Gemini, which take none, is refused with a clear error
// rather than sent where it cannot be answered.
func TestWebRTCCallsRefusedForProvidersWithout(t *testing.T) {
	for _, tc := range []struct {
		group string
		start func(*testing.T, string, ...func(*Settings)) (*gateway, listenerCert, string)
	}{{"grok-voice", xaiGateway}, {"gemini-voice", geminiGateway}} {
		t.Run(tc.group, func(t *testing.T) {
			g, lc, _ := tc.start(t, "ws")
			client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: lc.roots, MinVersion: tls.VersionTLS12}}}
			req, _ := http.NewRequest(http.MethodPost, "https://"+g.addr+"/v1/realtime/calls?model="+tc.group, strings.NewReader(sdpOffer))
			req.Header.Set("Authorization", "Bearer "+testMasterKey)
			req.Header.Set("Content-Type", "application/sdp")
			resp, err := client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var body struct {
				Error struct{ Code, Message string }
			}
			_ = json.NewDecoder(resp.Body).Decode(&body)
			if resp.StatusCode != http.StatusBadRequest || body.Error.Code != "unsupported_for_provider" ||
				!strings.Contains(body.Error.Message, "/v1/realtime") {
				t.Fatalf("HTTP %d %+v, want 400 unsupported_for_provider", resp.StatusCode, body.Error)
			}
		})
	}
}

// plainFront serves clients over ws:// (no TLS listener).
func plainFront(c *Settings) { c.TLSCert, c.TLSKey = "", "" }

// TestClientSecretsWithOtherProviders: a client secret minted by the
// gateway for an xAI or a Gemini group starts its session configured as the
// secret says (for Gemini the secret's session becomes the setup), and a
// turn is answered on it.
func TestClientSecretsWithOtherProviders(t *testing.T) {
	for _, tc := range []struct {
		group string
		start func(*testing.T, string, ...func(*Settings)) (*gateway, listenerCert, string)
	}{{"grok-voice", xaiGateway}, {"gemini-voice", geminiGateway}} {
		for _, up := range []string{"ws", "wss"} {
			t.Run(tc.group+"/"+up, func(t *testing.T) {
				g, _, _ := tc.start(t, up, plainFront)
				ek, _ := mint(t, g, testMasterKey, map[string]any{"session": map[string]any{"type": "realtime",
					"model": tc.group, "instructions": "From the secret."}})
				c, resp, err := dialSecret(t, g, ek, "model="+tc.group)
				if err != nil {
					t.Fatalf("dial with the secret: %v (%v)", err, resp)
				}
				first := read(t, c)
				if first.typ() != "session.created" || first.str("session", "instructions") != "From the secret." {
					t.Fatalf("first event %v, want session.created with the secret's instructions", first)
				}
				send(t, c, map[string]any{"type": "conversation.item.create", "item": map[string]any{"type": "message", "role": "user",
					"content": []any{map[string]any{"type": "input_text", "text": "hello"}}}})
				send(t, c, map[string]any{"type": "response.create"})
				events := eventsUntil(t, c, "response.done")
				for _, e := range events {
					if e.typ() == "error" {
						t.Fatalf("error event %v", e)
					}
				}
				if done := events[len(events)-1]; done.str("response", "status") != "completed" {
					t.Fatalf("response.done %v", done)
				}
				_ = c.Close()
			})
		}
	}
}

// vertexKeyFile writes a service-account key file whose token endpoint is
// a loopback fake answering every JWT-bearer grant with access token tok,
// and returns its path.
func vertexKeyFile(t *testing.T, tok string) string {
	t.Helper()
	tokens := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ParseForm() != nil || r.PostForm.Get("grant_type") != "urn:ietf:params:oauth:grant-type:jwt-bearer" {
			http.Error(w, `{"error":"unsupported_grant_type"}`, http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"access_token":"` + tok + `","expires_in":3600,"token_type":"Bearer"}`))
	}))
	t.Cleanup(tokens.Close)
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	data, _ := json.Marshal(map[string]string{"type": "service_account", "project_id": "proj-1", "private_key_id": "k1",
		"client_email": "gw@proj-1.iam.gserviceaccount.com", "token_uri": tokens.URL,
		"private_key": string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}))})
	path := filepath.Join(t.TempDir(), "sa.json")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestVertexBehindTheRealtimeAPI: a vertex_ai/ deployment (ws and wss
// upstream) is dialed at Vertex AI's Live path with the access token its
// service-account key earns (from a loopback token endpoint), names its
// model as Vertex's resource in the setup, and answers a Realtime client's
// turn; a token the upstream refuses reaches the client as an error event
// and the upstream's close, never silence.
func TestVertexBehindTheRealtimeAPI(t *testing.T) {
	for _, up := range []string{"ws", "wss"} {
		for _, tc := range []struct {
			name, token string
			works       bool
		}{{"token accepted", "tok-good", true}, {"token refused", "tok-stale", false}} {
			t.Run(up+"/"+tc.name, func(t *testing.T) {
				mock, roots := mockaiOver(t, up, "-key", "tok-good")
				path := writeConfig(t, `model_list:
  - model_name: vertex-voice
    litellm_params:
      model: vertex_ai/gemini-3.8-live
      vertex_location: us-central1
      vertex_credentials: `+vertexKeyFile(t, tc.token)+`
      api_base: `+strings.TrimSuffix(mock.baseURL, "/v1")+configTail)
				g := startGateway(t, nil, func(c *Settings) { c.RoutesFile, c.UpstreamRoots = path, roots })
				c := g.dial(t, "model=vertex-voice", bearer(testMasterKey))
				if e := read(t, c); e.typ() != "session.created" {
					t.Fatalf("first event %v", e)
				}
				send(t, c, map[string]any{"type": "conversation.item.create", "item": map[string]any{"type": "message", "role": "user",
					"content": []any{map[string]any{"type": "input_text", "text": "hello"}}}})
				send(t, c, map[string]any{"type": "response.create"})
				if !tc.works {
					e := eventsUntil(t, c, "error")
					if last := e[len(e)-1]; last.str("error", "code") != "upstream_closed" || !strings.Contains(last.str("error", "message"), "1008") {
						t.Fatalf("error event %v, want upstream_closed naming Vertex's 1008", last)
					}
					if ce := closeOf(t, c); ce == nil || ce.Code != 1008 {
						t.Fatalf("close %v, want Vertex's 1008", ce)
					}
					return
				}
				if done := eventsUntil(t, c, "response.done"); done[len(done)-1].str("response", "status") != "completed" {
					t.Fatalf("response.done %v", done[len(done)-1])
				}
				_ = c.Close()
				var sessions []struct{ API, Auth, Model string }
				getJSON(t, strings.TrimSuffix(mock.baseURL, "/v1")+"/mock/gemini/sessions", roots, &sessions)
				if len(sessions) != 1 || sessions[0].API != "vertex" || sessions[0].Auth != "bearer" ||
					sessions[0].Model != "projects/proj-1/locations/us-central1/publishers/google/models/gemini-3.8-live" {
					t.Fatalf("mockai saw %+v", sessions)
				}
			})
		}
	}
}

// getJSON decodes a GET of url (ws:// and wss:// read as http:// and
// https://, trusting roots) into v.
func getJSON(t *testing.T, url string, roots *x509.CertPool, v any) {
	t.Helper()
	url = strings.Replace(strings.Replace(url, "wss://", "https://", 1), "ws://", "http://", 1)
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}}}
	resp, err := client.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
}

// TestXAISessionResumes: an xAI upstream lost between turns is replaced by a
// fresh one (xAI opens with conversation.created, not session.created) and
// the client's session goes on: it is told with rtgate.session.resumed, and
// its next turn is answered on the same socket.
func TestXAISessionResumes(t *testing.T) {
	for _, up := range []string{"ws", "wss"} {
		t.Run(up, func(t *testing.T) {
			g, _, _ := xaiGatewayOn(t, up, []string{"-cut", "drop", "-cut-after", "1", "-cut-times", "1"}, plainFront)
			c := g.dial(t, "model=grok-voice", bearer(testMasterKey))
			if e := read(t, c); e.typ() != "session.created" {
				t.Fatalf("first event %v", e)
			}
			send(t, c, map[string]any{"type": "response.create"})
			eventsUntil(t, c, "response.done")
			eventsUntil(t, c, "rtgate.session.resumed")
			send(t, c, map[string]any{"type": "response.create"})
			if done := eventsUntil(t, c, "response.done"); done[len(done)-1].str("response", "status") != "completed" {
				t.Fatalf("the turn after the resume ended %v", done[len(done)-1])
			}
			_ = c.Close()
		})
	}
}

// TestXAIMinutesCountAgainstBudgets: an xAI session's connection time is
// booked against its key's budget as it runs (at each response) and at its
// end, so that a key on a budget cannot talk to xAI without limit: a
// session past the budget ends after its response with budget_exceeded,
// and the key's next connect is refused with 429.
func TestXAIMinutesCountAgainstBudgets(t *testing.T) {
	t.Setenv("TEAM_X_KEY", "sk-team-x-test")
	mock, _ := mockaiOver(t, "ws")
	path := writeConfig(t, `model_list:
  - model_name: grok-voice
    litellm_params:
      model: xai/grok-voice-latest
      api_base: `+strings.TrimSuffix(mock.baseURL, "/v1")+`/xai/v1
      api_key: os.environ/RTGATE_TEST_UPSTREAM
keys:
  - name: team-x
    key: os.environ/TEAM_X_KEY
    max_budget: 0.001
    budget_duration: 30d
`+configTail) // $0.001 is 1.2 s of xAI at $0.05 a minute
	dir := t.TempDir()
	g := startGateway(t, nil, func(c *Settings) {
		c.RoutesFile, c.UsageLog, c.SpendState = path, filepath.Join(dir, "usage.jsonl"), filepath.Join(dir, "budgets.json")
	})
	c := g.dial(t, "model=grok-voice", bearer("sk-team-x-test"))
	read(t, c)
	send(t, c, map[string]any{"type": "response.create"})
	eventsUntil(t, c, "response.done") // well under a second: under the budget
	time.Sleep(1500 * time.Millisecond)
	send(t, c, map[string]any{"type": "response.create"})
	eventsUntil(t, c, "response.done") // books the 1.5 s: over
	if e := eventsUntil(t, c, "error"); e[len(e)-1].str("error", "code") != "budget_exceeded" {
		t.Fatalf("after the response that crossed the budget: %v", e[len(e)-1])
	}
	if ce := closeOf(t, c); ce == nil || ce.Code != 1008 {
		t.Fatalf("close %v, want 1008", ce)
	}
	waitFor(t, "the session to end", func() bool { return g.srv.SessionsOpen() == 0 })
	if spent := budgetSpent(t, g, "team-x"); spent < 0.00125 {
		t.Fatalf("team-x spent %v USD, want at least the 1.5 s booked (0.00125)", spent)
	}
	_, resp, err := dialer().Dial(g.url("model=grok-voice"), bearer("sk-team-x-test"))
	if err == nil || resp == nil || resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("a key over its budget: %v (%v), want 429", err, resp)
	}
}

// TestGeminiRefusesTranscriptionSessions: a transcription session for a
// group only Gemini serves is refused with an error event naming why,
// rather than sent to Gemini untranslated.
func TestGeminiRefusesTranscriptionSessions(t *testing.T) {
	g, _, _ := geminiGateway(t, "ws", plainFront)
	c := g.dial(t, "model=gemini-voice&intent=transcription", bearer(testMasterKey))
	if e := read(t, c); e.typ() != "error" || e.str("error", "code") != "unsupported_for_provider" {
		t.Fatalf("first event %v, want an unsupported_for_provider error", e)
	}
	if ce := closeOf(t, c); ce == nil {
		t.Fatal("the session stayed open")
	}
}

// TestGeminiTokensCountAgainstBudgets: a Gemini session's usage, translated
// into response.done's usage, is booked against its key's budget at
// Gemini's audio and text prices like an OpenAI session's: the response
// that crosses the budget ends the session with budget_exceeded, and the
// key's next connect is refused with 429.
func TestGeminiTokensCountAgainstBudgets(t *testing.T) {
	t.Setenv("TEAM_G_KEY", "sk-team-g-test")
	mock, _ := mockaiOver(t, "ws", "-deltas", "5", "-delta-interval", "10ms")
	path := writeConfig(t, `model_list:
  - model_name: gemini-voice
    litellm_params:
      model: gemini/gemini-3.8-live
      api_base: `+strings.TrimSuffix(mock.baseURL, "/v1")+`
      api_key: os.environ/RTGATE_TEST_UPSTREAM
    model_info:
      input_cost_per_token: 0.0000005
      input_cost_per_audio_token: 0.000003
      output_cost_per_token: 0.000002
      output_cost_per_audio_token: 0.000012
keys:
  - name: team-g
    key: os.environ/TEAM_G_KEY
    max_budget: 0.0004
    budget_duration: 30d
`+configTail)
	dir := t.TempDir()
	g := startGateway(t, nil, func(c *Settings) {
		c.RoutesFile, c.UsageLog, c.SpendState = path, filepath.Join(dir, "usage.jsonl"), filepath.Join(dir, "budgets.json")
	})
	c := g.dial(t, "model=gemini-voice", bearer("sk-team-g-test"))
	read(t, c)
	var spent []float64
	for turn := 0; ; turn++ {
		if turn == 20 {
			t.Fatalf("20 responses and the budget never ended the session; spent %v", spent)
		}
		send(t, c, map[string]any{"type": "conversation.item.create", "item": map[string]any{"type": "message", "role": "user",
			"content": []any{map[string]any{"type": "input_text", "text": "hello"}}}})
		send(t, c, map[string]any{"type": "response.create"})
		events := eventsUntil(t, c, "response.done")
		if out, _ := events[len(events)-1]["response"].(map[string]any)["usage"].(map[string]any)["output_tokens"].(float64); out == 0 {
			t.Fatalf("response.done without output tokens: %v", events[len(events)-1])
		}
		spent = append(spent, budgetSpent(t, g, "team-g"))
		if spent[len(spent)-1] >= 0.0004 {
			break
		}
	}
	if e := eventsUntil(t, c, "error"); e[len(e)-1].str("error", "code") != "budget_exceeded" {
		t.Fatalf("after the response that crossed the budget: %v", e[len(e)-1])
	}
	if ce := closeOf(t, c); ce == nil || ce.Code != 1008 {
		t.Fatalf("close %v, want 1008", ce)
	}
	if len(spent) < 2 || spent[0] <= 0 || spent[1] <= spent[0] {
		t.Fatalf("spend after each response %v: want it to grow with each Gemini turn", spent)
	}
	_, resp, err := dialer().Dial(g.url("model=gemini-voice"), bearer("sk-team-g-test"))
	if err == nil || resp == nil || resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("a key over its budget: %v (%v), want 429", err, resp)
	}
}

// TestProvidersInPostgres: an xAI session and a Gemini session land in the
// spend log's session_usage as their usage log lines say: the xAI one with
// its seconds and their cost at $0.05 a minute, the Gemini one with its
// tokens and their cost at the deployment's prices.
func TestProvidersInPostgres(t *testing.T) {
	pg := pgtest.Start(t)
	mock, _ := mockaiOver(t, "ws", "-deltas", "5", "-delta-interval", "10ms")
	root := strings.TrimSuffix(mock.baseURL, "/v1")
	path := writeConfig(t, `model_list:
  - model_name: grok-voice
    litellm_params:
      model: xai/grok-voice-latest
      api_base: `+root+`/xai/v1
      api_key: os.environ/RTGATE_TEST_UPSTREAM
  - model_name: gemini-voice
    litellm_params:
      model: gemini/gemini-3.8-live
      api_base: `+root+`
      api_key: os.environ/RTGATE_TEST_UPSTREAM
    model_info:
      input_cost_per_token: 0.0000005
      output_cost_per_audio_token: 0.000012`+configTail)
	logPath := filepath.Join(t.TempDir(), "usage.jsonl")
	g := startGateway(t, nil, func(c *Settings) { c.RoutesFile, c.UsageLog, c.DatabaseURL = path, logPath, pg.URL })
	for _, group := range []string{"grok-voice", "gemini-voice"} {
		c := g.dial(t, "model="+group, bearer(testMasterKey))
		read(t, c)
		send(t, c, map[string]any{"type": "conversation.item.create", "item": map[string]any{"type": "message", "role": "user",
			"content": []any{map[string]any{"type": "input_text", "text": "hello"}}}})
		send(t, c, map[string]any{"type": "response.create"})
		eventsUntil(t, c, "response.done")
		_ = c.WriteMessage(websocket.CloseMessage, websocket.FormatCloseMessage(1000, ""))
		closeOf(t, c)
	}
	recs := waitRecords(t, logPath, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := g.srv.Shutdown(ctx); err != nil { // flushes the spend log
		t.Fatal(err)
	}
	for _, rec := range recs {
		var group string
		var seconds, cost float64
		var out int64
		err := pg.Conn(t).QueryRow(context.Background(), `SELECT model_group, seconds, output_tokens, cost_usd
			FROM session_usage WHERE session_id = $1`, rec.SessionID).Scan(&group, &seconds, &out, &cost)
		if err != nil {
			t.Fatalf("session %s (%s): %v", rec.SessionID, rec.ModelGroup, err)
		}
		if group != rec.ModelGroup || seconds != rec.Seconds || out != rec.Usage.OutputTokens || cost != rec.CostUSD || cost <= 0 {
			t.Fatalf("row %s: %v s, %d output tokens, %v USD; log line: %v s, %d, %v USD", group, seconds, out, cost,
				rec.Seconds, rec.Usage.OutputTokens, rec.CostUSD)
		}
		switch group {
		case "grok-voice":
			if math.Abs(cost-seconds*0.05/60) > 1e-12 || seconds <= 0 {
				t.Fatalf("xAI row: %v s at %v USD, want $0.05 a minute", seconds, cost)
			}
		case "gemini-voice":
			if out == 0 || seconds != 0 {
				t.Fatalf("Gemini row: %d output tokens, %v s: want tokens, not time", out, seconds)
			}
		}
	}
}

// TestGeminiSessionMovesAtGoAway: Gemini announces the end of a connection
// (goAway, then a 1011 once its time left has passed, as Google does at a
// connection's ten minutes). The gateway moves the client's session to a
// new connection at once, the newest resumption handle in its setup, and
// the client's socket stays open: it is told with rtgate.session.resumed
// (cause rollover), never sees an error, and its next turn is answered on
// the same socket by the resumed Gemini session. A session that has said
// nothing yet moves with a setup and no handle (there is nothing to carry).
// Over ws:// and wss:// upstreams.
func TestGeminiSessionMovesAtGoAway(t *testing.T) {
	for _, up := range []string{"ws", "wss"} {
		for _, talked := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/talked=%v", up, talked), func(t *testing.T) {
				g, _, logPath, mock, roots := geminiGatewayOn(t, up,
					[]string{"-gemini-go-away-after", "1500ms", "-gemini-go-away-time-left", "1s"}, plainFront)
				c := g.dial(t, "model=gemini-voice", bearer(testMasterKey))
				if e := read(t, c); e.typ() != "session.created" {
					t.Fatalf("first event %v", e)
				}
				send(t, c, map[string]any{"type": "session.update", "session": map[string]any{"type": "realtime", "instructions": "Be brief."}})
				eventsUntil(t, c, "session.updated")
				turn := func() []event {
					send(t, c, map[string]any{"type": "conversation.item.create", "item": map[string]any{"type": "message", "role": "user",
						"content": []any{map[string]any{"type": "input_text", "text": "hello"}}}})
					send(t, c, map[string]any{"type": "response.create"})
					return eventsUntil(t, c, "response.done")
				}
				var seen []event
				if talked {
					seen = append(seen, turn()...)
				}
				moved := eventsUntil(t, c, "rtgate.session.resumed")
				seen = append(seen, moved...)
				if r := moved[len(moved)-1]; r.str("cause") != "rollover" {
					t.Fatalf("resumed %v, want cause rollover", r)
				}
				after := turn()
				seen = append(seen, after...)
				if done := after[len(after)-1]; done.str("response", "status") != "completed" {
					t.Fatalf("the turn after the move ended %v", done)
				}
				for _, e := range seen {
					if e.typ() == "error" {
						t.Fatalf("the client got an error event: %v", e)
					}
				}
				// What mockai tells of each Gemini connection.
				type geminiConn struct {
					ID          string          `json:"id"`
					ResumedFrom string          `json:"resumed_from"`
					LastHandle  string          `json:"last_handle"`
					Setup       json.RawMessage `json:"setup"`
					GoAway      bool            `json:"go_away"`
					At          time.Time       `json:"at"`
				}
				var sessions []geminiConn
				getJSON(t, strings.TrimSuffix(mock.baseURL, "/v1")+"/mock/gemini/sessions", roots, &sessions)
				if len(sessions) < 2 {
					t.Fatalf("mockai saw %d Gemini connections, want the first and the one the session moved to", len(sessions))
				}
				slices.SortFunc(sessions, func(a, b geminiConn) int { return a.At.Compare(b.At) })
				first, second := sessions[0], sessions[1]
				var setup struct {
					SessionResumption struct {
						Handle string `json:"handle"`
					} `json:"sessionResumption"`
					SystemInstruction struct {
						Parts []struct{ Text string } `json:"parts"`
					} `json:"systemInstruction"`
				}
				_ = json.Unmarshal(second.Setup, &setup)
				if len(setup.SystemInstruction.Parts) == 0 || setup.SystemInstruction.Parts[0].Text != "Be brief." {
					t.Fatalf("the new connection's setup %s lost the session's instructions", second.Setup)
				}
				switch {
				case !first.GoAway:
					t.Fatalf("the first connection %+v had no goAway", first)
				case talked && (second.ResumedFrom != first.ID || setup.SessionResumption.Handle != first.LastHandle):
					t.Fatalf("the new connection resumed %q with handle %q, want %q with the first's newest %q",
						second.ResumedFrom, setup.SessionResumption.Handle, first.ID, first.LastHandle)
				case !talked && (second.ResumedFrom != "" || setup.SessionResumption.Handle != ""):
					t.Fatalf("a session that had said nothing resumed %q with handle %q, want a plain setup", second.ResumedFrom, setup.SessionResumption.Handle)
				}
				_ = c.Close()
				waitFor(t, "the session to end", func() bool { return g.srv.SessionsOpen() == 0 })
				rec := oneRecord(t, g, logPath)
				if len(rec.Resumes) == 0 || rec.Resumes[0].Cause != "rollover" || rec.Resumes[0].Outcome != "ok" || rec.UpstreamSessions < 2 {
					t.Fatalf("the record's resumes %+v, upstream sessions %d: want the move, ok", rec.Resumes, rec.UpstreamSessions)
				}
				t.Logf("the move to a new Gemini connection took %d ms (%s upstream)", rec.Resumes[0].DurationMS, up)
			})
		}
	}
}

// TestGeminiGoAwayWithoutContinuity: with continuity off for the key
// (SESSION_CONTINUITY=0 here), a Gemini session ends when Gemini closes the
// connection after its goAway: the client gets an error event naming
// Gemini's close, then that close (1011), and is not moved.
func TestGeminiGoAwayWithoutContinuity(t *testing.T) {
	g, _, _, _, _ := geminiGatewayOn(t, "ws", []string{"-gemini-go-away-after", "500ms", "-gemini-go-away-time-left", "300ms"},
		plainFront, func(c *Settings) { c.Continuity = false })
	c := g.dial(t, "model=gemini-voice", bearer(testMasterKey))
	if e := read(t, c); e.typ() != "session.created" {
		t.Fatalf("first event %v", e)
	}
	send(t, c, map[string]any{"type": "session.update", "session": map[string]any{"type": "realtime", "instructions": "Be brief."}})
	got := eventsUntil(t, c, "error")
	for _, e := range got {
		if e.typ() == "rtgate.session.resumed" {
			t.Fatalf("moved without continuity: %v", e)
		}
	}
	if last := got[len(got)-1]; last.str("error", "code") != "upstream_closed" || !strings.Contains(last.str("error", "message"), "1011") {
		t.Fatalf("error event %v, want upstream_closed naming Gemini's 1011", last)
	}
	if ce := closeOf(t, c); ce == nil || ce.Code != 1011 {
		t.Fatalf("close %v, want Gemini's 1011", ce)
	}
}
