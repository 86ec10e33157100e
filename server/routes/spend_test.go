package routes

import (
	"strings"
	"testing"
	"time"

	"rtgate/server/spend"
)

func TestConfigPrices(t *testing.T) {
	r := mustLoad(t, `model_list:
  - model_name: rt
    litellm_params: {model: openai/gpt-realtime}
  - model_name: rt-custom
    litellm_params: {model: openai/gpt-realtime-mini}
    model_info:
      id: abc-123
      description: free-form metadata is left alone
      output_cost_per_audio_token: 0.00003
      cache_read_input_token_cost: 0
  - model_name: on-azure
    litellm_params:
      model: azure/my-voice-deployment
      api_base: https://res.openai.azure.com
      api_key: os.environ/AZURE_KEY
    model_info: {base_model: gpt-realtime}
  - model_name: unpriced
    litellm_params: {model: openai/some-future-model}
keys:
  - name: web
    key: os.environ/WEB_KEY
    max_budget: 25.5
    budget_duration: 30d
  - name: batch
    key_hash: "`+strings.Repeat("ab", 32)+`"
    max_budget: 100
`)
	if d := only(t, r, "rt"); d.Prices != listPrices(t, "gpt-realtime") || !d.Priced {
		t.Errorf("rt prices %+v", d.Prices)
	}
	want := listPrices(t, "gpt-realtime-mini")
	want.OutputCostPerAudioToken, want.CacheReadInputTokenCost = 0.00003, 0
	if d := only(t, r, "rt-custom"); d.Prices != want {
		t.Errorf("rt-custom prices %+v, want %+v", d.Prices, want)
	}
	if d := only(t, r, "on-azure"); d.Prices != listPrices(t, "gpt-realtime") {
		t.Errorf("on-azure prices %+v", d.Prices)
	}
	if d := only(t, r, "unpriced"); d.Priced {
		t.Errorf("an unknown model is priced: %+v", d.Prices)
	}
	budgets := map[string]spend.Budget{}
	for _, k := range r.Keys {
		budgets[k.Name] = k.Budget
	}
	if b := budgets["web"]; b.Max != 25.5 || b.Every != 30*24*time.Hour {
		t.Errorf("web budget %+v", b)
	}
	if b := budgets["batch"]; b.Max != 100 || b.Every != 0 {
		t.Errorf("batch budget %+v", b)
	}
}

func TestConfigSpendErrors(t *testing.T) {
	for _, tc := range []struct{ name, body, want string }{
		{"negative price", `model_list:
  - model_name: m
    litellm_params: {model: gpt-realtime}
    model_info:
      input_cost_per_audio_token: -1
`, `config.yaml:5: model_list[0].model_info.input_cost_per_audio_token: "-1" is not a price`},
		{"price not a number", `model_list:
  - model_name: m
    litellm_params: {model: gpt-realtime}
    model_info: {output_cost_per_token: "$16/M"}
`, `config.yaml:4: model_list[0].model_info.output_cost_per_token: "$16/M" is not a price`},
		{"model_info not a mapping", `model_list:
  - model_name: m
    litellm_params: {model: gpt-realtime}
    model_info: [1, 2]
`, `config.yaml:4: model_list[0].model_info: must be a mapping`},
		{"zero budget", `model_list:
  - model_name: m
    litellm_params: {model: gpt-realtime}
keys:
  - name: k
    key: os.environ/WEB_KEY
    max_budget: 0
`, `config.yaml:7: keys[0].max_budget: "0" is not an amount in USD above 0`},
		{"bad duration", `model_list:
  - model_name: m
    litellm_params: {model: gpt-realtime}
keys:
  - name: k
    key: os.environ/WEB_KEY
    max_budget: 5
    budget_duration: monthly
`, `config.yaml:8: keys[0].budget_duration: "monthly" is not a duration like 30d`},
		{"duration without budget", `model_list:
  - model_name: m
    litellm_params: {model: gpt-realtime}
keys:
  - name: k
    key: os.environ/WEB_KEY
    budget_duration: 1h
`, `config.yaml:7: keys[0].budget_duration: budget_duration needs max_budget`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := loadConfig(t, tc.body, configEnv)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want one containing %q", err, tc.want)
			}
		})
	}
}

// listPrices are model's built-in prices.
func listPrices(t *testing.T, model string) spend.Prices {
	t.Helper()
	p, ok := spend.Lookup(model)
	if !ok {
		t.Fatalf("no built-in prices for %s", model)
	}
	return p
}
