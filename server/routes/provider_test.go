package routes

import (
	"math"
	"net/url"
	"strings"
	"testing"
)

// TestConfigXAI: xai/<model> is served on the Realtime API as LiteLLM
// spells it: xAI's API root unless api_base overrides it, the key from
// api_key or XAI_API_KEY as a bearer token, billed by connection time at
// xAI's per-minute price; a group may mix it with OpenAI.
func TestConfigXAI(t *testing.T) {
	r, err := loadConfig(t, `
model_list:
  - model_name: voice
    litellm_params:
      model: xai/grok-voice-latest
  - model_name: voice
    litellm_params:
      model: openai/gpt-realtime
      api_key: os.environ/OPENAI_KEY
  - model_name: local-grok
    litellm_params:
      model: xai/grok-voice-think-fast-1.0
      api_base: http://127.0.0.1:8089/xai/v1
      api_key: os.environ/OPENAI_KEY
general_settings:
  master_key: os.environ/MASTER
`, map[string]string{"XAI_API_KEY": "xai-env-secret", "OPENAI_KEY": "sk-openai-secret", "MASTER": "sk-master"})
	if err != nil {
		t.Fatal(err)
	}
	group := r.Groups["voice"]
	if len(group) != 2 || group[0].Kind != KindXAI || group[1].Kind != KindOpenAI {
		t.Fatalf("voice group %v, want an xai and an openai deployment", group)
	}
	x := group[0]
	checkTarget(t, x, url.Values{"model": {"voice"}}, "wss://api.x.ai/v1/realtime?model=grok-voice-latest", "Authorization", "Bearer xai-env-secret")
	checkTarget(t, only(t, r, "local-grok"), nil, "ws://127.0.0.1:8089/xai/v1/realtime?model=grok-voice-think-fast-1.0", "Authorization", "Bearer sk-openai-secret")
	if !x.BilledByTime() || group[1].BilledByTime() {
		t.Errorf("billed by time: xai %v, openai %v; want only xai", x.BilledByTime(), group[1].BilledByTime())
	}
	if !x.Priced || math.Abs(x.SecondPrice*60-0.05) > 1e-12 || x.Protocol != ProtocolRealtime {
		t.Errorf("xai deployment priced %v at %v/s, protocol %q; want $0.05 a minute on the Realtime API", x.Priced, x.SecondPrice, x.Protocol)
	}
}

// TestConfigXAIRefusals: what xAI does not offer is refused at load, with
// the field named.
func TestConfigXAIRefusals(t *testing.T) {
	for _, tc := range []struct{ name, params, info, want string }{
		{"GPT-Live on xai", "model: xai/gpt-live-1", "", "xai/ models are served on the Realtime API only"},
		{"live mode on xai", "model: xai/grok-voice-latest", "\n    model_info:\n      mode: live", "xai/ models are served on the Realtime API only"},
		{"api_version on xai", "model: xai/grok-voice-latest\n      api_version: 2024-10-01", "", "api_version applies to azure/ models only"},
		{"no model after the prefix", "model: xai/", "", `"xai/" names no model after the provider prefix`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := loadConfig(t, `model_list:
  - model_name: m
    litellm_params:
      `+tc.params+tc.info+`
`, map[string]string{"XAI_API_KEY": "xai-env-secret"})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one saying %q", err, tc.want)
			}
			if strings.Contains(err.Error(), "xai-env-secret") {
				t.Fatal("the key is in the error")
			}
		})
	}
}

// TestConfigGemini: gemini/<model> is served for Gemini's Live models (or
// model_info.mode: realtime) at AI Studio's Live endpoint, the key in
// x-goog-api-key (never in the URL, which reaches logs) from api_key or
// GEMINI_API_KEY, the model in the setup rather than the query; Gemini's
// chat models in the same config are loaded and not served.
func TestConfigGemini(t *testing.T) {
	r, err := loadConfig(t, `
model_list:
  - model_name: gemini-voice
    litellm_params:
      model: gemini/gemini-3.8-live
  - model_name: gemini-chat
    litellm_params:
      model: gemini/gemini-3-pro
  - model_name: custom
    litellm_params:
      model: gemini/my-tuned-voice
      api_base: http://127.0.0.1:8089
      api_key: os.environ/OTHER_KEY
    model_info:
      mode: realtime
general_settings:
  master_key: os.environ/MASTER
`, map[string]string{"GEMINI_API_KEY": "gem-env-secret", "OTHER_KEY": "gem-other-secret", "MASTER": "sk-master"})
	if err != nil {
		t.Fatal(err)
	}
	d := only(t, r, "gemini-voice")
	if d.Kind != KindGemini || !d.Translated() || d.UpstreamModel() != "models/gemini-3.8-live" || d.BilledByTime() {
		t.Fatalf("deployment kind %q translated %v upstream model %q", d.Kind, d.Translated(), d.UpstreamModel())
	}
	live := "wss://generativelanguage.googleapis.com/ws/google.ai.generativelanguage.v1beta.GenerativeService.BidiGenerateContent"
	checkTarget(t, d, url.Values{"model": {"gemini-voice"}, "foo": {"bar"}}, live, "X-Goog-Api-Key", "gem-env-secret")
	checkTarget(t, only(t, r, "custom"), nil,
		"ws://127.0.0.1:8089/ws/google.ai.generativelanguage.v1beta.GenerativeService.BidiGenerateContent", "X-Goog-Api-Key", "gem-other-secret")
	if _, ok := r.Groups["gemini-chat"]; ok {
		t.Fatal("a Gemini chat model is served")
	}
	if n := strings.Join(r.Notices, "\n"); !strings.Contains(n, "gemini/gemini-3-pro is not a Gemini Live model") {
		t.Fatalf("notices lack the chat model:\n%s", n)
	}
	u, h := d.Address(nil)
	if strings.Contains(u.String(), "gem-env-secret") || h.Get("Authorization") != "" {
		t.Fatalf("the key travels in %s / Authorization", u)
	}
}

// TestConfigGeminiNeedsAKey: a gemini/ deployment without a key is an error
// at load, not a session that fails later.
func TestConfigGeminiNeedsAKey(t *testing.T) {
	_, err := loadConfig(t, "model_list:\n  - model_name: g\n    litellm_params:\n      model: gemini/gemini-3.8-live\n", map[string]string{})
	if err == nil || !strings.Contains(err.Error(), "gemini/ models need api_key") {
		t.Fatalf("error %v", err)
	}
}
