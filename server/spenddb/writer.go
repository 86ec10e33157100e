// Package spenddb is the durable spend log: one row per ended session in
// Postgres's session_usage table (and, for a session that kept its
// conversation record, one in session_conversation), written off the data
// path.
//
// Sessions hand their record to Enqueue, which never blocks: a bounded
// queue feeds one writer goroutine that inserts in batches (a multi-row
// INSERT ... ON CONFLICT (session_id) DO NOTHING). When Postgres is down or
// slow, a batch that does not go in is appended to the spool, a JSON-lines
// file in the usage log's format, and fsynced; once Postgres answers again
// the spool is replayed and emptied. session_id is the idempotency key, so
// a replay that repeats rows (a crash between insert and emptying the
// spool, an outage that cut an insert off after it committed) adds none.
package spenddb

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"rtgate/server/transcript"
	"rtgate/server/usage"
)

// Config configures a Writer.
type Config struct {
	// URL is the Postgres connection string (DATABASE_URL).
	URL string
	// Spool is the file records wait in while Postgres is unreachable.
	Spool string
	// Queue bounds the records waiting for the writer (default 16384);
	// Batch bounds a batch (default 500); FlushEvery is the longest a
	// record waits for its batch to fill (default 200 ms); Retry is how
	// often a down database is tried again (default 1 s); Timeout bounds
	// each database call (default 5 s).
	Queue, Batch      int
	FlushEvery, Retry time.Duration
	Timeout           time.Duration
	// ConversationRetention, above 0, deletes session_conversation rows
	// whose session ended longer ago (RECORDINGS_RETENTION_DAYS: the
	// transcripts go with the recordings), at start and then every tenth
	// of it, at most hourly and at least every second.
	ConversationRetention time.Duration
	Log                   *slog.Logger
	Registry              prometheus.Registerer
}

// Writer is the durable spend log.
type Writer struct {
	cfg   Config
	pool  *pgxpool.Pool
	log   *slog.Logger
	queue chan usage.Record
	m     metrics

	mu     sync.RWMutex // Enqueue holds it shared, Close exclusively
	closed bool
	done   chan struct{}
	stop   context.CancelFunc

	// The prober is a goroutine of its own, so that waiting on a down or
	// hanging Postgres never holds up the records: the writer asks it to
	// probe (down) and it answers once Postgres took the migrations (up).
	probe, upCh chan struct{}
	probeDone   chan struct{}

	// the writer goroutine's own state
	spool    *os.File
	spooled  int // records in the spool
	up       bool
	lastWarn time.Time
}

type metrics struct {
	rows, spooled, replayed, dropped, failures prometheus.Counter
	up, pending                                prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer, queue chan usage.Record) metrics {
	c := func(name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
	}
	m := metrics{
		rows:     c("rtgate_spend_db_rows_total", "Session records inserted into session_usage (replays included; duplicates skipped are not counted)."),
		spooled:  c("rtgate_spend_db_spooled_total", "Session records written to the spool because Postgres did not take them."),
		replayed: c("rtgate_spend_db_replayed_total", "Spooled session records replayed into Postgres (duplicates included)."),
		dropped:  c("rtgate_spend_db_dropped_total", "Session records lost: the queue was full, or the spool could not be written."),
		failures: c("rtgate_spend_db_failures_total", "Failed Postgres calls (connect, migrate, insert)."),
		up: prometheus.NewGauge(prometheus.GaugeOpts{Name: "rtgate_spend_db_up",
			Help: "1 while the spend log's Postgres takes writes, 0 while records go to the spool."}),
		pending: prometheus.NewGauge(prometheus.GaugeOpts{Name: "rtgate_spend_db_spool_records",
			Help: "Session records in the spool waiting for Postgres."}),
	}
	if reg != nil {
		reg.MustRegister(m.rows, m.spooled, m.replayed, m.dropped, m.failures, m.up, m.pending,
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "rtgate_spend_db_queue",
				Help: "Session records queued for the spend log's writer."}, func() float64 { return float64(len(queue)) }))
	}
	return m
}

