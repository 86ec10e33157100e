package guardrail

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"
)

const testKey = "sk-guard-7f3a9c1e"

// fakeService is a Generic Guardrail API on loopback that records what it
// was sent and answers with its handler.
type fakeService struct {
	*httptest.Server
	mu      sync.Mutex
	path    string
	header  http.Header
	body    []byte
	calls   int
	respond func(w http.ResponseWriter, r *http.Request)
}

func newFakeService(t *testing.T, respond func(w http.ResponseWriter, r *http.Request)) *fakeService {
	t.Helper()
	f := &fakeService{respond: respond}
	f.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		f.mu.Lock()
		f.path, f.header, f.body = r.URL.Path, r.Header.Clone(), body
		f.calls++
		f.mu.Unlock()
		f.respond(w, r)
	}))
	t.Cleanup(f.Close)
	return f
}

func answer(body string) func(w http.ResponseWriter, r *http.Request) {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, body)
	}
}

func apiSpec(base string) Spec {
	return Spec{Name: "vendor", Kind: GenericAPI, Modes: []Mode{InputTranscription, ToolCall},
		APIBase: base, APIKey: testKey,
		Headers:          map[string]string{"X-Tenant": "acme"},
		AdditionalParams: map[string]any{"threshold": 0.8, "language": "en"}}
}

func TestGenericAPIRequest(t *testing.T) {
	tests := []struct {
		name string
		base string // appended to the server's URL
		in   Input
		want map[string]any
	}{
		{
			name: "input transcript",
			in: Input{Mode: InputTranscription, Texts: []string{"hello there"}, CallID: "sess_1",
				KeyAlias: "team-a", Model: "gpt-realtime"},
			want: map[string]any{
				"input_type": "request", "litellm_call_id": "sess_1", "litellm_trace_id": "sess_1",
				"texts":                               []any{"hello there"},
				"request_data":                        map[string]any{"user_api_key_alias": "team-a"},
				"additional_provider_specific_params": map[string]any{"threshold": 0.8, "language": "en"},
				"model":                               "gpt-realtime",
			},
		},
		{
			name: "tool call, base already has the path",
			base: "/beta/litellm_basic_guardrail_api",
			in: Input{Mode: ToolCall, Response: true, CallID: "sess_2", TraceID: "trace_9",
				ToolCalls: []FunctionCall{{ID: "call_1", Name: "get_weather", Arguments: `{"city":"Paris"}`}}},
			want: map[string]any{
				"input_type": "response", "litellm_call_id": "sess_2", "litellm_trace_id": "trace_9",
				"texts": []any{},
				"tool_calls": []any{map[string]any{"id": "call_1", "type": "function",
					"function": map[string]any{"name": "get_weather", "arguments": `{"city":"Paris"}`}}},
				"request_data":                        map[string]any{},
				"additional_provider_specific_params": map[string]any{"threshold": 0.8, "language": "en"},
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			svc := newFakeService(t, answer(`{"action":"NONE"}`))
			g := mustNew(t, apiSpec(svc.URL+tc.base+"/"))
			if v := g.Check(context.Background(), tc.in); !reflect.DeepEqual(v, Verdict{Guardrail: "vendor"}) {
				t.Fatalf("verdict %+v, want a pass", v)
			}
			svc.mu.Lock()
			defer svc.mu.Unlock()
			if svc.path != "/beta/litellm_basic_guardrail_api" {
				t.Errorf("path %q", svc.path)
			}
			var got map[string]any
			if err := json.Unmarshal(svc.body, &got); err != nil {
				t.Fatalf("body is not JSON: %v", err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("body\n got %v\nwant %v", got, tc.want)
			}
			for k, want := range map[string]string{"Content-Type": "application/json", "X-Tenant": "acme", "X-Api-Key": testKey} {
				if v := svc.header.Get(k); v != want {
					t.Errorf("header %s: got %d bytes, want %d", k, len(v), len(want))
				}
			}
		})
	}
}

func TestGenericAPIActions(t *testing.T) {
	tests := []struct {
		name   string
		answer string
		want   Verdict
	}{
		{"blocked", `{"action":"BLOCKED","blocked_reason":"prompt injection"}`,
			Verdict{Blocked: true, Guardrail: "vendor", Reason: "prompt injection"}},
		{"blocked without reason", `{"action":"BLOCKED"}`,
			Verdict{Blocked: true, Guardrail: "vendor", Reason: "blocked by the guardrail service"}},
		{"blocked lower case", `{"action":"blocked","blocked_reason":"pii"}`,
			Verdict{Blocked: true, Guardrail: "vendor", Reason: "pii"}},
		{"none", `{"action":"NONE"}`, Verdict{Guardrail: "vendor"}},
		{"none with extra fields", `{"action":"NONE","score":0.1,"blocked_reason":null}`, Verdict{Guardrail: "vendor"}},
		{"intervened", `{"action":"GUARDRAIL_INTERVENED","texts":["my card is [REDACTED]"]}`,
			Verdict{Guardrail: "vendor", Intervened: true, Texts: []string{"my card is [REDACTED]"}}},
		// Fail closed (the spec's default): what the service did not say
		// clearly blocks.
		{"unknown action", `{"action":"ALLOW"}`,
			Verdict{Blocked: true, Errored: true, Guardrail: "vendor", Reason: `guardrail service answered unknown action "ALLOW"`}},
		{"no action", `{"blocked_reason":"x"}`,
			Verdict{Blocked: true, Errored: true, Guardrail: "vendor", Reason: `guardrail service's answer has no "action"`}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			svc := newFakeService(t, answer(tc.answer))
			g := mustNew(t, apiSpec(svc.URL))
			v := g.Check(context.Background(), Input{Mode: InputTranscription, Texts: []string{"hi"}})
			if !reflect.DeepEqual(v, tc.want) {
				t.Fatalf("got %+v, want %+v", v, tc.want)
			}
		})
	}
}

