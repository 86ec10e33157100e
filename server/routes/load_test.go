package routes

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// configEnv is the environment the config tests run with. Every value is a
// secret as far as the tests are concerned: none may appear in an error.
var configEnv = map[string]string{
	"OPENAI_KEY":    "sk-openai-secret",
	"AZURE_KEY":     "azure-secret-0123",
	"WEB_KEY":       "sk-web-secret",
	"MASTER":        "sk-master-secret",
	"AZURE_BASE":    "https://env-res.openai.azure.com",
	"AZURE_VERSION": "2025-04-01-preview",
	"EMPTY":         "",
	"NEWLINE_KEY":   "sk-newline-secret\n",
}

func lookupIn(env map[string]string) func(string) (string, bool) {
	return func(name string) (string, bool) {
		v, ok := env[name]
		return v, ok
	}
}

// loadConfig writes body to config.yaml in a temporary directory and loads it.
func loadConfig(t *testing.T, body string, env map[string]string) (*Table, error) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return Load(path, lookupIn(env))
}

func mustLoad(t *testing.T, body string) *Table {
	t.Helper()
	r, err := loadConfig(t, body, configEnv)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	return r
}

// only returns the single deployment of group.
func only(t *testing.T, r *Table, group string) *Deployment {
	t.Helper()
	ds := r.Groups[group]
	if len(ds) != 1 {
		t.Fatalf("group %q has %d deployments, want 1 (groups: %v)", group, len(ds), r.Groups)
	}
	return ds[0]
}

// checkTarget asserts the upstream URL and the credential headers: exactly
// one of Authorization and Api-Key (or neither when want is empty).
func checkTarget(t *testing.T, d *Deployment, q url.Values, wantURL, wantHeader, wantValue string) {
	t.Helper()
	u, header := d.Address(q)
	if got := u.String(); got != wantURL {
		t.Errorf("Address(%v) URL = %s, want %s", q, got, wantURL)
	}
	for _, h := range []string{"Authorization", "Api-Key"} {
		got := header.Get(h)
		switch {
		case h == wantHeader && got != wantValue:
			t.Errorf("Address header %s is not the configured credential", h)
		case h != wantHeader && got != "":
			t.Errorf("Address sends %s, want only %q", h, wantHeader)
		}
	}
	if ua := header.Get("User-Agent"); ua != "rtgate" {
		t.Errorf("User-Agent = %q, want rtgate", ua)
	}
}

func TestConfigOpenAI(t *testing.T) {
	r := mustLoad(t, `
model_list:
  - model_name: gpt-realtime
    litellm_params:
      model: openai/gpt-realtime-2.1
      api_key: os.environ/OPENAI_KEY
  - model_name: mini
    litellm_params:
      model: gpt-realtime-mini
      api_base: http://127.0.0.1:8089/v1/
general_settings:
  master_key: os.environ/MASTER
`)
	if r.Default != "gpt-realtime" {
		t.Errorf("Default = %q, want the first model_name", r.Default)
	}
	d := only(t, r, "gpt-realtime")
	if d.Kind != KindOpenAI || d.Model != "gpt-realtime-2.1" || d.Name != "gpt-realtime/0@api.openai.com" {
		t.Errorf("deployment = kind %q model %q name %q", d.Kind, d.Model, d.Name)
	}
	const bearer = "Bearer sk-openai-secret"
	base := "wss://api.openai.com/v1/realtime"
	checkTarget(t, d, url.Values{"model": {"gpt-realtime"}}, base+"?model=gpt-realtime-2.1", "Authorization", bearer)
	checkTarget(t, d, nil, base+"?model=gpt-realtime-2.1", "Authorization", bearer)
	// call_id and transcription sockets pass through without a model,
	// as with the environment configuration.
	checkTarget(t, d, url.Values{"intent": {"transcription"}}, base+"?intent=transcription", "Authorization", bearer)
	checkTarget(t, d, url.Values{"call_id": {"rtc_123"}}, base+"?call_id=rtc_123", "Authorization", bearer)
	// Where the session goes is the gateway's choice; other parameters
	// pass through.
	checkTarget(t, d, url.Values{"model": {"gpt-realtime"}, "deployment": {"x"}, "api-version": {"1"}, "foo": {"a", "b"}},
		base+"?foo=a&foo=b&model=gpt-realtime-2.1", "Authorization", bearer)

	// A local upstream without a key: http becomes ws, no credentials.
	checkTarget(t, only(t, r, "mini"), nil, "ws://127.0.0.1:8089/v1/realtime?model=gpt-realtime-mini", "", "")
}

