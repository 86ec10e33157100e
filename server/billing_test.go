package server

import (
	"encoding/base64"
	"math"
	"net"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"rtgate/mockai"
	"rtgate/server/eventtype"
	"rtgate/server/usage"
)

// Usage that cannot be walked away from (keepFlights), and prices for every
// model a session makes the gateway pay for (modelPrices): issue 32's items
// 2, 3 and 4.

// walkAway asks for a response, reads n of its audio deltas and leaves:
// with a close frame, or by dropping the socket.
func walkAway(t *testing.T, c *websocket.Conn, n int, drop bool) {
	t.Helper()
	send(t, c, map[string]any{"type": "response.create"})
	for got := 0; got < n; {
		if read(t, c).typ() == "response.output_audio.delta" {
			got++
		}
	}
	if drop {
		_ = c.UnderlyingConn().(*net.TCPConn).SetLinger(0)
		_ = c.UnderlyingConn().Close()
		return
	}
	_ = c.WriteMessage(websocket.CloseMessage, websocket.FormatCloseMessage(1000, ""))
}

// appendRealtimeAudio sends n bytes of silence to a Realtime session.
func appendRealtimeAudio(t *testing.T, c *websocket.Conn, n int) {
	t.Helper()
	send(t, c, map[string]any{"type": "input_audio_buffer.append", "audio": base64.StdEncoding.EncodeToString(make([]byte, n))})
}

// billingGateway is a gateway in front of a mockai of cfg (ws or wss) that
// writes its records to a usage log, whose path it returns.
func billingGateway(t *testing.T, mock *mockai.Server, trust func(*Settings), mutate func(*Settings)) (*gateway, string) {
	logPath := filepath.Join(t.TempDir(), "usage.jsonl")
	g := startGateway(t, mock, func(c *Settings) {
		trust(c)
		c.UsageLog = logPath
		c.CloseTimeout = time.Second
		if mutate != nil {
			mutate(c)
		}
	})
	return g, logPath
}

// TestWalkedAwayResponseIsBilled: a client that got 9 of a response's 10
// audio deltas and left (its close frame, or its socket dropped) is billed
// that response: the gateway cancels it upstream and waits for the
// cancelled response.done's usage before closing (on main the record read
// responses=1 here: the walked-away one was free). mockai bills 10 output
// audio tokens a delta actually sent.
func TestWalkedAwayResponseIsBilled(t *testing.T) {
	cfg := mockai.Config{AudioDeltas: 10, AudioDeltaInterval: 20 * time.Millisecond}
	overBoth(t, cfg, func(t *testing.T, mock *mockai.Server, trust func(*Settings)) {
		for _, drop := range []bool{false, true} {
			name := "close"
			if drop {
				name = "drop"
			}
			t.Run(name, func(t *testing.T) {
				g, logPath := billingGateway(t, mock, trust, nil)
				c := g.dial(t, "model=gpt-realtime", bearer(testMasterKey))
				read(t, c) // session.created
				send(t, c, map[string]any{"type": "response.create"})
				readUntil(t, c, "response.done") // a whole response: 100 output audio tokens
				walkAway(t, c, 9, drop)
				rec := waitRecords(t, logPath, 1)[0]
				u := rec.Usage
				if u.Responses != 2 || rec.Unconfirmed || rec.Estimated != nil {
					t.Fatalf("record: %d responses, unconfirmed %v, estimated %+v; want 2 confirmed (usage %+v)",
						u.Responses, rec.Unconfirmed, rec.Estimated, u)
				}
				if out := u.OutputTokenDetails.AudioTokens; out < 190 || out > 200 {
					t.Errorf("output audio tokens %d, want 100 + the 9 or 10 deltas sent before the cancel (190-200)", out)
				}
				if rec.CostUSD <= 100*64e-6 {
					t.Errorf("cost %v: no more than the first response's", rec.CostUSD)
				}
				if len(g.mock.Records()) == 0 {
					t.Error("mockai recorded no session")
				}
			})
		}
	})
}