func TestGenericAPIErrors(t *testing.T) {
	hang := func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() }
	tests := []struct {
		name    string
		respond func(w http.ResponseWriter, r *http.Request)
		reason  string // a part of the verdict's reason
		timeout time.Duration
	}{
		{"HTTP 500", func(w http.ResponseWriter, r *http.Request) {
			http.Error(w, "internal error, your key was "+r.Header.Get("x-api-key"), http.StatusInternalServerError)
		}, "HTTP 500", 0},
		{"timeout", hang, "timed out after 50ms", 50 * time.Millisecond},
		{"not JSON", answer(`<html>hello</html>`), "not Generic Guardrail API JSON", 0},
		{"too long", answer(`{"action":"NONE","texts":["` + strings.Repeat("a", MaxResponseBytes) + `"]}`),
			"over 1048576 bytes", 0},
		{"redirect", func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, "http://127.0.0.1:1/elsewhere", http.StatusTemporaryRedirect)
		}, "HTTP 307", 0},
	}
	for _, tc := range tests {
		for _, failOpen := range []bool{false, true} {
			name := tc.name + "/fail_closed"
			if failOpen {
				name = tc.name + "/fail_open"
			}
			t.Run(name, func(t *testing.T) {
				svc := newFakeService(t, tc.respond)
				s := apiSpec(svc.URL)
				s.FailOpen, s.Timeout = failOpen, tc.timeout // 0: the default
				g := mustNew(t, s)
				v := g.Check(context.Background(), Input{Mode: InputTranscription, Texts: []string{"hi"}})
				if !v.Errored || v.Blocked == failOpen || v.Guardrail != "vendor" {
					t.Fatalf("got blocked=%v errored=%v guardrail=%q; want errored, blocked=%v",
						v.Blocked, v.Errored, v.Guardrail, !failOpen)
				}
				if strings.Contains(v.Reason, testKey) {
					t.Fatal("the reason holds the API key")
				}
				if !strings.Contains(v.Reason, tc.reason) {
					t.Fatalf("reason %q does not say %q", v.Reason, tc.reason)
				}
			})
		}
	}
}

// TestGenericAPIKeyNotInErrors: the key (and a token in api_base) stay out
// of every error a check or New can give.
func TestGenericAPIKeyNotInErrors(t *testing.T) {
	svc := newFakeService(t, answer(`{"action":"NONE"}`))
	base := svc.URL
	svc.Close() // nothing listens there now: connection refused
	withToken := strings.Replace(base, "http://", "http://user:"+testKey+"@", 1) + "/?token=" + testKey
	g := mustNew(t, apiSpec(withToken))
	v := g.Check(context.Background(), Input{Texts: []string{"hi"}})
	if !v.Errored || !v.Blocked {
		t.Fatalf("got blocked=%v errored=%v, want a fail-closed error", v.Blocked, v.Errored)
	}
	if strings.Contains(v.Reason, testKey) {
		t.Fatal("the reason holds the API key")
	}
	for _, s := range []Spec{
		func() Spec { s := apiSpec("http://host:bad" + testKey); return s }(),
		func() Spec { s := apiSpec("ftp://x/?k=" + testKey); return s }(),
		func() Spec { s := apiSpec(base); s.Headers = map[string]string{"Bad Name": testKey}; return s }(),
		func() Spec { s := apiSpec(base); s.Headers = map[string]string{"X-K": testKey + "\r\n"}; return s }(),
		func() Spec { s := apiSpec(base); s.APIKey = testKey + "\n"; return s }(),
	} {
		_, err := New(s, nil)
		if err == nil {
			t.Fatal("New accepted a bad spec")
		}
		if strings.Contains(err.Error(), testKey) {
			t.Fatal("New's error holds the API key")
		}
	}
	spec := g.Spec()
	for _, printed := range []string{spec.String(), spec.GoString(), spec.LogValue().String()} {
		if strings.Contains(printed, testKey) {
			t.Fatal("a printed Spec holds the API key")
		}
		if !strings.Contains(printed, "vendor") {
			t.Fatalf("a printed Spec lacks its name: %s", printed)
		}
	}
}
