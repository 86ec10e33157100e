package server

import (
	"context"
	"encoding/json"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	coder "github.com/coder/websocket"
	"github.com/gorilla/websocket"

	"rtgate/mockai"
	"rtgate/server/session"
)

// GPT-Live's session continuity as a client sees it: the socket stays open
// across the loss of the upstream (or its cap), the fresh upstream session
// starts with the kept configuration and the conversation as its input,
// and the session's record bills every upstream session's seconds.

// liveDev is the developer message a test's session.start gives as input.
var liveDev = map[string]any{"type": "message", "role": "developer", "content": []any{map[string]any{"type": "input_text", "text": "you are a test"}}}

// liveGateway starts a gateway with the Live group gpt-live at m, its usage
// log at the returned path.
func liveGateway(t *testing.T, m *mockai.Server, trust func(*Settings), mutate ...func(*Settings)) (*gateway, string) {
	t.Helper()
	logPath := filepath.Join(t.TempDir(), "usage.jsonl")
	g := startGateway(t, nil, func(c *Settings) {
		c.RoutesFile, c.UsageLog = liveConfig(t, m, "", ""), logPath
		trust(c)
		for _, f := range mutate {
			f(c)
		}
	})
	return g, logPath
}

// liveStarts is the session.start each of mock's Live upstream sessions
// received, in the order they came (a pooled socket's record is older than
// its session), as its session object.
func liveStarts(t *testing.T, mock *mockai.Server) []map[string]any {
	t.Helper()
	var starts []mockai.EventRecord
	for _, r := range mock.Records() {
		if r.SessionID == "" || !strings.HasPrefix(r.SessionID, "live_") {
			continue
		}
		for _, e := range mock.Received(r.SessionID) {
			if e.Type == "session.start" {
				starts = append(starts, e)
			}
		}
	}
	slices.SortFunc(starts, func(a, b mockai.EventRecord) int { return a.At.Compare(b.At) })
	var out []map[string]any
	for _, e := range starts {
		var ev struct {
			Session map[string]any `json:"session"`
		}
		if err := json.Unmarshal(e.Event, &ev); err != nil {
			t.Fatalf("session.start %s: %v", e.Event, err)
		}
		out = append(out, ev.Session)
	}
	return out
}

// inputTexts is a session.start's input as "role:text".
func inputTexts(session map[string]any) []string {
	var out []string
	in, _ := session["input"].([]any)
	for _, it := range in {
		m, _ := it.(map[string]any)
		content, _ := m["content"].([]any)
		if len(content) != 1 {
			out = append(out, "bad item")
			continue
		}
		part, _ := content[0].(map[string]any)
		out = append(out, m["role"].(string)+":"+part["type"].(string)+":"+part["text"].(string))
	}
	return out
}

// liveTurn appends audio and reads the answer's transcript: one turn.
func liveTurn(t *testing.T, c *websocket.Conn) {
	t.Helper()
	appendAudio(t, c, 4800)
	readUntil(t, c, "session.output_transcript.delta")
}