// TestWalkedAwayResponseUnconfirmed: when the upstream does not answer the
// cancel in time (mockai's IgnoreCancel), the response is billed an
// estimate flagged unconfirmed, not 0 (on main: responses=0, cost_usd=0):
// its output audio from the audio relayed at the session's rate (the
// default 20 tokens a second here: the confirmed response before was text
// only), its input from that response's input and output. The flag is counted in
// rtgate_usage_flagged_total too.
func TestWalkedAwayResponseUnconfirmed(t *testing.T) {
	// 400 deltas: the response outlasts the farewell's wait.
	cfg := mockai.Config{AudioDeltas: 400, AudioDeltaInterval: 20 * time.Millisecond, IgnoreCancel: true}
	overBoth(t, cfg, func(t *testing.T, mock *mockai.Server, trust func(*Settings)) {
		g, logPath := billingGateway(t, mock, trust, nil)
		c := g.dial(t, "model=gpt-realtime", bearer(testMasterKey))
		read(t, c)
		send(t, c, map[string]any{"type": "response.create", "response": map[string]any{"output_modalities": []string{"text"}}})
		first, _ := readUntil(t, c, "response.done") // confirmed, text only: the audio rate is the default's
		walkAway(t, c, 9, false)
		rec := waitRecords(t, logPath, 1)[0]
		est := rec.Estimated
		if !rec.Unconfirmed || est == nil || est.Responses != 1 || rec.Usage.Responses != 2 {
			t.Fatalf("record: unconfirmed %v, estimated %+v, %d responses; want 1 estimated of 2", rec.Unconfirmed, est, rec.Usage.Responses)
		}
		// At least the 9 deltas the client got (0.9 s of audio at the
		// default 20 tokens a second), at most the whole 40 s response.
		if out := est.OutputTokenDetails.AudioTokens; out < 17 || out > 800 {
			t.Errorf("estimated output audio tokens %d, want from 18 (9 deltas' 0.9 s at 20 a second) up", out)
		}
		fu := first["response"].(map[string]any)["usage"].(map[string]any)
		wantIn := int64(fu["input_tokens"].(float64) + fu["output_tokens"].(float64))
		if est.InputTokens < wantIn {
			t.Errorf("estimated input tokens %d, want at least the last response's input and output (%d)", est.InputTokens, wantIn)
		}
		if rec.CostUSD < float64(est.OutputTokenDetails.AudioTokens)*64e-6 {
			t.Errorf("cost %v does not include the estimate %+v", rec.CostUSD, est)
		}
		if got := metricValue(t, g, `rtgate_usage_flagged_total{flag="unconfirmed",model="",model_group="gpt-realtime"}`); got != 1 {
			t.Errorf("rtgate_usage_flagged_total unconfirmed %v, want 1", got)
		}
	})
}

// TestGatewayEndCancelsInFlight: a session the gateway ends
// (MAX_SESSION_SECS) while a response streams is billed that response from
// its cancelled response.done, as a client's walking away is.
func TestGatewayEndCancelsInFlight(t *testing.T) {
	cfg := mockai.Config{AudioDeltas: 400, AudioDeltaInterval: 20 * time.Millisecond}
	overBoth(t, cfg, func(t *testing.T, mock *mockai.Server, trust func(*Settings)) {
		g, logPath := billingGateway(t, mock, trust, func(c *Settings) { c.MaxSessionDuration = time.Second })
		c := g.dial(t, "model=gpt-realtime", bearer(testMasterKey))
		read(t, c)
		send(t, c, map[string]any{"type": "response.create"})
		done, _ := readUntil(t, c, "response.done") // the cancelled one reaches the client before the close
		if done.str("response", "status") != "cancelled" {
			t.Errorf("response.done status %q, want cancelled", done.str("response", "status"))
		}
		closeOf(t, c)
		rec := waitRecords(t, logPath, 1)[0]
		if rec.Usage.Responses != 1 || rec.Unconfirmed || rec.Usage.OutputTokenDetails.AudioTokens == 0 || rec.CostUSD == 0 {
			t.Fatalf("record %+v, cost %v, unconfirmed %v; want the cancelled response's usage", rec.Usage, rec.CostUSD, rec.Unconfirmed)
		}
	})
}

// transcribeAndLeave turns input transcription on with model, has a second
// of audio transcribed and closes.
func transcribeAndLeave(t *testing.T, c *websocket.Conn, model string) {
	t.Helper()
	send(t, c, map[string]any{"type": "session.update", "session": map[string]any{"type": "realtime",
		"audio": map[string]any{"input": map[string]any{"transcription": map[string]any{"model": model}}}}})
	readUntil(t, c, "session.updated")
	appendRealtimeAudio(t, c, 48000) // 1 s: 100 audio tokens
	send(t, c, map[string]any{"type": "input_audio_buffer.commit"})
	readUntil(t, c, eventtype.TranscriptionComplete)
	_ = c.WriteMessage(websocket.CloseMessage, websocket.FormatCloseMessage(1000, ""))
}

