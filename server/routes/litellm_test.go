package routes

import (
	"strings"
	"testing"
)

// realisticLiteLLM is a LiteLLM proxy config.yaml as teams write them: chat,
// embedding and realtime models from several providers, LiteLLM's tuning
// fields on each, router_settings, litellm_settings and general_settings.
const realisticLiteLLM = `model_list:
  - model_name: gpt-4o
    litellm_params:
      model: openai/gpt-4o
      api_key: os.environ/OPENAI_KEY
      rpm: 10000
      tpm: 2000000
      timeout: 600
      stream_timeout: 60
      max_retries: 2
  - model_name: claude-sonnet
    litellm_params:
      model: anthropic/claude-3-5-sonnet-20241022
      api_key: os.environ/ANTHROPIC_KEY_NOT_SET
  - model_name: titan
    litellm_params:
      model: bedrock/amazon.titan-text-express-v1
      aws_region_name: us-east-1
  - model_name: text-embedding-3-small
    litellm_params:
      model: openai/text-embedding-3-small
      api_key: os.environ/OPENAI_KEY
    model_info:
      mode: embedding
  - model_name: gpt-realtime
    litellm_params:
      model: openai/gpt-realtime
      api_key: os.environ/OPENAI_KEY
      organization: org-rtgate-test
      rpm: 120
      max_parallel_requests: 50
      timeout: 600
      tpm: 100000
    model_info:
      mode: realtime
      id: rt-primary
  - model_name: gpt-realtime
    litellm_params:
      model: azure/realtime-eu
      api_base: os.environ/AZURE_BASE
      api_key: os.environ/AZURE_KEY
      api_version: os.environ/AZURE_VERSION
      region_name: swedencentral
      stream_timeout: 30
    model_info:
      base_model: gpt-realtime
router_settings:
  routing_strategy: usage-based-routing-v2
  redis_host: os.environ/REDIS_HOST
  num_retries: 2
  timeout: 30
litellm_settings:
  drop_params: true
  success_callback: ["langfuse"]
  request_timeout: 600
general_settings:
  master_key: os.environ/MASTER
  database_url: os.environ/DATABASE_URL
  alerting: ["slack"]
  proxy_batch_write_at: 60
`

func TestRealisticLiteLLMConfig(t *testing.T) {
	env := map[string]string{}
	for k, v := range configEnv {
		env[k] = v
	}
	// Entries not served are not checked further (their providers have
	// fields of their own, aws_region_name here, and keys that are not set).
	r, err := loadConfig(t, realisticLiteLLM, env)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	// Served: the realtime group on both clouds, and gpt-4o (an openai/
	// entry: it would fail upstream like any model without a realtime API).
	if n := len(r.Groups["gpt-realtime"]); n != 2 {
		t.Fatalf("gpt-realtime has %d deployments, want 2", n)
	}
	for _, g := range []string{"claude-sonnet", "titan", "text-embedding-3-small"} {
		if _, ok := r.Groups[g]; ok {
			t.Errorf("%s is served", g)
		}
	}
	if _, ok := r.Groups["gpt-4o"]; !ok {
		t.Errorf("gpt-4o is not loaded")
	}
	oa, az := r.Groups["gpt-realtime"][0], r.Groups["gpt-realtime"][1]
	if oa.RPM != 120 || oa.MaxSessions != 50 {
		t.Errorf("rpm %v, max_parallel_requests %v; want 120, 50", oa.RPM, oa.MaxSessions)
	}
	_, oaHeader := oa.Address(nil)
	if got := oaHeader.Get("OpenAI-Organization"); got != "org-rtgate-test" {
		t.Errorf("OpenAI-Organization %q", got)
	}
	if !az.Priced || az.Prices != oa.Prices {
		t.Errorf("the Azure deployment with base_model gpt-realtime is priced %+v, want gpt-realtime's", az.Prices)
	}
	notices := strings.Join(r.Notices, "\n")
	for _, want := range []string{
		"LiteLLM fields accepted and ignored", "timeout (line 8, 32)", "router_settings.redis_host (line 49)", "stream_timeout (line 9, 44)",
		"max_retries (line 10)", "region_name (line 43)", "database_url (line 58)", "alerting (line 59)",
		"not served: claude-sonnet (model_list[1]: anthropic/", "titan (model_list[2]: bedrock/",
		"text-embedding-3-small (model_list[3]: model_info.mode is embedding)",
	} {
		if !strings.Contains(notices, want) {
			t.Errorf("notices lack %q:\n%s", want, notices)
		}
	}
	if len(r.Notices) != 2 {
		t.Errorf("%d notices, want 2 (one for ignored fields, one for entries not served):\n%s", len(r.Notices), notices)
	}

	// A field in neither list is still a typo, with its line.
	_, err = loadConfig(t, strings.Replace(realisticLiteLLM, "      max_retries: 2", "      max_retires: 2", 1), env)
	if err == nil || !strings.Contains(err.Error(), `config.yaml:10: model_list[0].litellm_params: unknown field "max_retires"`) {
		t.Fatalf("a typo: %v", err)
	}
}

func TestLiteLLMFieldErrors(t *testing.T) {
	for _, tc := range []struct{ name, field, want string }{
		{"rpm not a number", "rpm: lots", `config.yaml:5: model_list[0].litellm_params.rpm: "lots" is not a number of connects per minute`},
		{"negative parallel", "max_parallel_requests: -1", `config.yaml:5: model_list[0].litellm_params.max_parallel_requests: "-1" is not a whole number`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := loadConfig(t, `model_list:
  - model_name: m
    litellm_params:
      model: gpt-realtime
      `+tc.field+`
general_settings:
  master_key: os.environ/MASTER
`, configEnv)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
		})
	}
}
