package server

import (
	"encoding/json"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gobwas/ws"
	"github.com/gorilla/websocket"

	"rtgate/frames"
	"rtgate/mockai"
	"rtgate/server/session"
)

// Rollovers and the edges of a resume a client notices: every turn is
// answered across many rollovers, a rollover forced while a response is in
// progress, a client frame half sent to the lost upstream, and a resume
// refused after the upstream's session_expired.

// turnsAcrossRollovers has a client ask for responses back to back (a new
// response.create the instant the last response.done arrives, so that the
// quiet moments a rollover waits for are the instants a request is on its
// way) until its session moved to a fresh upstream want times (rollovers;
// on a slow machine the cap itself may come first, and counts). Every
// request must be answered with a response.done: completed, or ended by a
// rollover forced at its deadline, which cancels the response in progress
// to keep its usage (cancelled; TestForcedRolloverDuringResponse), or by a
// lost upstream (failed with upstream_lost). It returns how many responses
// were answered and how many were ended so.
func turnsAcrossRollovers(c *websocket.Conn, want int, until time.Time) (answered, failed int, err error) {
	rollovers := 0
	for turn := 1; rollovers < want; turn++ {
		if time.Now().After(until) {
			return answered, failed, fmt.Errorf("only %d rollovers by the deadline (turn %d)", rollovers, turn)
		}
		if err := c.WriteMessage(websocket.TextMessage, []byte(`{"type":"response.create"}`)); err != nil {
			return answered, failed, fmt.Errorf("turn %d: send: %w", turn, err)
		}
		for done := false; !done; {
			_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
			_, p, err := c.ReadMessage()
			if err != nil {
				return answered, failed, fmt.Errorf("turn %d got no answer (after %d rollovers): %w", turn, rollovers, err)
			}
			var e event
			if err := json.Unmarshal(p, &e); err != nil {
				return answered, failed, err
			}
			switch e.typ() {
			case session.EventResumed:
				if e.str("cause") != "rollover" && e.str("cause") != "session_expired" {
					return answered, failed, fmt.Errorf("turn %d: resumed %v", turn, e)
				}
				rollovers++
			case "error":
				return answered, failed, fmt.Errorf("turn %d: error %v", turn, e)
			case "response.done":
				switch {
				case e.str("response", "status") == "completed":
				case e.str("response", "status") == "cancelled",
					e.str("response", "status") == "failed" && e.str("response", "status_details", "error", "code") == "upstream_lost":
					failed++
				default:
					return answered, failed, fmt.Errorf("turn %d: %v", turn, e)
				}
				answered++
				done = true
			}
		}
	}
	return answered, failed, nil
}

// TestRolloverKeepsEveryTurn: many sessions roll over while asking for
// responses back to back. The old relay checked for a quiet moment before
// letting go of the upstream, not while: a response.create forwarded in
// between (or not yet answered with response.created) stayed on the upstream
// let go of, and its turn was never answered (the 10-minute run's lost
// turns).
//
// Each session makes as many rollovers as its resume budget allows
// (maxResumes in resumeWindow). A loaded box once lost a turn here (about
// one CI run in six): a forced rollover's response.cancel reached the
// upstream after its response had ended, and the upstream's
// response_cancel_not_active error, which names the gateway's own event,
// was taken as the answer to the client's id-less response.create sent
// meanwhile, so the rollover left that request on the abandoned upstream;
// the quiet session then rolled over until its budget was spent and the
// next cap reached the client as session_expired. continuity's
// State.refused now ignores errors that name an event the gateway made
// (TestAsked's "the gateway's own event's error").
func TestRolloverKeepsEveryTurn(t *testing.T) {
	const sessions, rollovers = 12, maxResumes
	overBoth(t, mockai.Config{SessionCap: 4 * time.Second, AudioDeltas: 1}, func(t *testing.T, mock *mockai.Server, trust func(*Settings)) {
		g := startGateway(t, mock, trust)
		var wg sync.WaitGroup
		var mu sync.Mutex
		answered, failed := 0, 0
		until := time.Now().Add(60 * time.Second)
		for i := range sessions {
			c := g.dial(t, "model=gpt-realtime", bearer(testMasterKey))
			read(t, c) // session.created
			wg.Go(func() {
				n, f, err := turnsAcrossRollovers(c, rollovers, until)
				_ = c.Close() // done: before its next cap, which no resume would carry
				mu.Lock()
				answered, failed = answered+n, failed+f
				mu.Unlock()
				if err != nil {
					t.Errorf("session %d: %v", i, err)
				}
			})
		}
		wg.Wait()
		n := resumes(t, g, "rollover", "ok")
		capped := resumes(t, g, "session_expired", "ok")
		t.Logf("%d responses answered across %v rollovers and %v resumes at the cap (%d ended by a forced rollover or a lost upstream)", answered, n, capped, failed)
		if n < sessions*rollovers/2 { // the cap may come first on a loaded machine, not mostly
			t.Errorf("%v rollovers, want most of %d", n, sessions*rollovers)
		}
	})
}

