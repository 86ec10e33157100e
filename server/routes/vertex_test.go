package routes

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
)

// vertexLive is Vertex AI's Live path, as the tests expect it.
const vertexLive = "/ws/google.cloud.aiplatform.v1beta1.LlmBidiService/BidiGenerateContent"

// fakeGoogleToken is a loopback token endpoint answering every grant with
// access token tok-N; grants counts them.
type fakeGoogleToken struct {
	*httptest.Server
	grants atomic.Int32
}

func newFakeGoogleToken(t *testing.T) *fakeGoogleToken {
	t.Helper()
	f := &fakeGoogleToken{}
	f.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := r.ParseForm(); err != nil || r.PostForm.Get("grant_type") != "urn:ietf:params:oauth:grant-type:jwt-bearer" {
			http.Error(w, `{"error":"unsupported_grant_type"}`, http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"access_token":"tok-%d","expires_in":3600,"token_type":"Bearer"}`, f.grants.Add(1))
	}))
	t.Cleanup(f.Close)
	return f
}

// newRSAKey is a service account's private key, for the key files below.
func newRSAKey(t *testing.T) *rsa.PrivateKey {
	t.Helper()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	return key
}

// vertexKey writes a service-account key file for key naming project (none
// when empty) and token endpoint tokenURI, and returns its path and JSON.
func vertexKey(t *testing.T, key *rsa.PrivateKey, project, tokenURI string) (string, []byte) {
	t.Helper()
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]string{
		"type": "service_account", "private_key_id": "k1", "client_email": "gw@p.iam.gserviceaccount.com",
		"private_key": string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})), "token_uri": tokenURI,
	}
	if project != "" {
		m["project_id"] = project
	}
	data, err := json.MarshalIndent(m, "", "  ") // a key file as Google hands it out: on several lines
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "sa.json")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return path, data
}

// TestConfigVertex: vertex_ai/<model> (and vertex_ai_beta/) is served for
// Gemini's Live models at the location's Live endpoint (regional, global,
// multi-region, or api_base), its model named in the setup as Vertex's full
// resource, its project from vertex_project or the key's project_id, its
// location us-central1 unless set; nothing static travels in the address,
// and the dial's bearer comes from the key's token endpoint, one grant for
// every deployment sharing the key. Vertex's other models are not served.
func TestConfigVertex(t *testing.T) {
	tok := newFakeGoogleToken(t)
	keyPath, keyJSON := vertexKey(t, newRSAKey(t), "key-project", tok.URL+"/token")
	env := map[string]string{"MASTER": "sk-master", "SA_JSON": string(keyJSON)}
	r, err := loadConfig(t, `
model_list:
  - model_name: live
    litellm_params:
      model: vertex_ai/gemini-live-2.5-flash-native-audio
      vertex_credentials: `+keyPath+`
  - model_name: live-eu
    litellm_params:
      model: vertex_ai_beta/gemini-live-2.5-flash-native-audio
      vertex_project: other-project
      vertex_location: europe-west4
      vertex_credentials: `+keyPath+`
  - model_name: live-global
    litellm_params:
      model: vertex_ai/gemini-live-2.5-flash-native-audio
      vertex_location: global
      vertex_credentials: os.environ/SA_JSON
  - model_name: live-us
    litellm_params:
      model: vertex_ai/gemini-live-2.5-flash-native-audio
      vertex_location: us
      vertex_credentials: `+keyPath+`
  - model_name: live-proxy
    litellm_params:
      model: vertex_ai/my-tuned-voice
      api_base: http://127.0.0.1:8089/vertex
      vertex_credentials: `+keyPath+`
    model_info:
      mode: realtime
  - model_name: vertex-chat
    litellm_params:
      model: vertex_ai/gemini-2.5-pro
      vertex_credentials: `+keyPath+`
general_settings:
  master_key: os.environ/MASTER
`, env)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ group, url, model string }{
		{"live", "wss://us-central1-aiplatform.googleapis.com" + vertexLive,
			"projects/key-project/locations/us-central1/publishers/google/models/gemini-live-2.5-flash-native-audio"},
		{"live-eu", "wss://europe-west4-aiplatform.googleapis.com" + vertexLive,
			"projects/other-project/locations/europe-west4/publishers/google/models/gemini-live-2.5-flash-native-audio"},
		{"live-global", "wss://aiplatform.googleapis.com" + vertexLive,
			"projects/key-project/locations/global/publishers/google/models/gemini-live-2.5-flash-native-audio"},
		{"live-us", "wss://aiplatform.us.rep.googleapis.com" + vertexLive,
			"projects/key-project/locations/us/publishers/google/models/gemini-live-2.5-flash-native-audio"},
		{"live-proxy", "ws://127.0.0.1:8089/vertex" + vertexLive,
			"projects/key-project/locations/us-central1/publishers/google/models/my-tuned-voice"},
	} {
		d := only(t, r, tc.group)
		if d.Kind != KindVertex || !d.Translated() || d.BilledByTime() || d.Protocol != ProtocolRealtime {
			t.Errorf("%s: kind %q translated %v billed by time %v protocol %q", tc.group, d.Kind, d.Translated(), d.BilledByTime(), d.Protocol)
		}
		if got := d.UpstreamModel(); got != tc.model {
			t.Errorf("%s: setup model %s, want %s", tc.group, got, tc.model)
		}
		u, h := d.Address(map[string][]string{"model": {tc.group}, "foo": {"bar"}})
		if u.String() != tc.url {
			t.Errorf("%s: URL %s, want %s", tc.group, u, tc.url)
		}
		if h.Get("Authorization") != "" || h.Get("X-Goog-Api-Key") != "" {
			t.Errorf("%s: the address carries a static credential", tc.group)
		}
	}
	if _, ok := r.Groups["vertex-chat"]; ok {
		t.Fatal("a Vertex chat model is served")
	}
	if n := strings.Join(r.Notices, "\n"); !strings.Contains(n, "vertex_ai/gemini-2.5-pro is not a Gemini Live model") {
		t.Fatalf("notices lack the chat model:\n%s", n)
	}

	// The dial's credential: the key file's token, fetched once for the
	// deployments sharing it.
	for _, g := range []string{"live", "live-eu", "live-us", "live-proxy", "live"} {
		authorize := only(t, r, g).Authorizer()
		if authorize == nil {
			t.Fatalf("%s has no Authorizer", g)
		}
		h := http.Header{}
		if err := authorize(t.Context(), h); err != nil {
			t.Fatalf("%s: %v", g, err)
		}
		if got := h.Get("Authorization"); got != "Bearer tok-1" {
			t.Fatalf("%s's dial carries %q, want the token endpoint's Bearer tok-1", g, got)
		}
	}
	if n := tok.grants.Load(); n != 1 {
		t.Fatalf("the token endpoint saw %d grants, want one for the four deployments sharing the key", n)
	}
	if only(t, r, "live-global").Authorizer() == nil {
		t.Fatal("the deployment whose key came from the environment has no Authorizer")
	}
}

// TestConfigVertexDefaults: without vertex_credentials the credentials are
// LiteLLM's VERTEXAI_CREDENTIALS, then Application Default Credentials
// (GOOGLE_APPLICATION_CREDENTIALS's file read at load; else found at the
// first dial); the project and location fall back to VERTEXAI_PROJECT,
// VERTEXAI_LOCATION, the key's project_id and GOOGLE_CLOUD_PROJECT.
func TestConfigVertexDefaults(t *testing.T) {
	key := newRSAKey(t)
	keyPath, keyJSON := vertexKey(t, key, "key-project", "http://127.0.0.1:1/token")
	noProjectKey, _ := vertexKey(t, key, "", "http://127.0.0.1:1/token")
	const body = "model_list:\n  - model_name: v\n    litellm_params:\n      model: vertex_ai/gemini-live-2.5-flash-native-audio\n" +
		"general_settings:\n  master_key: os.environ/MASTER\n"
	for _, tc := range []struct {
		name       string
		env        map[string]string
		wantModel  string
		wantAuthor bool
		quota      string // the X-Goog-User-Project the address carries
	}{
		{"Application Default Credentials, project from the environment",
			map[string]string{"GOOGLE_CLOUD_PROJECT": "adc-project"},
			"projects/adc-project/locations/us-central1/", true, ""},
		{"LiteLLM's variables",
			map[string]string{"VERTEXAI_PROJECT": "lite-project", "VERTEXAI_LOCATION": "asia-northeast1", "GOOGLE_CLOUD_PROJECT": "adc-project"},
			"projects/lite-project/locations/asia-northeast1/", true, ""},
		{"VERTEXAI_CREDENTIALS holding the JSON",
			map[string]string{"VERTEXAI_CREDENTIALS": string(keyJSON), "GOOGLE_CLOUD_PROJECT": "adc-project"},
			"projects/key-project/locations/us-central1/", true, ""},
		{"GOOGLE_APPLICATION_CREDENTIALS's file",
			map[string]string{"GOOGLE_APPLICATION_CREDENTIALS": keyPath},
			"projects/key-project/locations/us-central1/", true, ""},
		{"a key without project_id, GOOGLE_CLOUD_PROJECT",
			map[string]string{"GOOGLE_APPLICATION_CREDENTIALS": noProjectKey, "GOOGLE_CLOUD_PROJECT": "adc-project"},
			"projects/adc-project/locations/us-central1/", true, ""},
		{"a gcloud user's file: its quota project",
			map[string]string{"VERTEXAI_CREDENTIALS": `{"type": "authorized_user", "client_id": "c", "client_secret": "s", "refresh_token": "r", "quota_project_id": "quota-p"}`},
			"projects/quota-p/locations/us-central1/", true, "quota-p"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.env["MASTER"] = "sk-master"
			r, err := loadConfig(t, body, tc.env)
			if err != nil {
				t.Fatal(err)
			}
			d := only(t, r, "v")
			if got := d.UpstreamModel(); !strings.HasPrefix(got, tc.wantModel) {
				t.Fatalf("setup model %s, want it under %s", got, tc.wantModel)
			}
			if (d.Authorizer() != nil) != tc.wantAuthor {
				t.Fatalf("Authorizer set: %v", d.Authorizer() != nil)
			}
			if _, h := d.Address(nil); h.Get("X-Goog-User-Project") != tc.quota {
				t.Fatalf("X-Goog-User-Project %q, want %q", h.Get("X-Goog-User-Project"), tc.quota)
			}
		})
	}
}

// TestConfigVertexErrors: what cannot work is refused at load with the
// field and its line, and never with the credentials' content.
func TestConfigVertexErrors(t *testing.T) {
	key := newRSAKey(t)
	keyPath, keyJSON := vertexKey(t, key, "key-project", "http://127.0.0.1:1/token")
	noProjectKey, _ := vertexKey(t, key, "", "http://127.0.0.1:1/token")
	secretKey := string(keyJSON[strings.Index(string(keyJSON), "MII"):][:40]) // a piece of the private key
	const head = "model_list:\n  - model_name: v\n    litellm_params:\n      model: vertex_ai/gemini-live-2.5-flash-native-audio\n"
	for _, tc := range []struct {
		name, params string
		env          map[string]string
		want         string
	}{
		{"no project anywhere", "      vertex_credentials: " + noProjectKey + "\n", nil,
			"config.yaml:4: model_list[0].litellm_params: vertex_ai/ models need vertex_project"},
		{"no project with default credentials", "", nil,
			"config.yaml:4: model_list[0].litellm_params: vertex_ai/ models need vertex_project"},
		{"missing key file", "      vertex_project: p1\n      vertex_credentials: /nonexistent/sa.json\n", nil,
			"config.yaml:6: model_list[0].litellm_params.vertex_credentials: cannot read the credentials file (a path, or the JSON itself starting with {): no such file or directory"},
		{"not a key", "      vertex_project: p1\n      vertex_credentials: os.environ/SA\n", map[string]string{"SA": `{"type": "service_account", "private_key": "` + secretKey + `"}`},
			`config.yaml:6: model_list[0].litellm_params.vertex_credentials: the credentials are unusable: a service-account key needs "client_email"`},
		{"broken JSON", "      vertex_project: p1\n      vertex_credentials: os.environ/SA\n", map[string]string{"SA": `{"private_key": "` + secretKey + `" oops}`},
			"config.yaml:6: model_list[0].litellm_params.vertex_credentials: the credentials are unusable: not valid JSON (at byte"},
		{"unset variable", "      vertex_project: p1\n      vertex_credentials: os.environ/NOPE\n", nil,
			"config.yaml:6: model_list[0].litellm_params.vertex_credentials: environment variable NOPE is not set"},
		{"bad GOOGLE_APPLICATION_CREDENTIALS", "      vertex_project: p1\n", map[string]string{"GOOGLE_APPLICATION_CREDENTIALS": "/nonexistent/adc.json"},
			"config.yaml:4: model_list[0].litellm_params: GOOGLE_APPLICATION_CREDENTIALS: cannot read the credentials file"},
		{"bad location", "      vertex_project: p1\n      vertex_location: Europe/West\n", nil,
			`config.yaml:6: model_list[0].litellm_params.vertex_location: "Europe/West" is not a Vertex AI location`},
		{"bad project", "      vertex_project: my project/x\n      vertex_credentials: " + keyPath + "\n", nil,
			`config.yaml:5: model_list[0].litellm_params.vertex_project: "my project/x" is not a Google Cloud project id`},
		{"api_key on vertex", "      vertex_project: p1\n      api_key: os.environ/SA\n", map[string]string{"SA": secretKey},
			"config.yaml:6: model_list[0].litellm_params.api_key: vertex_ai/ models authenticate with vertex_credentials"},
		{"vertex field elsewhere", "", nil, ""}, // filled below
		{"GPT-Live mode", "      vertex_project: p1\n    model_info:\n      mode: live\n", nil,
			"vertex_ai/ models are served on the Realtime API only"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body := head + tc.params
			if tc.name == "vertex field elsewhere" {
				body = "model_list:\n  - model_name: v\n    litellm_params:\n      model: gemini/gemini-3.8-live\n      api_key: os.environ/SA\n      vertex_project: p1\n"
				tc.env = map[string]string{"SA": secretKey}
				tc.want = "config.yaml:6: model_list[0].litellm_params.vertex_project: vertex_project applies to vertex_ai/ models only"
			}
			body += "general_settings:\n  master_key: os.environ/MASTER\n"
			env := map[string]string{"MASTER": "sk-master"}
			for k, v := range tc.env {
				env[k] = v
			}
			_, err := loadConfig(t, body, env)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v\nwant one saying %q", err, tc.want)
			}
			if strings.Contains(err.Error(), secretKey) || strings.Contains(err.Error(), "PRIVATE KEY") {
				t.Fatalf("the error quotes the credentials: %v", err)
			}
		})
	}
}
