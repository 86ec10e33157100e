package api

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"testing"

	"rtgate/server/balance"
	"rtgate/server/routes"
)

// healthNotes is a Balancer that writes down what it is told.
type healthNotes struct{ notes []string }

func (h *healthNotes) Rank(ds []*routes.Deployment) []*routes.Deployment { return ds }
func (h *healthNotes) Succeeded(d *routes.Deployment)                    { h.notes = append(h.notes, d.Name+" ok") }
func (h *healthNotes) Failed(d *routes.Deployment, why string) {
	h.notes = append(h.notes, d.Name+" failed: "+why)
}

// candidates is an Admission that only lists deployments.
type candidates []*routes.Deployment

func (c candidates) Candidates() []*routes.Deployment                              { return c }
func (candidates) Release()                                                        {}
func (candidates) MeterCall(*routes.ClientKey, string, *routes.Deployment, string) {}
func (candidates) MeterLive(*routes.ClientKey, *routes.Deployment, string)         {}

// TestFirstToAnswer: deployments are asked in order until one answers, at
// most balance.MaxAttempts of them, and the balancer hears of every
// outcome.
func TestFirstToAnswer(t *testing.T) {
	var ds candidates
	for i := range balance.MaxAttempts + 2 {
		ds = append(ds, &routes.Deployment{Name: fmt.Sprintf("d%d", i)})
	}
	down := errors.New("connection refused")
	for _, tc := range []struct {
		name      string
		failing   int // how many deployments fail before one answers
		answered  string
		tried     int
		lastNotes []string
	}{
		{"the first answers", 0, "d0", 1, []string{"d0 ok"}},
		{"the second answers", 1, "d1", 2, []string{"d0 failed: create failed", "d1 ok"}},
		{"none answers within the attempts", len(ds), "", balance.MaxAttempts,
			[]string{fmt.Sprintf("d%d failed: create failed", balance.MaxAttempts-1)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := &healthNotes{}
			e := New(Config{}, Deps{Balancer: h, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
			asked := 0
			d, tried := e.firstToAnswer(ds, "create", func(d *routes.Deployment) error {
				asked++
				if asked <= tc.failing {
					return down
				}
				return nil
			})
			got := ""
			if d != nil {
				got = d.Name
			}
			if got != tc.answered || tried != tc.tried || asked != tried {
				t.Fatalf("answered by %q after %d tried (%d asked), want %q after %d", got, tried, asked, tc.answered, tc.tried)
			}
			if len(h.notes) != tried || !slices.Equal(h.notes[len(h.notes)-len(tc.lastNotes):], tc.lastNotes) {
				t.Fatalf("the balancer heard %q, want one note per deployment tried ending %q", h.notes, tc.lastNotes)
			}
		})
	}
}