// Open starts the writer. Postgres need not be up: the schema is migrated
// and the spool replayed as soon as it answers. Only a bad URL or an
// unusable spool file is an error.
func Open(cfg Config) (*Writer, error) {
	if cfg.Queue <= 0 {
		cfg.Queue = 16384
	}
	if cfg.Batch <= 0 {
		cfg.Batch = 500
	}
	cfg.Batch = min(cfg.Batch, 65535/perRow) // Postgres takes at most 65,535 parameters a statement
	if cfg.FlushEvery <= 0 {
		cfg.FlushEvery = 200 * time.Millisecond
	}
	if cfg.Retry <= 0 {
		cfg.Retry = time.Second
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 5 * time.Second
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	pc, err := pgxpool.ParseConfig(cfg.URL)
	if err != nil {
		// pgx's message may quote the URL, password and all: keep it out.
		return nil, errors.New("DATABASE_URL is not a valid Postgres connection string")
	}
	pc.MaxConns = 2
	if pc.ConnConfig.ConnectTimeout == 0 || pc.ConnConfig.ConnectTimeout > cfg.Timeout {
		pc.ConnConfig.ConnectTimeout = cfg.Timeout
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), pc) // connects lazily
	if err != nil {
		return nil, fmt.Errorf("DATABASE_URL: %w", err)
	}
	spool, err := os.OpenFile(cfg.Spool, os.O_CREATE|os.O_RDWR|os.O_APPEND, 0o640)
	if err != nil {
		pool.Close()
		return nil, fmt.Errorf("opening the spend spool: %w", err)
	}
	w := &Writer{cfg: cfg, pool: pool, log: cfg.Log, queue: make(chan usage.Record, cfg.Queue),
		done: make(chan struct{}), spool: spool,
		probe: make(chan struct{}, 1), upCh: make(chan struct{}, 1), probeDone: make(chan struct{})}
	w.m = newMetrics(cfg.Registry, w.queue)
	w.spooled = countLines(spool)
	w.m.pending.Set(float64(w.spooled))
	ctx, cancel := context.WithCancel(context.Background())
	w.stop = cancel
	w.probe <- struct{}{}
	go w.prober(ctx)
	go w.run(ctx)
	if cfg.ConversationRetention > 0 {
		go w.retire(ctx)
	}
	return w, nil
}

// retire deletes the conversation records older than the retention, every
// tenth of it (between a second and an hour), while the writer runs. A
// database that is down is tried again at the next round.
func (w *Writer) retire(ctx context.Context) {
	every := min(max(w.cfg.ConversationRetention/10, time.Second), time.Hour)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		if n, err := w.RetireConversations(ctx); err != nil {
			w.log.Debug("conversation records not retired this round", "err", err)
		} else if n > 0 {
			w.log.Info("conversation records past their retention deleted", "rows", n, "retention", w.cfg.ConversationRetention)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// RetireConversations deletes now the session_conversation rows whose
// session ended more than ConversationRetention ago, and says how many.
func (w *Writer) RetireConversations(ctx context.Context) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, w.cfg.Timeout)
	defer cancel()
	tag, err := w.pool.Exec(ctx, `DELETE FROM session_conversation WHERE ended_at < now() - make_interval(secs => $1)`,
		w.cfg.ConversationRetention.Seconds())
	if err != nil {
		return 0, fmt.Errorf("deleting old conversation records: %w", err)
	}
	return tag.RowsAffected(), nil
}

func countLines(f *os.File) int {
	n := 0
	sc := bufio.NewScanner(io.NewSectionReader(f, 0, 1<<62))
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		n++
	}
	return n
}

// Enqueue hands an ended session's record to the writer; it never blocks.
// A full queue (the writer is behind by Queue records) loses the record
// from the database, counted and logged; it is still in USAGE_LOG.
func (w *Writer) Enqueue(rec usage.Record) {
	w.mu.RLock()
	defer w.mu.RUnlock()
	if w.closed {
		w.m.dropped.Inc()
		return
	}
	select {
	case w.queue <- rec:
	default:
		w.m.dropped.Inc()
	}
}

