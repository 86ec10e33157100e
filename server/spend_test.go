package server

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/json"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"rtgate/mockai"
	"rtgate/server/usage"
)

// syncBuffer is a log sink that tests read while the gateway writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func (s *syncBuffer) lines() []map[string]any {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []map[string]any
	for _, l := range bytes.Split(s.b.Bytes(), []byte("\n")) {
		var m map[string]any
		if json.Unmarshal(l, &m) == nil {
			out = append(out, m)
		}
	}
	return out
}

// talk runs one session of responses (appending ms of audio before each)
// and closes it normally.
func talk(t testing.TB, c *websocket.Conn, ms ...int) {
	t.Helper()
	read(t, c) // session.created
	for _, d := range ms {
		send(t, c, map[string]any{"type": "input_audio_buffer.append", "audio": base64.StdEncoding.EncodeToString(make([]byte, 48*d))})
		send(t, c, map[string]any{"type": "response.create"})
		readUntil(t, c, "response.done")
	}
	_ = c.WriteMessage(websocket.CloseMessage, websocket.FormatCloseMessage(1000, ""))
	closeOf(t, c)
}

// readRecords reads a usage log.
func readRecords(t testing.TB, path string) []usage.Record {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []usage.Record
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var r usage.Record
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("usage log line %q: %v", sc.Bytes(), err)
		}
		out = append(out, r)
	}
	return out
}

// TestSessionCost prices a session at gpt-realtime's list prices, over a
// plain and a TLS upstream, and finds the same cost in the usage record,
// the session's log line and rtgate_spend_usd_total.
//
// mockai's usage for 100 ms and 250 ms of audio and 4 deltas of 9600 bytes
// a response: input audio (4800+12000)/480 = 35, input text 2×10 = 20,
// output audio 2×4×9600/480 = 160, output text 2×5 = 10. At gpt-realtime's
// prices ($4, $32, $16, $64 a million for text in, audio in, text out,
// audio out): 20×4e-6 + 35×32e-6 + 10×16e-6 + 160×64e-6
// = 0.00008 + 0.00112 + 0.00016 + 0.01024 = 0.0116 USD.
func TestSessionCost(t *testing.T) {
	const want = 0.0116
	for _, tlsUp := range []bool{false, true} {
		name := "ws"
		if tlsUp {
			name = "wss"
		}
		t.Run(name, func(t *testing.T) {
			m := startMock(t, mockai.Config{AudioDeltas: 4, AudioDeltaBytes: 9600, TLS: tlsUp})
			logPath := filepath.Join(t.TempDir(), "usage.jsonl")
			var logs syncBuffer
			g := startGatewayLog(t, m, func(c *Settings) {
				c.UsageLog = logPath
				if tlsUp {
					c.UpstreamRoots = trustMock(t, m)
				}
			}, slog.New(slog.NewJSONHandler(&logs, nil)))
			talk(t, g.dial(t, "model=gpt-realtime", bearer(testMasterKey)), 100, 250)
			waitFor(t, "the session to end", func() bool { return g.srv.SessionsOpen() == 0 })
			ctx, cancel := contextWithTimeout(5 * time.Second)
			defer cancel()
			_ = g.srv.Shutdown(ctx)

			recs := readRecords(t, logPath)
			if len(recs) != 1 {
				t.Fatalf("%d records, want 1", len(recs))
			}
			if math.Abs(recs[0].CostUSD-want) > 1e-12 {
				t.Errorf("record cost_usd %.9f, want %.9f (usage %+v)", recs[0].CostUSD, want, recs[0].Usage)
			}
			if got := metricSum(t, g, "rtgate_spend_usd_total"); math.Abs(got-want) > 1e-12 {
				t.Errorf("rtgate_spend_usd_total %.9f, want %.9f", got, want)
			}
			var line map[string]any
			for _, l := range logs.lines() {
				if l["msg"] == "session ended" {
					line = l
				}
			}
			if line == nil {
				t.Fatal("no session ended log line")
			}
			if c, _ := line["cost_usd"].(float64); math.Abs(c-want) > 1e-12 || line["session_id"] != recs[0].SessionID {
				t.Errorf("log line cost_usd %v session_id %v, want %v and %s", line["cost_usd"], line["session_id"], want, recs[0].SessionID)
			}
		})
	}
}