func TestConfigAzure(t *testing.T) {
	r := mustLoad(t, `
model_list:
  - model_name: preview
    litellm_params:
      model: azure/gpt-4o-realtime-preview
      api_base: https://res.openai.azure.com/
      api_version: "2025-04-01-preview"
      api_key: os.environ/AZURE_KEY
  - model_name: ga
    litellm_params:
      model: azure/gpt-realtime
      api_base: https://res.openai.azure.com
      api_key: os.environ/AZURE_KEY
  - model_name: ga-v1-base
    litellm_params:
      model: azure/gpt-realtime
      api_base: https://res.openai.azure.com/openai/v1/
      api_key: os.environ/AZURE_KEY
  - model_name: preview-openai-base
    litellm_params:
      model: azure/dep
      api_base: os.environ/AZURE_BASE
      api_version: os.environ/AZURE_VERSION
      api_key: os.environ/AZURE_KEY
general_settings:
  master_key: os.environ/MASTER
`)
	const key = "azure-secret-0123"
	p := only(t, r, "preview")
	if p.Kind != KindAzure || p.Model != "gpt-4o-realtime-preview" || p.APIVersion != "2025-04-01-preview" {
		t.Errorf("preview deployment = kind %q model %q version %q", p.Kind, p.Model, p.APIVersion)
	}
	checkTarget(t, p, url.Values{"model": {"preview"}},
		"wss://res.openai.azure.com/openai/realtime?api-version=2025-04-01-preview&deployment=gpt-4o-realtime-preview", "Api-Key", key)
	checkTarget(t, p, url.Values{"intent": {"transcription"}},
		"wss://res.openai.azure.com/openai/realtime?api-version=2025-04-01-preview&intent=transcription", "Api-Key", key)
	// A client's own api-version does not override the configured one.
	checkTarget(t, p, url.Values{"model": {"preview"}, "api-version": {"2024-10-01-preview"}},
		"wss://res.openai.azure.com/openai/realtime?api-version=2025-04-01-preview&deployment=gpt-4o-realtime-preview", "Api-Key", key)

	ga := "wss://res.openai.azure.com/openai/v1/realtime?model=gpt-realtime"
	checkTarget(t, only(t, r, "ga"), url.Values{"model": {"ga"}}, ga, "Api-Key", key)
	checkTarget(t, only(t, r, "ga-v1-base"), url.Values{"model": {"ga-v1-base"}}, ga, "Api-Key", key)

	env := only(t, r, "preview-openai-base")
	if env.Name != "preview-openai-base/0@env-res.openai.azure.com" {
		t.Errorf("Name = %q", env.Name)
	}
	checkTarget(t, env, nil, "wss://env-res.openai.azure.com/openai/realtime?api-version=2025-04-01-preview&deployment=dep", "Api-Key", key)
}

func TestConfigModelGroups(t *testing.T) {
	r := mustLoad(t, `
model_list:
  - model_name: gpt-realtime
    litellm_params: &openai
      model: openai/gpt-realtime
      api_key: os.environ/OPENAI_KEY
  - model_name: other
    litellm_params: *openai
  - model_name: gpt-realtime
    litellm_params:
      model: azure/gpt-realtime
      api_base: https://a.openai.azure.com
      api_key: os.environ/AZURE_KEY
  - model_name: gpt-realtime
    litellm_params:
      model: azure/gpt-realtime
      api_base: https://b.openai.azure.com
      api_key: os.environ/AZURE_KEY
    model_info:
      id: b-deployment
general_settings:
  master_key: os.environ/MASTER
litellm_settings:
  drop_params: true
  callbacks: ["prometheus"]
router_settings:
  routing_strategy: usage-based-routing-v2
`)
	var names []string
	for _, d := range r.Groups["gpt-realtime"] {
		names = append(names, d.Name)
		if d.Group != "gpt-realtime" {
			t.Errorf("%s: Group = %q", d.Name, d.Group)
		}
	}
	want := "gpt-realtime/0@api.openai.com gpt-realtime/1@a.openai.azure.com gpt-realtime/2@b.openai.azure.com"
	if got := strings.Join(names, " "); got != want {
		t.Errorf("group deployments = %s, want %s", got, want)
	}
	// The alias reuses the anchored parameters.
	checkTarget(t, only(t, r, "other"), nil, "wss://api.openai.com/v1/realtime?model=gpt-realtime", "Authorization", "Bearer sk-openai-secret")
}

