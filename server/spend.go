package server

// The server's side of spend: pricing each session by the deployment that
// served it, and handing the ended session's record to the usage log (and
// the durable spend log). The pricing and the stores live in server/spend
// and server/usage; this file only connects them to the session lifecycle.

import (
	"context"
	"slices"
	"time"

	"rtgate/server/routes"
	"rtgate/server/spend"
	"rtgate/server/spenddb"
	"rtgate/server/usage"
)

// prices are the per-token prices of deployment d (nil: a session that
// never reached an upstream, which costs nothing).
func prices(d *routes.Deployment) spend.Prices {
	if d == nil {
		return spend.Prices{}
	}
	return d.Prices
}

// logTableNotices says once per load what the routes file's LiteLLM fields
// did not do, and which deployments have no prices (their sessions cost 0).
func (s *Server) logTableNotices(t *routes.Table) {
	for _, n := range t.Notices {
		s.log.Info(n)
	}
	var unpriced []string
	for _, ds := range t.Groups {
		for _, d := range ds {
			if !d.Priced {
				unpriced = append(unpriced, d.Name+" ("+d.Model+")")
			}
		}
	}
	if len(unpriced) > 0 {
		slices.Sort(unpriced)
		s.log.Warn("no prices for these deployments: their sessions cost 0 USD and count nothing against budgets; "+
			"set model_info prices (input_cost_per_token, ...) or model_info.base_model", "deployments", unpriced)
	}
}

// recordSession prices an ended session, counts its spend and writes its
// record wherever records go.
func (s *Server) recordSession(info *sessionInfo, rec *usage.Record) {
	// Postgres keeps microseconds: so do the log line and the JSON line,
	// so that the three read alike.
	rec.StartedAt, rec.EndedAt = rec.StartedAt.Truncate(time.Microsecond), rec.EndedAt.Truncate(time.Microsecond)
	rec.CostUSD = prices(info.currentDeployment()).Cost(rec.Usage)
	if info.overBudget.Load() {
		rec.Outcome = "budget_exceeded"
	}
	s.metrics.spend.WithLabelValues(rec.ModelGroup, rec.KeyName).Add(rec.CostUSD)
	s.log.Info("session ended", rec.LogAttrs()...)
	if s.usageLog != nil {
		s.usageLog.Write(*rec)
	}
	if s.spendDB != nil {
		s.spendDB.Enqueue(*rec)
	}
}

// openSpendDB starts the durable spend log when DATABASE_URL is set.
func (s *Server) openSpendDB() error {
	if s.cfg.DatabaseURL == "" {
		return nil
	}
	spool := s.cfg.SpendSpool
	if spool == "" {
		spool = s.cfg.UsageLog + ".pg-spool"
	}
	w, err := spenddb.Open(spenddb.Config{URL: s.cfg.DatabaseURL, Spool: spool, Log: s.log, Registry: s.metrics.reg})
	if err != nil {
		return err
	}
	s.spendDB = w
	return nil
}

// closeSpend flushes the usage log and the spend log at shutdown.
func (s *Server) closeSpend(ctx context.Context) {
	if s.spendDB != nil {
		if err := s.spendDB.Close(ctx); err != nil {
			s.log.Warn("the spend log did not drain before shutdown; the rest is in the spool", "err", err)
		}
	}
	if s.usageLog != nil {
		s.usageLog.Close()
	}
}

// ReopenLogs reopens the files the gateway writes (USAGE_LOG), on SIGHUP,
// so that logrotate's postrotate `kill -HUP` starts new ones. (The spend
// spool is not rotated: it empties itself once Postgres takes its records.)
func (s *Server) ReopenLogs() error {
	if s.usageLog == nil {
		return nil
	}
	if err := s.usageLog.Reopen(); err != nil {
		s.log.Error("reopening USAGE_LOG failed; still writing the old file", "err", err)
		return err
	}
	s.log.Info("USAGE_LOG reopened")
	return nil
}
