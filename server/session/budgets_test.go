package session

import (
	"context"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"rtgate/server/routes"
	"rtgate/server/spend"
)

// TestBudgetLastSaveAtShutdown: the save at shutdown is the last write to
// the state file. Spend is booked while the periodic save runs (every
// 100 µs here, so that one is nearly always in flight), then the saver is
// stopped and closed as Shutdown does: the file must hold the whole spend
// and nothing else may be left in the folder (a periodic save still in
// flight would leave its temporary file, or rename an older ledger over the
// last one, after Shutdown returned).
func TestBudgetLastSaveAtShutdown(t *testing.T) {
	bud := spend.Budget{Max: 1e9}
	for i := range 50 {
		dir := t.TempDir()
		state := filepath.Join(dir, "budgets.json")
		b, err := newBudgets(Config{SpendState: state}, nil, func() *routes.Table { return &routes.Table{} },
			prometheus.NewRegistry(), slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		b.every = 100 * time.Microsecond
		ctx, cancel := context.WithCancel(context.Background())
		go b.run(ctx)
		var total float64
		for end := time.Now().Add(5 * time.Millisecond); time.Now().Before(end); {
			total = b.ledger.Book("team-a", bud, 0.001, time.Now())
		}
		cancel()
		b.close(context.Background())
		entries, err := os.ReadDir(dir)
		if err != nil || len(entries) != 1 || entries[0].Name() != "budgets.json" {
			t.Fatalf("round %d: the state folder holds %v (%v), want budgets.json alone", i, entries, err)
		}
		saved, err := spend.LoadLedger(state)
		if err != nil {
			t.Fatal(err)
		}
		if got := saved.Spent("team-a", bud, time.Now()); math.Abs(got-total) > 1e-9 {
			t.Fatalf("round %d: the state file holds %v USD spent, want the %v booked before shutdown", i, got, total)
		}
	}
}