// transcribedRecord is the usage record of one session through a fresh
// gateway in front of mock that turned input transcription on with model
// and left, and the gateway.
func transcribedRecord(t *testing.T, mock *mockai.Server, trust func(*Settings), model string) (*gateway, usage.Record) {
	t.Helper()
	g, logPath := billingGateway(t, mock, trust, nil)
	c := g.dial(t, "model=gpt-realtime", bearer(testMasterKey))
	read(t, c)
	transcribeAndLeave(t, c, model)
	return g, waitRecords(t, logPath, 1)[0]
}

// TestTranscriptionPricedByItsModel: a Realtime session with input
// transcription on gpt-4o-transcribe, and no response, is billed the
// transcription at gpt-4o-transcribe's prices, its output tokens (reported
// without output_token_details) included: 100 audio tokens at $6 and 5 text
// tokens at $10 a million, 0.00065 USD (on main: 0.0032, the audio at
// gpt-realtime's rate and the output ignored).
func TestTranscriptionPricedByItsModel(t *testing.T) {
	overBoth(t, mockai.Config{}, func(t *testing.T, mock *mockai.Server, trust func(*Settings)) {
		_, rec := transcribedRecord(t, mock, trust, "gpt-4o-transcribe")
		if len(rec.Transcription) != 1 || rec.Transcription[0].Model != "gpt-4o-transcribe" {
			t.Fatalf("transcription usage %+v, want gpt-4o-transcribe's", rec.Transcription)
		}
		tu := rec.Transcription[0].Usage
		if tu.InputTokenDetails.AudioTokens != 100 || tu.OutputTokenDetails.TextTokens != 5 || rec.Usage.TotalTokens != 0 {
			t.Errorf("transcription %+v, session usage %+v; want 100 audio in, 5 text out, none in the session's", tu, rec.Usage)
		}
		if want := 100*6e-6 + 5*10e-6; math.Abs(rec.CostUSD-want) > 1e-12 {
			t.Errorf("cost %.6f, want %.6f", rec.CostUSD, want)
		}
	})
}

// TestTranscriptionUnpriced: a transcription model nothing prices is
// flagged in the record and the metric, never booked as $0 in silence.
func TestTranscriptionUnpriced(t *testing.T) {
	overBoth(t, mockai.Config{}, func(t *testing.T, mock *mockai.Server, trust func(*Settings)) {
		g, rec := transcribedRecord(t, mock, trust, "mystery-transcribe")
		if !slices.Equal(rec.Unpriced, []string{"mystery-transcribe"}) {
			t.Fatalf("record unpriced %v, want [mystery-transcribe]", rec.Unpriced)
		}
		if got := metricValue(t, g, `rtgate_usage_flagged_total{flag="unpriced",model="mystery-transcribe",model_group="gpt-realtime"}`); got != 1 {
			t.Errorf("rtgate_usage_flagged_total unpriced %v, want 1", got)
		}
	})
}

// liveDelegate runs a GPT-Live session of key delegating to backend: two
// delegated responses and a second of audio, then session.close.
func liveDelegate(t *testing.T, g *gateway, key, backend string) {
	t.Helper()
	c := g.dialLive(t, key)
	send(t, c, liveStart("gpt-live", map[string]any{"delegation": map[string]any{"type": "responses", "responses": map[string]any{"model": backend}}}))
	if e := read(t, c); e.typ() != "session.started" {
		t.Fatalf("first event %v", e)
	}
	for range 2 {
		send(t, c, map[string]any{"type": "response.create"})
		for {
			e := read(t, c)
			if e.typ() == "response.event" && e.str("event", "type") == "response.completed" {
				break
			}
		}
	}
	appendAudio(t, c, liveSecond)
	send(t, c, map[string]any{"type": "session.close"})
	readUntil(t, c, "session.closed")
}

// TestLiveBackendPricedAndAllowed: GPT-Live's delegated o3-pro tokens are
// billed at o3-pro's built-in prices (on main: $0, its tokens looked up
// among Realtime prices only); a model nothing prices is flagged unpriced;
// and a key limited to models: [gpt-live] may not delegate to o3-pro: its
// session.start is refused with model_not_allowed (on main it started).
// Over ws:// and wss://.
func TestLiveBackendPricedAndAllowed(t *testing.T) {
	overBoth(t, mockai.Config{Live: mockai.LiveConfig{UsageInterval: -1}}, liveBackendPricedAndAllowed)
}