// Close writes what is queued (to Postgres, or to the spool) and stops
// the writer; ctx bounds the wait.
func (w *Writer) Close(ctx context.Context) error {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return nil
	}
	w.closed = true
	close(w.queue)
	w.mu.Unlock()
	var err error
	select {
	case <-w.done:
	case <-ctx.Done():
		w.stop() // cut database calls short: what is left goes to the spool
		<-w.done
		err = ctx.Err()
	}
	w.stop()
	<-w.probeDone
	w.pool.Close()
	_ = w.spool.Close()
	return err
}

func (w *Writer) run(ctx context.Context) {
	defer close(w.done)
	flush := time.NewTicker(w.cfg.FlushEvery)
	defer flush.Stop()
	retry := time.NewTicker(w.cfg.Retry)
	defer retry.Stop()
	batch := make([]usage.Record, 0, w.cfg.Batch)
	for {
		select {
		case rec, ok := <-w.queue:
			if !ok { // closing: one last try to leave nothing in the spool
				w.write(ctx, batch)
				w.lastTry(ctx)
				return
			}
			if batch = append(batch, rec); len(batch) >= w.cfg.Batch {
				w.write(ctx, batch)
				batch = batch[:0]
			}
		case <-flush.C:
			w.write(ctx, batch)
			batch = batch[:0]
		case <-w.upCh:
			w.setUp(true)
			w.log.Info("spend log connected to Postgres; schema current", "schema_version", len(migrations))
			if w.spooled > 0 {
				w.replay(ctx)
			}
		case <-retry.C:
			if w.up && w.spooled > 0 { // a replay that failed half-way
				w.replay(ctx)
			}
		}
	}
}

// prober waits for a request, then tries Postgres every Retry until the
// schema is migrated, and tells the writer.
func (w *Writer) prober(ctx context.Context) {
	defer close(w.probeDone)
	var lastWarn time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-w.probe:
		}
		for {
			cctx, cancel := context.WithTimeout(ctx, w.cfg.Timeout)
			err := migrate(cctx, w.pool)
			cancel()
			if err == nil {
				break
			}
			w.m.failures.Inc()
			if time.Since(lastWarn) > 10*time.Second {
				w.log.Warn("the spend log's Postgres is unreachable; records go to the spool until it is back", "err", err)
				lastWarn = time.Now()
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(w.cfg.Retry):
			}
		}
		select {
		case w.upCh <- struct{}{}:
		case <-ctx.Done():
			return
		}
	}
}

// lastTry, at Close, migrates and replays if Postgres answers now.
func (w *Writer) lastTry(ctx context.Context) {
	if !w.up {
		cctx, cancel := context.WithTimeout(ctx, w.cfg.Timeout)
		err := migrate(cctx, w.pool)
		cancel()
		if err != nil {
			return
		}
		w.setUp(true)
	}
	if w.spooled > 0 {
		w.replay(ctx)
	}
}

func (w *Writer) setUp(up bool) {
	w.up = up
	if up {
		w.m.up.Set(1)
	} else {
		w.m.up.Set(0)
	}
}

// failed counts a database failure, marks the database down, and logs now
// and then (an outage fails every call).
func (w *Writer) failed(msg string, err error) {
	w.m.failures.Inc()
	if w.up {
		w.setUp(false)
		select {
		case w.probe <- struct{}{}:
		default: // a probe is asked for already
		}
	}
	if time.Since(w.lastWarn) > 10*time.Second {
		w.log.Warn(msg, "err", err, "spooled", w.spooled)
		w.lastWarn = time.Now()
	}
}

// write inserts a batch, or spools it when Postgres does not take it.
func (w *Writer) write(ctx context.Context, batch []usage.Record) {
	if len(batch) == 0 {
		return
	}
	if w.up {
		n, err := w.insert(ctx, batch)
		if err == nil {
			w.m.rows.Add(float64(n))
			return
		}
		w.failed("writing to the spend log's Postgres failed; records go to the spool", err)
	}
	w.toSpool(batch)
}

