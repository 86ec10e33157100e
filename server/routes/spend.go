package routes

// The spend fields of the routes file: prices in a model_list entry's
// model_info (LiteLLM's names) and budgets on keys (max_budget,
// budget_duration, as LiteLLM names them on its virtual keys).

import (
	"math"
	"strconv"

	"go.yaml.in/yaml/v3"

	"rtgate/server/spend"
)

// modelInfo reads the price fields of a model_info mapping into d's prices;
// other fields are LiteLLM's free-form metadata and are let be. It reports
// false when something was refused.
func (l *loader) modelInfo(n *yaml.Node, path string, d *Deployment) bool {
	n = deref(n)
	if n.Kind != yaml.MappingNode {
		l.fail(n, path, "must be a mapping (name: value lines), not %s", kindName(n))
		return false
	}
	before := len(l.errs)
	var info spend.ModelInfo
	prices := map[string]**float64{
		"input_cost_per_token":              &info.InputCostPerToken,
		"output_cost_per_token":             &info.OutputCostPerToken,
		"input_cost_per_audio_token":        &info.InputCostPerAudioToken,
		"output_cost_per_audio_token":       &info.OutputCostPerAudioToken,
		"cache_read_input_token_cost":       &info.CacheReadInputTokenCost,
		"cache_read_input_audio_token_cost": &info.CacheReadInputAudioTokenCost,
		"input_cost_per_image_token":        &info.InputCostPerImageToken,
		"input_cost_per_second":             &info.InputCostPerSecond,
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		p := join(path, k.Value)
		if !spend.IsPriceField(k.Value) {
			continue
		}
		s, ok := l.str(v, p)
		if !ok {
			continue
		}
		if k.Value == "base_model" {
			info.BaseModel = s
			continue
		}
		unit, example := "token", "0.000032"
		if k.Value == "input_cost_per_second" {
			unit, example = "second", "0.00083"
		}
		f, err := strconv.ParseFloat(s, 64)
		if err != nil || f < 0 || math.IsInf(f, 0) || math.IsNaN(f) {
			l.fail(deref(v), p, "%q is not a price in USD per %s (a number of at least 0, such as %s)", s, unit, example)
			continue
		}
		*prices[k.Value] = &f
	}
	if len(l.errs) > before {
		return false
	}
	d.Prices, d.Priced = info.Resolve(d.Model)
	if sp, ok := info.SecondPrice(d.Model); ok {
		d.SecondPrice, d.Priced = sp, true
	}
	return true
}

// budget reads a key's max_budget and budget_duration.
func (l *loader) budget(e *keyEntry, itemPath string, k *ClientKey) {
	if given(&e.MaxBudget) {
		p := join(itemPath, "max_budget")
		if s, ok := l.str(&e.MaxBudget, p); ok {
			v, err := strconv.ParseFloat(s, 64)
			if err != nil || v <= 0 || math.IsInf(v, 0) || math.IsNaN(v) {
				l.fail(deref(&e.MaxBudget), p, "%q is not an amount in USD above 0", s)
			}
			k.Budget.Max = v
		}
	}
	if given(&e.BudgetDuration) {
		p := join(itemPath, "budget_duration")
		if s, ok := l.str(&e.BudgetDuration, p); ok {
			d, err := spend.ParseDuration(s)
			switch {
			case err != nil:
				l.fail(deref(&e.BudgetDuration), p, "%v", err)
			case !given(&e.MaxBudget):
				l.fail(deref(&e.BudgetDuration), p, "budget_duration needs max_budget")
			}
			k.Budget.Every = d
		}
	}
}
