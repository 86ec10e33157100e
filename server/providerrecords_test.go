package server

import (
	"testing"

	"rtgate/server/transcript"
)

// TestProviderConversationRecords: a Gemini Live and an xAI session keep
// their conversation record like an OpenAI one (log_transcripts on the
// deployment), read from the OpenAI events the client gets: the assistant's
// transcripts and the tool call with its arguments, through the official
// openai SDK (providers.mjs's voice session: audio in, a tool call and its
// output, an interruption), over ws:// and wss:// upstreams.
func TestProviderConversationRecords(t *testing.T) {
	for _, tc := range []struct{ name, group, model, path string }{
		{"gemini", "gemini-voice", "gemini/gemini-3.8-live", ""},
		{"xai", "grok-voice", "xai/grok-voice-latest", "/xai/v1"},
	} {
		for _, scheme := range []string{"ws", "wss"} {
			t.Run(tc.name+"/"+scheme, func(t *testing.T) {
				g, lc, logPath, _, _ := providerGateway(t, scheme, nil, func(root string) string {
					return `
  - model_name: ` + tc.group + `
    litellm_params:
      model: ` + tc.model + `
      api_base: ` + root + tc.path + `
      api_key: os.environ/RTGATE_TEST_UPSTREAM
      log_transcripts: true`
				})
				toolBy := "choice"
				if tc.name == "gemini" {
					toolBy = "text" // Gemini has no per-response tool_choice
				}
				runNode(t, "providers.mjs", "CLIENT=openai", "MODEL="+tc.group, "TOOL_BY="+toolBy,
					"GATEWAY_BASE=https://"+g.addr+"/v1", "GATEWAY_KEY="+testMasterKey, "NODE_EXTRA_CA_CERTS="+lc.certFile)
				rec := waitRecords(t, logPath, 1)[0]
				if rec.Conversation == nil {
					t.Fatal("no conversation record")
				}
				var assistant, call, output int
				for _, e := range rec.Conversation.Entries {
					switch {
					case e.Kind == transcript.KindTranscript && e.Role == "assistant" && e.Text != "":
						assistant++
					case e.Kind == transcript.KindToolCall && e.Name == "get_weather" && e.CallID != "":
						call++
					case e.Kind == transcript.KindToolOutput && e.CallID != "":
						output++
					}
				}
				if assistant == 0 || call != 1 || output != 1 {
					t.Fatalf("record: %d assistant transcripts, %d tool calls, %d outputs: %+v", assistant, call, output, rec.Conversation.Entries)
				}
			})
		}
	}
}