func (w *Writer) toSpool(batch []usage.Record) {
	var buf []byte
	for _, r := range batch {
		b, err := json.Marshal(r)
		if err != nil {
			continue
		}
		buf = append(append(buf, b...), '\n')
	}
	_, err := w.spool.Write(buf)
	if err == nil {
		err = w.spool.Sync()
	}
	if err != nil {
		w.m.dropped.Add(float64(len(batch)))
		w.log.Error("writing the spend spool failed; records are lost from the database (USAGE_LOG still has them)", "err", err)
		return
	}
	w.spooled += len(batch)
	w.m.spooled.Add(float64(len(batch)))
	w.m.pending.Set(float64(w.spooled))
}

// replay inserts the spool's records and empties it. New records keep
// arriving meanwhile: between batches they are taken off the queue (so none
// waits in a full queue) and kept aside, and written after the spool is
// emptied, to Postgres or, if it failed again, back to the spool. They are
// not appended to the spool under the read: a read that has met the end of
// the file would miss them, and emptying the file would lose them. A
// failure leaves the spool whole for the next try (rows already in are
// skipped then).
func (w *Writer) replay(ctx context.Context) {
	var aside []usage.Record
	defer func() {
		for len(aside) > 0 {
			n := min(len(aside), w.cfg.Batch)
			w.write(ctx, aside[:n])
			aside = aside[n:]
		}
	}()
	sc := bufio.NewScanner(io.NewSectionReader(w.spool, 0, 1<<62))
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	batch := make([]usage.Record, 0, w.cfg.Batch)
	put := func() bool {
		if len(batch) == 0 {
			return true
		}
		n, err := w.insert(ctx, batch)
		if err != nil {
			w.failed("replaying the spend spool into Postgres failed; will retry", err)
			return false
		}
		w.m.rows.Add(float64(n))
		w.m.replayed.Add(float64(len(batch)))
		batch = batch[:0]
		return true
	}
	lines := 0
	for sc.Scan() {
		lines++
		var r usage.Record
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil || r.SessionID == "" {
			w.log.Error("skipping a spend spool line that is not a session record", "line", lines)
			continue
		}
		if batch = append(batch, r); len(batch) < w.cfg.Batch {
			continue
		}
		if !put() {
			return
		}
		for len(aside) < w.cfg.Queue {
			r, ok := tryRecv(w.queue)
			if !ok {
				break
			}
			aside = append(aside, r)
		}
	}
	if sc.Err() != nil {
		w.log.Error("reading the spend spool failed", "err", sc.Err())
		return
	}
	if !put() {
		return
	}
	if err := w.spool.Truncate(0); err != nil {
		w.log.Error("emptying the spend spool failed; it will be replayed again (no duplicates)", "err", err)
		return
	}
	_ = w.spool.Sync()
	w.log.Info("spend spool replayed into Postgres", "records", lines)
	w.spooled = 0
	w.m.pending.Set(0)
}

// tryRecv takes a record if one is waiting and the channel is open.
func tryRecv(c chan usage.Record) (usage.Record, bool) {
	select {
	case r, ok := <-c:
		return r, ok
	default:
		return usage.Record{}, false
	}
}

// columns of session_usage that a record fills, in insert order.
const columns = "session_id, key_name, model_group, deployment, started_at, ended_at, " +
	"input_tokens, output_tokens, total_tokens, cost_usd, outcome, usage, " +
	"protocol, seconds, unconfirmed, unmetered, upstream_sessions, resumes, turns, first_audio_p50_ms, first_audio_p95_ms, " +
	"estimated, transcription_usage, unpriced"

const perRow = 24

