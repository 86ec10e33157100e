package harness

import (
	"maps"
	"strings"
	"testing"
)

func TestParseMetrics(t *testing.T) {
	text := `# TYPE rtgate_sessions_total counter
rtgate_sessions_total{outcome="client_closed"} 10
rtgate_sessions_total{outcome="a,b",model="x"} 2
rtgate_sessions_total{outcome="say \"hi\", then }",model="y"} 3
rtgate_sessions_total{model="z"} 1
go_goroutines 42
untyped_thing{k="v"} 1e1 1700000000000
`
	m, err := ParseMetrics(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	if v, ok := m.Sum("rtgate_sessions_total"); !ok || v != 16 {
		t.Errorf("Sum = %v, %v; want 16", v, ok)
	}
	if v, ok := m.Sum("untyped_thing"); !ok || v != 10 {
		t.Errorf("Sum of an untyped metric with a timestamp = %v, %v", v, ok)
	}
	if _, ok := m.Sum("absent_total"); ok {
		t.Error("absent metric reported present")
	}
	want := map[string]float64{"client_closed": 10, "a,b": 2, `say "hi", then }`: 3, "": 1}
	if got := m.SumBy("rtgate_sessions_total", "outcome"); !maps.Equal(got, want) {
		t.Errorf("SumBy = %v, want %v", got, want)
	}
	if got := m.SumBy("absent_total", "outcome"); len(got) != 0 {
		t.Errorf("SumBy of an absent metric = %v", got)
	}
	for _, bad := range []string{"go_goroutines many\n", `x{a="b} 1` + "\n"} {
		if _, err := ParseMetrics(strings.NewReader(bad)); err == nil || !strings.HasPrefix(err.Error(), "metrics: ") {
			t.Errorf("%q: error %v", bad, err)
		}
	}
}