func liveBackendPricedAndAllowed(t *testing.T, m *mockai.Server, trust func(*Settings)) {
	logPath := filepath.Join(t.TempDir(), "usage.jsonl")
	g := startGateway(t, nil, func(c *Settings) {
		trust(c)
		c.RoutesFile = liveConfig(t, m, "", "\n    models: [gpt-live]")
		c.UsageLog = logPath
	})

	liveDelegate(t, g, testMasterKey, "o3-pro")
	rec := waitRecords(t, logPath, 1)[0]
	// Per response (mockai): 120 in (20 cached), 30 out; o3-pro $20 in
	// (cached too) and $80 out a million; and a second at $0.05 a minute.
	want := 2*(120*20e-6+30*80e-6) + 0.05/60
	if rec.Usage.Responses != 2 || math.Abs(rec.CostUSD-want) > 1e-12 || len(rec.Unpriced) != 0 {
		t.Fatalf("o3-pro delegation: usage %+v, cost %v, unpriced %v; want %v", rec.Usage, rec.CostUSD, rec.Unpriced, want)
	}

	liveDelegate(t, g, testMasterKey, "mystery-backend")
	rec = waitRecords(t, logPath, 2)[1]
	if !slices.Equal(rec.Unpriced, []string{"mystery-backend"}) || math.Abs(rec.CostUSD-0.05/60) > 1e-12 {
		t.Fatalf("unknown backend: unpriced %v, cost %v; want it flagged and only the second billed", rec.Unpriced, rec.CostUSD)
	}

	c := g.dialLive(t, "sk-team-a-test")
	send(t, c, liveStart("gpt-live", map[string]any{"delegation": map[string]any{"type": "responses", "responses": map[string]any{"model": "o3-pro"}}}))
	e := read(t, c)
	if e.typ() != "error" || e.str("error", "code") != "model_not_allowed" {
		t.Fatalf("a gpt-live-only key delegating to o3-pro got %v, want error model_not_allowed", e)
	}
	if ce := closeOf(t, c); ce == nil || ce.Code != websocket.ClosePolicyViolation {
		t.Fatalf("close %v, want 1008", ce)
	}
}

// TestTranscriptionModelChecked: a key limited to models: [gpt-realtime]
// asking for input transcription on gpt-4o-transcribe gets it replaced by
// the gateway's session.update (transcription off: no TRANSCRIPTION_MODEL
// here); with transcription_model: refuse it is also told, with an error
// event model_not_allowed (on main the choice went through unchecked).
func TestTranscriptionModelChecked(t *testing.T) {
	overBoth(t, mockai.Config{}, func(t *testing.T, mock *mockai.Server, trust func(*Settings)) {
		for _, policy := range []string{"rewrite", "refuse"} {
			t.Run(policy, func(t *testing.T) {
				g := startGateway(t, nil, func(c *Settings) {
					trust(c)
					c.RoutesFile = writeConfig(t, "model_list:"+openaiEntry("gpt-realtime", mock)+`
keys:
  - name: team-a
    key: os.environ/TEAM_A_KEY
    models: [gpt-realtime]
    transcription_model: `+policy+configTail)
				})
				c := g.dial(t, "model=gpt-realtime", bearer("sk-team-a-test"))
				read(t, c)
				send(t, c, map[string]any{"type": "session.update", "session": map[string]any{"type": "realtime",
					"audio": map[string]any{"input": map[string]any{"transcription": map[string]any{"model": "gpt-4o-transcribe"}}}}})
				readUntil(t, c, "session.updated") // the client's
				var refused bool
				for {
					e := read(t, c)
					if e.typ() == "error" && e.str("error", "code") == "model_not_allowed" {
						refused = true
						continue
					}
					if e.typ() == "session.updated" { // the gateway's
						if m := e.str("session", "audio", "input", "transcription", "model"); m != "" {
							t.Fatalf("transcription model after the gateway's update: %q, want none", m)
						}
						break
					}
				}
				if refused != (policy == "refuse") {
					t.Errorf("error event model_not_allowed: %v, want %v", refused, policy == "refuse")
				}
			})
		}
	})
}
