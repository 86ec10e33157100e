package server

import (
	"context"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"rtgate/mockai"
	"rtgate/server/spenddb/pgtest"
	"rtgate/server/usage"
)

// TestSpendLogPostgresOutage runs sessions through the gateway (wss://
// upstream) with DATABASE_URL set, stops Postgres a third of the way in and
// starts it again at two thirds, and then finds every session in
// session_usage exactly once, each row as its usage log line says, and the
// spend totals of the log, rtgate_spend_usd_total and Postgres agreeing.
func TestSpendLogPostgresOutage(t *testing.T) {
	const sessions, workers = 60, 4
	pg := pgtest.Start(t)
	m := startMock(t, mockai.Config{AudioDeltas: 2, AudioDeltaBytes: 4800, TLS: true})
	dir := t.TempDir()
	logPath := filepath.Join(dir, "usage.jsonl")
	g := startGateway(t, m, func(c *Settings) {
		c.UsageLog = logPath
		c.DatabaseURL = pg.URL
		c.UpstreamRoots = trustMock(t, m)
	})

	var ended atomic.Int64
	var wg sync.WaitGroup
	work := make(chan int, sessions)
	for i := range sessions {
		work <- i
	}
	close(work)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				talk(t, g.dial(t, "model=gpt-realtime", bearer(testMasterKey)), 20+i%5*20)
				ended.Add(1)
			}
		}()
	}
	waitFor(t, "a third of the sessions", func() bool { return ended.Load() >= sessions/3 })
	pg.Stop()
	t.Logf("postgres stopped after %d sessions", ended.Load())
	waitFor(t, "two thirds of the sessions", func() bool { return ended.Load() >= 2*sessions/3 })
	pg.Restart()
	t.Logf("postgres restarted after %d sessions", ended.Load())
	wg.Wait()
	waitFor(t, "the sessions to end", func() bool { return g.srv.SessionsOpen() == 0 })
	waitFor(t, "the spool to be replayed", func() bool {
		return metricSum(t, g, "rtgate_spend_db_up") == 1 && metricSum(t, g, "rtgate_spend_db_spool_records") == 0 &&
			metricSum(t, g, "rtgate_spend_db_queue") == 0
	})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := g.srv.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}

	recs := readRecords(t, logPath)
	if len(recs) != sessions {
		t.Fatalf("%d usage log records, want %d", len(recs), sessions)
	}
	c := pg.Conn(t)
	var rows, distinct int
	var pgSum float64
	if err := c.QueryRow(context.Background(), `SELECT count(*), count(DISTINCT session_id), coalesce(sum(cost_usd), 0) FROM session_usage`).
		Scan(&rows, &distinct, &pgSum); err != nil {
		t.Fatal(err)
	}
	if rows != sessions || distinct != sessions {
		t.Fatalf("after the outage: %d rows, %d distinct sessions; want %d", rows, distinct, sessions)
	}
	logSum := 0.0
	for _, r := range recs {
		logSum += r.CostUSD
		var key, group, outcome string
		var in, out int64
		var cost float64
		var started, endedAt time.Time
		err := c.QueryRow(context.Background(), `SELECT key_name, model_group, outcome, input_tokens, output_tokens, cost_usd,
			started_at, ended_at FROM session_usage WHERE session_id = $1`, r.SessionID).Scan(&key, &group, &outcome, &in, &out, &cost, &started, &endedAt)
		if err != nil {
			t.Fatalf("session %s of the usage log: %v", r.SessionID, err)
		}
		if key != r.KeyName || group != r.ModelGroup || outcome != r.Outcome || in != r.Usage.InputTokens ||
			out != r.Usage.OutputTokens || cost != r.CostUSD || !started.Equal(r.StartedAt) || !endedAt.Equal(r.EndedAt) {
			t.Fatalf("row for %s differs from its log line %+v", r.SessionID, r)
		}
	}
	metric := metricSum(t, g, "rtgate_spend_usd_total")
	if math.Abs(logSum-pgSum) > 1e-9 || math.Abs(logSum-metric) > 1e-9 {
		t.Fatalf("spend totals: log %.9f, Postgres %.9f, metric %.9f", logSum, pgSum, metric)
	}
	if spooled := metricSum(t, g, "rtgate_spend_db_spooled_total"); spooled == 0 {
		t.Errorf("no record was spooled: the outage did not happen during the load")
	}
	t.Logf("sessions: %d, rows after recovery: %d (distinct %d), spooled during the outage: %v; spend USD: log %.6f, metric %.6f, Postgres %.6f",
		sessions, rows, distinct, metricSum(t, g, "rtgate_spend_db_spooled_total"), logSum, metric, pgSum)
}