func TestConfigEnvironmentFallbacks(t *testing.T) {
	body := `
model_list:
  - model_name: gpt-realtime
    litellm_params:
      model: gpt-realtime
  - model_name: az
    litellm_params:
      model: azure/dep
      api_base: https://res.openai.azure.com
`
	env := map[string]string{"OPENAI_API_KEY": "sk-env-openai", "AZURE_API_KEY": "az-env", "LITELLM_MASTER_KEY": "sk-env-master"}
	r, err := loadConfig(t, body, env)
	if err != nil {
		t.Fatal(err)
	}
	checkTarget(t, only(t, r, "gpt-realtime"), nil, "wss://api.openai.com/v1/realtime?model=gpt-realtime", "Authorization", "Bearer sk-env-openai")
	checkTarget(t, only(t, r, "az"), nil, "wss://res.openai.azure.com/openai/v1/realtime?model=dep", "Api-Key", "az-env")
	if k, ok := r.Authenticate("sk-env-master"); !ok || k.Name != "master" {
		t.Errorf("LITELLM_MASTER_KEY does not authenticate as master: %v %v", k, ok)
	}
}

func TestConfigExampleFile(t *testing.T) {
	env := map[string]string{
		"OPENAI_API_KEY": "sk-o", "AZURE_API_KEY": "a1", "AZURE_OTHER_API_KEY": "a2",
		"WEB_APP_KEY": "sk-web", "LITELLM_MASTER_KEY": "sk-master",
	}
	r, err := Load("testdata/example.yaml", lookupIn(env))
	if err != nil {
		t.Fatalf("the example config does not load: %v", err)
	}
	if len(r.Groups["gpt-realtime"]) != 2 || len(r.Groups["gpt-4o-realtime"]) != 1 || len(r.Keys) != 2 ||
		len(r.Groups["gpt-live"]) != 2 || r.Protocol("gpt-live") != ProtocolLive {
		t.Errorf("example: groups %v, %d keys", r.Groups, len(r.Keys))
	}
	for key, name := range map[string]string{"sk-web": "web-app", "sk-batch-example": "batch", "sk-master": "master"} {
		if k, ok := r.Authenticate(key); !ok || k.Name != name {
			t.Errorf("example: a key of %s authenticates as %v, %v", name, k, ok)
		}
	}
	// Every variable it names is needed.
	delete(env, "AZURE_OTHER_API_KEY")
	if _, err := Load("testdata/example.yaml", lookupIn(env)); err == nil ||
		!strings.Contains(err.Error(), "environment variable AZURE_OTHER_API_KEY is not set") {
		t.Errorf("example without AZURE_OTHER_API_KEY: err = %v", err)
	}
}

const keysConfig = `
model_list:
  - model_name: gpt-realtime
    litellm_params:
      model: gpt-realtime
  - model_name: mini
    litellm_params:
      model: gpt-realtime-mini
keys:
  - name: by-hash
    key_hash: 8886E4D51679AE29D7F677C35C9D15F47EC8CF0E56C2148AF0A906B8AB6546B4
    models: [mini]
    max_sessions: 3
    connect_rate: 0.5
  - name: by-env
    key: os.environ/WEB_KEY
    models: ["*"]
  - name: unlimited
    key: os.environ/OPENAI_KEY
general_settings:
  master_key: os.environ/MASTER
`

func TestConfigKeys(t *testing.T) {
	r := mustLoad(t, keysConfig)
	if len(r.Keys) != 3 {
		t.Fatalf("%d keys, want 3", len(r.Keys))
	}
	h := r.Keys[0]
	if h.Name != "by-hash" || h.MaxSessions != 3 || h.ConnectRate != 0.5 || strings.Join(h.Models, ",") != "mini" {
		t.Errorf("by-hash key = %+v", *h)
	}
	for _, tc := range []struct {
		key, group string
		allowed    bool
	}{
		{"by-hash", "mini", true},
		{"by-hash", "gpt-realtime", false},
		{"by-env", "gpt-realtime", true},
		{"by-env", "mini", true},
		{"unlimited", "mini", true},
		{"unlimited", "gpt-realtime", true},
	} {
		var k *ClientKey
		for _, c := range r.Keys {
			if c.Name == tc.key {
				k = c
			}
		}
		if got := k.Allows(tc.group); got != tc.allowed {
			t.Errorf("%s.Allows(%q) = %v, want %v", tc.key, tc.group, got, tc.allowed)
		}
	}
}

