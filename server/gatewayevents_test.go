package server

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"rtgate/mockai"
	"rtgate/server/protocol"
	"rtgate/server/session"
)

// The upstream's answers to the gateway's own events (holdGatewayAnswer):
// mockai's CancelLate answers every response.cancel with
// response_cancel_not_active (the response ended on its own as the cancel
// arrived), then ends the response, completed. The client never gets that
// error: not at a rollover the gateway forces, not before the close of a
// session the gateway ends; and the session and its bill stay right.

// gatewayErrorOf reports an event that is an upstream error answering the
// gateway's own event: what a client must never get.
func gatewayErrorOf(e event) bool {
	return e.typ() == "error" && (e.str("error", "code") == "response_cancel_not_active" ||
		strings.HasPrefix(e.str("error", "event_id"), protocol.GatewayEventPrefix))
}

// eventsUntilClose reads a client's events until the gateway's close.
func eventsUntilClose(t *testing.T, c *websocket.Conn) ([]event, *websocket.CloseError) {
	t.Helper()
	var evs []event
	for range 10000 {
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		_, p, err := c.ReadMessage()
		if err != nil {
			ce, ok := err.(*websocket.CloseError)
			if !ok {
				t.Fatalf("connection ended without a close frame after %d events: %v", len(evs), err)
			}
			return evs, ce
		}
		var e event
		if err := json.Unmarshal(p, &e); err != nil {
			t.Fatalf("event is not JSON: %v: %.200s", err, p)
		}
		evs = append(evs, e)
	}
	t.Fatalf("no close in 10000 events")
	return nil, nil
}

// TestRolloverCancelNotActiveKeptFromClient: the deadline before the cap
// passes while a response streams; the gateway's response.cancel crosses
// the response's own end and the upstream answers it with
// response_cancel_not_active. The client gets the response's (completed)
// response.done and the resumed event, never that error (on the code before
// holdGatewayAnswer it got it, every time: mockai sends it before the
// response.done the rollover waits for); the record bills the response as
// confirmed, and the metric counts the error.
func TestRolloverCancelNotActiveKeptFromClient(t *testing.T) {
	cfg := mockai.Config{SessionCap: 4 * time.Second, AudioDeltas: 4000, AudioDeltaInterval: 5 * time.Millisecond, CancelLate: true}
	overBoth(t, cfg, func(t *testing.T, mock *mockai.Server, trust func(*Settings)) {
		g, logPath := billingGateway(t, mock, trust, nil)
		c := g.dial(t, "model=gpt-realtime", bearer(testMasterKey))
		read(t, c)
		send(t, c, map[string]any{"type": "response.create"})
		created, _ := readUntil(t, c, "response.created")
		id := created.str("response", "id")
		var done event
		for e := read(t, c); e.typ() != session.EventResumed; e = read(t, c) {
			if gatewayErrorOf(e) {
				t.Fatalf("the client got the upstream's error for the gateway's cancel: %v", e)
			}
			if e.typ() == "response.done" {
				done = e
			}
		}
		if done == nil || done.str("response", "id") != id || done.str("response", "status") != "completed" {
			t.Fatalf("response.done before the rollover %v, want %s completed", done, id)
		}
		// The session goes on on the fresh upstream.
		send(t, c, userItem("item_user2", "are you still there?"))
		if e, _ := readUntil(t, c, "conversation.item.done"); e.str("item", "id") != "item_user2" {
			t.Fatalf("item done %v", e)
		}
		_ = c.WriteMessage(websocket.CloseMessage, websocket.FormatCloseMessage(1000, ""))
		rec := waitRecords(t, logPath, 1)[0]
		if rec.Usage.Responses != 1 || rec.Unconfirmed || rec.Estimated != nil || rec.Usage.OutputTokenDetails.AudioTokens == 0 {
			t.Errorf("record usage %+v, unconfirmed %v; want the one response, confirmed", rec.Usage, rec.Unconfirmed)
		}
		if len(rec.Resumes) != 1 || rec.Resumes[0].Cause != "rollover" || rec.Resumes[0].Outcome != "ok" {
			t.Errorf("record resumes %+v, want one rollover, ok", rec.Resumes)
		}
		if got := metricValue(t, g, `rtgate_gateway_event_errors_total{reason="response_cancel_not_active"}`); got != 1 {
			t.Errorf("rtgate_gateway_event_errors_total %v, want 1", got)
		}
	})
}

