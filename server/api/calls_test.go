package api

import (
	"os"
	"path/filepath"
	"testing"

	"rtgate/server/routes"
)

// TestCallsURL: the calls endpoint of each kind of deployment, with the
// deployment's credentials and no model in the query.
func TestCallsURL(t *testing.T) {
	t.Setenv("OPENAI_KEY", "sk-openai-test-key")
	t.Setenv("AZ_KEY", "az-test-key")
	path := filepath.Join(t.TempDir(), "config.yaml")
	config := `model_list:
  - model_name: gpt-realtime
    litellm_params:
      model: openai/gpt-realtime
      api_base: https://api.example.test/v1
      api_key: os.environ/OPENAI_KEY
  - model_name: azure-rt
    litellm_params:
      model: azure/my-deployment
      api_base: https://res.openai.azure.com
      api_key: os.environ/AZ_KEY
general_settings:
  master_key: sk-master-test-key
`
	if err := os.WriteFile(path, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	table, err := routes.Load(path, os.LookupEnv)
	if err != nil {
		t.Fatal(err)
	}
	for group, want := range map[string]struct{ url, header, value string }{
		"gpt-realtime": {"https://api.example.test/v1/realtime/calls", "Authorization", "Bearer sk-openai-test-key"},
		"azure-rt":     {"https://res.openai.azure.com/openai/v1/realtime/calls", "Api-Key", "az-test-key"},
	} {
		u, h := callsURL(table.Groups[group][0])
		if u.String() != want.url || h.Get(want.header) != want.value {
			t.Errorf("%s: %s (%s set: %v), want %s", group, u, want.header, h.Get(want.header) == want.value, want.url)
		}
	}
}