// TestLiveResumeBetweenTurns: the upstream is dropped (or closed 1012)
// right after the first answer; the client's socket stays, it gets
// rtgate.session.resumed and never the fresh session's session.started,
// the conversation goes on, and the fresh upstream's session.start carries
// the kept configuration (session.start's, with session.update's
// delegation) and the conversation as input messages.
func TestLiveResumeBetweenTurns(t *testing.T) {
	for _, tc := range []struct {
		name  string
		cut   mockai.Cut
		cause string
	}{
		{"dropped", mockai.Cut{Kind: mockai.CutDrop, AfterResponses: 1, Times: 1}, "upstream_lost"},
		{"closed 1012", mockai.Cut{Kind: mockai.CutClose, Code: 1012, AfterResponses: 1, Times: 1}, "upstream_closed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			overBoth(t, mockai.Config{Cut: tc.cut}, func(t *testing.T, mock *mockai.Server, trust func(*Settings)) {
				g, logPath := liveGateway(t, mock, trust)
				c := g.dialLive(t, "sk-team-a-test")
				send(t, c, liveStart("gpt-live", map[string]any{"input": []any{liveDev}}))
				if e := read(t, c); e.typ() != "session.started" {
					t.Fatalf("first event %v", e)
				}
				send(t, c, map[string]any{"type": "session.update", "session": map[string]any{"delegation": map[string]any{"type": "client"}}})
				readUntil(t, c, "session.updated")
				liveTurn(t, c)
				resumed, seen := readUntil(t, c, session.EventResumed)
				if resumed.str("cause") != tc.cause || resumed.str("replayed_items") != "3" {
					t.Errorf("resumed event %v", resumed)
				}
				liveTurn(t, c) // the session goes on, on the fresh upstream
				send(t, c, map[string]any{"type": "session.close"})
				_, after := readUntil(t, c, "session.closed")
				if slices.Contains(append(seen, after...), "session.started") {
					t.Errorf("the client saw the fresh upstream's session.started: %v %v", seen, after)
				}
				if ce := closeOf(t, c); ce.Code != 1000 {
					t.Errorf("close %v", ce)
				}
				starts := liveStarts(t, mock)
				if len(starts) != 2 {
					t.Fatalf("%d upstream session.starts, want 2", len(starts))
				}
				second := starts[1]
				del, _ := second["delegation"].(map[string]any)
				if second["model"] != "gpt-live-1" || second["instructions"] != "be brief" || del["type"] != "client" {
					t.Errorf("the fresh upstream's configuration %v", second)
				}
				want := []string{"developer:input_text:you are a test", "user:input_text:" + mockai.LiveTranscript,
					"assistant:output_text:" + mockai.LiveTranscript}
				if got := inputTexts(second); strings.Join(got, "\n") != strings.Join(want, "\n") {
					t.Errorf("the fresh upstream's input\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
				}
				rec := waitRecords(t, logPath, 1)[0]
				if rec.Protocol != "live" || rec.UpstreamSessions != 2 || len(rec.Resumes) != 1 || rec.Resumes[0].Cause != tc.cause ||
					rec.Resumes[0].Outcome != "ok" || rec.Unconfirmed {
					t.Errorf("record %+v", rec)
				}
			})
		})
	}
}

// TestLiveResumeDuringResponse: the upstream is dropped in the middle of a
// delegated (Responses) response; the client gets that response's end in
// GPT-Live's own shape (response.event wrapping response.failed), then
// rtgate.session.resumed, and the next response completes.
func TestLiveResumeDuringResponse(t *testing.T) {
	overBoth(t, mockai.Config{Cut: mockai.Cut{Kind: mockai.CutDrop, AfterResponses: 1, During: true, Times: 1}},
		func(t *testing.T, mock *mockai.Server, trust func(*Settings)) {
			g, _ := liveGateway(t, mock, trust)
			c := g.dialLive(t, "sk-team-a-test")
			send(t, c, liveStart("gpt-live", map[string]any{
				"delegation": map[string]any{"type": "responses", "responses": map[string]any{"model": "gpt-5-mini"}}}))
			readUntil(t, c, "session.started")
			send(t, c, map[string]any{"type": "response.create"})
			created, _ := readUntil(t, c, "response.event")
			id := created["event"].(map[string]any)["response"].(map[string]any)["id"]
			var failed event
			for range 100 {
				e := read(t, c)
				if e.typ() == session.EventResumed {
					t.Fatal("resumed before the lost response ended")
				}
				if inner, _ := e["event"].(map[string]any); e.typ() == "response.event" && inner["type"] == "response.failed" {
					failed = e
					break
				}
			}
			resp, _ := failed["event"].(map[string]any)["response"].(map[string]any)
			if resp["id"] != id || resp["status"] != "failed" || failed.str("delegation_id") != created.str("delegation_id") {
				t.Errorf("failed response %v, want %v failed", failed, id)
			}
			if resumed, _ := readUntil(t, c, session.EventResumed); resumed.str("cause") != "upstream_lost" || resumed.str("lost_response_id") != id {
				t.Errorf("resumed %v", resumed)
			}
			send(t, c, map[string]any{"type": "response.create"})
			for range 100 {
				e, _ := readUntil(t, c, "response.event")
				if inner := e["event"].(map[string]any); inner["type"] == "response.completed" {
					return
				}
			}
			t.Fatal("no response completed after the resume")
		})
}

