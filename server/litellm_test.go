package server

import (
	"encoding/json"
	"net/http"
	"testing"

	"rtgate/mockai"
)

// TestLiteLLMConfigServed loads a LiteLLM proxy config with realtime and
// non-realtime entries and LiteLLM's tuning fields, and serves the realtime
// group: organization reaches the upstream as OpenAI-Organization,
// max_parallel_requests caps live sessions and rpm the connect rate, both
// refused before the upgrade with 429 and Retry-After.
func TestLiteLLMConfigServed(t *testing.T) {
	m := startMock(t, mockai.Config{})
	path := writeConfig(t, `model_list:
  - model_name: claude
    litellm_params:
      model: anthropic/claude-3-5-sonnet-20241022
      api_key: os.environ/ANTHROPIC_API_KEY
  - model_name: embeddings
    litellm_params: {model: openai/text-embedding-3-small}
    model_info: {mode: embedding}
  - model_name: gpt-realtime
    litellm_params:
      model: openai/gpt-realtime
      api_base: `+m.BaseURL()+`
      api_key: os.environ/RTGATE_TEST_UPSTREAM
      organization: org-rtgate-test
      max_parallel_requests: 2
      timeout: 600
      tpm: 100000
      max_retries: 3
  - model_name: slow
    litellm_params:
      model: openai/gpt-realtime
      api_base: `+m.BaseURL()+`
      api_key: os.environ/RTGATE_TEST_UPSTREAM
      organization: org-rtgate-test
      rpm: 6
router_settings:
  routing_strategy: simple-shuffle
litellm_settings:
  drop_params: true
`+configTail)
	g := startGateway(t, nil, func(c *Settings) { c.RoutesFile = path })
	refusal := func(group, want string) {
		t.Helper()
		_, resp, err := dialer().Dial(g.url("model="+group), bearer(testMasterKey))
		if err == nil || resp == nil || resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" {
			t.Fatalf("connect: %v (%v), want 429 with Retry-After", err, resp)
		}
		defer resp.Body.Close()
		var body struct{ Error struct{ Code string } }
		if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
			t.Fatal(err)
		}
		if body.Error.Code != want {
			t.Fatalf("code %q, want %q", body.Error.Code, want)
		}
	}

	a := g.dial(t, "model=gpt-realtime", bearer(testMasterKey))
	b := g.dial(t, "model=gpt-realtime", bearer(testMasterKey))
	if e := read(t, a); e.typ() != "session.created" {
		t.Fatalf("got %v", e)
	}
	read(t, b)
	refusal("gpt-realtime", "deployment_at_capacity") // max_parallel_requests: 2
	_ = a.Close()
	waitFor(t, "a session to end", func() bool { return g.srv.SessionsOpen() == 1 })
	c := g.dial(t, "model=gpt-realtime", bearer(testMasterKey)) // a slot again
	read(t, c)
	_ = b.Close()
	_ = c.Close()

	// rpm 6: one connect now, the next in 10 s.
	d := g.dial(t, "model=slow", bearer(testMasterKey))
	read(t, d)
	_ = d.Close()
	refusal("slow", "deployment_rate_limited")
	waitFor(t, "the sessions to end", func() bool { return g.srv.SessionsOpen() == 0 })

	for _, r := range m.Records() {
		if r.Header.Get("OpenAI-Organization") != "org-rtgate-test" {
			t.Fatalf("upstream connect without the deployment's organization: %v", r.Header)
		}
	}
	if len(m.Records()) != 4 {
		t.Fatalf("mockai saw %d connects, want 4", len(m.Records()))
	}
	if _, resp, err := dialer().Dial(g.url("model=claude"), bearer(testMasterKey)); err == nil || resp.StatusCode != http.StatusNotFound {
		t.Fatalf("a model that is not served: %v, want 404", err)
	}
}
