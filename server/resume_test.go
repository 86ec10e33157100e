package server

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	coder "github.com/coder/websocket"
	"github.com/gorilla/websocket"

	"rtgate/mockai"
	"rtgate/server/session"
	"rtgate/server/usage"
)

// Session continuity as a client sees it: its socket stays open across the
// loss of the upstream, the conversation goes on, and the fresh upstream
// session got the configuration and every item, in order, with their ids.

// userItem is a conversation.item.create of a user's text with id.
// maxResumes is the documented cap on a session's resumes: "at most 3
// times a minute" (docs/continuity.md); a fourth loss ends it as before.
const maxResumes = 3

// resumes is rtgate_session_resumes_total{cause, outcome}.
func resumes(t testing.TB, g *gateway, cause, outcome string) float64 {
	t.Helper()
	return gatheredLabels(t, g.srv.reg, "rtgate_session_resumes_total", map[string]string{"cause": cause, "outcome": outcome})
}

func userItem(id, text string) map[string]any {
	return map[string]any{"type": "conversation.item.create", "item": map[string]any{"id": id, "type": "message", "role": "user",
		"content": []any{map[string]any{"type": "input_text", "text": text}}}}
}

// converse sets the session up and has one turn: session.update, a user
// item, a response; it returns the assistant item's id.
func converse(t *testing.T, c *websocket.Conn) string {
	t.Helper()
	send(t, c, map[string]any{"type": "session.update", "session": map[string]any{"type": "realtime", "instructions": "be brief"}})
	if e, _ := readUntil(t, c, "session.updated"); e.str("session", "instructions") != "be brief" {
		t.Fatalf("session.updated %v", e)
	}
	send(t, c, userItem("item_user1", "hello"))
	readUntil(t, c, "conversation.item.done")
	send(t, c, map[string]any{"type": "response.create"})
	done, _ := readUntil(t, c, "response.done")
	out, _ := done["response"].(map[string]any)["output"].([]any)
	if len(out) != 1 {
		t.Fatalf("response.done output %v", out)
	}
	return out[0].(map[string]any)["id"].(string)
}

// secondTurn checks the session goes on after the resume.
func secondTurn(t *testing.T, c *websocket.Conn) {
	t.Helper()
	send(t, c, userItem("item_user2", "and then?"))
	if e, _ := readUntil(t, c, "conversation.item.done"); e.str("item", "id") != "item_user2" {
		t.Fatalf("item done %v", e)
	}
	send(t, c, map[string]any{"type": "response.create"})
	if done, _ := readUntil(t, c, "response.done"); done.str("response", "status") != "completed" {
		t.Fatalf("second response %v", done)
	}
}