func TestRoutesAuthenticate(t *testing.T) {
	r := mustLoad(t, keysConfig)
	for _, tc := range []struct {
		key, want string // want "" for a refusal
	}{
		{"sk-batch-example", "by-hash"}, // matched by its configured hash
		{"sk-web-secret", "by-env"},
		{"sk-openai-secret", "unlimited"},
		{"sk-master-secret", "master"},
		{"", ""},
		{"sk-web-secreT", ""},
		{"sk-web-secret ", ""},
		{"sk-batch-exampl", ""},
		// The hash itself is not a key.
		{"8886e4d51679ae29d7f677c35c9d15f47ec8cf0e56c2148af0a906b8ab6546b4", ""},
	} {
		k, ok := r.Authenticate(tc.key)
		if tc.want == "" {
			if ok || k != nil {
				t.Errorf("Authenticate(%q) = %v, want a refusal", tc.key, k)
			}
			continue
		}
		if !ok || k.Name != tc.want {
			t.Errorf("Authenticate(%q) = %v, %v; want %s", tc.key, k, ok, tc.want)
			continue
		}
		// Only digests are kept, and they are what is compared.
		if sum := sha256.Sum256([]byte(tc.key)); k.hash != keyHash(sum) {
			t.Errorf("%s: stored hash is not the key's SHA-256", k.Name)
		}
	}
	m, _ := r.Authenticate("sk-master-secret")
	for _, g := range []string{"gpt-realtime", "mini", "anything"} {
		if !m.Allows(g) {
			t.Errorf("master may not use %q", g)
		}
	}
}

func TestSingle(t *testing.T) {
	base, err := ParseAPIBase("ws://127.0.0.1:8089/v1")
	if err != nil {
		t.Fatal(err)
	}
	r := Single("gpt-realtime", "", base, "sk-up", "sk-m")
	if r.Default != "gpt-realtime" || len(r.Keys) != 0 {
		t.Errorf("Default = %q, %d keys", r.Default, len(r.Keys))
	}
	d := only(t, r, "gpt-realtime")
	if d.Kind != KindOpenAI || d.Name != "gpt-realtime/0@127.0.0.1:8089" {
		t.Errorf("deployment kind %q name %q", d.Kind, d.Name)
	}
	checkTarget(t, d, url.Values{"model": {"gpt-realtime"}}, "ws://127.0.0.1:8089/v1/realtime?model=gpt-realtime", "Authorization", "Bearer sk-up")
	if k, ok := r.Authenticate("sk-m"); !ok || k.Name != "master" || !k.Allows("gpt-realtime") {
		t.Errorf("master key: %v %v", k, ok)
	}
	if _, ok := r.Authenticate("sk-up"); ok {
		t.Error("the upstream key authenticates a client")
	}

	// No keys at all: no credentials upstream, nobody admitted.
	r = Single("m", "", base, "", "")
	checkTarget(t, only(t, r, "m"), nil, "ws://127.0.0.1:8089/v1/realtime?model=m", "", "")
	for _, k := range []string{"", "sk-m", "anything"} {
		if _, ok := r.Authenticate(k); ok {
			t.Errorf("without a master key, %q is admitted", k)
		}
	}
}

func TestRoutesAddressIsFresh(t *testing.T) {
	d := only(t, mustLoad(t, keysConfig), "mini")
	au, ah := d.Address(nil)
	ah.Set("X-Extra", "1")
	au.Path = "/elsewhere"
	bu, bh := d.Address(nil)
	if bh.Get("X-Extra") != "" || bu.Path != "/v1/realtime" || d.Base.Path != "/v1" {
		t.Errorf("changing one Address changed the next: header %v, path %q, base %q", bh, bu.Path, d.Base.Path)
	}
}

