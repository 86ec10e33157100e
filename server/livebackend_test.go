package server

import (
	"crypto/tls"
	"encoding/json"
	"net/http"
	"path/filepath"
	"slices"
	"testing"

	"github.com/gorilla/websocket"

	"rtgate/mockai"
)

// TestLiveWebRTCBackendModel: the key's models list applies to the backend
// a GPT-Live WebRTC session delegates to, as it does on WebSocket (where
// session.start is refused with model_not_allowed and close 1008). A key
// limited to models: [gpt-live] (ws:// and wss:// upstreams):
//   - creating a session that delegates to o3-pro is refused 403
//     model_not_allowed, and nothing reaches the upstream;
//   - a session created without delegation, moved to o3-pro by a
//     session.update the gateway never relays (the browser's data channel
//     goes straight to the upstream: here a sideband dialed to mockai
//     directly), is hung up through the control API as soon as the
//     gateway's metering sideband reads the session.updated, before any
//     response spends on o3-pro; its record's outcome is "refused".
//
// On the code before this change the create answered 201 and the session
// ran on.
func TestLiveWebRTCBackendModel(t *testing.T) {
	for _, up := range upstreams {
		t.Run(up.name, func(t *testing.T) {
			mock := startMock(t, up.cfg)
			t.Setenv("APP_A_KEY", keyA)
			path := writeConfig(t, "model_list:\n  - model_name: gpt-live\n    litellm_params:\n      model: openai/gpt-live-1\n      api_base: "+
				mock.BaseURL()+"\n      api_key: os.environ/RTGATE_TEST_UPSTREAM"+configTail+`
keys:
  - name: app-a
    key: os.environ/APP_A_KEY
    models: [gpt-live]
`)
			logPath := t.TempDir() + "/usage.jsonl"
			g := startAppGateway(t, mock, func(c *Settings) { c.RoutesFile, c.UsageLog = path, logPath })

			body, _ := json.Marshal(map[string]any{"session": map[string]any{"model": "gpt-live",
				"delegation": map[string]any{"type": "responses", "responses": map[string]any{"model": "o3-pro"}}},
				"transport": map[string]any{"type": "webrtc", "sdp": sdpOffer}})
			status, _, b := post(t, g, "/v1/live/sessions", keyA, "application/json", body, nil)
			var refusal struct {
				Error struct{ Code string } `json:"error"`
			}
			_ = json.Unmarshal(b, &refusal)
			if status != http.StatusForbidden || refusal.Error.Code != "model_not_allowed" {
				t.Fatalf("a create delegating to o3-pro: HTTP %d %s, want 403 model_not_allowed", status, b)
			}
			if n := len(mock.LiveSessions()); n != 0 {
				t.Fatalf("the refused create reached the upstream: %d sessions there", n)
			}

			id := newWebRTCSession(t, g, keyA)
			// Joined upstream (mockai adds a sideband a moment after its 101):
			// the session.updated below is broadcast to it.
			waitFor(t, "the gateway's own sideband upstream", func() bool {
				return meteringSidebands(t, g) == 1 && mock.LiveSessions()[0].Sidebands == 1
			})
			d := dialer()
			if up.cfg.TLS {
				d.TLSClientConfig = &tls.Config{RootCAs: trustMock(t, mock)}
			}
			browser := dialWith(t, d, mock.BaseURL()+"/live/sessions/"+id+"/attach", bearer(testUpstreamKey))
			send(t, browser, map[string]any{"type": "session.update", "session": map[string]any{
				"delegation": map[string]any{"type": "responses", "responses": map[string]any{"model": "o3-pro"}}}})
			// The browser's own copy of session.updated is not read: the
			// gateway's sideband gets it too and the hang-up it makes may
			// close the browser's socket before mockai's broadcast reaches it.
			waitFor(t, "the session to be hung up", func() bool {
				for _, s := range mock.LiveSessions() {
					if s.ID == id {
						return s.State == "closed"
					}
				}
				return false
			})
			rec := waitRecords(t, logPath, 1)[0] // the session's: the refused create made none
			if rec.Protocol != "live" || rec.Outcome != "refused" || rec.KeyName != "app-a" || rec.Usage.Responses != 0 || rec.Seconds < 15 {
				t.Fatalf("record %+v: want refused, app-a, no backend response, the 15 s floor billed", rec)
			}
			for _, s := range mock.LiveSessions() {
				if s.ID == id && (s.Reason != "close_requested" || !slices.Contains(s.Actions, "hangup")) {
					t.Fatalf("upstream session: reason %q, actions %v; want hung up", s.Reason, s.Actions)
				}
			}
		})
	}
}

// TestLiveBackendUpdateRefused: on a GPT-Live WebSocket session of a key
// limited to models: [gpt-live], a session.update that moves the delegation
// to o3-pro ends the session as soon as the upstream's session.updated says
// so, before any response spends on o3-pro: an error event
// model_not_allowed, close 1008, the record's outcome "refused" with no
// backend response (before, the session ran on until a response's tokens
// were booked); ws:// and wss://.
func TestLiveBackendUpdateRefused(t *testing.T) {
	overBoth(t, mockai.Config{}, func(t *testing.T, mock *mockai.Server, trust func(*Settings)) {
		logPath := filepath.Join(t.TempDir(), "usage.jsonl")
		g := startGateway(t, nil, func(c *Settings) {
			trust(c)
			c.RoutesFile = liveConfig(t, mock, "", "\n    models: [gpt-live]")
			c.UsageLog = logPath
		})
		c := g.dialLive(t, "sk-team-a-test")
		send(t, c, liveStart("gpt-live", nil))
		if e := read(t, c); e.typ() != "session.started" {
			t.Fatalf("first event %v", e)
		}
		send(t, c, map[string]any{"type": "session.update", "session": map[string]any{
			"delegation": map[string]any{"type": "responses", "responses": map[string]any{"model": "o3-pro"}}}})
		e, seen := readUntil(t, c, "error")
		if e.str("error", "code") != "model_not_allowed" || !slices.Contains(seen, "session.updated") {
			t.Fatalf("error %v after %v; want model_not_allowed after session.updated", e, seen)
		}
		if ce := closeOf(t, c); ce == nil || ce.Code != websocket.ClosePolicyViolation {
			t.Fatalf("close %v, want 1008", ce)
		}
		rec := waitRecords(t, logPath, 1)[0]
		if rec.Outcome != "refused" || rec.Usage.Responses != 0 {
			t.Fatalf("record: outcome %q, %d backend responses; want refused, none", rec.Outcome, rec.Usage.Responses)
		}
	})
}
