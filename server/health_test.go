package server

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// gathered adds up every sample of the named metric family in reg.
func gathered(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	return gatheredWhere(t, reg, name, "", "")
}

// gatheredWhere adds up the samples of the named metric family in reg whose
// label has value; every sample when label is "".
func gatheredWhere(t *testing.T, reg prometheus.Gatherer, name, label, value string) float64 {
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
		for _, m := range f.GetMetric() {
			match := label == ""
			for _, l := range m.GetLabel() {
				match = match || l.GetName() == label && l.GetValue() == value
			}
			if match {
				sum += m.GetCounter().GetValue() + m.GetGauge().GetValue()
			}
		}
	}
	return sum
}
