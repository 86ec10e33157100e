package server

import (
	"encoding/base64"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	prom "github.com/prometheus/client_model/go"

	"rtgate/mockai"
	"rtgate/server/usage"
)

// turnAudio is 20 ms chunks of what mockai's server VAD hears as speech
// (PCMPattern) and as silence (zeros).
var (
	turnSpeech  = base64.StdEncoding.EncodeToString(mockai.PCMPattern(960))
	turnSilence = base64.StdEncoding.EncodeToString(make([]byte, 960))
)

// vadTurn turns server VAD on with a silence window of silenceMS and
// speaks: 100 ms of speech, then enough silence to end it. The appends name
// their type first, as the SDKs write them (the gateway reads an event's
// type from its first bytes).
func vadTurn(t *testing.T, c *websocket.Conn, silenceMS int) {
	t.Helper()
	send(t, c, map[string]any{"type": "session.update", "session": map[string]any{"type": "realtime",
		"audio": map[string]any{"input": map[string]any{"turn_detection": map[string]any{
			"type": "server_vad", "silence_duration_ms": silenceMS, "prefix_padding_ms": 20}}}}})
	readUntil(t, c, "session.updated")
	for i := range 5 + silenceMS/20 + 1 {
		audio := turnSpeech
		if i >= 5 {
			audio = turnSilence
		}
		if err := c.WriteMessage(websocket.TextMessage, []byte(`{"type":"input_audio_buffer.append","audio":"`+audio+`"}`)); err != nil {
			t.Fatal(err)
		}
	}
}

// oneResponseSession runs a session of one response.create through g and
// ends it with a close frame.
func oneResponseSession(t *testing.T, g *gateway, query string) {
	t.Helper()
	c := g.dial(t, query, bearer(testMasterKey))
	readUntil(t, c, "session.created")
	send(t, c, map[string]any{"type": "response.create"})
	readUntil(t, c, "response.done")
	_ = c.WriteMessage(websocket.CloseMessage, websocket.FormatCloseMessage(1000, ""))
	closeOf(t, c)
}

// recordsAfterShutdown stops g, so that every record is written, and reads
// its USAGE_LOG.
func recordsAfterShutdown(t *testing.T, g *gateway, logPath string) []usage.Record {
	t.Helper()
	ctx, cancel := contextWithTimeout(5 * time.Second)
	defer cancel()
	_ = g.srv.Shutdown(ctx)
	return readRecords(t, logPath)
}

// turnSessions runs one client session per kind of turn through g: a manual
// turn, a server-VAD turn (silence window 300 ms), a tool-call chain, and
// a turn the client cancels before its audio (?first_audio_delay=1m).
func turnSessions(t *testing.T, g *gateway) {
	t.Helper()
	end := func(c *websocket.Conn) {
		_ = c.WriteMessage(websocket.CloseMessage, websocket.FormatCloseMessage(1000, ""))
		closeOf(t, c)
	}
	oneResponseSession(t, g, "model=gpt-realtime") // manual

	// Server VAD: speech, then the silence window, and the upstream answers.
	c := g.dial(t, "model=gpt-realtime", bearer(testMasterKey))
	readUntil(t, c, "session.created")
	vadTurn(t, c, 300)
	readUntil(t, c, "input_audio_buffer.speech_stopped")
	readUntil(t, c, "response.done")
	end(c)

	// A tool call, the client's output, then speech: one turn.
	end(toolChain(t, g, 0))

	// Interrupted: the client cancels before any audio.
	c = g.dial(t, "model=gpt-realtime&first_audio_delay=1m", bearer(testMasterKey))
	readUntil(t, c, "session.created")
	send(t, c, map[string]any{"type": "response.create"})
	readUntil(t, c, "response.created")
	send(t, c, map[string]any{"type": "response.cancel"})
	if done, _ := readUntil(t, c, "response.done"); done.str("response", "status") != "cancelled" {
		t.Fatalf("the cancelled response ended %v", done["response"])
	}
	end(c)
}

// toolChain runs a session's tool chain through g: a tool call, the client
// running its tool for toolTime, its function_call_output and create, and
// the answer that speaks; the session is left open.
func toolChain(t *testing.T, g *gateway, toolTime time.Duration) *websocket.Conn {
	t.Helper()
	c := g.dial(t, "model=gpt-realtime", bearer(testMasterKey))
	readUntil(t, c, "session.created")
	send(t, c, map[string]any{"type": "session.update", "session": map[string]any{"type": "realtime",
		"tools": []any{map[string]any{"type": "function", "name": "get_weather", "parameters": map[string]any{"type": "object"}}}}})
	readUntil(t, c, "session.updated")
	send(t, c, map[string]any{"type": "response.create", "response": map[string]any{"tool_choice": "required"}})
	added, _ := readUntil(t, c, "response.output_item.added")
	readUntil(t, c, "response.done")
	time.Sleep(toolTime)
	send(t, c, map[string]any{"type": "conversation.item.create", "item": map[string]any{
		"type": "function_call_output", "call_id": added.str("item", "call_id"), "output": `{"sunny":true}`}})
	send(t, c, map[string]any{"type": "response.create"})
	readUntil(t, c, "response.output_audio.delta")
	readUntil(t, c, "response.done")
	return c
}

