package harness

import (
	"fmt"
	"io"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Metrics are one scrape of a Prometheus text endpoint (the gateway's admin
// /metrics), parsed by expfmt: label values may hold any character, escapes
// included, which a hand-written line splitter gets wrong.
type Metrics map[string]*dto.MetricFamily

// ParseMetrics reads the Prometheus text exposition format.
func ParseMetrics(r io.Reader) (Metrics, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(r)
	if err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	return Metrics(fams), nil
}

// Sum adds up every series of the counter, gauge or untyped metric name
// (whatever its labels); ok is false when the metric is absent.
func (m Metrics) Sum(name string) (total float64, ok bool) {
	f, ok := m[name]
	if !ok {
		return 0, false
	}
	for _, s := range f.GetMetric() {
		total += value(s)
	}
	return total, true
}

// SumBy adds up the series of metric name by the value of label ("" for
// series without it).
func (m Metrics) SumBy(name, label string) map[string]float64 {
	out := map[string]float64{}
	for _, s := range m[name].GetMetric() {
		v := ""
		for _, l := range s.GetLabel() {
			if l.GetName() == label {
				v = l.GetValue()
			}
		}
		out[v] += value(s)
	}
	return out
}

func value(s *dto.Metric) float64 {
	switch {
	case s.Counter != nil:
		return s.GetCounter().GetValue()
	case s.Gauge != nil:
		return s.GetGauge().GetValue()
	default:
		return s.GetUntyped().GetValue()
	}
}