func TestConfigSecretsStayOutOfOutput(t *testing.T) {
	r := mustLoad(t, `
model_list:
  - model_name: gpt-realtime
    litellm_params:
      model: openai/gpt-realtime
      api_key: os.environ/OPENAI_KEY
  - model_name: az
    litellm_params:
      model: azure/dep
      api_base: https://res.openai.azure.com
      api_key: os.environ/AZURE_KEY
keys:
  - name: web
    key: os.environ/WEB_KEY
general_settings:
  master_key: os.environ/MASTER
`)
	var out bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&out, nil))
	for _, ds := range r.Groups {
		for _, d := range ds {
			fmt.Fprintf(&out, "%v %+v %#v %s %v %+v\n", d, d, d, d, *d, *d)
			log.Info("deployment", "d", d, "v", *d)
		}
	}
	fmt.Fprintf(&out, "%v %+v %#v\n", r, *r, r.Keys)
	for name, secret := range configEnv {
		if secret != "" && strings.Contains(out.String(), secret) {
			t.Errorf("printing routes shows %s's value:\n%s", name, out.String())
		}
	}
	if !strings.Contains(out.String(), "az/0@res.openai.azure.com") {
		t.Errorf("printed deployments do not show their names:\n%s", out.String())
	}
}

// TestConfigErrors covers every refusal: each must name the file, the line
// and the field, and no error may show a secret.
func TestConfigErrors(t *testing.T) {
	const master = "general_settings:\n  master_key: os.environ/MASTER\n"
	for _, tc := range []struct {
		name string
		body string
		env  map[string]string // nil: configEnv
		want []string          // substrings of the error, "config.yaml:N" meaning that line
		not  []string          // must not appear in the error
	}{
		{name: "unknown field with its line", body: `model_list:
  - model_name: gpt-realtime
    litellm_params:
      model: gpt-realtime
      rpmm: 100
` + master, want: []string{`config.yaml:5: model_list[0].litellm_params: unknown field "rpmm" (known fields: model, api_key, api_base, api_version, rpm,`}},
		{name: "unknown top-level field", body: `model_list:
  - model_name: gpt-realtime
    litellm_params:
      model: gpt-realtime
environment_variables:
  A: b
` + master, want: []string{`config.yaml:5: top level: unknown field "environment_variables"`}},
		{name: "unknown key field", body: `model_list:
  - model_name: m
    litellm_params: {model: m}
keys:
  - name: k
    key: os.environ/WEB_KEY
    max_budgte: 10
`, want: []string{`config.yaml:7: keys[0]: unknown field "max_budgte"`}},
		{name: "unknown general_settings field", body: `model_list:
  - model_name: m
    litellm_params: {model: m}
general_settings:
  master_key: os.environ/MASTER
  masterkey: x
`, want: []string{`config.yaml:6: general_settings: unknown field "masterkey"`}},
		{name: "field given twice", body: `model_list:
  - model_name: m
    litellm_params:
      model: m
      model: n
` + master, want: []string{`config.yaml:5: model_list[0].litellm_params: field "model" is given twice (first on line 4)`}},
		{name: "missing env var", body: `model_list:
  - model_name: m
    litellm_params:
      model: m
      api_key: os.environ/NOT_SET_ANYWHERE
` + master, want: []string{"config.yaml:5: model_list[0].litellm_params.api_key: environment variable NOT_SET_ANYWHERE is not set"}},
		{name: "empty env var", body: `model_list:
  - model_name: m
    litellm_params:
      model: m
      api_base: os.environ/EMPTY
` + master, want: []string{"config.yaml:5: model_list[0].litellm_params.api_base: environment variable EMPTY is empty"}},
		{name: "env var with a newline", body: `model_list:
  - model_name: m
    litellm_params:
      model: m
      api_key: os.environ/NEWLINE_KEY
` + master, want: []string{"config.yaml:5: model_list[0].litellm_params.api_key: environment variable NEWLINE_KEY holds a line break"}},
		{name: "value with a control character", body: `model_list:
  - model_name: "m\r"
    litellm_params:
      model: m
` + master, want: []string{"config.yaml:2: model_list[0].model_name: holds a line break"}},
		{name: "env prefix without a name", body: `model_list:
  - model_name: m
    litellm_params:
      model: m
      api_key: os.environ/
` + master, want: []string{"config.yaml:5: model_list[0].litellm_params.api_key: os.environ/ needs a variable name"}},
		{name: "missing master env var", body: `model_list:
  - model_name: m
    litellm_params: {model: m}
general_settings:
  master_key: os.environ/NO_MASTER
`, want: []string{"config.yaml:5: general_settings.master_key: environment variable NO_MASTER is not set"}},
		{name: "bad URL scheme", body: `model_list:
  - model_name: m
    litellm_params:
      model: m
      api_base: ftp://example.com/v1
` + master, want: []string{`config.yaml:5: model_list[0].litellm_params.api_base: "ftp://example.com/v1": scheme must be ws, wss, http or https`}},
		{name: "URL without host", body: `model_list:
  - model_name: m
    litellm_params:
      model: m
      api_base: https:///v1
` + master, want: []string{`config.yaml:5: model_list[0].litellm_params.api_base:`, "has no host"}},
		{name: "unparseable URL", body: `model_list:
  - model_name: m
    litellm_params:
      model: m
      api_base: "https://exa mple.com:port/"
` + master, want: []string{`config.yaml:5: model_list[0].litellm_params.api_base:`, "is not a URL"}},
		{name: "URL with a query", body: `model_list:
  - model_name: m
    litellm_params:
      model: m
      api_base: https://api.openai.com/v1?x=1
` + master, want: []string{`config.yaml:5: model_list[0].litellm_params.api_base:`, "takes no query"}},
		{name: "URL with credentials", body: `model_list:
  - model_name: m
    litellm_params:
      model: m
      api_base: https://user:hunter2pass@example.com/v1
` + master, want: []string{"config.yaml:5: model_list[0].litellm_params.api_base: must not carry credentials"}, not: []string{"hunter2pass"}},
		{name: "unknown provider prefix", body: `model_list:
  - model_name: claude
    litellm_params:
      model: antropic/claude-3-5-sonnet
` + master, want: []string{`config.yaml:4: model_list[0].litellm_params.model: "antropic/claude-3-5-sonnet": unknown provider prefix "antropic"`}},
		{name: "provider prefix without model", body: `model_list:
  - model_name: m
    litellm_params:
      model: azure/
      api_base: https://res.openai.azure.com
      api_key: os.environ/AZURE_KEY
` + master, want: []string{`config.yaml:4: model_list[0].litellm_params.model: "azure/" names no model`}},
		{name: "azure without api_base", body: `model_list:
  - model_name: m
    litellm_params:
      model: azure/dep
      api_key: os.environ/AZURE_KEY
` + master, want: []string{"config.yaml:4: model_list[0].litellm_params: azure/ models need api_base"}},
		{name: "azure without a key", body: `model_list:
  - model_name: m
    litellm_params:
      model: azure/dep
      api_base: https://res.openai.azure.com
` + master, want: []string{"config.yaml:4: model_list[0].litellm_params: azure/ models need api_key"}},
		{name: "azure GA base with api_version", body: `model_list:
  - model_name: m
    litellm_params:
      model: azure/dep
      api_base: https://res.openai.azure.com/openai/v1
      api_version: 2025-04-01-preview
      api_key: os.environ/AZURE_KEY
` + master, want: []string{"config.yaml:5: model_list[0].litellm_params.api_base: ends in /openai/v1"}},
		{name: "api_version on openai", body: `model_list:
  - model_name: m
    litellm_params:
      model: openai/gpt-realtime
      api_version: 2025-04-01-preview
` + master, want: []string{"config.yaml:5: model_list[0].litellm_params.api_version: api_version applies to azure/ models only"}},
		{name: "model missing", body: `model_list:
  - model_name: m
    litellm_params:
      api_key: os.environ/OPENAI_KEY
` + master, want: []string{"config.yaml:4: model_list[0].litellm_params: model is missing"}},
		{name: "model_name missing", body: `model_list:
  - litellm_params:
      model: m
` + master, want: []string{"config.yaml:2: model_list[0]: model_name is missing"}},
		{name: "wildcard model_name", body: `model_list:
  - model_name: "*"
    litellm_params:
      model: m
` + master, want: []string{`config.yaml:2: model_list[0].model_name: "*" is not a model name`}},
		{name: "empty model_list", body: "model_list: []\n" + master, want: []string{"config.yaml:1: model_list: is empty"}},
		{name: "missing model_list", body: master, want: []string{"config.yaml:1: top level: model_list is missing"}},
		{name: "model_list not a list", body: "model_list:\n  m: x\n" + master, want: []string{"config.yaml:2: model_list: must be a list of models, not a mapping"}},
		{name: "bad hash length", body: `model_list:
  - model_name: m
    litellm_params: {model: m}
keys:
  - name: k
    key_hash: abc123
`, want: []string{"config.yaml:6: keys[0].key_hash: must be 64 hexadecimal characters"}, not: []string{"abc123"}},
		{name: "key pasted as hash", body: `model_list:
  - model_name: m
    litellm_params: {model: m}
keys:
  - name: k
    key_hash: sk-proj-PASTEDxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx
`, want: []string{"config.yaml:6: keys[0].key_hash: must be 64 hexadecimal characters"}, not: []string{"PASTED"}},
		{name: "non-hex hash", body: `model_list:
  - model_name: m
    litellm_params: {model: m}
keys:
  - name: k
    key_hash: zz86e4d51679ae29d7f677c35c9d15f47ec8cf0e56c2148af0a906b8ab6546b4
`, want: []string{"config.yaml:6: keys[0].key_hash: must be 64 hexadecimal characters"}},
		{name: "hash of the empty key", body: `model_list:
  - model_name: m
    litellm_params: {model: m}
keys:
  - name: k
    key_hash: e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855
`, want: []string{"config.yaml:6: keys[0].key_hash: is the SHA-256 of an empty key"}},
		{name: "duplicate key names", body: `model_list:
  - model_name: m
    litellm_params: {model: m}
keys:
  - name: team
    key: os.environ/WEB_KEY
  - name: team
    key: os.environ/OPENAI_KEY
`, want: []string{`config.yaml:7: keys[1].name: the name "team" is already used on line 5`}},
		{name: "same key twice", body: `model_list:
  - model_name: m
    litellm_params: {model: m}
keys:
  - name: a
    key: os.environ/WEB_KEY
  - name: b
    key_hash: ` + hex.EncodeToString(func() []byte { s := sha256.Sum256([]byte("sk-web-secret")); return s[:] }()) + `
`, want: []string{`config.yaml:7: keys[1]: the same key as key "a"`}},
		{name: "client key equal to the master key", body: `model_list:
  - model_name: m
    litellm_params: {model: m}
keys:
  - name: a
    key: os.environ/MASTER
` + master, want: []string{"config.yaml:5: keys[0]: the same key as the master key"}},
		{name: "reserved key name", body: `model_list:
  - model_name: m
    litellm_params: {model: m}
keys:
  - name: master
    key: os.environ/WEB_KEY
`, want: []string{`config.yaml:5: keys[0].name: the name "master" is reserved`}},
		{name: "literal key", body: `model_list:
  - model_name: m
    litellm_params: {model: m}
keys:
  - name: k
    key: sk-literal-in-file
`, want: []string{"config.yaml:6: keys[0].key: write the key as os.environ/NAME, or give key_hash"}, not: []string{"sk-literal-in-file"}},
		{name: "key and hash", body: `model_list:
  - model_name: m
    litellm_params: {model: m}
keys:
  - name: k
    key: os.environ/WEB_KEY
    key_hash: 8886e4d51679ae29d7f677c35c9d15f47ec8cf0e56c2148af0a906b8ab6546b4
`, want: []string{"config.yaml:5: keys[0]: give key_hash or key, not both"}},
		{name: "no key", body: `model_list:
  - model_name: m
    litellm_params: {model: m}
keys:
  - name: k
    models: [m]
`, want: []string{"config.yaml:5: keys[0]: key_hash or key is missing"}},
		{name: "unknown model in key", body: `model_list:
  - model_name: m
    litellm_params: {model: m}
keys:
  - name: k
    key: os.environ/WEB_KEY
    models: [m, gpt-4o]
`, want: []string{`config.yaml:7: keys[0].models: "gpt-4o" is not a model_name in model_list`}},
		{name: "bad limits", body: `model_list:
  - model_name: m
    litellm_params: {model: m}
keys:
  - name: k
    key: os.environ/WEB_KEY
    max_sessions: -1
    connect_rate: fast
`, want: []string{`config.yaml:7: keys[0].max_sessions: "-1" is not a whole number of at least 0`,
			`config.yaml:8: keys[0].connect_rate: "fast" is not a rate of connects per second`}},
		{name: "nobody can connect", body: `model_list:
  - model_name: m
    litellm_params: {model: m}
`, want: []string{"config.yaml:1: top level: no client can connect"}},
		{name: "litellm_params not a mapping", body: `model_list:
  - model_name: m
    litellm_params: [openai/m]
` + master, want: []string{"config.yaml:3: model_list[0].litellm_params: must be a mapping (name: value lines), not a list"}},
		{name: "model_name a list", body: `model_list:
  - model_name: [a, b]
    litellm_params: {model: m}
` + master, want: []string{"config.yaml:2: model_list[0].model_name: must be a single value, not a list"}},
		{name: "unknown field behind an alias", body: `params: &p
  model: m
model_list:
  - model_name: m
    litellm_params: *p
` + master, want: []string{`config.yaml:1: top level: unknown field "params"`}},
		{name: "not a mapping", body: "- a\n- b\n", want: []string{"config.yaml:1: top level: must be a mapping"}},
		{name: "YAML syntax", body: "model_list:\n  - model_name: m\n   bad: [\n", want: []string{"config.yaml: yaml: line"}},
		{name: "two documents", body: "model_list: []\n---\nkeys: []\n", want: []string{"config.yaml:2: the file holds more than one YAML document"}},
		{name: "empty file", body: "# nothing here\n", want: []string{"config.yaml: the config file is empty"}},
		{name: "every problem at once", body: `model_list:
  - model_name: m
    litellm_params:
      model: bedrok/m
      api_key: os.environ/NOT_SET_ANYWHERE
keys:
  - name: k
    key_hash: "12"
`, want: []string{"config.yaml:4: model_list[0].litellm_params.model:",
			"config.yaml:5: model_list[0].litellm_params.api_key: environment variable NOT_SET_ANYWHERE is not set",
			"config.yaml:8: keys[0].key_hash:"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := tc.env
			if env == nil {
				env = configEnv
			}
			r, err := loadConfig(t, tc.body, env)
			if err == nil {
				t.Fatalf("loaded, want an error (routes: %v)", r)
			}
			if r != nil {
				t.Errorf("routes returned along with the error")
			}
			msg := err.Error()
			t.Log(msg)
			for _, w := range tc.want {
				if !strings.Contains(msg, w) {
					t.Errorf("error lacks %q:\n%s", w, msg)
				}
			}
			for _, n := range tc.not {
				if strings.Contains(msg, n) {
					t.Errorf("error shows %q:\n%s", n, msg)
				}
			}
			for name, secret := range configEnv {
				if secret != "" && !strings.HasPrefix(secret, "https://") && !strings.HasPrefix(secret, "2025") && strings.Contains(msg, secret) {
					t.Errorf("error shows the value of %s:\n%s", name, msg)
				}
			}
		})
	}
}

