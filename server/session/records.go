package session

// Where an ended session's record goes: the usage log (and USAGE_LOG), the
// durable spend log, and the spend metric. The stores live in server/usage
// and server/spenddb; records connects them to the session lifecycle.

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"rtgate/server/routes"
	"rtgate/server/spenddb"
	"rtgate/server/transcript"
	"rtgate/server/usage"
)

// records is where ended sessions' records go: the log, USAGE_LOG, the
// durable spend log, and the spend metric.
type records struct {
	log      *slog.Logger
	routes   func() *routes.Table // the prices of models beside the deployment's (modelPrices)
	spend    *prometheus.CounterVec
	flagged  *prometheus.CounterVec // records with unpriced or unconfirmed usage
	usageLog *usage.Log             // nil without USAGE_LOG
	spendDB  *spenddb.Writer        // nil without DATABASE_URL
}

// openRecords opens USAGE_LOG and starts the durable spend log when
// DATABASE_URL is set.
func openRecords(cfg Config, m *metrics, log *slog.Logger, table func() *routes.Table) (*records, error) {
	r := &records{log: log, spend: m.spend, flagged: m.flagged, routes: table}
	if cfg.UsageLog != "" {
		ul, err := usage.Open(cfg.UsageLog, log, m.usageLogErrors)
		if err != nil {
			return nil, fmt.Errorf("USAGE_LOG: %w", err)
		}
		r.usageLog = ul
	}
	if cfg.DatabaseURL != "" {
		spool := cfg.SpendSpool
		if spool == "" {
			spool = cfg.UsageLog + ".pg-spool"
		}
		w, err := spenddb.Open(spenddb.Config{URL: cfg.DatabaseURL, Spool: spool, Log: log, Registry: m.reg,
			ConversationRetention: cfg.Recordings.Retention})
		if err != nil {
			return nil, err
		}
		r.spendDB = w
	}
	return r, nil
}

// record prices an ended session, counts its spend and writes its record
// wherever records go.
func (r *records) record(info *sessionInfo, rec *usage.Record) {
	// Postgres keeps microseconds: so do the log line and the JSON line,
	// so that the three read alike.
	rec.StartedAt, rec.EndedAt = rec.StartedAt.Truncate(time.Microsecond), rec.EndedAt.Truncate(time.Microsecond)
	if info.live != nil {
		rec.CostUSD = info.live.cost() // seconds, and backend tokens at their own model's prices
	} else {
		// Tokens, and the time billed by duration: a translation
		// session's wall clock, a per-minute transcription model's audio.
		d := info.currentDeployment()
		rec.CostUSD = prices(d).Cost(rec.Usage) + secondPrice(d)*(rec.Seconds+rec.Usage.TranscriptionSeconds)
		if d != nil && !d.Priced && rec.Usage.TotalTokens+int64(rec.Usage.TranscriptionSeconds) > 0 {
			info.noteUnpriced(d.Model)
		}
		// A conversation's input transcription, at its own model's
		// prices (modelPrices).
		for _, t := range rec.Transcription {
			rec.CostUSD += transcriptionCost(r.routes(), info, t.Model, t.Usage)
		}
	}
	rec.Unpriced = info.unpricedModels()
	for _, model := range rec.Unpriced {
		r.flagged.WithLabelValues(rec.ModelGroup, model, "unpriced").Inc()
	}
	if rec.Unconfirmed {
		r.flagged.WithLabelValues(rec.ModelGroup, "", "unconfirmed").Inc()
	}
	if info.overBudget.Load() {
		rec.Outcome = "budget_exceeded"
	}
	r.spend.WithLabelValues(rec.ModelGroup, rec.KeyName).Add(rec.CostUSD)
	r.log.Info("session ended", rec.LogAttrs()...)
	if r.usageLog != nil {
		r.usageLog.Write(*rec)
	}
	if r.spendDB != nil {
		r.spendDB.Enqueue(*rec)
	}
}

// close flushes the usage log and the spend log at shutdown.
func (r *records) close(ctx context.Context) {
	if r.spendDB != nil {
		if err := r.spendDB.Close(ctx); err != nil {
			r.log.Warn("the spend log did not drain before shutdown; the rest is in the spool", "err", err)
		}
	}
	if r.usageLog != nil {
		r.usageLog.Close()
	}
}

// ReopenLogs reopens the files the gateway writes (USAGE_LOG), on SIGHUP,
// so that logrotate's postrotate `kill -HUP` starts new ones. (The spend
// spool is not rotated: it empties itself once Postgres takes its records.)
func (m *Manager) ReopenLogs() error {
	ul := m.records.usageLog
	if ul == nil {
		return nil
	}
	if err := ul.Reopen(); err != nil {
		m.log.Error("reopening USAGE_LOG failed; still writing the old file", "err", err)
		return err
	}
	m.log.Info("USAGE_LOG reopened")
	return nil
}

// keepConversation starts the session's conversation record when its key,
// or else the deployments it may start on (ds, the connect's candidates),
// keep transcripts. A GPT-Live session's session.start names its model
// later: unless its key decides, its record starts when some GPT-Live
// deployment keeps transcripts, and is discarded at session.start if the
// one it gets does not (liveState.start, keptByDeployment). Started here,
// the record's observers are the session's from its open, so nothing
// swaps them while frames flow.
func (m *Manager) keepConversation(info *sessionInfo, ds []*routes.Deployment) {
	keep := logTranscripts(info.key, ds)
	if info.kind == kindLive && (info.key == nil || info.key.LogTranscripts == nil) {
		keep = liveKeepsTranscripts(m.routes())
	}
	if !keep {
		return
	}
	t := m.routes().Transcripts
	rec, err := transcript.New(t.MaxBytes, t.Redact, time.Now)
	if err != nil { // the rules were checked at load: a bug, not input
		m.log.Error("conversation record not kept", "session", info.id, "err", err)
		return
	}
	info.conv = rec
}

// keptByDeployment discards a GPT-Live session's record, started before
// its deployment was known (keepConversation), when its key says nothing
// and the deployment it got (d) keeps no transcripts.
func (i *sessionInfo) keptByDeployment(d *routes.Deployment) {
	if i.conv != nil && (i.key == nil || i.key.LogTranscripts == nil) && !d.LogTranscripts {
		i.conv.Discard()
	}
}

// liveKeepsTranscripts reports whether one of t's GPT-Live deployments
// keeps transcripts.
func liveKeepsTranscripts(t *routes.Table) bool {
	for _, ds := range t.Groups {
		for _, d := range ds {
			if d.Protocol == routes.ProtocolLive && d.LogTranscripts {
				return true
			}
		}
	}
	return false
}

// logTranscripts says whether a session of key on one of ds keeps its
// conversation record: the key's log_transcripts when it has one, else
// whether the first deployment it would start on opts in.
func logTranscripts(key *routes.ClientKey, ds []*routes.Deployment) bool {
	if key != nil && key.LogTranscripts != nil {
		return *key.LogTranscripts
	}
	return len(ds) > 0 && ds[0].LogTranscripts
}
