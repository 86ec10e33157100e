package session

// Prices for every model a session makes the gateway pay for, beside the
// deployment's own model (whose prices are the deployment's: prices, secondPrice):
//
//	usage                                   priced at
//	a Realtime session's input transcription its transcription model's prices: a model
//	(transcription events' usage)           group of that name (its deployment's, model_info
//	                                        included), else the built-in table
//	                                        (spend.Lookup, spend.ModelInfo.SecondPrice for
//	                                        whisper-1 and the like)
//	GPT-Live's delegated Responses tokens   the Live deployment's model_info token prices
//	(response.event)                        when it sets any (they override), else the
//	                                        built-in table
//
// Usage that none of these prices is unpriced: it stays in the record, is
// not in cost_usd, the record names its model (unpriced), and
// rtgate_usage_flagged_total{flag="unpriced"} counts it; the gateway logs it.
// Never $0 in silence.

import (
	"log/slog"
	"slices"

	"rtgate/server/routes"
	"rtgate/server/spend"
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

// secondPrice is deployment d's price of a second of session time (0 for
// nil).
func secondPrice(d *routes.Deployment) float64 {
	if d == nil {
		return 0
	}
	return d.SecondPrice
}

// LogTableNotices says once per load what the routes file's LiteLLM fields
// did not do, and which deployments have no prices (their sessions cost 0).
func LogTableNotices(log *slog.Logger, t *routes.Table) {
	for _, n := range t.Notices {
		log.Info(n)
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
		log.Warn("no prices for these deployments: their sessions cost 0 USD and count nothing against budgets; "+
			"set model_info prices (input_cost_per_token, ...) or model_info.base_model", "deployments", unpriced)
	}
}

// modelPrices are the token prices, and the price per second of audio, of
// model as something other than a deployment's own model; known is false
// when nothing prices it. table may be nil (the built-in table only).
func modelPrices(table *routes.Table, model string) (p spend.Prices, perSecond float64, known bool) {
	if table != nil {
		for _, d := range table.Groups[model] {
			if d.Priced {
				return d.Prices, d.SecondPrice, true
			}
		}
	}
	p, known = spend.Lookup(model)
	if known {
		p, _ = spend.ModelInfo{}.Resolve(model) // the kinds a text model lacks, at its text rates
	}
	if sp, ok := (spend.ModelInfo{}).SecondPrice(model); ok {
		perSecond, known = sp, true
	}
	return p, perSecond, known
}

// transcriptionCost is the price of a transcription's usage on model, and
// whether it had one (an unpriced model is noted on the session).
func transcriptionCost(table *routes.Table, info *sessionInfo, model string, u usage.Usage) float64 {
	p, perSecond, known := modelPrices(table, model)
	if !known {
		info.noteUnpriced(model)
		return 0
	}
	return p.Cost(u) + perSecond*u.TranscriptionSeconds
}

// noteUnpriced records that usage of model could not be priced (once per
// model per session). "" names a transcription whose model the upstream did
// not say.
func (i *sessionInfo) noteUnpriced(model string) {
	if model == "" {
		model = "unknown"
	}
	i.estMu.Lock()
	defer i.estMu.Unlock()
	if !slices.Contains(i.unpriced, model) {
		i.unpriced = append(i.unpriced, model)
	}
}

// unpricedModels is what noteUnpriced recorded, sorted (nil for none).
func (i *sessionInfo) unpricedModels() []string {
	i.estMu.Lock()
	defer i.estMu.Unlock()
	if len(i.unpriced) == 0 {
		return nil
	}
	out := slices.Clone(i.unpriced)
	slices.Sort(out)
	return out
}

// backendPrices are the token prices of a GPT-Live delegated response's
// model: the Live deployment's model_info token prices when it sets any
// (they override, as model_info does everywhere), else the built-in table;
// known is false when neither prices it.
func backendPrices(d *routes.Deployment, model string) (spend.Prices, bool) {
	if d != nil && d.Prices != (spend.Prices{}) {
		return d.Prices, true
	}
	p, _, known := modelPrices(nil, model)
	return p, known
}