// wantReplay checks the second upstream session got converse's session
// config and items, with assistant's id, then secondTurn's item and response.
func wantReplay(t *testing.T, mock *mockai.Server, assistant string) {
	t.Helper()
	want := []string{"session.update be brief", "conversation.item.create item_user1 user input_text",
		"conversation.item.create " + assistant + " assistant output_text",
		"conversation.item.create item_user2 user input_text", "response.create"}
	if got := replayed(t, mock, 1); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("the fresh upstream received\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// replayed is what the n-th upstream session received, as types (with the
// item id for item creates, and the instructions for session.update).
func replayed(t *testing.T, mock *mockai.Server, n int) []string {
	t.Helper()
	var got []string
	for _, e := range mock.Received(upstreamSession(t, mock, n)) {
		var ev struct {
			Item struct {
				ID      string `json:"id"`
				Role    string `json:"role"`
				Content []struct {
					Type string `json:"type"`
				} `json:"content"`
			} `json:"item"`
			Session struct {
				Instructions string `json:"instructions"`
			} `json:"session"`
		}
		_ = json.Unmarshal(e.Event, &ev)
		switch e.Type {
		case "conversation.item.create":
			got = append(got, e.Type+" "+ev.Item.ID+" "+ev.Item.Role+" "+ev.Item.Content[0].Type)
		case "session.update":
			got = append(got, e.Type+" "+ev.Session.Instructions)
		default:
			got = append(got, e.Type)
		}
	}
	return got
}

func TestResumeBetweenTurns(t *testing.T) {
	for _, tc := range []struct {
		name  string
		cut   mockai.Cut
		cause string
	}{
		{"dropped", mockai.Cut{Kind: mockai.CutDrop, AfterResponses: 1, Times: 1}, "upstream_lost"},
		{"closed 1012", mockai.Cut{Kind: mockai.CutClose, Code: 1012, AfterResponses: 1, Times: 1}, "upstream_closed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			overBoth(t, mockai.Config{AudioDeltas: 2, Cut: tc.cut}, func(t *testing.T, mock *mockai.Server, trust func(*Settings)) {
				g := startGateway(t, mock, trust)
				c := g.dial(t, "model=gpt-realtime", bearer(testMasterKey))
				read(t, c) // session.created
				assistant := converse(t, c)
				resumed, _ := readUntil(t, c, session.EventResumed)
				if resumed.str("cause") != tc.cause || resumed.str("replayed_items") != "2" || resumed.str("lost_response_id") != "" {
					t.Errorf("resumed event %v", resumed)
				}
				secondTurn(t, c)
				wantReplay(t, mock, assistant)
				if err := c.WriteMessage(websocket.CloseMessage, websocket.FormatCloseMessage(1000, "bye")); err != nil {
					t.Fatal(err)
				}
				if ce := closeOf(t, c); ce.Code != 1000 {
					t.Errorf("close %v", ce)
				}
			})
		})
	}
}

