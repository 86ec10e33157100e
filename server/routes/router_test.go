package routes

import (
	"strings"
	"testing"
	"time"
)

const routerModels = `
model_list:
  - model_name: gpt-realtime
    litellm_params:
      model: openai/gpt-realtime
      api_key: sk-a
      weight: 3
      tpm: 100000
  - model_name: gpt-realtime
    litellm_params:
      model: openai/gpt-realtime
      api_key: sk-b
      api_base: wss://b.example.com/v1
general_settings:
  master_key: sk-master
`

func TestRouterSettings(t *testing.T) {
	for _, tc := range []struct {
		name, settings string
		want           Router
		err            string
	}{
		{"none: least-busy", "", DefaultRouter(), ""},
		{"latency with LiteLLM's args", `
router_settings:
  routing_strategy: latency-based-routing
  routing_strategy_args: {ttl: 60, lowest_latency_buffer: 0.5, max_latency_list_size: 20}
  num_retries: 3`, Router{Strategy: LatencyBased, TTL: time.Minute, LowestLatencyBuffer: 0.5, MaxLatencyListSize: 20}, ""},
		{"simple-shuffle", "router_settings: {routing_strategy: simple-shuffle}",
			Router{Strategy: SimpleShuffle, TTL: time.Hour, MaxLatencyListSize: 10}, ""},
		{"cost-based accepted", "router_settings: {routing_strategy: cost-based-routing}",
			Router{Strategy: CostBased, TTL: time.Hour, MaxLatencyListSize: 10}, ""},
		{"a typo", "router_settings:\n  routing_strategy: latency-routing", Router{},
			`config.yaml:17: router_settings.routing_strategy: unknown routing strategy "latency-routing"`},
		{"bad ttl", "router_settings:\n  routing_strategy_args:\n    ttl: soon", Router{},
			`config.yaml:18: router_settings.routing_strategy_args.ttl: "soon" is not a number of seconds`},
		{"list size 0", "router_settings:\n  routing_strategy_args: {max_latency_list_size: 0}", Router{},
			`router_settings.routing_strategy_args.max_latency_list_size: must be at least 1`},
		{"not a mapping", "router_settings: latency", Router{}, `router_settings: must be a mapping`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tab, err := loadConfig(t, routerModels+tc.settings, nil)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tab.Router != tc.want {
				t.Errorf("router %+v, want %+v", tab.Router, tc.want)
			}
			if d := tab.Groups["gpt-realtime"][0]; d.Weight != 3 || d.TPM != 100000 {
				t.Errorf("weight %v tpm %v, want 3 and 100000", d.Weight, d.TPM)
			}
			if strings.Contains(tc.settings, "num_retries") && !strings.Contains(strings.Join(tab.Notices, "\n"), "router_settings.num_retries (line") {
				t.Errorf("notices do not name the ignored router setting: %v", tab.Notices)
			}
		})
	}
}