// TestLiveSessionInPostgres: a metered GPT-Live session (1 s of audio, one
// delegated response; wss:// upstream) lands in session_usage with its
// protocol, seconds, backend tokens and cost, as its usage log line says.
func TestLiveSessionInPostgres(t *testing.T) {
	pg := pgtest.Start(t)
	m := startMock(t, mockai.Config{TLS: true, Live: mockai.LiveConfig{UsageInterval: -1}})
	logPath := filepath.Join(t.TempDir(), "usage.jsonl")
	g := startGateway(t, m, func(c *Settings) {
		c.UsageLog, c.DatabaseURL, c.UpstreamRoots = logPath, pg.URL, trustMock(t, m)
	})
	c := g.dialLive(t, testMasterKey)
	send(t, c, liveStart("gpt-live-1", map[string]any{"delegation": map[string]any{"type": "responses",
		"responses": map[string]any{"model": "gpt-realtime-mini"}}}))
	send(t, c, map[string]any{"type": "response.create"})
	appendAudio(t, c, liveSecond)
	readUntil(t, c, "session.output_audio.delta")
	send(t, c, map[string]any{"type": "session.close"})
	readUntil(t, c, "session.closed")
	rec := waitRecords(t, logPath, 1)[0]
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := g.srv.Shutdown(ctx); err != nil { // flushes the spend log
		t.Fatal(err)
	}
	var protocol string
	var seconds, cost float64
	var unconfirmed bool
	var in, out int64
	err := pg.Conn(t).QueryRow(context.Background(), `SELECT protocol, seconds, unconfirmed, input_tokens, output_tokens, cost_usd
		FROM session_usage WHERE session_id = $1`, rec.SessionID).Scan(&protocol, &seconds, &unconfirmed, &in, &out, &cost)
	if err != nil {
		t.Fatal(err)
	}
	// 1 s at $0.05 a minute; 120 backend input tokens (20 cached) and 30
	// output at gpt-realtime-mini's text prices.
	want := 0.05/60 + 100*0.60e-6 + 20*0.06e-6 + 30*2.40e-6
	if protocol != "live" || seconds != 1 || unconfirmed || in != 120 || out != 30 || math.Abs(cost-want) > 1e-12 || cost != rec.CostUSD {
		t.Fatalf("row: %s, %v s, unconfirmed %v, %d/%d tokens, %v USD; want live, 1 s, 120/30, %v USD (log line %v)",
			protocol, seconds, unconfirmed, in, out, cost, want, rec.CostUSD)
	}
	t.Logf("session_usage row: protocol %s, %v s, %d backend input and %d output tokens, %.9f USD", protocol, seconds, in, out, cost)
}

// TestBillingFlagsInPostgres: a walked-away response the upstream never
// confirmed (mockai ignores the cancel) and a transcription nothing prices
// land in session_usage with their flags: the estimate and unconfirmed, the
// transcription usage and unpriced. Postgres is down while both sessions
// end, so the records go through the spool and its replay, and none is
// lost (ws:// and wss://).
func TestBillingFlagsInPostgres(t *testing.T) {
	pg := pgtest.Start(t)
	cfg := mockai.Config{AudioDeltas: 400, AudioDeltaInterval: 20 * time.Millisecond, IgnoreCancel: true}
	overBoth(t, cfg, func(t *testing.T, mock *mockai.Server, trust func(*Settings)) {
		g, logPath := billingGateway(t, mock, trust, func(c *Settings) { c.DatabaseURL = pg.URL })
		waitFor(t, "the spend log to connect", func() bool { return metricSum(t, g, "rtgate_spend_db_up") == 1 })
		pg.Stop()

		c := g.dial(t, "model=gpt-realtime", bearer(testMasterKey))
		read(t, c)
		walkAway(t, c, 3, false)
		c = g.dial(t, "model=gpt-realtime", bearer(testMasterKey))
		read(t, c)
		transcribeAndLeave(t, c, "mystery-transcribe")
		recs := waitRecords(t, logPath, 2)
		waitFor(t, "both records in the spool", func() bool { return metricSum(t, g, "rtgate_spend_db_spool_records") == 2 })

		pg.Restart()
		waitFor(t, "the spool to be replayed", func() bool {
			return metricSum(t, g, "rtgate_spend_db_up") == 1 && metricSum(t, g, "rtgate_spend_db_spool_records") == 0
		})
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if err := g.srv.Shutdown(ctx); err != nil {
			t.Fatal(err)
		}
		byID := map[string]usage.Record{}
		for _, r := range recs {
			byID[r.SessionID] = r
		}
		pc := pg.Conn(t)
		for id, rec := range byID {
			var unconfirmed bool
			var estResponses, estOut *int64
			var transcription string
			var unpriced []string
			var cost float64
			err := pc.QueryRow(context.Background(), `SELECT unconfirmed, (estimated->>'responses')::bigint,
				(estimated->'output_token_details'->>'audio_tokens')::bigint, transcription_usage::text, unpriced, cost_usd
				FROM session_usage WHERE session_id = $1`, id).Scan(&unconfirmed, &estResponses, &estOut, &transcription, &unpriced, &cost)
			if err != nil {
				t.Fatalf("session %s of the usage log: %v", id, err)
			}
			if cost != rec.CostUSD || unconfirmed != rec.Unconfirmed || !slices.Equal(unpriced, rec.Unpriced) {
				t.Errorf("row %s: unconfirmed %v, unpriced %v, cost %v; its log line %v, %v, %v", id, unconfirmed, unpriced, cost,
					rec.Unconfirmed, rec.Unpriced, rec.CostUSD)
			}
			switch {
			case rec.Estimated != nil: // the walked-away response
				if !unconfirmed || estResponses == nil || *estResponses != 1 || estOut == nil || *estOut != rec.Estimated.OutputTokenDetails.AudioTokens || *estOut == 0 {
					t.Errorf("walked-away row: unconfirmed %v, estimate %v responses, %v output audio tokens; log line %+v",
						unconfirmed, estResponses, estOut, rec.Estimated)
				}
			case len(rec.Unpriced) > 0: // the transcription
				if unconfirmed || estResponses != nil || !slices.Equal(unpriced, []string{"mystery-transcribe"}) ||
					!strings.Contains(transcription, `"model": "mystery-transcribe"`) {
					t.Errorf("transcription row: unconfirmed %v, estimate %v, unpriced %v, transcription %s", unconfirmed, estResponses, unpriced, transcription)
				}
			default:
				t.Errorf("record %s has neither an estimate nor an unpriced model: %+v", id, rec)
			}
		}
		if len(byID) != 2 {
			t.Errorf("%d records, want 2", len(byID))
		}
	})
}