// A response in flight when the upstream goes ends for the client as a
// failed response.done, then the session continues.
func TestResumeDuringResponse(t *testing.T) {
	overBoth(t, mockai.Config{AudioDeltas: 50, AudioDeltaInterval: 5 * time.Millisecond,
		Cut: mockai.Cut{Kind: mockai.CutDrop, AfterResponses: 1, During: true, Times: 1}},
		func(t *testing.T, mock *mockai.Server, trust func(*Settings)) {
			g := startGateway(t, mock, trust)
			c := g.dial(t, "model=gpt-realtime", bearer(testMasterKey))
			read(t, c)
			send(t, c, userItem("item_user1", "hello"))
			readUntil(t, c, "conversation.item.done")
			send(t, c, map[string]any{"type": "response.create"})
			created, _ := readUntil(t, c, "response.created")
			done, seen := readUntil(t, c, "response.done")
			if done.str("response", "status") != "failed" || done.str("response", "id") != created.str("response", "id") ||
				done.str("response", "status_details", "error", "code") != "upstream_lost" {
				t.Fatalf("response.done %v after %v, want the response failed: upstream_lost", done, seen)
			}
			resumed := read(t, c)
			if resumed.typ() != session.EventResumed || resumed.str("lost_response_id") != created.str("response", "id") || resumed.str("cause") != "upstream_lost" {
				t.Fatalf("after the failed response: %v", resumed)
			}
			secondTurn(t, c)
			// The lost response's item was never confirmed: only the user's items.
			want := []string{"conversation.item.create item_user1 user input_text",
				"conversation.item.create item_user2 user input_text", "response.create"}
			if got := replayed(t, mock, 1); strings.Join(got, "\n") != strings.Join(want, "\n") {
				t.Errorf("the fresh upstream received\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
			}
		})
}

// OpenAI's cap: session_expired and 1001 never reach the client, between
// turns or during a response.
func TestResumeAtTheCap(t *testing.T) {
	for _, during := range []bool{false, true} {
		name := "between turns"
		if during {
			name = "during a response"
		}
		t.Run(name, func(t *testing.T) {
			// No expires_at: the gateway cannot see the cap coming (no
			// rollover), so the upstream's own cap ends the session.
			cfg := mockai.Config{SessionCap: 700 * time.Millisecond, NoExpiresAt: true, AudioDeltas: 2}
			if during {
				cfg.AudioDeltas, cfg.AudioDeltaInterval = 1000, 5*time.Millisecond
			}
			overBoth(t, cfg, func(t *testing.T, mock *mockai.Server, trust func(*Settings)) {
				g := startGateway(t, mock, trust)
				c := g.dial(t, "model=gpt-realtime", bearer(testMasterKey))
				read(t, c)
				send(t, c, userItem("item_user1", "hello"))
				readUntil(t, c, "conversation.item.done")
				if during {
					send(t, c, map[string]any{"type": "response.create"})
				}
				var seen []string
				for {
					e := read(t, c)
					seen = append(seen, e.typ())
					if e.typ() == "error" {
						t.Fatalf("the client got the upstream's error: %v", e)
					}
					if e.typ() == session.EventResumed {
						if e.str("cause") != "session_expired" {
							t.Errorf("resumed %v", e)
						}
						break
					}
				}
				if during && !strings.Contains(strings.Join(seen, " "), "response.done") {
					t.Errorf("no failed response.done before the resume: %v", seen)
				}
				send(t, c, userItem("item_user2", "still there?"))
				if e, _ := readUntil(t, c, "conversation.item.done"); e.str("item", "id") != "item_user2" {
					t.Fatalf("item done %v", e)
				}
				got := replayed(t, mock, 1)
				if len(got) < 2 || got[0] != "conversation.item.create item_user1 user input_text" {
					t.Errorf("the fresh upstream received %v", got)
				}
			})
		})
	}
}

// Half a frame towards the client cannot be repaired: the session ends as
// before (1011, no close frame possible mid-frame: the connection drops).
func TestMidFrameLossEnds(t *testing.T) {
	overBoth(t, mockai.Config{AudioDeltas: 3, Cut: mockai.Cut{Kind: mockai.CutMidFrame, AfterResponses: 1, During: true, Times: 1}},
		func(t *testing.T, mock *mockai.Server, trust func(*Settings)) {
			g := startGateway(t, mock, trust)
			c := g.dial(t, "model=gpt-realtime", bearer(testMasterKey))
			read(t, c)
			send(t, c, map[string]any{"type": "response.create"})
			_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
			for {
				_, p, err := c.ReadMessage()
				if err != nil {
					break
				}
				if strings.Contains(string(p), session.EventResumed) {
					t.Fatal("resumed after a loss in the middle of a frame")
				}
			}
			waitFor(t, "the session to end", func() bool { return g.srv.sessionsOpen.Load() == 0 })
			if n := resumes(t, g, "mid_frame", "failed"); n != 1 {
				t.Errorf("mid_frame losses counted %v, want 1", n)
			}
		})
}

// Continuity off (SESSION_CONTINUITY=0, or a key's continuity: false): the
// client gets the upstream's loss as before.
func TestContinuityOff(t *testing.T) {
	mock := startMock(t, mockai.Config{AudioDeltas: 1, Cut: mockai.Cut{Kind: mockai.CutDrop, AfterResponses: 1}})
	g := startGateway(t, mock, func(s *Settings) { s.Continuity = false })
	lostAsBefore(t, g, testMasterKey)
}

// lostAsBefore has one turn on a session whose upstream drops after it, and
// expects the session to end as without continuity.
func lostAsBefore(t *testing.T, g *gateway, key string) {
	t.Helper()
	c := g.dial(t, "model=gpt-realtime", bearer(key))
	read(t, c)
	send(t, c, map[string]any{"type": "response.create"})
	readUntil(t, c, "response.done")
	if ce := closeOf(t, c); ce.Code != 1011 || ce.Text != "upstream connection lost" {
		t.Errorf("close %v, want 1011 upstream connection lost", ce)
	}
}

// A resume that finds no upstream ends the session: the upstream is gone
// for good here (every session cut, the listener refusing afterwards).
func TestResumeFails(t *testing.T) {
	mock := startMock(t, mockai.Config{AudioDeltas: 1, Cut: mockai.Cut{Kind: mockai.CutDrop, AfterResponses: 1}})
	g := startGateway(t, mock, func(s *Settings) { s.DialTimeout = 2 * time.Second })
	c := g.dial(t, "model=gpt-realtime", bearer(testMasterKey))
	read(t, c)
	// Every session is cut after its first response: the session resumes
	// maxResumes times, then ends.
	for i := range maxResumes + 1 {
		send(t, c, map[string]any{"type": "response.create"})
		readUntil(t, c, "response.done")
		if i < maxResumes {
			readUntil(t, c, session.EventResumed)
		}
	}
	if ce := closeOf(t, c); ce.Code != 1011 || ce.Text != "upstream connection lost" {
		t.Errorf("close %v, want 1011 upstream connection lost", ce)
	}
	waitFor(t, "the session to end", func() bool { return g.srv.sessionsOpen.Load() == 0 })
	if n := resumes(t, g, "upstream_lost", "refused"); n != 1 {
		t.Errorf("refused resumes %v, want 1", n)
	}
}

// coder/websocket, an independent client, across a resume over a TLS
// upstream, with audio appended while the upstream is being replaced: every
// append the client sent after it learnt of the loss (the failed
// response.done) reaches the fresh upstream, queued meanwhile.
func TestResumeCoderClient(t *testing.T) {
	mock := startMock(t, mockai.Config{TLS: true, AudioDeltas: 100, AudioDeltaInterval: 5 * time.Millisecond,
		UpgradeDelay: 30 * time.Millisecond,
		Cut:          mockai.Cut{Kind: mockai.CutClose, Code: 1011, AfterResponses: 1, During: true, Times: 1}})
	roots := trustMock(t, mock)
	g := startGateway(t, mock, func(c *Settings) { c.UpstreamRoots = roots })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, _, err := coder.Dial(ctx, g.url("model=gpt-realtime"), &coder.DialOptions{HTTPHeader: bearer(testMasterKey)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseNow()
	c.SetReadLimit(1 << 20)
	readType := func() map[string]any {
		_, p, err := c.Read(ctx)
		if err != nil {
			t.Fatalf("read: %v", err)
		}
		var e map[string]any
		if err := json.Unmarshal(p, &e); err != nil {
			t.Fatal(err)
		}
		return e
	}
	until := func(typ string) map[string]any {
		for range 1000 {
			if e := readType(); e["type"] == typ {
				return e
			}
		}
		t.Fatalf("no %s", typ)
		return nil
	}
	write := func(v any) {
		b, _ := json.Marshal(v)
		if err := c.Write(ctx, coder.MessageText, b); err != nil {
			t.Fatal(err)
		}
	}
	until("session.created")
	write(map[string]any{"type": "response.create"})
	if done := until("response.done"); done["response"].(map[string]any)["status"] != "failed" {
		t.Fatalf("response.done %v, want the response failed", done)
	}
	// The upstream closed 1011 during the response; appends sent now queue
	// while the fresh upstream connects (its upgrade is slowed).
	audio := base64.StdEncoding.EncodeToString(make([]byte, 4800))
	for range 10 {
		write(map[string]any{"type": "input_audio_buffer.append", "audio": audio})
	}
	resumed := until(session.EventResumed)
	if resumed["cause"] != "upstream_closed" {
		t.Errorf("resumed %v", resumed)
	}
	write(map[string]any{"type": "response.create"})
	done := until("response.done")
	usage, _ := done["response"].(map[string]any)["usage"].(map[string]any)
	details, _ := usage["input_token_details"].(map[string]any)
	// 10 appends of 4,800 bytes: 100 audio tokens, all on the fresh upstream.
	if details["audio_tokens"] != float64(100) {
		t.Errorf("input audio tokens %v, want 100: every append reached the fresh upstream", details["audio_tokens"])
	}
	_ = c.Close(coder.StatusNormalClosure, "bye")
}

// One record across upstream sessions; a key with continuity: false gets
// the upstream's loss as before; another deployment serves the resume when
// the first one's connection failed.
func TestResumeRecordAndKeySwitch(t *testing.T) {
	a := startMock(t, mockai.Config{AudioDeltas: 1, Cut: mockai.Cut{Kind: mockai.CutDrop, AfterResponses: 1}})
	b := startMock(t, mockai.Config{AudioDeltas: 1})
	t.Setenv("KEEP_KEY", "sk-keep-0123456789")
	t.Setenv("NOKEEP_KEY", "sk-nokeep-0123456789")
	path := writeConfig(t, "model_list:"+openaiEntry("gpt-realtime", a)+openaiEntry("gpt-realtime", b)+`
keys:
  - name: keep
    key: os.environ/KEEP_KEY
  - name: nokeep
    key: os.environ/NOKEEP_KEY
    continuity: false
`+configTail)
	logPath := filepath.Join(t.TempDir(), "usage.jsonl")
	g := startGateway(t, nil, func(c *Settings) { c.RoutesFile, c.UsageLog, c.HedgeDelay = path, logPath, 0 })

	// Sessions until one starts on a (the ranking may pick either).
	var c *websocket.Conn
	for try := 0; c == nil; try++ {
		if try == 20 {
			t.Fatal("20 sessions, none on the first deployment")
		}
		cc := g.dial(t, "model=gpt-realtime", bearer("sk-keep-0123456789"))
		created := read(t, cc)
		onA := false
		for _, r := range a.Records() {
			onA = onA || r.SessionID == created.str("session", "id")
		}
		if onA {
			c = cc
		} else {
			cc.Close()
		}
	}
	for i := range 3 {
		send(t, c, map[string]any{"type": "response.create"})
		readUntil(t, c, "response.done")
		if i == 0 {
			// What the client sends before this may reach the dying
			// upstream and be lost with it (docs/continuity.md).
			readUntil(t, c, session.EventResumed)
		}
	}
	// a drops every session after its first response: the session resumed
	// once, on b (a was reported failed), and b answered the rest.
	if err := c.WriteMessage(websocket.CloseMessage, websocket.FormatCloseMessage(1000, "bye")); err != nil {
		t.Fatal(err)
	}
	closeOf(t, c)
	waitFor(t, "the sessions to end", func() bool { return g.srv.SessionsOpen() == 0 })
	_ = g.srv.Shutdown(context.Background())
	var r *usage.Record
	for _, rec := range readRecords(t, logPath) {
		if rec.Usage.Responses == 3 {
			r = &rec
		}
	}
	if r == nil {
		t.Fatal("no record of the session")
	}
	if r.UpstreamSessions != 2 || len(r.Resumes) != 1 || r.Resumes[0].Cause != "upstream_lost" || r.Resumes[0].Outcome != "ok" ||
		!strings.Contains(r.Deployment, b.Addr()) {
		t.Errorf("record %+v, want 2 upstream sessions, one resume, ending on %s", r, b.Addr())
	}
}

// TestResumeRespectsMaxParallel: a resume leaves the deployment that lost
// the session only for one with room. With the other at its
// max_parallel_requests it goes back to the first, whose slot it holds,
// rather than past the other's limit.
func TestResumeRespectsMaxParallel(t *testing.T) {
	for _, secure := range []bool{false, true} {
		t.Run(map[bool]string{false: "ws", true: "wss"}[secure], func(t *testing.T) {
			a := startMock(t, mockai.Config{TLS: secure, AudioDeltas: 1, Cut: mockai.Cut{Kind: mockai.CutDrop, AfterResponses: 1}})
			b := startMock(t, mockai.Config{TLS: secure, AudioDeltas: 1})
			entry := func(m *mockai.Server, max string) string {
				return openaiEntry("gpt-realtime", m) + "\n      max_parallel_requests: " + max
			}
			path := writeConfig(t, "model_list:"+entry(a, "3")+entry(b, "1")+configTail)
			g := startGateway(t, nil, func(c *Settings) {
				if secure {
					c.UpstreamRoots = trustMock(t, a)
					c.UpstreamRoots.AppendCertsFromPEM(b.CertPEM())
				}
				c.RoutesFile, c.HedgeDelay = path, 0
			})
			// Three sessions: b's one slot and two of a's three.
			var onA []*websocket.Conn
			for range 3 {
				c := g.dial(t, "model=gpt-realtime", bearer(testMasterKey))
				id := read(t, c).str("session", "id")
				for _, r := range a.Records() {
					if r.SessionID == id {
						onA = append(onA, c)
					}
				}
			}
			if len(onA) != 2 || len(b.Records()) != 1 {
				t.Fatalf("%d sessions on a, %d on b: want 2 and 1", len(onA), len(b.Records()))
			}
			c := onA[0]
			send(t, c, map[string]any{"type": "response.create"})
			readUntil(t, c, "response.done")
			readUntil(t, c, session.EventResumed) // a dropped it after its response
			if n := len(b.Records()); n != 1 {
				t.Errorf("b served %d upstream sessions, want 1: the resume went past its max_parallel_requests", n)
			}
			if n := len(a.Records()); n != 3 {
				t.Errorf("a served %d upstream sessions, want 3 (two connects and the resume)", n)
			}
		})
	}
}

func TestKeyContinuityOff(t *testing.T) {
	a := startMock(t, mockai.Config{AudioDeltas: 1, Cut: mockai.Cut{Kind: mockai.CutDrop, AfterResponses: 1}})
	t.Setenv("NOKEEP_KEY", "sk-nokeep-0123456789")
	path := writeConfig(t, "model_list:"+openaiEntry("gpt-realtime", a)+`
keys:
  - name: nokeep
    key: os.environ/NOKEEP_KEY
    continuity: false
`+configTail)
	g := startGateway(t, nil, func(c *Settings) { c.RoutesFile = path })
	lostAsBefore(t, g, "sk-nokeep-0123456789")
}

// A session nearing its upstream's cap moves to a fresh upstream session at
// a quiet moment, before the upstream ends it: the client never sees
// session_expired.
func TestRolloverBeforeTheCap(t *testing.T) {
	overBoth(t, mockai.Config{SessionCap: 3 * time.Second, AudioDeltas: 2}, func(t *testing.T, mock *mockai.Server, trust func(*Settings)) {
		g := startGateway(t, mock, trust)
		c := g.dial(t, "model=gpt-realtime", bearer(testMasterKey))
		read(t, c)
		assistant := converse(t, c)
		e := read(t, c) // nothing else comes before the rollover
		if e.typ() != session.EventResumed || e.str("cause") != "rollover" || e.str("lost_response_id") != "" {
			t.Fatalf("got %v, want the rollover's %s", e, session.EventResumed)
		}
		secondTurn(t, c)
		wantReplay(t, mock, assistant)
		if n := resumes(t, g, "rollover", "ok"); n != 1 {
			t.Errorf("rollovers counted %v", n)
		}
	})
}

func TestContinuitySettings(t *testing.T) {
	for _, tc := range []struct {
		env  map[string]string
		cont bool
		max  time.Duration
	}{
		{nil, true, 4 * time.Hour},
		{map[string]string{"SESSION_CONTINUITY": "0"}, false, 61 * time.Minute},
		{map[string]string{"SESSION_CONTINUITY": "0", "MAX_SESSION_SECS": "7200"}, false, 2 * time.Hour},
		{map[string]string{"MAX_SESSION_SECS": "600"}, true, 10 * time.Minute},
	} {
		c, err := FromEnv(func(k string) (string, bool) { v, ok := tc.env[k]; return v, ok })
		if err != nil {
			t.Fatal(err)
		}
		if c.Continuity != tc.cont || c.MaxSessionDuration != tc.max {
			t.Errorf("%v: continuity %v max %v, want %v %v", tc.env, c.Continuity, c.MaxSessionDuration, tc.cont, tc.max)
		}
	}
	if _, err := FromEnv(func(k string) (string, bool) { return "maybe", k == "SESSION_CONTINUITY" }); err == nil ||
		!strings.Contains(err.Error(), "SESSION_CONTINUITY") {
		t.Errorf("a bad SESSION_CONTINUITY: %v", err)
	}
}

// A key's max_session_secs is the gateway's own cap on its sessions.
func TestKeyMaxSessionSecs(t *testing.T) {
	m := startMock(t, mockai.Config{})
	t.Setenv("SHORT_KEY", "sk-short-0123456789")
	path := writeConfig(t, "model_list:"+openaiEntry("gpt-realtime", m)+`
keys:
  - name: short
    key: os.environ/SHORT_KEY
    max_session_secs: 1
`+configTail)
	g := startGateway(t, nil, func(c *Settings) { c.RoutesFile = path })
	c := g.dial(t, "model=gpt-realtime", bearer("sk-short-0123456789"))
	read(t, c)
	if e, _ := readUntil(t, c, "error"); e.str("error", "code") != "session_max_duration" {
		t.Errorf("error %v", e)
	}
	if ce := closeOf(t, c); ce.Code != 1001 {
		t.Errorf("close %v, want 1001", ce)
	}
}

// A resume that finds no upstream (the only deployment is gone for good)
// ends the session with upstream_unavailable and 1011, within the dial
// budget.
func TestResumeNoUpstream(t *testing.T) {
	overBoth(t, mockai.Config{AudioDeltas: 1}, func(t *testing.T, mock *mockai.Server, trust func(*Settings)) {
		g := startGateway(t, mock, func(c *Settings) { trust(c); c.DialTimeout = 2 * time.Second })
		c := g.dial(t, "model=gpt-realtime", bearer(testMasterKey))
		read(t, c)
		send(t, c, map[string]any{"type": "response.create"})
		readUntil(t, c, "response.done")
		_ = mock.Close() // its sockets drop, and nothing listens any more
		e, _ := readUntil(t, c, "error")
		if e.str("error", "code") != "upstream_unavailable" {
			t.Errorf("error %v, want upstream_unavailable", e)
		}
		if ce := closeOf(t, c); ce.Code != 1011 {
			t.Errorf("close %v, want 1011", ce)
		}
		waitFor(t, "the session to end", func() bool { return g.srv.SessionsOpen() == 0 })
		if n := resumes(t, g, "upstream_lost", "failed"); n != 1 {
			t.Errorf("failed resumes %v, want 1", n)
		}
	})
}

// A client secret's session resumes configured as the secret said: its
// config, under what the client's session.update changed, is replayed
// (the pool serving the resume too).
func TestResumeClientSecret(t *testing.T) {
	mock := startMock(t, mockai.Config{TLS: true, AudioDeltas: 1, Cut: mockai.Cut{Kind: mockai.CutDrop, AfterResponses: 1, Times: 1}})
	g := startAppGateway(t, mock, func(c *Settings) { c.Pool.Size = 2 })
	waitFor(t, "warm sockets", func() bool { return mock.Stats().Sessions >= 2 })
	ek, _ := mint(t, g, testMasterKey, map[string]any{
		"session": map[string]any{"type": "realtime", "instructions": "Speak like a pirate.", "output_modalities": []string{"audio"}}})
	c := g.dial(t, "", bearer(ek))
	if first := read(t, c); first.str("session", "instructions") != "Speak like a pirate." {
		t.Fatalf("first event %v", first)
	}
	send(t, c, map[string]any{"type": "session.update", "session": map[string]any{"type": "realtime", "tool_choice": "none"}})
	readUntil(t, c, "session.updated")
	send(t, c, map[string]any{"type": "response.create"})
	readUntil(t, c, "response.done")
	readUntil(t, c, session.EventResumed)
	var cut string
	for _, r := range mock.Records() {
		for _, e := range mock.Received(r.SessionID) {
			if e.Type == "response.create" {
				cut = r.SessionID
			}
		}
	}
	var replay *mockai.EventRecord
	for _, r := range mock.Records() {
		if r.SessionID == "" || r.SessionID == cut {
			continue
		}
		if got := mock.Received(r.SessionID); len(got) > 0 && got[0].Type == "session.update" {
			replay = &got[0]
		}
	}
	if replay == nil {
		t.Fatal("no upstream session got the replayed configuration")
	}
	var ev struct {
		Session map[string]any `json:"session"`
	}
	_ = json.Unmarshal(replay.Event, &ev)
	if ev.Session["instructions"] != "Speak like a pirate." || ev.Session["tool_choice"] != "none" || ev.Session["model"] != nil {
		t.Errorf("replayed configuration %v, want the secret's instructions, the client's tool_choice, no model", ev.Session)
	}
}
