package server

import (
	"context"
	"encoding/json"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"rtgate/mockai"
	"rtgate/server/spenddb/pgtest"
	"rtgate/server/transcript"
)

// TestConversationRecord: a Realtime session on a deployment that keeps
// transcripts (log_transcripts) lands in the usage log and in Postgres's
// session_conversation with what was said, in order: the user's transcribed
// speech, the user's text, the tool call with its arguments and the tool's
// output, the assistant's transcripts. A redaction rule (a phone number)
// is applied before anything is written: the number is in neither the log
// nor the row. A key that says log_transcripts: false keeps none on the
// same deployment. Over ws:// and wss:// upstreams, with continuity off
// (the record does not need it).
func TestConversationRecord(t *testing.T) {
	pg := pgtest.Start(t)
	t.Setenv("TEAM_QUIET_KEY", "sk-quiet-0123456789")
	const phone = "555-0100"
	overBoth(t, mockai.Config{AudioDeltas: 3}, func(t *testing.T, mock *mockai.Server, trust func(*Settings)) {
		path := writeConfig(t, `model_list:`+openaiEntry("gpt-realtime", mock, "log_transcripts: true")+`
keys:
  - name: quiet
    key: os.environ/TEAM_QUIET_KEY
    log_transcripts: false
transcripts:
  redact:
    - pattern: '\d{3}-\d{4}'
      label: PHONE`+configTail)
		logPath := filepath.Join(t.TempDir(), "usage.jsonl")
		g := startGateway(t, nil, func(c *Settings) {
			trust(c)
			c.RoutesFile, c.UsageLog, c.DatabaseURL, c.Continuity = path, logPath, pg.URL, false
		})

		talk := func(key string) {
			c := g.dial(t, "model=gpt-realtime", bearer(key))
			read(t, c) // session.created
			send(t, c, map[string]any{"type": "session.update", "session": map[string]any{"type": "realtime",
				"audio":       map[string]any{"input": map[string]any{"transcription": map[string]any{"model": "gpt-4o-transcribe"}}},
				"tools":       []any{map[string]any{"type": "function", "name": "lookup_order", "parameters": map[string]any{"type": "object"}}},
				"tool_choice": "required"}})
			eventsUntil(t, c, "session.updated")
			send(t, c, map[string]any{"type": "input_audio_buffer.append", "audio": strings.Repeat("AAAA", 400)})
			send(t, c, map[string]any{"type": "input_audio_buffer.commit"})
			eventsUntil(t, c, "conversation.item.input_audio_transcription.completed")
			send(t, c, map[string]any{"type": "conversation.item.create", "item": map[string]any{"type": "message", "role": "user",
				"content": []any{map[string]any{"type": "input_text", "text": "call me at " + phone}}}})
			send(t, c, map[string]any{"type": "response.create"})
			call := eventsUntil(t, c, "response.function_call_arguments.done")
			callID := call[len(call)-1].str("call_id")
			eventsUntil(t, c, "response.done")
			send(t, c, map[string]any{"type": "conversation.item.create", "item": map[string]any{"type": "function_call_output",
				"call_id": callID, "output": `{"status":"shipped","callback":"` + phone + `"}`}})
			send(t, c, map[string]any{"type": "response.create"})
			eventsUntil(t, c, "response.done")
			_ = c.WriteMessage(websocket.CloseMessage, websocket.FormatCloseMessage(1000, ""))
			closeOf(t, c)
		}
		talk(testMasterKey)
		talk("sk-quiet-0123456789")
		recs := waitRecords(t, logPath, 2)
		raw := shutdownAndReadLog(t, g, logPath)
		if strings.Contains(string(raw), phone) {
			t.Fatalf("the usage log holds the number the rule redacts:\n%s", raw)
		}
		for _, rec := range recs {
			var entries []byte
			err := pg.Conn(t).QueryRow(context.Background(),
				`SELECT entries FROM session_conversation WHERE session_id = $1`, rec.SessionID).Scan(&entries)
			if rec.KeyName == "quiet" {
				if rec.Conversation != nil || err == nil {
					t.Fatalf("the key that keeps no transcripts has a record %+v (row: %v)", rec.Conversation, err)
				}
				continue
			}
			if rec.Conversation == nil {
				t.Fatal("no conversation record for a deployment that keeps transcripts")
			}
			checkConversation(t, rec.Conversation)
			if err != nil {
				t.Fatalf("no session_conversation row: %v", err)
			}
			var row []transcript.Entry
			if err := json.Unmarshal(entries, &row); err != nil {
				t.Fatal(err)
			}
			if len(row) != len(rec.Conversation.Entries) || strings.Contains(string(entries), phone) {
				t.Fatalf("the row's %d entries, the log's %d; the row holds the number: %v", len(row), len(rec.Conversation.Entries),
					strings.Contains(string(entries), phone))
			}
		}
	})
}

