package spenddb

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"rtgate/server/spenddb/pgtest"
	"rtgate/server/transcript"
	"rtgate/server/usage"
)

func record(i int) usage.Record {
	start := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC).Add(time.Duration(i) * time.Second)
	r := usage.Record{SessionID: fmt.Sprintf("gws_test%06d", i), KeyName: "team-a", ModelGroup: "gpt-realtime",
		Deployment: "gpt-realtime/0@127.0.0.1", StartedAt: start, EndedAt: start.Add(1500 * time.Millisecond),
		Outcome: "client_closed", CostUSD: float64(i) * 0.001}
	r.Usage.Responses = 1
	r.Usage.InputTokens, r.Usage.OutputTokens, r.Usage.TotalTokens = int64(i), 2*int64(i), 3*int64(i)
	r.Usage.InputTokenDetails.AudioTokens = int64(i)
	r.Usage.OutputTokenDetails.AudioTokens = 2 * int64(i)
	return r
}

func open(t *testing.T, url, spool string, reg prometheus.Registerer) *Writer {
	t.Helper()
	w, err := Open(Config{URL: url, Spool: spool, FlushEvery: 20 * time.Millisecond, Retry: 50 * time.Millisecond,
		Timeout: 5 * time.Second, Registry: reg})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Close(context.Background()) })
	return w
}

func count(t *testing.T, pg *pgtest.Server) (rows, distinct int) {
	t.Helper()
	c := pg.Conn(t)
	defer c.Close(context.Background())
	var exists bool
	if err := c.QueryRow(context.Background(), `SELECT to_regclass('session_usage') IS NOT NULL`).Scan(&exists); err != nil {
		t.Fatal(err)
	}
	if !exists { // the writer has not migrated yet
		return 0, 0
	}
	err := c.QueryRow(context.Background(), `SELECT count(*), count(DISTINCT session_id) FROM session_usage`).Scan(&rows, &distinct)
	if err != nil {
		t.Fatal(err)
	}
	return rows, distinct
}