// TestForcedRolloverDuringResponse: the deadline before the cap passes
// while a response is in progress. The gateway cancels it first (a
// rollover it chooses loses no usage: forcedRollover), so the client sees that
// response end as a cancelled response.done carrying its usage, then the
// gateway's resumed event, and the conversation goes on on the fresh
// upstream, which got the confirmed items.
func TestForcedRolloverDuringResponse(t *testing.T) {
	// A response far longer than the cap: no quiet moment comes.
	overBoth(t, mockai.Config{SessionCap: 4 * time.Second, AudioDeltas: 4000, AudioDeltaInterval: 5 * time.Millisecond},
		func(t *testing.T, mock *mockai.Server, trust func(*Settings)) {
			g := startGateway(t, mock, trust)
			c := g.dial(t, "model=gpt-realtime", bearer(testMasterKey))
			read(t, c)
			send(t, c, userItem("item_user1", "tell me a long story"))
			readUntil(t, c, "conversation.item.done")
			send(t, c, map[string]any{"type": "response.create"})
			created, _ := readUntil(t, c, "response.created")
			id := created.str("response", "id")
			done, seen := readUntil(t, c, "response.done")
			if done.str("response", "id") != id || done.str("response", "status") != "cancelled" ||
				done.str("response", "usage", "output_token_details", "audio_tokens") == "0" {
				t.Fatalf("response.done %v (after %d events), want %s cancelled with its usage", done, len(seen), id)
			}
			resumed, _ := readUntil(t, c, session.EventResumed)
			if resumed.str("cause") != "rollover" || resumed.str("lost_response_id") != "" {
				t.Fatalf("after the cancelled response.done: %v, want %s (rollover, no response lost)", resumed, session.EventResumed)
			}
			send(t, c, userItem("item_user2", "are you still there?"))
			if e, _ := readUntil(t, c, "conversation.item.done"); e.str("item", "id") != "item_user2" {
				t.Fatalf("item done %v", e)
			}
			// The cancelled answer is a confirmed item now, as in OpenAI's
			// own conversation after a cancel.
			answer := done["response"].(map[string]any)["output"].([]any)[0].(map[string]any)["id"].(string)
			want := []string{"conversation.item.create item_user1 user input_text",
				"conversation.item.create " + answer + " assistant output_text", "conversation.item.create item_user2 user input_text"}
			if got := replayed(t, mock, 1); strings.Join(got, "\n") != strings.Join(want, "\n") {
				t.Errorf("the fresh upstream received\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
			}
		})
}

// TestClientFrameCutByLoss: the upstream is lost while a client frame is
// half sent to it. One of up to poller.MaxCutKept bytes reaches the fresh
// upstream whole, after the replay; a longer one cannot, and the client is
// told (client_event_lost) while the session goes on.
func TestClientFrameCutByLoss(t *testing.T) {
	for _, tc := range []struct {
		name   string
		text   int  // the item's text: the frame is a little longer
		resent bool // the frame reaches the fresh upstream
	}{
		{"kept", 40 << 10, true},
		{"too long to keep", 100 << 10, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// The upstream drops at its first output delta, a moment after
			// response.created: the client has half sent its frame by then.
			cfg := mockai.Config{AudioDeltas: 2, FirstAudioDelay: 300 * time.Millisecond,
				Cut: mockai.Cut{Kind: mockai.CutDrop, AfterResponses: 1, During: true, Times: 1}}
			overBoth(t, cfg, func(t *testing.T, mock *mockai.Server, trust func(*Settings)) {
				g := startGateway(t, mock, trust)
				var raw net.Conn
				d := dialer()
				d.NetDial = func(network, addr string) (net.Conn, error) {
					conn, err := net.Dial(network, addr)
					raw = conn
					return conn, err
				}
				c := dialWith(t, d, g.url("model=gpt-realtime"), bearer(testMasterKey))
				read(t, c)
				send(t, c, map[string]any{"type": "response.create"})
				readUntil(t, c, "response.created")

				item := userItem("item_big", strings.Repeat("a", tc.text))
				payload, _ := json.Marshal(item)
				frame := frames.AppendFrame(nil, ws.OpText, payload, true)
				half := len(frame) / 2
				if _, err := raw.Write(frame[:half]); err != nil {
					t.Fatal(err)
				}
				done, _ := readUntil(t, c, "response.done") // the upstream is lost
				if done.str("response", "status") != "failed" {
					t.Fatalf("response.done %v, want failed", done)
				}
				var lost event
				for e := read(t, c); e.typ() != session.EventResumed; e = read(t, c) {
					if e.typ() == "error" {
						lost = e
					}
				}
				if _, err := raw.Write(frame[half:]); err != nil {
					t.Fatal(err)
				}
				send(t, c, userItem("item_after", "and this one"))
				e, seen := readUntil(t, c, "conversation.item.done")
				if tc.resent {
					if lost != nil {
						t.Errorf("the client was told %v", lost)
					}
					if e.str("item", "id") != "item_big" {
						t.Fatalf("first item done %v (after %v), want item_big", e.str("item", "id"), seen)
					}
					content := e["item"].(map[string]any)["content"].([]any)[0].(map[string]any)
					if text, _ := content["text"].(string); len(text) != tc.text {
						t.Errorf("item_big arrived with %d bytes of text, want %d", len(text), tc.text)
					}
					e, _ = readUntil(t, c, "conversation.item.done")
				} else if lost.str("error", "code") != "client_event_lost" {
					t.Errorf("error %v, want client_event_lost", lost)
				}
				if e.str("item", "id") != "item_after" {
					t.Fatalf("item done %v, want item_after", e)
				}
				// mockai records an event over 4 KiB by its length.
				want := []string{"conversation.item.create item_after"}
				if tc.resent {
					want = append([]string{fmt.Sprintf("conversation.item.create %d bytes", len(payload))}, want...)
				}
				if got := receivedBy(t, mock, 1); strings.Join(got, "\n") != strings.Join(want, "\n") {
					t.Errorf("the fresh upstream received\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
				}
			})
		})
	}
}

// TestResumeRefusedAfterExpired: a session out of resumes reaches the
// upstream's cap once more. It ends as it would without continuity: the
// upstream's session_expired error event (held back while the resume was
// weighed), then its close 1001.
func TestResumeRefusedAfterExpired(t *testing.T) {
	// No expires_at: no rollover, the cap itself each time.
	overBoth(t, mockai.Config{SessionCap: 400 * time.Millisecond, NoExpiresAt: true}, func(t *testing.T, mock *mockai.Server, trust func(*Settings)) {
		g := startGateway(t, mock, trust)
		c := g.dial(t, "model=gpt-realtime", bearer(testMasterKey))
		read(t, c)
		for i := range maxResumes {
			if e, _ := readUntil(t, c, session.EventResumed); e.str("cause") != "session_expired" {
				t.Fatalf("resume %d: %v", i+1, e)
			}
		}
		e := read(t, c)
		if e.typ() != "error" || e.str("error", "code") != "session_expired" {
			t.Fatalf("got %v, want the upstream's session_expired error", e)
		}
		if ce := closeOf(t, c); ce.Code != 1001 || !strings.Contains(ce.Text, "maximum duration") {
			t.Errorf("close %v, want the upstream's 1001", ce)
		}
		if n := resumes(t, g, "session_expired", "refused"); n != 1 {
			t.Errorf("refused resumes counted %v", n)
		}
	})
}

// receivedBy is what the n-th upstream session received: each event's type
// and its item's id, or its length when mockai kept only that.
func receivedBy(t *testing.T, mock *mockai.Server, n int) []string {
	t.Helper()
	var got []string
	for _, e := range mock.Received(upstreamSession(t, mock, n)) {
		var ev struct {
			Truncated int `json:"truncated"`
			Item      struct {
				ID string `json:"id"`
			} `json:"item"`
		}
		_ = json.Unmarshal(e.Event, &ev)
		switch {
		case ev.Truncated > 0:
			got = append(got, fmt.Sprintf("%s %d bytes", e.Type, ev.Truncated))
		case ev.Item.ID != "":
			got = append(got, e.Type+" "+ev.Item.ID)
		default:
			got = append(got, e.Type)
		}
	}
	return got
}

// upstreamSession is the id of the n-th upstream session mockai served
// (from 0).
func upstreamSession(t *testing.T, mock *mockai.Server, n int) string {
	t.Helper()
	var ids []string
	for _, r := range mock.Records() {
		if r.SessionID != "" {
			ids = append(ids, r.SessionID)
		}
	}
	if len(ids) <= n {
		t.Fatalf("%d upstream sessions, want more than %d", len(ids), n)
	}
	return ids[n]
}

// TestResumeAsksAgain: the upstream drops right after each response.done,
// and the client asks for its next response at once. The request reaches
// the dying upstream (which never answers it) or the queue for the fresh
// one; either way the client gets its answer: an unanswered
// response.create is asked again after the replay. The old relay left a
// request the dying upstream had taken unanswered.
func TestResumeAsksAgain(t *testing.T) {
	// Every upstream session drops after its first response, which lasts
	// long enough for a resume's hand-over to come first.
	overBoth(t, mockai.Config{AudioDeltas: 3, AudioDeltaInterval: 20 * time.Millisecond,
		Cut: mockai.Cut{Kind: mockai.CutDrop, AfterResponses: 1}},
		func(t *testing.T, mock *mockai.Server, trust func(*Settings)) {
			g := startGateway(t, mock, trust)
			c := g.dial(t, "model=gpt-realtime", bearer(testMasterKey))
			read(t, c)
			// Each turn's upstream is lost after it: maxResumes resumes,
			// then the last turn's loss ends the session.
			for turn := 1; turn <= maxResumes+1; turn++ {
				send(t, c, map[string]any{"type": "response.create"})
				for done := false; !done; {
					_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
					_, p, err := c.ReadMessage()
					if err != nil {
						t.Fatalf("turn %d got no answer: %v", turn, err)
					}
					var e event
					_ = json.Unmarshal(p, &e)
					switch e.typ() {
					case "error":
						t.Fatalf("turn %d: %v", turn, e)
					case "response.done":
						if e.str("response", "status") != "completed" {
							t.Fatalf("turn %d: %v", turn, e)
						}
						done = true
					}
				}
			}
			if n := resumes(t, g, "upstream_lost", "ok"); n != maxResumes {
				t.Errorf("%v resumes, want %d", n, maxResumes)
			}
		})
}
