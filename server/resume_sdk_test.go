package server

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"rtgate/mockai"
)

// TestResumeSDKs: the official openai SDK (OpenAIRealtimeWS, over a TLS
// gateway and a wss:// upstream) and @openai/agents-realtime (ws:// gateway,
// ws:// upstream) continue across a resume: the response the upstream was
// producing ends as a failed response.done their schemas accept, the
// gateway's event arrives as an ordinary event, and the next turn is
// answered on the same socket.
func TestResumeSDKs(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatal("node is not installed (apt-get install -y nodejs npm)")
	}
	dir := ensureNodeModules(t)
	for _, client := range []string{"openai", "agents"} {
		t.Run(client, func(t *testing.T) {
			cfg := mockai.Config{AudioDeltas: 200, AudioDeltaInterval: 5 * time.Millisecond,
				Cut: mockai.Cut{Kind: mockai.CutDrop, AfterResponses: 1, During: true, Times: 1}}
			var env []string
			var mutate func(*Settings)
			if client == "openai" {
				cfg.TLS = true
				mock := startMock(t, cfg)
				roots := trustMock(t, mock)
				lc := newListenerCert(t)
				mutate = func(c *Settings) {
					c.UpstreamRoots = roots
					c.TLSCert, c.TLSKey = lc.certFile, lc.keyFile
				}
				g := startGateway(t, mock, mutate)
				env = []string{"GATEWAY_BASE=https://" + g.addr + "/v1", "NODE_EXTRA_CA_CERTS=" + lc.certFile}
			} else {
				mock := startMock(t, cfg)
				g := startGateway(t, mock, nil)
				env = []string{"GATEWAY_URL=" + g.url("model=gpt-realtime")}
			}
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, node, "resume.mjs")
			cmd.Dir = dir
			cmd.Env = append(append(os.Environ(), "CLIENT="+client, "GATEWAY_KEY="+testMasterKey), env...)
			outb, err := cmd.Output()
			if err != nil {
				t.Fatalf("node resume.mjs: %v", err)
			}
			var got struct {
				Events    []string       `json:"events"`
				Statuses  []string       `json:"statuses"`
				TurnsDone []string       `json:"turns_done"`
				Resumed   map[string]any `json:"resumed"`
				Error     string         `json:"error"`
			}
			if err := json.Unmarshal(outb, &got); err != nil {
				t.Fatalf("resume.mjs printed %q: %v", outb, err)
			}
			if got.Error != "" {
				t.Fatalf("the client failed: %s (events %v)", got.Error, got.Events)
			}
			lost, _ := got.Resumed["lost_response_id"].(string)
			if got.Resumed["cause"] != "upstream_lost" || lost == "" {
				t.Fatalf("resumed event %v", got.Resumed)
			}
			if strings.Join(got.Statuses, ",") != "failed,completed" {
				t.Errorf("response.done statuses %v, want failed then completed (events %v)", got.Statuses, got.Events)
			}
			if client == "agents" && (len(got.TurnsDone) != 2 || !slices.Contains(got.TurnsDone, lost)) {
				t.Errorf("turn_done for %v, want the failed response %s accepted by the SDK's schema and the next", got.TurnsDone, lost)
			}
		})
	}
}