func waitRows(t *testing.T, pg *pgtest.Server, want int) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		n, _ := count(t, pg)
		if n == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("session_usage has %d rows after 20 s, want %d", n, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestRowsMatchRecords writes records and reads them back column by column.
func TestRowsMatchRecords(t *testing.T) {
	pg := pgtest.Start(t)
	w := open(t, pg.URL, filepath.Join(t.TempDir(), "spool.jsonl"), nil)
	for i := range 1200 { // more than two batches
		w.Enqueue(record(i))
	}
	waitRows(t, pg, 1200)
	if err := w.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if rows, distinct := count(t, pg); rows != 1200 || distinct != 1200 {
		t.Fatalf("%d rows (%d distinct), want 1200", rows, distinct)
	}
	c := pg.Conn(t)
	want := record(7)
	var got usage.Record
	var inAudio, outAudio int64
	err := c.QueryRow(context.Background(), `SELECT session_id, key_name, model_group, deployment, started_at, ended_at,
		input_tokens, output_tokens, cost_usd, outcome, (usage->'input_token_details'->>'audio_tokens')::bigint,
		(usage->'output_token_details'->>'audio_tokens')::bigint FROM session_usage WHERE session_id = $1`, want.SessionID).Scan(
		&got.SessionID, &got.KeyName, &got.ModelGroup, &got.Deployment, &got.StartedAt, &got.EndedAt,
		&got.Usage.InputTokens, &got.Usage.OutputTokens, &got.CostUSD, &got.Outcome, &inAudio, &outAudio)
	if err != nil {
		t.Fatal(err)
	}
	if got.SessionID != want.SessionID || got.KeyName != want.KeyName || got.ModelGroup != want.ModelGroup ||
		got.Deployment != want.Deployment || !got.StartedAt.Equal(want.StartedAt) || !got.EndedAt.Equal(want.EndedAt) ||
		got.Usage.InputTokens != 7 || got.Usage.OutputTokens != 14 || got.CostUSD != want.CostUSD ||
		got.Outcome != want.Outcome || inAudio != 7 || outAudio != 14 {
		t.Fatalf("row %+v (audio %d/%d), want %+v", got, inAudio, outAudio, want)
	}
}

// TestOutageSpoolsAndReplays stops Postgres with records flowing, writes
// more while it is down, restarts it, and finds every record exactly once.
func TestOutageSpoolsAndReplays(t *testing.T) {
	pg := pgtest.Start(t)
	reg := prometheus.NewRegistry()
	spool := filepath.Join(t.TempDir(), "spool.jsonl")
	w := open(t, pg.URL, spool, reg)
	n := 0
	enqueue := func(k int) {
		for range k {
			w.Enqueue(record(n))
			n++
		}
	}
	enqueue(300)
	waitRows(t, pg, 300)

	pg.Stop()
	enqueue(400) // into a dead database: spooled
	deadline := time.Now().Add(20 * time.Second)
	for testutil.ToFloat64(w.m.pending) < 400 {
		if time.Now().After(deadline) {
			t.Fatalf("spool holds %v records, want 400", testutil.ToFloat64(w.m.pending))
		}
		time.Sleep(20 * time.Millisecond)
	}
	if up := testutil.ToFloat64(w.m.up); up != 0 {
		t.Fatalf("rtgate_spend_db_up %v while Postgres is down", up)
	}

	pg.Restart()
	enqueue(300)
	// A duplicate (as a replay after a crash would send) adds nothing.
	w.Enqueue(record(5))
	waitRows(t, pg, 1000)
	if err := w.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if rows, distinct := count(t, pg); rows != 1000 || distinct != 1000 {
		t.Fatalf("after recovery: %d rows, %d distinct, want 1000 of each", rows, distinct)
	}
	if p := testutil.ToFloat64(w.m.pending); p != 0 {
		t.Errorf("spool still holds %v records", p)
	}
	if s := testutil.ToFloat64(w.m.spooled); s < 400 {
		t.Errorf("rtgate_spend_db_spooled_total %v, want at least 400", s)
	}
	if d := testutil.ToFloat64(w.m.dropped); d != 0 {
		t.Errorf("rtgate_spend_db_dropped_total %v", d)
	}
}

// TestStartsWithPostgresDown opens the writer before Postgres exists; the
// schema is made and the records arrive once it does.
func TestStartsWithPostgresDown(t *testing.T) {
	pg := pgtest.Start(t)
	pg.Stop()
	spool := filepath.Join(t.TempDir(), "spool.jsonl")
	w := open(t, pg.URL, spool, nil)
	for i := range 50 {
		w.Enqueue(record(i))
	}
	time.Sleep(200 * time.Millisecond) // batches fail to the spool
	pg.Restart()
	waitRows(t, pg, 50)
	_ = w.Close(context.Background())

	// A second gateway on the same database: migrations are not rerun,
	// and a leftover spool replays without duplicates.
	w2 := open(t, pg.URL, spool, nil)
	w2.Enqueue(record(3))
	w2.Enqueue(record(50))
	waitRows(t, pg, 51)
	var versions int
	if err := pg.Conn(t).QueryRow(context.Background(), `SELECT count(*) FROM rtgate_schema_migrations`).Scan(&versions); err != nil {
		t.Fatal(err)
	}
	if versions != len(migrations) {
		t.Fatalf("%d migrations recorded, want %d", versions, len(migrations))
	}
}

func TestBadURL(t *testing.T) {
	_, err := Open(Config{URL: "postgres://u:s3cret@[bad", Spool: filepath.Join(t.TempDir(), "s")})
	if err == nil {
		t.Fatal("a bad URL opened")
	}
	if got := err.Error(); strings.Contains(got, "s3cret") {
		t.Fatalf("the error shows the password: %s", got)
	}
}

// TestSlowPostgres pauses Postgres (connections open, calls hanging):
// Enqueue still returns at once, the writer gives up on each call after its
// timeout and spools, and once Postgres goes on every record is in once.
func TestSlowPostgres(t *testing.T) {
	pg := pgtest.Start(t)
	reg := prometheus.NewRegistry()
	w, err := Open(Config{URL: pg.URL, Spool: filepath.Join(t.TempDir(), "spool.jsonl"), FlushEvery: 20 * time.Millisecond,
		Retry: 50 * time.Millisecond, Timeout: 300 * time.Millisecond, Registry: reg})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close(context.Background())
	for i := range 100 {
		w.Enqueue(record(i))
	}
	waitRows(t, pg, 100)
	pg.Pause()
	for i := 100; i < 600; i++ { // would hang here if Enqueue waited on the database
		w.Enqueue(record(i))
	}
	deadline := time.Now().Add(20 * time.Second)
	for testutil.ToFloat64(w.m.spooled) < 500 {
		if time.Now().After(deadline) {
			pg.Resume()
			t.Fatalf("%v records spooled while Postgres hangs, want 500 (rows %v, failures %v, dropped %v, up %v, queue %d)", testutil.ToFloat64(w.m.spooled),
				testutil.ToFloat64(w.m.rows), testutil.ToFloat64(w.m.failures), testutil.ToFloat64(w.m.dropped), testutil.ToFloat64(w.m.up), len(w.queue))
		}
		time.Sleep(20 * time.Millisecond)
	}
	pg.Resume()
	waitRows(t, pg, 600)
	if rows, distinct := count(t, pg); rows != 600 || distinct != 600 {
		t.Fatalf("%d rows, %d distinct; want 600", rows, distinct)
	}
}

// schemaAt leaves the database as a gateway of schema version v did.
func schemaAt(t *testing.T, c *pgx.Conn, v int) {
	t.Helper()
	ctx := context.Background()
	if _, err := c.Exec(ctx, `CREATE TABLE rtgate_schema_migrations (version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())`); err != nil {
		t.Fatal(err)
	}
	for i, m := range migrations[:v] {
		if _, err := c.Exec(ctx, m); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Exec(ctx, `INSERT INTO rtgate_schema_migrations (version) VALUES ($1)`, i+1); err != nil {
			t.Fatal(err)
		}
	}
}

// upgradeFrom leaves the database at schema version v with one row of that
// version's columns in it, record(1)'s, for a writer to upgrade.
func upgradeFrom(t *testing.T, c *pgx.Conn, v int) usage.Record {
	t.Helper()
	schemaAt(t, c, v)
	old := record(1)
	if _, err := c.Exec(context.Background(), `INSERT INTO session_usage (session_id, key_name, model_group, started_at, ended_at,
		input_tokens, output_tokens, total_tokens, cost_usd, outcome, usage) VALUES ($1,'team-a','gpt-realtime',$2,$3,1,2,3,0,'client_closed','{}')`,
		old.SessionID, old.StartedAt, old.EndedAt); err != nil {
		t.Fatal(err)
	}
	return old
}

// TestSecondRoundColumns upgrades a database left at schema version 2 with
// a row in it, then writes records that use the columns migration 3 adds:
// the old row reads as a Realtime session on one upstream session, the new
// ones read back as written.
func TestSecondRoundColumns(t *testing.T) {
	pg := pgtest.Start(t)
	ctx := context.Background()
	c := pg.Conn(t)
	old := upgradeFrom(t, c, 2)

	live := record(2)
	live.Protocol, live.Seconds, live.Unconfirmed = "live", 42.5, true
	resumed := record(3)
	resumed.UpstreamSessions, resumed.Turns, resumed.FirstAudioP50MS, resumed.FirstAudioP95MS = 2, 7, 310, 820
	resumed.Resumes = []usage.Resume{{Cause: "session_expired", At: resumed.StartedAt.Add(time.Second), DurationMS: 180, Outcome: "ok"}}
	webrtc := record(4)
	webrtc.Protocol, webrtc.Seconds, webrtc.Unmetered = "live", 15, true

	w := open(t, pg.URL, filepath.Join(t.TempDir(), "spool.jsonl"), nil)
	for _, r := range []usage.Record{live, resumed, webrtc} {
		w.Enqueue(r)
	}
	waitRows(t, pg, 4)

	type row struct {
		protocol         string
		seconds          float64
		unconfirmed      bool
		unmetered        bool
		upstreams, turns int
		resumes          string
		p50, p95         *float64
	}
	read := func(id string) row {
		var r row
		if err := c.QueryRow(ctx, `SELECT protocol, seconds, unconfirmed, unmetered, upstream_sessions, turns,
			resumes::text, first_audio_p50_ms, first_audio_p95_ms FROM session_usage WHERE session_id = $1`, id).Scan(
			&r.protocol, &r.seconds, &r.unconfirmed, &r.unmetered, &r.upstreams, &r.turns, &r.resumes, &r.p50, &r.p95); err != nil {
			t.Fatalf("reading %s: %v", id, err)
		}
		return r
	}
	if r := read(old.SessionID); r.protocol != "realtime" || r.upstreams != 1 || r.turns != 0 || r.resumes != "[]" || r.p50 != nil {
		t.Errorf("the row from before the upgrade reads %+v", r)
	}
	if r := read(live.SessionID); r.protocol != "live" || r.seconds != 42.5 || !r.unconfirmed || r.unmetered || r.upstreams != 1 {
		t.Errorf("the Live record reads %+v", r)
	}
	if r := read(webrtc.SessionID); !r.unmetered || r.seconds != 15 {
		t.Errorf("the unmetered record reads %+v", r)
	}
	r := read(resumed.SessionID)
	if r.protocol != "realtime" || r.upstreams != 2 || r.turns != 7 || r.p50 == nil || *r.p50 != 310 || r.p95 == nil || *r.p95 != 820 ||
		!strings.Contains(r.resumes, `"cause": "session_expired"`) || !strings.Contains(r.resumes, `"duration_ms": 180`) {
		t.Errorf("the resumed record reads %+v", r)
	}
}

// TestBillingColumns upgrades a database left at schema version 3 with a
// row in it, then writes a record with an estimated (unconfirmed) response,
// one with transcription usage and an unpriced model, and a plain one: the
// old row reads as confirmed and priced, each new one reads back as written,
// and the flagged rows are the ones a query for flags finds.
func TestBillingColumns(t *testing.T) {
	pg := pgtest.Start(t)
	ctx := context.Background()
	c := pg.Conn(t)
	old := upgradeFrom(t, c, 3)

	walked := record(2)
	walked.Unconfirmed = true
	walked.Estimated = &usage.Usage{Responses: 1, InputTokens: 40, OutputTokens: 18, TotalTokens: 58}
	walked.Estimated.OutputTokenDetails.AudioTokens = 18
	transcribed := record(3)
	transcribed.Unpriced = []string{"mystery-transcribe"}
	transcribed.Transcription = []usage.ModelUsage{{Model: "mystery-transcribe", Usage: usage.Usage{InputTokens: 100, OutputTokens: 5}}}
	plain := record(4)

	w := open(t, pg.URL, filepath.Join(t.TempDir(), "spool.jsonl"), nil)
	for _, r := range []usage.Record{walked, transcribed, plain} {
		w.Enqueue(r)
	}
	waitRows(t, pg, 4)

	type row struct {
		unconfirmed   bool
		estimatedOut  *int64
		transcription string
		unpriced      []string
	}
	read := func(id string) row {
		var r row
		if err := c.QueryRow(ctx, `SELECT unconfirmed, (estimated->'output_token_details'->>'audio_tokens')::bigint,
			transcription_usage::text, unpriced FROM session_usage WHERE session_id = $1`, id).Scan(
			&r.unconfirmed, &r.estimatedOut, &r.transcription, &r.unpriced); err != nil {
			t.Fatalf("reading %s: %v", id, err)
		}
		return r
	}
	for _, id := range []string{old.SessionID, plain.SessionID} {
		if r := read(id); r.unconfirmed || r.estimatedOut != nil || r.transcription != "[]" || len(r.unpriced) != 0 {
			t.Errorf("%s (no flags) reads %+v", id, r)
		}
	}
	if r := read(walked.SessionID); !r.unconfirmed || r.estimatedOut == nil || *r.estimatedOut != 18 || len(r.unpriced) != 0 {
		t.Errorf("the walked-away record reads %+v, want unconfirmed with 18 estimated output audio tokens", r)
	}
	r := read(transcribed.SessionID)
	if r.unconfirmed || r.estimatedOut != nil || len(r.unpriced) != 1 || r.unpriced[0] != "mystery-transcribe" ||
		!strings.Contains(r.transcription, `"model": "mystery-transcribe"`) || !strings.Contains(r.transcription, `"input_tokens": 100`) {
		t.Errorf("the transcribed record reads %+v", r)
	}
	var flagged []string
	rows, err := c.Query(ctx, `SELECT session_id FROM session_usage WHERE unconfirmed OR cardinality(unpriced) > 0 ORDER BY session_id`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		flagged = append(flagged, id)
	}
	if rows.Err() != nil {
		t.Fatal(rows.Err())
	}
	if len(flagged) != 2 || flagged[0] != walked.SessionID || flagged[1] != transcribed.SessionID {
		t.Errorf("flagged rows %v, want %s and %s", flagged, walked.SessionID, transcribed.SessionID)
	}
}

// TestConversationsOutliveAnOutage: sessions that kept a conversation
// record get a session_conversation row beside their session_usage row,
// those without get none; records written while Postgres is down wait in
// the spool with their conversations and land once it is back, and a
// record written twice (a replay) adds no second row.
func TestConversationsOutliveAnOutage(t *testing.T) {
	pg := pgtest.Start(t)
	w := open(t, pg.URL, filepath.Join(t.TempDir(), "spool.jsonl"), prometheus.NewRegistry())
	talked := func(i int) usage.Record {
		r := record(i)
		if i%2 == 0 {
			r.Conversation = &transcript.Record{Bytes: 70, Redactions: 1, Entries: []transcript.Entry{
				{At: r.StartedAt, Kind: transcript.KindText, Role: "user", Text: fmt.Sprintf("order %d for [CARD]", i)}}}
		}
		return r
	}
	for i := range 10 {
		w.Enqueue(talked(i))
	}
	waitRows(t, pg, 10)
	pg.Stop()
	for i := 10; i < 20; i++ {
		w.Enqueue(talked(i))
	}
	time.Sleep(300 * time.Millisecond) // into the spool
	pg.Restart()
	w.Enqueue(talked(4)) // a duplicate
	waitRows(t, pg, 20)
	if err := w.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	c := pg.Conn(t)
	defer c.Close(context.Background())
	rows, err := c.Query(context.Background(), `SELECT session_id, entries->0->>'text', redactions FROM session_conversation ORDER BY session_id`)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for rows.Next() {
		var id, text string
		var redactions int
		if err := rows.Scan(&id, &text, &redactions); err != nil {
			t.Fatal(err)
		}
		got = append(got, fmt.Sprintf("%s %s %d", id, text, redactions))
	}
	if rows.Err() != nil {
		t.Fatal(rows.Err())
	}
	var want []string
	for i := 0; i < 20; i += 2 {
		want = append(want, fmt.Sprintf("%s order %d for [CARD] 1", record(i).SessionID, i))
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("session_conversation holds\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestConversationRetention: with a retention, the conversation records
// of sessions that ended longer ago are deleted; newer ones, and the
// session_usage rows, stay.
func TestConversationRetention(t *testing.T) {
	pg := pgtest.Start(t)
	w, err := Open(Config{URL: pg.URL, Spool: filepath.Join(t.TempDir(), "spool.jsonl"), FlushEvery: 20 * time.Millisecond,
		Retry: 50 * time.Millisecond, Timeout: 5 * time.Second, ConversationRetention: 24 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Close(context.Background()) })
	now := time.Now().UTC().Truncate(time.Microsecond)
	for i, ended := range []time.Time{now.Add(-48 * time.Hour), now.Add(-time.Hour)} {
		r := record(i)
		r.StartedAt, r.EndedAt = ended.Add(-time.Minute), ended
		r.Conversation = &transcript.Record{Bytes: 70, Entries: []transcript.Entry{{At: ended, Kind: transcript.KindText, Role: "user", Text: "hi"}}}
		w.Enqueue(r)
	}
	waitRows(t, pg, 2)
	// (The writer's own round at start may have come first: what is
	// left is what counts.)
	if n, err := w.RetireConversations(context.Background()); err != nil || n > 1 {
		t.Fatalf("retired %d (%v), want at most the one that ended two days ago", n, err)
	}
	var left []string
	rows, err := pg.Conn(t).Query(context.Background(), `SELECT session_id FROM session_conversation`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id string
		_ = rows.Scan(&id)
		left = append(left, id)
	}
	if len(left) != 1 || left[0] != record(1).SessionID {
		t.Fatalf("left %v, want only %s", left, record(1).SessionID)
	}
	if usage, _ := count(t, pg); usage != 2 {
		t.Fatalf("session_usage has %d rows, want both", usage)
	}
}