// insert writes a batch as one multi-row insert, skipping records already
// in (by session_id), and returns the rows added.
func (w *Writer) insert(ctx context.Context, batch []usage.Record) (int64, error) {
	var q strings.Builder
	q.WriteString("INSERT INTO session_usage (" + columns + ") VALUES ")
	args := make([]any, 0, perRow*len(batch))
	for i, r := range batch {
		placeholders(&q, i, perRow)
		u, err := json.Marshal(r.Usage)
		if err != nil {
			return 0, fmt.Errorf("encoding usage: %w", err)
		}
		resumes := []byte("[]")
		if len(r.Resumes) > 0 {
			if resumes, err = json.Marshal(r.Resumes); err != nil {
				return 0, fmt.Errorf("encoding resumes: %w", err)
			}
		}
		protocol := r.Protocol
		if protocol == "" {
			protocol = "realtime"
		}
		upstreams := max(r.UpstreamSessions, 1)
		var p50, p95 *float64 // NULL when no turn was measured
		if r.Turns > 0 {
			p50, p95 = &r.FirstAudioP50MS, &r.FirstAudioP95MS
		}
		var estimated *string // NULL when every response was confirmed
		if r.Estimated != nil {
			b, err := json.Marshal(r.Estimated)
			if err != nil {
				return 0, fmt.Errorf("encoding the estimate: %w", err)
			}
			estimated = new(string(b))
		}
		transcription := []byte("[]")
		if len(r.Transcription) > 0 {
			if transcription, err = json.Marshal(r.Transcription); err != nil {
				return 0, fmt.Errorf("encoding transcription usage: %w", err)
			}
		}
		unpriced := r.Unpriced
		if unpriced == nil {
			unpriced = []string{}
		}
		args = append(args, r.SessionID, r.KeyName, r.ModelGroup, r.Deployment, r.StartedAt, r.EndedAt,
			r.Usage.InputTokens, r.Usage.OutputTokens, r.Usage.TotalTokens, r.CostUSD, r.Outcome, string(u),
			protocol, r.Seconds, r.Unconfirmed, r.Unmetered, upstreams, string(resumes), r.Turns, p50, p95,
			estimated, string(transcription), unpriced)
	}
	q.WriteString(" ON CONFLICT (session_id) DO NOTHING")
	cctx, cancel := context.WithTimeout(ctx, w.cfg.Timeout)
	defer cancel()
	tag, err := w.pool.Exec(cctx, q.String(), args...)
	if err != nil {
		return 0, fmt.Errorf("inserting %d session records: %w", len(batch), err)
	}
	// The conversations after their sessions' rows: a batch that fails
	// here goes to the spool whole, and its replay skips the rows already
	// in (both tables by session_id) and adds what is missing.
	if err := w.insertConversations(cctx, batch); err != nil {
		return 0, err
	}
	return tag.RowsAffected(), nil
}

// placeholders writes row's ($1, $2, ...) of a multi-row insert of perRow
// columns a row, with the comma before every row but the first.
func placeholders(q *strings.Builder, row, perRow int) {
	if row > 0 {
		q.WriteByte(',')
	}
	q.WriteByte('(')
	for j := range perRow {
		if j > 0 {
			q.WriteByte(',')
		}
		q.WriteByte('$')
		q.WriteString(strconv.Itoa(row*perRow + j + 1))
	}
	q.WriteByte(')')
}

// conversationColumns of session_conversation that a record fills.
const conversationColumns = "session_id, key_name, model_group, started_at, ended_at, entries, bytes, cut, cut_bytes, redactions"

const conversationPerRow = 10

// insertConversations writes the conversation records of a batch's
// sessions that kept one, skipping those already in.
func (w *Writer) insertConversations(ctx context.Context, batch []usage.Record) error {
	var q strings.Builder
	var args []any
	n := 0
	for _, r := range batch {
		c := r.Conversation
		if c == nil {
			continue
		}
		list := c.Entries
		if list == nil {
			list = []transcript.Entry{} // [] in the row, not null
		}
		entries, err := json.Marshal(list)
		if err != nil {
			return fmt.Errorf("encoding a conversation: %w", err)
		}
		if n == 0 {
			q.WriteString("INSERT INTO session_conversation (" + conversationColumns + ") VALUES ")
		}
		placeholders(&q, n, conversationPerRow)
		args = append(args, r.SessionID, r.KeyName, r.ModelGroup, r.StartedAt, r.EndedAt, string(entries),
			c.Bytes, c.Cut, c.CutBytes, c.Redactions)
		n++
	}
	if n == 0 {
		return nil
	}
	q.WriteString(" ON CONFLICT (session_id) DO NOTHING")
	if _, err := w.pool.Exec(ctx, q.String(), args...); err != nil {
		return fmt.Errorf("inserting %d conversation records: %w", n, err)
	}
	return nil
}
