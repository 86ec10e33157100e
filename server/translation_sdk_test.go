package server

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
)

// TestNodeSDKTranslation: the official openai package's translation API
// (realtime.translations.clientSecrets.create, OpenAIRealtimeTranslationWS)
// unchanged against the gateway (TLS to the client, since the SDK only dials
// wss://), with mockai as a process behind it over ws:// and wss://: the
// secret is minted, the session opens on /v1/realtime/translations, updates,
// translates, and finish() ends it with session.closed; the gateway books
// one translation record.
func TestNodeSDKTranslation(t *testing.T) {
	for _, up := range []string{"ws", "wss"} {
		t.Run(up, func(t *testing.T) {
			mock, roots := mockaiOver(t, up)
			entry := func(group string) string {
				return "\n  - model_name: " + group + "\n    litellm_params:\n      model: openai/" + group +
					"\n      api_base: " + mock.baseURL + "\n      api_key: os.environ/RTGATE_TEST_UPSTREAM"
			}
			path := writeConfig(t, "model_list:"+entry("gpt-realtime")+entry("gpt-realtime-translate")+configTail)
			logPath := filepath.Join(t.TempDir(), "usage.jsonl")
			lc := newListenerCert(t)
			g := startGateway(t, nil, func(c *Settings) {
				c.RoutesFile, c.UsageLog = path, logPath
				c.UpstreamRoots = roots
				c.TLSCert, c.TLSKey = lc.certFile, lc.keyFile
			})
			out := runNode(t, "translation.mjs", "GATEWAY_BASE=https://"+g.addr+"/v1", "GATEWAY_KEY="+testMasterKey,
				"NODE_EXTRA_CA_CERTS="+lc.certFile)
			var got struct {
				SecretIsEK        bool     `json:"secret_is_ek"`
				SecretSessionType string   `json:"secret_session_type"`
				URLPath           string   `json:"url_path"`
				CreatedModel      string   `json:"created_model"`
				UpdatedLanguage   string   `json:"updated_language"`
				TranscriptDelta   string   `json:"transcript_delta"`
				Closed            bool     `json:"closed"`
				Errors            []string `json:"errors"`
				Error             string   `json:"error"`
			}
			if err := json.Unmarshal(out, &got); err != nil {
				t.Fatalf("translation.mjs printed %q: %v", out, err)
			}
			switch {
			case got.Error != "" || len(got.Errors) > 0:
				t.Fatalf("the SDK failed: %s %v", got.Error, got.Errors)
			case !got.SecretIsEK || got.SecretSessionType != "translation":
				t.Fatalf("translations.clientSecrets.create: %+v", got)
			case got.URLPath != "/v1/realtime/translations" || got.CreatedModel != "gpt-realtime-translate" ||
				got.UpdatedLanguage != "fr" || strings.TrimSpace(got.TranscriptDelta) == "" || !got.Closed:
				t.Fatalf("OpenAIRealtimeTranslationWS: %+v", got)
			}
			waitFor(t, "the session to end", func() bool { return g.srv.SessionsOpen() == 0 })
			rec := oneRecord(t, g, logPath)
			if rec.Protocol != "translation" || rec.Seconds <= 0 || rec.CostUSD <= 0 {
				t.Fatalf("record: protocol %q seconds %v cost %v", rec.Protocol, rec.Seconds, rec.CostUSD)
			}
		})
	}
}