// checkConversation asserts what TestConversationRecord's session said, in
// order.
func checkConversation(t *testing.T, rec *transcript.Record) {
	t.Helper()
	var got []string
	for _, e := range rec.Entries {
		got = append(got, string(e.Kind)+"/"+e.Role)
	}
	find := func(from int, ok func(transcript.Entry) bool) int {
		for i := from; i < len(rec.Entries); i++ {
			if ok(rec.Entries[i]) {
				return i
			}
		}
		t.Fatalf("entries %v lack one after #%d", got, from)
		return -1
	}
	i := find(0, func(e transcript.Entry) bool {
		return e.Kind == transcript.KindTranscript && e.Role == "user" && e.Text == "Hello from mockai."
	})
	i = find(i+1, func(e transcript.Entry) bool {
		return e.Kind == transcript.KindText && e.Role == "user" && e.Text == "call me at [PHONE]"
	})
	i = find(i+1, func(e transcript.Entry) bool {
		return e.Kind == transcript.KindToolCall && e.Name == "lookup_order" && e.CallID != ""
	})
	i = find(i+1, func(e transcript.Entry) bool {
		return e.Kind == transcript.KindToolOutput && strings.Contains(e.Output, "[PHONE]")
	})
	find(i+1, func(e transcript.Entry) bool {
		return e.Kind == transcript.KindTranscript && e.Role == "assistant" && e.Text != "" && !e.Partial
	})
	if rec.Redactions < 2 {
		t.Fatalf("%d redactions counted, want the text's and the tool output's", rec.Redactions)
	}
}

// TestLiveConversationRecord: a GPT-Live session whose key keeps
// transcripts records the caller's and the model's transcripts, redacted
// by the rules before they are written; with continuity on or off, over
// ws:// and wss:// upstreams.
func TestLiveConversationRecord(t *testing.T) {
	overBoth(t, mockai.Config{Live: mockai.LiveConfig{UsageInterval: 50 * time.Millisecond}}, func(t *testing.T, m *mockai.Server, trust func(*Settings)) {
		for _, continuity := range []bool{true, false} {
			g, logPath := liveGateway(t, m, trust, func(c *Settings) {
				c.RoutesFile = liveConfig(t, m, "", "\n    log_transcripts: true\ntranscripts:\n  redact:\n    - pattern: mockai\n      label: BOT")
				c.Continuity = continuity
			})
			c := g.dialLive(t, "sk-team-a-test")
			send(t, c, liveStart("gpt-live", nil))
			readUntil(t, c, "session.started")
			appendAudio(t, c, liveSecond)
			readUntil(t, c, "session.output_transcript.delta")
			send(t, c, map[string]any{"type": "session.close"})
			readUntil(t, c, "session.closed")
			closeOf(t, c)
			rec := waitRecords(t, logPath, 1)[0]
			if rec.Conversation == nil {
				t.Fatalf("continuity %v: no conversation record for a key that keeps transcripts", continuity)
			}
			said := map[string]string{}
			for _, e := range rec.Conversation.Entries {
				if e.Kind == transcript.KindTranscript {
					said[e.Role] += e.Text
				}
			}
			want := strings.ReplaceAll(mockai.LiveTranscript, "mockai", "[BOT]")
			if !strings.HasPrefix(said["user"], want) || !strings.HasPrefix(said["assistant"], want) || rec.Conversation.Redactions == 0 {
				t.Fatalf("continuity %v: transcripts %q, %d redactions; want both sides starting %q", continuity, said, rec.Conversation.Redactions, want)
			}
		}
	})
}