// TestConfigAliases: YAML anchors and aliases are followed, and the lines
// reported are those of the anchored values.
func TestConfigAliases(t *testing.T) {
	r := mustLoad(t, `
model_list:
  - model_name: a
    litellm_params: &params
      model: openai/gpt-realtime
      api_base: ws://127.0.0.1:9/v1
  - model_name: b
    litellm_params: *params
general_settings:
  master_key: os.environ/MASTER
`)
	for _, g := range []string{"a", "b"} {
		checkTarget(t, only(t, r, g), nil, "ws://127.0.0.1:9/v1/realtime?model=gpt-realtime", "", "")
	}
	_, err := loadConfig(t, `
model_list:
  - model_name: a
    litellm_params: &params
      model: openai/gpt-realtime
      api_key: os.environ/NOT_SET_ANYWHERE
  - model_name: b
    litellm_params: *params
general_settings:
  master_key: os.environ/MASTER
`, configEnv)
	if err == nil || !strings.Contains(err.Error(), "config.yaml:6: model_list[1].litellm_params.api_key: environment variable NOT_SET_ANYWHERE is not set") {
		t.Errorf("err = %v, want the alias's error at the anchored line", err)
	}
}

func TestConfigMissingFile(t *testing.T) {
	_, err := Load(filepath.Join(t.TempDir(), "nope.yaml"), lookupIn(nil))
	if !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("err = %v, want a wrapped not-exist error", err)
	}
}
