package server

// The server's side of spend: pricing each session by the deployment that
// served it, and handing the ended session's record to the usage log (and
// the durable spend log). The pricing and the stores live in server/spend
// and server/usage; this file only connects them to the session lifecycle.

import (
	"rtgate/server/spend"
	"rtgate/server/usage"
)

// prices are the per-token prices of deployment d (nil: a session that
// never reached an upstream, which costs nothing).
func prices(d *Deployment) spend.Prices {
	if d == nil {
		return spend.Prices{}
	}
	p, _ := spend.ModelInfo{}.Resolve(d.Model)
	return p
}

// recordSession prices an ended session, counts its spend and writes its
// record wherever records go.
func (s *Server) recordSession(info *sessionInfo, rec *usage.Record) {
	rec.CostUSD = prices(info.deployment).Cost(rec.Usage)
	s.metrics.spend.WithLabelValues(rec.ModelGroup, rec.KeyName).Add(rec.CostUSD)
	s.log.Info("session ended", rec.LogAttrs()...)
	if s.usageLog != nil {
		s.usageLog.Write(*rec)
	}
}