// TestLiveResumeAtTheCap: GPT-Live's cap (session.closed, reason expired,
// then close) is held from the client and the session resumes; the
// session's record bills both upstream sessions' seconds (the cumulative
// usage.seconds of the fresh session added to the old one's, not put in
// their place): 1 s heard by the first, 2 s by the second.
func TestLiveResumeAtTheCap(t *testing.T) {
	// No expires_at: the gateway cannot see the cap coming, so the
	// session meets it (TestLiveRolloverBeforeTheCap has one).
	overBoth(t, mockai.Config{NoExpiresAt: true, Live: mockai.LiveConfig{MaxDuration: 2 * time.Second, UsageInterval: -1}},
		func(t *testing.T, mock *mockai.Server, trust func(*Settings)) {
			g, logPath := liveGateway(t, mock, trust)
			c := g.dialLive(t, "sk-team-a-test")
			send(t, c, liveStart("gpt-live", nil))
			readUntil(t, c, "session.started")
			appendAudio(t, c, liveSecond)
			readUntil(t, c, "session.output_transcript.delta")
			resumed, seen := readUntil(t, c, session.EventResumed)
			if resumed.str("cause") != "session_expired" {
				t.Errorf("resumed %v", resumed)
			}
			if slices.Contains(seen, "session.closed") {
				t.Errorf("the client saw the cap's session.closed: %v", seen)
			}
			appendAudio(t, c, 2*liveSecond)
			readUntil(t, c, "session.output_transcript.delta")
			send(t, c, map[string]any{"type": "session.close"})
			readUntil(t, c, "session.closed")
			closeOf(t, c)
			rec := waitRecords(t, logPath, 1)[0]
			// The second upstream session may reach its own cap before
			// the close on a slow machine: one more resume, 0 s more.
			if rec.Seconds != 3 || rec.UpstreamSessions < 2 || rec.Unconfirmed {
				t.Errorf("record: %v s over %d upstream sessions (unconfirmed %v), want 3 s (1 + 2) over 2 or more",
					rec.Seconds, rec.UpstreamSessions, rec.Unconfirmed)
			}
			if rec.CostUSD < 0.0024 || rec.CostUSD > 0.0026 {
				t.Errorf("cost $%v, want 3 s at $0.05/min", rec.CostUSD)
			}
		})
}

// TestLiveResumeRefusedAfterExpired: a Live session out of resumes meets
// the cap once more and ends as it would without continuity: the cap's
// session.closed (held back while the resume was weighed), then the close.
func TestLiveResumeRefusedAfterExpired(t *testing.T) {
	overBoth(t, mockai.Config{NoExpiresAt: true, Live: mockai.LiveConfig{MaxDuration: 400 * time.Millisecond, UsageInterval: -1}},
		func(t *testing.T, mock *mockai.Server, trust func(*Settings)) {
			g, _ := liveGateway(t, mock, trust)
			c := g.dialLive(t, "sk-team-a-test")
			send(t, c, liveStart("gpt-live", nil))
			readUntil(t, c, "session.started")
			for i := range maxResumes {
				if e, _ := readUntil(t, c, session.EventResumed); e.str("cause") != "session_expired" {
					t.Fatalf("resume %d: %v", i+1, e)
				}
			}
			e, seen := readUntil(t, c, "session.closed")
			if e.str("reason") != "expired" {
				t.Fatalf("got %v after %v, want the cap's session.closed", e, seen)
			}
			closeOf(t, c)
			if n := resumes(t, g, "session_expired", "refused"); n != 1 {
				t.Errorf("refused resumes counted %v", n)
			}
		})
}

// TestLiveRolloverBeforeTheCap: a GPT-Live session whose session.started
// names expires_at moves to a fresh upstream at a quiet moment before the
// cap: the client never sees the cap's session.closed, gets
// rtgate.session.resumed (cause rollover), and goes on; the fresh upstream's
// session.start carries the conversation.
//
// Its seconds: the rollover hangs up on the old upstream, whose seconds are
// billed as its last session.usage.updated said (sent every 200 ms here).
func TestLiveRolloverBeforeTheCap(t *testing.T) {
	overBoth(t, mockai.Config{Live: mockai.LiveConfig{MaxDuration: 4 * time.Second, UsageInterval: 200 * time.Millisecond}},
		func(t *testing.T, mock *mockai.Server, trust func(*Settings)) {
			g, logPath := liveGateway(t, mock, trust)
			c := g.dialLive(t, "sk-team-a-test")
			send(t, c, liveStart("gpt-live", nil))
			readUntil(t, c, "session.started")
			appendAudio(t, c, liveSecond)
			readUntil(t, c, "session.output_transcript.delta")
			resumed, seen := readUntil(t, c, session.EventResumed)
			if resumed.str("cause") != "rollover" {
				t.Errorf("resumed %v, want the rollover's", resumed)
			}
			if slices.Contains(seen, "session.closed") {
				t.Errorf("the client saw a session.closed before the rollover: %v", seen)
			}
			appendAudio(t, c, liveSecond)
			readUntil(t, c, "session.output_transcript.delta")
			starts := liveStarts(t, mock)
			if len(starts) < 2 || len(inputTexts(starts[1])) == 0 {
				t.Errorf("upstream session.starts %v, want a second carrying the conversation", starts)
			}
			send(t, c, map[string]any{"type": "session.close"})
			readUntil(t, c, "session.closed")
			closeOf(t, c)
			rec := waitRecords(t, logPath, 1)[0]
			if rec.UpstreamSessions < 2 || len(rec.Resumes) == 0 || rec.Resumes[0].Cause != "rollover" || rec.Seconds < 2 {
				t.Errorf("record %+v, want 2 s or more over 2 or more upstream sessions, the first resume a rollover", rec)
			}
		})
}