// histogramCount is the sample count of histogram name in g's metrics.
func histogramCount(t *testing.T, g *gateway, name string) uint64 {
	t.Helper()
	fams, err := g.srv.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var n uint64
	for _, f := range fams {
		if f.GetName() == name {
			for _, m := range f.GetMetric() {
				n += histogramOf(m).GetSampleCount()
			}
		}
	}
	return n
}

func histogramOf(m *prom.Metric) *prom.Histogram { return m.GetHistogram() }

// TestTurnMetrics: manual, VAD, tool-chain and interrupted turns, over a
// plain and a TLS upstream, are counted by outcome, their first audio and
// durations observed, and each session's record carries its turns and
// first-audio percentiles (the VAD turn's from the forwarding of the audio
// speech_stopped.audio_end_ms points at: the upstream's 20 ms, not the
// 300 ms silence window the upstream waited before sending it).
func TestTurnMetrics(t *testing.T) {
	poolSchemes(t, func(t *testing.T, tls bool) {
		mock := startPoolMock(t, mockai.Config{FirstAudioDelay: 20 * time.Millisecond, FaultsFromQuery: true}, tls)
		logPath := filepath.Join(t.TempDir(), "usage.jsonl")
		g := startGateway(t, mock, func(c *Settings) {
			c.UsageLog = logPath
			if tls {
				c.UpstreamRoots = trustMock(t, mock)
			}
		})
		turnSessions(t, g)
		waitFor(t, "the sessions to end", func() bool { return g.srv.SessionsOpen() == 0 })
		if got := metricWith(t, g, "rtgate_turns_total", "outcome", "completed"); got != 3 {
			t.Errorf("completed turns %v, want 3 (manual, VAD, one tool chain)", got)
		}
		if got := metricWith(t, g, "rtgate_turns_total", "outcome", "interrupted"); got != 1 {
			t.Errorf("interrupted turns %v, want 1", got)
		}
		if got := histogramCount(t, g, "rtgate_turn_first_audio_seconds"); got != 3 {
			t.Errorf("first-audio samples %d, want 3", got)
		}
		if got := histogramCount(t, g, "rtgate_turn_duration_seconds"); got != 4 {
			t.Errorf("duration samples %d, want 4", got)
		}
		if got := metricWith(t, g, "rtgate_turns_total", "deployment", g.srv.routes.Load().Groups["gpt-realtime"][0].Name); got != 4 {
			t.Errorf("turns labelled with the deployment %v, want 4", got)
		}
		recs := recordsAfterShutdown(t, g, logPath)
		if len(recs) != 4 {
			t.Fatalf("%d records, want 4", len(recs))
		}
		// In the order the sessions ran: a record is written once its
		// session has ended, which may be after the client saw its close
		// and started the next (one CI run wrote the tool chain's after
		// the interrupted one's).
		slices.SortFunc(recs, func(a, b usage.Record) int { return a.StartedAt.Compare(b.StartedAt) })
		for i, r := range recs {
			if r.Turns != 1 {
				t.Errorf("session %d: turns %d, want 1", i, r.Turns)
			}
			if i < 3 && (r.FirstAudioP50MS < 20 || r.FirstAudioP95MS < r.FirstAudioP50MS) {
				t.Errorf("session %d: first audio p50 %v p95 %v ms, want at least the upstream's 20 ms delay", i, r.FirstAudioP50MS, r.FirstAudioP95MS)
			}
		}
		if recs[1].FirstAudioP50MS >= 300 {
			t.Errorf("VAD turn's first audio %v ms, want it timed from the forwarded audio at audio_end_ms (under the 300 ms window)", recs[1].FirstAudioP50MS)
		}
		if recs[3].FirstAudioP50MS != 0 {
			t.Errorf("the interrupted turn had no audio, yet p50 %v", recs[3].FirstAudioP50MS)
		}
	})
}

// TestTurnMetricsOff: with TURN_METRICS=0 no turn is measured or recorded.
func TestTurnMetricsOff(t *testing.T) {
	mock := startMock(t, mockai.Config{FaultsFromQuery: true})
	logPath := filepath.Join(t.TempDir(), "usage.jsonl")
	g := startGateway(t, mock, func(c *Settings) { c.UsageLog, c.NoTurnMetrics = logPath, true })
	turnSessions(t, g)
	waitFor(t, "the sessions to end", func() bool { return g.srv.SessionsOpen() == 0 })
	if got := metricSum(t, g, "rtgate_turns_total"); got != 0 {
		t.Errorf("%v turns counted with TURN_METRICS=0", got)
	}
	for _, r := range recordsAfterShutdown(t, g, logPath) {
		if r.Turns != 0 || r.FirstAudioP50MS != 0 || r.Usage.Responses == 0 {
			t.Errorf("record with turns off: turns %d p50 %v responses %d", r.Turns, r.FirstAudioP50MS, r.Usage.Responses)
		}
	}
}
