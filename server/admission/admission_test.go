package admission

import (
	"io"
	"log/slog"
	"net/http"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"rtgate/server/balance"
	"rtgate/server/frontdoor"
	"rtgate/server/limit"
	"rtgate/server/routes"
)

// gateFor is a gate over a real per-key limiter and balancer, for a table
// whose group "g" has one deployment holding at most slots sessions;
// overBudget names keys the budget refuses.
func gateFor(slots int, overBudget ...string) (*Gate, *routes.Table) {
	bal := balance.New(balance.Config{Registerer: prometheus.NewRegistry(), Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		DialFailures: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "f"}, []string{"model_group"})})
	table := &routes.Table{Groups: map[string][]*routes.Deployment{"g": {{Name: "d", Group: "g", MaxSessions: slots}}}}
	g := New(Config{MaxSessionsPerKey: 0}, Deps{Limiter: limit.NewLocal(nil), Balancer: bal,
		CheckBudget: func(key *routes.ClientKey) *frontdoor.Refusal {
			for _, name := range overBudget {
				if key.Name == name {
					return &frontdoor.Refusal{Status: http.StatusTooManyRequests, Code: "budget_exceeded"}
				}
			}
			return nil
		}})
	return g, table
}

// code is a refusal's code ("" when admitted).
func code(herr *frontdoor.Refusal) string {
	if herr == nil {
		return ""
	}
	return herr.Code
}

// TestGateCountsWhatTheTableSays: each way in counts what its rule says,
// and an admission gives back what it counts once, or nothing once handed
// over to a session.
func TestGateCountsWhatTheTableSays(t *testing.T) {
	oneSession := &routes.ClientKey{Name: "one", MaxSessions: 1}
	free := &routes.ClientKey{Name: "free"}
	for _, tc := range []struct {
		name  string
		slots int // the deployment's max_parallel_requests (0: no limit)
		run   func(t *testing.T, g *Gate, table *routes.Table)
	}{
		{"a key's sessions count for a connect, a call and a fork, not a sideband", 0, func(t *testing.T, g *Gate, table *routes.Table) {
			for _, e := range []Entry{Connect, Call, Fork} {
				a, herr := g.Admit(e, oneSession, table, "g", nil)
				if herr != nil {
					t.Fatalf("entry %d: first session refused %s", e, code(herr))
				}
				if _, herr := g.Admit(e, oneSession, table, "g", nil); code(herr) != "concurrent_sessions_exceeded" {
					t.Fatalf("entry %d: a second session at max_sessions 1 got %q", e, code(herr))
				}
				if _, herr := g.Admit(Sideband, oneSession, table, "g", nil); herr != nil {
					t.Fatalf("a sideband of a key at its limit refused %s: its call already counts", code(herr))
				}
				a.Release()
			}
		}},
		{"a deployment's slot is held until released, and given back once", 1, func(t *testing.T, g *Gate, table *routes.Table) {
			a, herr := g.Admit(Call, free, table, "g", nil)
			if herr != nil || len(a.Candidates()) != 1 || a.Plan().Reserved == nil {
				t.Fatalf("first call: %s, plan %+v", code(herr), a.Plan())
			}
			if _, herr := g.Admit(Connect, free, table, "g", nil); code(herr) != "deployment_at_capacity" {
				t.Fatalf("a connect to a full deployment got %q", code(herr))
			}
			if s, herr := g.Admit(Sideband, free, table, "g", nil); herr != nil || s.Plan().Reserved != nil {
				t.Fatalf("a sideband to a full deployment: %q, reserved %v (it holds no slot)", code(herr), s.Plan().Reserved)
			}
			a.Release()
			a.Release() // once only: a second give-back must not free a slot it does not hold
			b, herr := g.Admit(Call, free, table, "g", nil)
			if herr != nil {
				t.Fatalf("after the release: %s", code(herr))
			}
			if _, herr := g.Admit(Call, free, table, "g", nil); code(herr) != "deployment_at_capacity" {
				t.Fatalf("a double release freed a second slot: %q", code(herr))
			}
			b.Release()
		}},
		{"a handed-over admission gives back nothing itself", 1, func(t *testing.T, g *Gate, table *routes.Table) {
			a, _ := g.Admit(Connect, oneSession, table, "g", nil)
			keyed, reserved := a.HandOver()
			if !keyed || reserved == nil {
				t.Fatalf("hand-over: keyed %v, reserved %v", keyed, reserved)
			}
			a.Release()
			if _, herr := g.Admit(Connect, oneSession, table, "g", nil); code(herr) != "concurrent_sessions_exceeded" {
				t.Fatalf("after a hand-over and a release the key's session was given back: %q", code(herr))
			}
		}},
		{"the key's models and budget come first", 0, func(t *testing.T, g *Gate, table *routes.Table) {
			other := &routes.ClientKey{Name: "other", Models: []string{"h"}}
			if _, herr := g.Admit(Call, other, table, "g", nil); code(herr) != "model_not_allowed" {
				t.Fatalf("a model the key may not use got %q", code(herr))
			}
			broke := &routes.ClientKey{Name: "broke"}
			if _, herr := g.Admit(Sideband, broke, table, "g", nil); code(herr) != "budget_exceeded" {
				t.Fatalf("a key over its budget got %q", code(herr))
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g, table := gateFor(tc.slots, "broke")
			tc.run(t, g, table)
		})
	}
}

// TestWaits: only the entries that count a key's sessions may wait on the
// limiter.
func TestWaits(t *testing.T) {
	g, _ := gateFor(0)
	g.deps.Limiter = waitingLimiter{limit.NewLocal(nil)}
	key := &routes.ClientKey{Name: "k", MaxSessions: 3}
	for e, want := range map[Entry]bool{Connect: true, Call: true, Fork: true, Sideband: false} {
		if got := g.Waits(e, key); got != want {
			t.Errorf("entry %d: Waits %v, want %v", e, got, want)
		}
	}
}

// waitingLimiter is a limiter that always says it may wait (as Redis's
// does for a limited key).
type waitingLimiter struct{ *limit.Local }

func (waitingLimiter) Waits(int, float64) bool { return true }
