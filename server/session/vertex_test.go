package session

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
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"rtgate/server/routes"
	"rtgate/upstream"
)

// TestVertexDialCarriesBearer: a session's dial to a vertex_ai/ deployment
// carries the access token its service-account key's token endpoint
// issued, fetched once for several dials; a dial to any other deployment
// carries only its static credential.
func TestVertexDialCarriesBearer(t *testing.T) {
	var grants atomic.Int32
	tokens := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ParseForm() != nil || r.PostForm.Get("grant_type") != "urn:ietf:params:oauth:grant-type:jwt-bearer" {
			http.Error(w, `{"error":"unsupported_grant_type"}`, http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"access_token":"vertex-tok-%d","expires_in":3600,"token_type":"Bearer"}`, grants.Add(1))
	}))
	defer tokens.Close()

	var mu sync.Mutex
	var seen []string
	up := websocket.Upgrader{}
	live := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.URL.Path+" "+r.Header.Get("Authorization"))
		mu.Unlock()
		if c, err := up.Upgrade(w, r, nil); err == nil {
			_ = c.Close()
		}
	}))
	defer live.Close()

	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	der, _ := x509.MarshalPKCS8PrivateKey(key)
	sa, _ := json.Marshal(map[string]string{
		"type": "service_account", "project_id": "p1", "client_email": "gw@p1.iam.gserviceaccount.com",
		"private_key": string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})), "token_uri": tokens.URL + "/token",
	})
	dir := t.TempDir()
	keyPath, cfgPath := filepath.Join(dir, "sa.json"), filepath.Join(dir, "config.yaml")
	cfg := `model_list:
  - model_name: vertex
    litellm_params:
      model: vertex_ai/gemini-live-2.5-flash-native-audio
      api_base: ` + live.URL + `
      vertex_credentials: ` + keyPath + `
  - model_name: plain
    litellm_params:
      model: openai/gpt-realtime
      api_base: ` + live.URL + `
      api_key: os.environ/OPENAI_KEY
general_settings:
  master_key: os.environ/MASTER
`
	if os.WriteFile(keyPath, sa, 0o600) != nil || os.WriteFile(cfgPath, []byte(cfg), 0o600) != nil {
		t.Fatal("writing the config")
	}
	table, err := routes.Load(cfgPath, func(name string) (string, bool) {
		v, ok := map[string]string{"MASTER": "sk-master", "OPENAI_KEY": "sk-static"}[name]
		return v, ok
	})
	if err != nil {
		t.Fatal(err)
	}
	d := &upstream.Dialer{Timeout: 5 * time.Second}
	for _, g := range []string{"vertex", "vertex", "plain", "vertex"} {
		c, err := d.Dial(t.Context(), target(table.Groups[g][0], nil, nil))
		if err != nil {
			t.Fatalf("dial %s: %v", g, err)
		}
		c.Endpoint.Close()
	}
	const vx = "/ws/google.cloud.aiplatform.v1beta1.LlmBidiService/BidiGenerateContent Bearer vertex-tok-1"
	mu.Lock()
	got := strings.Join(seen, ",")
	mu.Unlock()
	if want := vx + "," + vx + ",/realtime Bearer sk-static," + vx; got != want {
		t.Fatalf("the upstream saw\n%s\nwant\n%s", got, want)
	}
	if n := grants.Load(); n != 1 {
		t.Fatalf("%d token grants for 3 Vertex dials, want 1", n)
	}
}