// TestLiveResumeCoderClient: coder/websocket, an independent client, goes
// on across a Live upstream dropped between turns, over a TLS upstream
// with the Live pool on (the pool may serve the fresh session).
func TestLiveResumeCoderClient(t *testing.T) {
	mock := startMock(t, mockai.Config{TLS: true, Cut: mockai.Cut{Kind: mockai.CutClose, Code: 1011, AfterResponses: 2, Times: 1}})
	roots := trustMock(t, mock)
	g, _ := liveGateway(t, mock, func(c *Settings) { c.UpstreamRoots = roots }, func(c *Settings) { c.LivePool.Size = 2 })
	waitFor(t, "the Live pool's two sockets", func() bool { return metricSum(t, g, "rtgate_live_pool_warm_sockets") >= 2 })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, _, err := coder.Dial(ctx, g.liveURL(), &coder.DialOptions{HTTPHeader: bearer("sk-team-a-test")})
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseNow()
	c.SetReadLimit(1 << 20)
	write := func(v any) {
		b, _ := json.Marshal(v)
		if err := c.Write(ctx, coder.MessageText, b); err != nil {
			t.Fatal(err)
		}
	}
	until := func(typ string) map[string]any {
		for range 1000 {
			_, p, err := c.Read(ctx)
			if err != nil {
				t.Fatalf("read: %v", err)
			}
			var e map[string]any
			if err := json.Unmarshal(p, &e); err != nil {
				t.Fatal(err)
			}
			if e["type"] == typ {
				return e
			}
		}
		t.Fatalf("no %s", typ)
		return nil
	}
	audio := map[string]any{"type": "session.input_audio.append", "audio": strings.Repeat("AAAA", 1600)}
	write(liveStart("gpt-live", nil))
	until("session.started")
	for range 2 {
		write(audio)
		until("session.output_transcript.delta")
	}
	if resumed := until(session.EventResumed); resumed["cause"] != "upstream_closed" || resumed["replayed_items"] != 4.0 {
		t.Errorf("resumed %v", resumed)
	}
	write(audio)
	until("session.output_transcript.delta")
	write(map[string]any{"type": "session.close"})
	if closed := until("session.closed"); closed["reason"] != "close_requested" {
		t.Errorf("closed %v", closed)
	}
	if starts := liveStarts(t, mock); len(starts) != 2 || len(inputTexts(starts[1])) != 4 {
		t.Errorf("upstream session.starts %v, want the second with 4 input messages", starts)
	}
	if hits := metricSum(t, g, "rtgate_live_pool_hits_total"); hits != 2 {
		t.Errorf("%v Live pool hits, want 2 (the connect and the resume)", hits)
	}
}

// TestLiveResumeDuringVoiceAnswer: the upstream is dropped while it speaks
// (after the answer's audio, before its transcript). GPT-Live's voice turns
// have no done or failed event, so the client gets rtgate.session.resumed
// alone; the fresh session's input holds what was heard (the user's
// words), and the session goes on.
func TestLiveResumeDuringVoiceAnswer(t *testing.T) {
	overBoth(t, mockai.Config{Cut: mockai.Cut{Kind: mockai.CutDrop, AfterResponses: 1, During: true, Times: 1}},
		func(t *testing.T, mock *mockai.Server, trust func(*Settings)) {
			g, _ := liveGateway(t, mock, trust)
			c := g.dialLive(t, "sk-team-a-test")
			send(t, c, liveStart("gpt-live", nil))
			readUntil(t, c, "session.started")
			appendAudio(t, c, 4800)
			resumed, seen := readUntil(t, c, session.EventResumed)
			if resumed.str("cause") != "upstream_lost" || resumed.str("replayed_items") != "1" || slices.Contains(seen, "response.event") {
				t.Errorf("resumed %v after %v", resumed, seen)
			}
			liveTurn(t, c)
			starts := liveStarts(t, mock)
			if len(starts) != 2 {
				t.Fatalf("%d upstream session.starts, want 2", len(starts))
			}
			if got := inputTexts(starts[1]); len(got) != 1 || got[0] != "user:input_text:"+mockai.LiveTranscript {
				t.Errorf("the fresh upstream's input %v, want the user's words only", got)
			}
		})
}
