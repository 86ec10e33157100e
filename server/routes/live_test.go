package routes

import (
	"math"
	"net/url"
	"strings"
	"testing"
)

// Which model_list entries are GPT-Live deployments, the upstream each
// dials, and the group aliases clients use.
func TestConfigLiveDeployments(t *testing.T) {
	r := mustLoad(t, `
model_list:
  - model_name: gpt-realtime
    litellm_params: {model: openai/gpt-realtime, api_key: os.environ/OPENAI_KEY, api_base: http://127.0.0.1:9001/v1}
  - model_name: gpt-live
    litellm_params: {model: openai/gpt-live-1, api_key: os.environ/OPENAI_KEY, api_base: http://127.0.0.1:9001/v1}
  - model_name: live-eu
    litellm_params: {model: azure/my-live, api_key: os.environ/AZURE_KEY, api_base: https://res.openai.azure.com}
    model_info: {mode: live}
  - model_name: live-base
    litellm_params: {model: azure/other-live, api_key: os.environ/AZURE_KEY, api_base: https://res.openai.azure.com/openai/v1}
    model_info: {base_model: gpt-live-1.1}
  - model_name: gpt-live-transcribe
    litellm_params: {model: openai/gpt-live-transcribe, api_base: http://127.0.0.1:9001/v1}
general_settings: {master_key: os.environ/MASTER}
`)
	cases := []struct {
		group, protocol, url, header, value string
	}{
		{"gpt-realtime", ProtocolRealtime, "ws://127.0.0.1:9001/v1/realtime?model=gpt-realtime", "Authorization", "Bearer sk-openai-secret"},
		{"gpt-live", ProtocolLive, "ws://127.0.0.1:9001/v1/live/sessions", "Authorization", "Bearer sk-openai-secret"},
		{"live-eu", ProtocolLive, "wss://res.openai.azure.com/openai/v1/live/sessions", "Api-Key", "azure-secret-0123"},
		{"live-base", ProtocolLive, "wss://res.openai.azure.com/openai/v1/live/sessions", "Api-Key", "azure-secret-0123"},
		// gpt-live-transcribe is a Realtime transcription model.
		{"gpt-live-transcribe", ProtocolRealtime, "ws://127.0.0.1:9001/v1/realtime?model=gpt-live-transcribe", "", ""},
	}
	for _, c := range cases {
		d := only(t, r, c.group)
		if d.Protocol != c.protocol || r.Protocol(c.group) != c.protocol {
			t.Errorf("%s: protocol %q (table %q), want %q", c.group, d.Protocol, r.Protocol(c.group), c.protocol)
		}
		// A Live upstream takes no query, whatever the client's.
		checkTarget(t, d, url.Values{"model": {c.group}}, c.url, c.header, c.value)
	}
	if r.Default != "gpt-realtime" {
		t.Errorf("Default = %q, want the first Realtime group", r.Default)
	}
	if r.Protocol("nope") != "" {
		t.Error("an unknown group has a protocol")
	}
	// Built-in per-second prices: gpt-live-1 and (via base_model) 1.1 at
	// $0.05 a minute; the Azure name without base_model has none.
	for g, want := range map[string]float64{"gpt-live": 0.05 / 60, "live-base": 0.05 / 60, "live-eu": 0} {
		if d := only(t, r, g); math.Abs(d.SecondPrice-want) > 1e-12 {
			t.Errorf("%s: SecondPrice %v, want %v", g, d.SecondPrice, want)
		}
	}
}

// A first entry that is GPT-Live does not become the Realtime default; a
// file of Live models only has none.
func TestConfigLiveOnly(t *testing.T) {
	r := mustLoad(t, `
model_list:
  - model_name: gpt-live
    litellm_params: {model: openai/gpt-live-1}
    model_info: {input_cost_per_second: 0.001}
general_settings: {master_key: os.environ/MASTER}
`)
	if r.Default != "" {
		t.Errorf("Default = %q, want none", r.Default)
	}
	d := only(t, r, "gpt-live")
	if d.SecondPrice != 0.001 || !d.Priced {
		t.Errorf("input_cost_per_second: %v (priced %v), want 0.001", d.SecondPrice, d.Priced)
	}
}

func TestConfigLiveErrors(t *testing.T) {
	cases := []struct{ name, body, want string }{
		{"mixed group", `
model_list:
  - model_name: voice
    litellm_params: {model: openai/gpt-realtime}
  - model_name: voice
    litellm_params: {model: openai/gpt-live-1}
general_settings: {master_key: os.environ/MASTER}
`, `model group "voice" mixes Realtime and GPT-Live deployments`},
		{"live model with mode realtime", `
model_list:
  - model_name: gpt-live
    litellm_params: {model: openai/gpt-live-1}
    model_info: {mode: realtime}
general_settings: {master_key: os.environ/MASTER}
`, `"gpt-live-1" is a GPT-Live model: its mode is live`},
		{"azure preview", `
model_list:
  - model_name: gpt-live
    litellm_params: {model: azure/live, api_key: os.environ/AZURE_KEY, api_base: https://r.openai.azure.com, api_version: 2025-04-01-preview}
    model_info: {mode: live}
general_settings: {master_key: os.environ/MASTER}
`, "GPT-Live on Azure is served at /openai/v1/live/sessions only"},
		{"bad second price", `
model_list:
  - model_name: gpt-live
    litellm_params: {model: openai/gpt-live-1}
    model_info: {input_cost_per_second: cheap}
general_settings: {master_key: os.environ/MASTER}
`, `"cheap" is not a price in USD per second`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := loadConfig(t, c.body, configEnv)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want one containing %q", err, c.want)
			}
		})
	}
}

// The environment-only setup serves GPT-Live beside Realtime.
func TestSingleLive(t *testing.T) {
	base, err := ParseAPIBase("https://127.0.0.1:8089/v1")
	if err != nil {
		t.Fatal(err)
	}
	r := Single("gpt-realtime", "gpt-live-1", base, "sk-up", "sk-m")
	if r.Default != "gpt-realtime" {
		t.Errorf("Default = %q", r.Default)
	}
	d := only(t, r, "gpt-live-1")
	if d.Protocol != ProtocolLive || d.Model != "gpt-live-1" {
		t.Errorf("live deployment %q protocol %q", d.Model, d.Protocol)
	}
	checkTarget(t, d, nil, "wss://127.0.0.1:8089/v1/live/sessions", "Authorization", "Bearer sk-up")
	if only(t, r, "gpt-realtime").Protocol != ProtocolRealtime {
		t.Error("the Realtime model is not Realtime")
	}
	// A Realtime model named like a Live one stays Realtime on this path.
	if r := Single("gpt-live-1", "", base, "", "sk-m"); only(t, r, "gpt-live-1").Protocol != ProtocolRealtime {
		t.Error("OPENAI_REALTIME_MODEL became Live")
	}
}

func TestIsLiveModel(t *testing.T) {
	for m, want := range map[string]bool{
		"gpt-live-1": true, "openai/gpt-live-1.1": true, "gpt-live-1-2026-11-20": true,
		"gpt-live-transcribe": false, "gpt-realtime": false, "gpt-live": false, "": false,
	} {
		if IsLiveModel(m) != want {
			t.Errorf("IsLiveModel(%q) = %v", m, !want)
		}
	}
}