// TestGatewayEndCancelNotActiveKeptFromClient: a session the gateway ends
// (MAX_SESSION_SECS) while a response streams, whose cancel the upstream
// answers response_cancel_not_active: the client gets the gateway's notice,
// the response's response.done and the close, never the upstream's error
// (on the code before holdGatewayAnswer it got it before the close), with
// continuity on (the holder is continuity's) and off (a filter only); the
// record bills the response, confirmed.
func TestGatewayEndCancelNotActiveKeptFromClient(t *testing.T) {
	cfg := mockai.Config{AudioDeltas: 400, AudioDeltaInterval: 20 * time.Millisecond, CancelLate: true}
	overBoth(t, cfg, func(t *testing.T, mock *mockai.Server, trust func(*Settings)) {
		for _, continuity := range []bool{true, false} {
			name := "continuity"
			if !continuity {
				name = "no continuity"
			}
			t.Run(name, func(t *testing.T) {
				g, logPath := billingGateway(t, mock, trust, func(c *Settings) {
					c.MaxSessionDuration, c.Continuity = time.Second, continuity
				})
				c := g.dial(t, "model=gpt-realtime", bearer(testMasterKey))
				read(t, c)
				send(t, c, map[string]any{"type": "response.create"})
				evs, ce := eventsUntilClose(t, c)
				completed := false
				for _, e := range evs {
					if gatewayErrorOf(e) {
						t.Fatalf("the client got the upstream's error for the gateway's cancel: %v", e)
					}
					completed = completed || (e.typ() == "response.done" && e.str("response", "status") == "completed")
				}
				if !completed {
					t.Errorf("no completed response.done before the close %v", ce)
				}
				rec := waitRecords(t, logPath, 1)[0]
				if rec.Usage.Responses != 1 || rec.Unconfirmed || rec.Usage.OutputTokenDetails.AudioTokens == 0 || rec.CostUSD == 0 {
					t.Errorf("record usage %+v, cost %v, unconfirmed %v; want the response's usage, confirmed", rec.Usage, rec.CostUSD, rec.Unconfirmed)
				}
				if got := metricValue(t, g, `rtgate_gateway_event_errors_total{reason="response_cancel_not_active"}`); got != 1 {
					t.Errorf("rtgate_gateway_event_errors_total %v, want 1", got)
				}
			})
		}
	})
}

// TestTranscriptionRewriteRefusedKeptFromClient: the upstream refuses the
// session.update the gateway sends to impose the group's transcription
// model (mockai serves no RejectTranscriptionModel): the client, which sent
// no such update, never gets that error; it is counted (reason other).
func TestTranscriptionRewriteRefusedKeptFromClient(t *testing.T) {
	overBoth(t, mockai.Config{}, func(t *testing.T, mock *mockai.Server, trust func(*Settings)) {
		g := startGateway(t, nil, func(c *Settings) {
			trust(c)
			c.TranscriptionModel = "reject-transcribe"
			c.RoutesFile = writeConfig(t, "model_list:"+openaiEntry("gpt-realtime", mock)+`
  - model_name: reject-transcribe
    litellm_params:
      model: openai/`+mockai.RejectTranscriptionModel+`
      api_base: `+mock.BaseURL()+`
      api_key: os.environ/RTGATE_TEST_UPSTREAM
keys:
  - name: team-a
    key: os.environ/TEAM_A_KEY
    models: [gpt-realtime, reject-transcribe]`+configTail)
		})
		c := g.dial(t, "model=gpt-realtime", bearer("sk-team-a-test"))
		read(t, c)
		send(t, c, map[string]any{"type": "session.update", "session": map[string]any{"type": "realtime",
			"audio": map[string]any{"input": map[string]any{"transcription": map[string]any{"model": "gpt-4o-transcribe"}}}}})
		readUntil(t, c, "session.updated") // the client's
		waitFor(t, "the gateway's session.update upstream", func() bool {
			n := 0
			for _, typ := range receivedBy(t, mock, 0) {
				if typ == "session.update" {
					n++
				}
			}
			return n == 2
		})
		// mockai answers in order: its error for the gateway's update comes
		// before this item's answer.
		send(t, c, userItem("item_user1", "hello"))
		if _, seen := readUntil(t, c, "conversation.item.done"); slices.Contains(seen, "error") {
			t.Fatalf("the client got an error for the gateway's session.update: %v", seen)
		}
		if got := metricValue(t, g, `rtgate_gateway_event_errors_total{reason="other"}`); got != 1 {
			t.Errorf("rtgate_gateway_event_errors_total{reason=other} %v, want 1", got)
		}
	})
}
