package server

import (
	"slices"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// gathered adds up every sample of the named metric family in reg.
func gathered(t testing.TB, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	return gatheredWhere(t, reg, name, "", "")
}

// gatheredWhere adds up the samples of the named metric family in reg whose
// label has value; every sample when label is "".
func gatheredWhere(t testing.TB, reg prometheus.Gatherer, name, label, value string) float64 {
	t.Helper()
	if label == "" {
		return gatheredLabels(t, reg, name, nil)
	}
	return gatheredLabels(t, reg, name, map[string]string{label: value})
}

// gatheredLabels adds up the samples (a histogram's count) of the named
// metric family in reg whose labels include every one of want.
func gatheredLabels(t testing.TB, reg prometheus.Gatherer, name string, want map[string]string) float64 {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
	series:
		for _, m := range f.GetMetric() {
			for k, v := range want {
				if !slices.ContainsFunc(m.GetLabel(), func(l *dto.LabelPair) bool { return l.GetName() == k && l.GetValue() == v }) {
					continue series
				}
			}
			sum += m.GetCounter().GetValue() + m.GetGauge().GetValue() + float64(m.GetHistogram().GetSampleCount())
		}
	}
	return sum
}
