package spenddb

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// migrations are the schema's versions, applied in order, each once; a new
// version is appended, never edited, since instances already ran the old.
var migrations = []string{
	// 1: one row per ended session. session_id is the gateway's own id, so
	// a record written twice (a replay after an outage) is a conflict that
	// is skipped, not a second row.
	`CREATE TABLE session_usage (
		session_id    text PRIMARY KEY,
		key_name      text NOT NULL,
		model_group   text NOT NULL,
		deployment    text NOT NULL DEFAULT '',
		started_at    timestamptz NOT NULL,
		ended_at      timestamptz NOT NULL,
		input_tokens  bigint NOT NULL,
		output_tokens bigint NOT NULL,
		total_tokens  bigint NOT NULL,
		cost_usd      double precision NOT NULL,
		outcome       text NOT NULL,
		usage         jsonb NOT NULL,
		recorded_at   timestamptz NOT NULL DEFAULT now()
	)`,
	// 2: what budgets and reports ask: a key's spend over a time range.
	`CREATE INDEX session_usage_key_ended ON session_usage (key_name, ended_at)`,
	// 3: the protocol and what the second round of features adds to a
	// record (GPT-Live and translation seconds, unconfirmed or unmetered
	// usage, session continuity's upstream sessions and resumes, turns and
	// their first-audio percentiles). One migration for all of them, so an
	// instance upgrades once. Old rows read as Realtime sessions on one
	// upstream session with no turns measured.
	`ALTER TABLE session_usage
		ADD COLUMN protocol           text NOT NULL DEFAULT 'realtime',
		ADD COLUMN seconds            double precision NOT NULL DEFAULT 0,
		ADD COLUMN unconfirmed        boolean NOT NULL DEFAULT false,
		ADD COLUMN unmetered          boolean NOT NULL DEFAULT false,
		ADD COLUMN upstream_sessions  integer NOT NULL DEFAULT 1,
		ADD COLUMN resumes            jsonb NOT NULL DEFAULT '[]',
		ADD COLUMN turns              integer NOT NULL DEFAULT 0,
		ADD COLUMN first_audio_p50_ms double precision,
		ADD COLUMN first_audio_p95_ms double precision`,
	// 4: what billing every response adds (issue 32): the estimate booked
	// for responses the upstream never confirmed (NULL when every response
	// was confirmed; its tokens are in usage and cost_usd already), the
	// input transcription usage by transcription model, and the models of
	// usage the gateway could not price (in the row, not in cost_usd). The
	// partial index finds the flagged rows (an estimate, an unpriced model)
	// without reading the rest. Old rows read as confirmed and priced.
	`ALTER TABLE session_usage
		ADD COLUMN estimated           jsonb,
		ADD COLUMN transcription_usage jsonb NOT NULL DEFAULT '[]',
		ADD COLUMN unpriced            text[] NOT NULL DEFAULT '{}';
	CREATE INDEX session_usage_flagged ON session_usage (key_name, ended_at)
		WHERE unconfirmed OR cardinality(unpriced) > 0`,
	// 5: the conversation record (issue 36) of the sessions whose key or
	// deployment keeps it (log_transcripts): a row beside session_usage's,
	// same session_id, entries as the usage log's JSON writes them
	// (redacted before they were kept), and what the bound cut.
	`CREATE TABLE session_conversation (
		session_id  text PRIMARY KEY,
		key_name    text NOT NULL,
		model_group text NOT NULL,
		started_at  timestamptz NOT NULL,
		ended_at    timestamptz NOT NULL,
		entries     jsonb NOT NULL,
		bytes       integer NOT NULL,
		cut         integer NOT NULL DEFAULT 0,
		cut_bytes   integer NOT NULL DEFAULT 0,
		redactions  integer NOT NULL DEFAULT 0,
		recorded_at timestamptz NOT NULL DEFAULT now()
	);
	CREATE INDEX session_conversation_key_ended ON session_conversation (key_name, ended_at)`,
}

// migrate brings the schema to the newest version. An advisory lock held
// for the transaction makes instances that start together take turns.
func migrate(ctx context.Context, pool *pgxpool.Pool) error {
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(72217001)`); err != nil {
			return fmt.Errorf("locking for migrations: %w", err)
		}
		if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS rtgate_schema_migrations (
			version    integer PRIMARY KEY,
			applied_at timestamptz NOT NULL DEFAULT now())`); err != nil {
			return fmt.Errorf("creating rtgate_schema_migrations: %w", err)
		}
		var have int
		if err := tx.QueryRow(ctx, `SELECT coalesce(max(version), 0) FROM rtgate_schema_migrations`).Scan(&have); err != nil {
			return fmt.Errorf("reading the schema version: %w", err)
		}
		if have > len(migrations) {
			return fmt.Errorf("the database's schema is at version %d, newer than this gateway's %d", have, len(migrations))
		}
		for v := have + 1; v <= len(migrations); v++ {
			if _, err := tx.Exec(ctx, migrations[v-1]); err != nil {
				return fmt.Errorf("applying migration %d: %w", v, err)
			}
			if _, err := tx.Exec(ctx, `INSERT INTO rtgate_schema_migrations (version) VALUES ($1)`, v); err != nil {
				return fmt.Errorf("recording migration %d: %w", v, err)
			}
		}
		return nil
	})
}