// TestLiveConversationRecordByDeployment: a GPT-Live deployment's
// log_transcripts keeps the record of the sessions its session.start
// routes to it, when their key says nothing; a session routed to a
// deployment that says nothing keeps none. ws and wss.
func TestLiveConversationRecordByDeployment(t *testing.T) {
	overBoth(t, mockai.Config{}, func(t *testing.T, m *mockai.Server, trust func(*Settings)) {
		g, logPath := liveGateway(t, m, trust, func(c *Settings) {
			c.RoutesFile = writeConfig(t, "model_list:"+openaiEntry("gpt-realtime", m)+`
  - model_name: gpt-live
    litellm_params:
      model: openai/gpt-live-1
      api_base: `+m.BaseURL()+`
      api_key: os.environ/RTGATE_TEST_UPSTREAM
      log_transcripts: true
  - model_name: gpt-live-quiet
    litellm_params:
      model: openai/gpt-live-1
      api_base: `+m.BaseURL()+`
      api_key: os.environ/RTGATE_TEST_UPSTREAM
keys:
  - name: team-a
    key: os.environ/TEAM_A_KEY
`+configTail)
		})
		for _, group := range []string{"gpt-live", "gpt-live-quiet"} {
			c := g.dialLive(t, "sk-team-a-test")
			send(t, c, liveStart(group, nil))
			readUntil(t, c, "session.started")
			appendAudio(t, c, liveSecond)
			readUntil(t, c, "session.output_transcript.delta")
			send(t, c, map[string]any{"type": "session.close"})
			readUntil(t, c, "session.closed")
			closeOf(t, c)
		}
		recs := waitRecords(t, logPath, 2)
		for _, rec := range recs {
			kept := rec.Conversation != nil && len(rec.Conversation.Entries) > 0
			if want := rec.ModelGroup == "gpt-live"; kept != want {
				t.Errorf("a session on %s: record kept %v, want %v", rec.ModelGroup, kept, want)
			}
		}
	})
}

// TestSessionViewInChromium: the admin port's session view, open in
// headless Chromium, lists the live sessions (one keeps its conversation
// record, one does not) and shows the kept one's conversation as it
// stands, redacted, with what the caller typed shown as text and never run
// as markup. Its JSON answers 404 for a session that keeps no record.
func TestSessionViewInChromium(t *testing.T) {
	t.Setenv("TEAM_QUIET_KEY", "sk-quiet-0123456789")
	mock := startMock(t, mockai.Config{AudioDeltas: 3})
	path := writeConfig(t, `model_list:`+openaiEntry("gpt-realtime", mock, "log_transcripts: true")+`
keys:
  - name: quiet
    key: os.environ/TEAM_QUIET_KEY
    log_transcripts: false
transcripts:
  redact:
    - pattern: '\d{3}-\d{4}'
      label: PHONE`+configTail)
	g := startGateway(t, mock, func(c *Settings) { c.RoutesFile = path })
	admin := g.serveAdmin(t)
	kept := g.dial(t, "model=gpt-realtime", bearer(testMasterKey))
	read(t, kept)
	hostile := `<img src=x onerror="document.title='ran'">call 555-0100`
	send(t, kept, map[string]any{"type": "conversation.item.create", "item": map[string]any{"type": "message", "role": "user",
		"content": []any{map[string]any{"type": "input_text", "text": hostile}}}})
	send(t, kept, map[string]any{"type": "response.create"})
	eventsUntil(t, kept, "response.done")
	quiet := g.dial(t, "model=gpt-realtime", bearer("sk-quiet-0123456789"))
	read(t, quiet)

	var list struct {
		Sessions []struct {
			ID   string `json:"id"`
			Key  string `json:"key_name"`
			Kept bool   `json:"kept"`
		} `json:"sessions"`
	}
	getJSON(t, "http://"+admin+"/sessions.json", nil, &list)
	ids := map[string]string{}
	for _, s := range list.Sessions {
		ids[s.Key] = s.ID
		if s.Kept != (s.Key == "master") {
			t.Fatalf("session of %s listed kept=%v", s.Key, s.Kept)
		}
	}
	if len(ids) != 2 {
		t.Fatalf("sessions listed %+v, want the two live ones", list.Sessions)
	}
	resp, err := http.Get("http://" + admin + "/sessions/" + ids["quiet"] + "/conversation")
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Fatalf("the conversation of a session that keeps none: %d, want 404", resp.StatusCode)
	}

	b := startBrowser(t, 1280, 900)
	b.navigate("http://" + admin + "/sessions?id=" + ids["master"])
	want := `<img src=x onerror="document.title='ran'">call [PHONE]`
	b.waitFor("the conversation on the page", `[...document.querySelectorAll("#conv td")].some(c => c.textContent === `+strconv.Quote(want)+`)`,
		cellsOf("conv"), 10*time.Second)
	if n := eval[float64](b, `document.querySelectorAll("#conv img").length`); n != 0 || eval[string](b, `document.title`) == "ran" {
		t.Fatalf("what the caller typed was run as markup: %v img elements, title %q", n, eval[string](b, `document.title`))
	}
	if page := eval[string](b, `document.body.innerText`); strings.Contains(page, "555-0100") || !strings.Contains(page, "not kept") {
		t.Fatalf("the page shows the redacted number, or not the session that keeps no record:\n%s", page)
	}
	_ = kept.Close()
	_ = quiet.Close()
}
