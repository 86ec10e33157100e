package session

// Budgets per key (max_budget, budget_duration): spend is booked as each
// response ends, from the relay's read path, into a spend.Ledger; a connect
// from a key at its budget is refused with 429, and a live session whose
// response takes the key over it is ended once that response has reached
// the client (error event, close 1008). With REDIS_URL the ledger is synced
// with Redis every budgetSync, so every instance sees the cluster's spend
// within that; without it the ledger is this instance's and is saved to
// SPEND_STATE, so a restart does not reset a budget. While Redis cannot be
// reached, an instance lets a key spend only its part (store.Part) of what
// remained at the last good sync (spend.Ledger.Cap), so that the instances
// together stay within the budget; one that has not synced yet lets a
// budgeted key spend nothing.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"rtgate/internal/every"
	"rtgate/server/cluster"
	"rtgate/server/routes"
	"rtgate/server/spend"
	"rtgate/server/usage"
)

const (
	budgetSync = 250 * time.Millisecond // with Redis
	budgetSave = time.Second            // without: the state file
)

// budgets are the per-key spend budgets: the ledger and how it is kept.
type budgets struct {
	log    *slog.Logger
	routes func() *routes.Table // the keys in force, for their budgets

	ledger *spend.Ledger
	state  string         // the state file; "" with Redis
	shared *spend.Shared  // nil without Redis
	store  *cluster.Store // nil without Redis: this instance's part of a budget while Redis is away
	every  time.Duration  // how often run syncs or saves
	// stopped is closed when run returns: close waits for it, so that the
	// last save is the last write (a tick's save still in flight could
	// otherwise rename an older ledger over it, after Shutdown returned).
	stopped chan struct{}
	refused *prometheus.CounterVec
	ended   *prometheus.CounterVec
	failed  prometheus.Counter
}

// newBudgets makes the ledger: shared through Redis when the cluster store
// is there, else loaded from (and saved to) the state file (SPEND_STATE, or
// beside USAGE_LOG).
func newBudgets(cfg Config, store *cluster.Store, table func() *routes.Table, reg prometheus.Registerer, log *slog.Logger) (*budgets, error) {
	b, err := openBudgets(cfg, store, table, log)
	if err != nil {
		return nil, err
	}
	reg.MustRegister(b.refused, b.ended, b.failed, budgetGauges{b})
	return b, nil
}

// openBudgets is newBudgets before its metrics are registered: the
// gauges read the ledger it sets, so they are registered once it is there.
func openBudgets(cfg Config, store *cluster.Store, table func() *routes.Table, log *slog.Logger) (*budgets, error) {
	b := &budgets{log: log, routes: table, every: budgetSave, stopped: make(chan struct{}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "rtgate_budget_refused_total",
			Help: "Connects refused with 429 budget_exceeded, by client key name."}, []string{"key"}),
		ended: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "rtgate_budget_ended_sessions_total",
			Help: "Live sessions ended (close 1008) after a response took their key over its budget."}, []string{"key"}),
		failed: prometheus.NewCounter(prometheus.CounterOpts{Name: "rtgate_budget_sync_failures_total",
			Help: "Failed budget syncs with Redis or saves of the budget state file."}),
	}
	if store != nil {
		b.ledger = spend.NewLedger()
		b.shared = &spend.Shared{Client: store.Client, Prefix: store.Prefix}
		b.store = store
		b.every = budgetSync
		// One sync before the first connect, so that what the other
		// instances spent is known from the start (or, if Redis does not
		// answer, that it is not: then budgeted keys wait for it).
		if err := b.persist(context.Background()); err != nil {
			b.failed.Inc()
			log.Warn("budget spend could not be read from redis at startup: keys with a budget are refused until it answers", "err", err)
		}
		return b, nil
	}
	b.state = cfg.SpendState
	if b.state == "" && cfg.UsageLog != "" {
		b.state = cfg.UsageLog + ".budgets.json"
	}
	if b.state == "" {
		for _, k := range table().Keys {
			if k.Budget.Max > 0 {
				return nil, fmt.Errorf("key %q has max_budget: set SPEND_STATE (or USAGE_LOG, or REDIS_URL) so that a restart does not reset its spend", k.Name)
			}
		}
		b.ledger = spend.NewLedger()
		return b, nil
	}
	l, err := spend.LoadLedger(b.state)
	if err != nil {
		return nil, fmt.Errorf("SPEND_STATE: %w", err)
	}
	b.ledger = l
	return b, nil
}

// budgetGauges export what the ledger knows when scraped: each budgeted
// key's spend in its current window (the cluster's, as of the last sync,
// with REDIS_URL), and whether this instance is enforcing its own share
// because that sync failed (spend.Ledger.Cut).
type budgetGauges struct{ b *budgets }

var (
	budgetSpentDesc = prometheus.NewDesc("rtgate_budget_spent_usd",
		"Spend in each budgeted key's current window, as this instance knows it (with REDIS_URL: the cluster's, as of the last sync).",
		[]string{"key"}, nil)
	budgetCutDesc = prometheus.NewDesc("rtgate_budget_sync_cut",
		"1 while the last budget sync with Redis failed and this instance lets each key spend only its share of what remained, else 0.",
		nil, nil)
)

func (g budgetGauges) Describe(ch chan<- *prometheus.Desc) {
	ch <- budgetSpentDesc
	ch <- budgetCutDesc
}

func (g budgetGauges) Collect(ch chan<- prometheus.Metric) {
	now := time.Now()
	for name, bud := range g.b.budgeted() {
		ch <- prometheus.MustNewConstMetric(budgetSpentDesc, prometheus.GaugeValue, g.b.ledger.Spent(name, bud, now), name)
	}
	cut := 0.0
	if g.b.ledger.Cut() {
		cut = 1
	}
	ch <- prometheus.MustNewConstMetric(budgetCutDesc, prometheus.GaugeValue, cut)
}

// budgeted are the keys with a budget, now.
func (b *budgets) budgeted() map[string]spend.Budget {
	out := map[string]spend.Budget{}
	for _, k := range b.routes().Keys {
		if k.Budget.Max > 0 {
			out[k.Name] = k.Budget
		}
	}
	return out
}

// run syncs or saves the ledger every b.every until ctx ends; close saves a
// last time at shutdown.
func (b *budgets) run(ctx context.Context) {
	defer close(b.stopped)
	var lastWarn time.Time
	every.Tick(ctx, b.every, func(time.Time) {
		if err := b.persist(ctx); err != nil {
			b.failed.Inc()
			if time.Since(lastWarn) > 10*time.Second {
				b.log.Warn("budget spend is not being shared or saved; enforcing with what this instance knows", "err", err)
				lastWarn = time.Now()
			}
		}
	})
}

func (b *budgets) persist(ctx context.Context) error {
	if b.shared != nil {
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		return b.ledger.Sync(cctx, *b.shared, b.budgeted(), time.Now())
	}
	if b.state != "" {
		return b.ledger.Save(b.state)
	}
	return nil
}

// check refuses a connect from a key at or over its budget.
func (b *budgets) check(key *routes.ClientKey) *refusal {
	bud := key.Budget
	if bud.Max <= 0 {
		return nil
	}
	now := time.Now()
	spent := b.ledger.Spent(key.Name, bud, now)
	limit := b.limit(key.Name, bud, now)
	if spent < limit {
		return nil
	}
	b.refused.WithLabelValues(key.Name).Inc()
	msg := fmt.Sprintf("This key has reached its budget: $%.4f spent of $%s", spent, strconv.FormatFloat(bud.Max, 'f', -1, 64))
	if limit < bud.Max {
		msg = fmt.Sprintf("This key has reached this gateway instance's part of its budget while the instances cannot reach their shared store "+
			"($%.4f spent of a budget of $%s; this instance may let it reach $%.4f until the store answers)",
			spent, strconv.FormatFloat(bud.Max, 'f', -1, 64), limit)
		if _, ok := b.store.Part(); !ok || limit == 0 {
			msg = fmt.Sprintf("This key has a budget ($%s), and this gateway instance cannot reach the shared store that says what the other instances spent, "+
				"nor has it learned how many instances share it: it admits none of this key's sessions until the store answers",
				strconv.FormatFloat(bud.Max, 'f', -1, 64))
		}
		return &refusal{Status: http.StatusTooManyRequests, Type: "insufficient_quota", Code: "budget_exceeded",
			Message: msg + ".", Header: http.Header{"Retry-After": {"1"}}}
	}
	h := http.Header{}
	if anchor, ok := b.ledger.Anchor(key.Name); ok && bud.Every > 0 {
		wait := bud.ResetsIn(anchor, now)
		msg += fmt.Sprintf(" in the current %s window, which resets at %s.", windowName(bud.Every), now.Add(wait).UTC().Format(time.RFC3339))
		h.Set("Retry-After", strconv.Itoa(int(wait.Seconds())+1))
	} else {
		msg += " (a lifetime budget)."
	}
	return &refusal{Status: http.StatusTooManyRequests, Type: "insufficient_quota", Code: "budget_exceeded",
		Message: msg, Header: h}
}

// budgetOf is key's budget in force: the routes table's now (a reload's
// lowered budget applies to live sessions), else the one it was admitted
// with (a revoked key's session, being ended, still books its spend).
func (b *budgets) budgetOf(key *routes.ClientKey) spend.Budget {
	if c := b.routes().Current(key); c != nil {
		return c.Budget
	}
	return key.Budget
}

// limit is what key may spend on this instance now (spend.Ledger.Cap): the
// budget, or while Redis is away this instance's part of what remained.
func (b *budgets) limit(key string, bud spend.Budget, now time.Time) float64 {
	if b.store == nil {
		return bud.Max
	}
	part, ok := b.store.Part()
	return b.ledger.Cap(key, bud, part, ok, now)
}

// meter books each response's cost against the session's key as it ends,
// and ends the session (end, in a goroutine of its own) once its key is
// over budget (its budget in force: budgetOf). It runs on the relay's read
// path, after the response.done went to the client: the response the client
// paid for is never cut short. A key admitted without a budget is not
// metered (a budget a reload adds applies to the sessions admitted after
// it).
func (b *budgets) meter(info *sessionInfo, end func(message string)) {
	if info.key.Budget.Max <= 0 {
		return
	}
	ended := false // only the read path touches it
	book := func(usd float64) {
		bud := b.budgetOf(info.key)
		if bud.Max <= 0 {
			return // the reload took the budget away
		}
		now := time.Now()
		total := b.ledger.Book(info.key.Name, bud, usd, now)
		if ended || total < b.limit(info.key.Name, bud, now) {
			return
		}
		ended = true
		info.overBudget.Store(true)
		b.ended.WithLabelValues(info.key.Name).Inc()
		go end(fmt.Sprintf("This key has reached its budget of $%s; the session ends after the response it was given.",
			strconv.FormatFloat(bud.Max, 'f', -1, 64)))
	}
	info.meter.OnEvent = func(add usage.Usage) {
		d := info.currentDeployment()
		book(prices(d).Cost(add) + info.timeToBook(d))
	}
	if info.meter.SplitTranscription { // a conversation's transcription, at its own model's prices (transcriptionCost)
		info.meter.OnTranscription = func(model string, add usage.Usage) { book(transcriptionCost(b.routes(), info, model, add)) }
	}
}

// timeToBook is the connection time a session on deployment d billed by
// time (xAI) has run since it was last booked, at d's price per second,
// and books it as booked: each response.done books the time before it, and
// the session's end the rest (end.go), so that a key's budget sees an xAI
// session's minutes as they pass, like a Realtime session's tokens. 0 for
// other deployments.
func (i *sessionInfo) timeToBook(d *routes.Deployment) float64 {
	if d == nil || !d.BilledByTime() {
		return 0
	}
	now := time.Now().UnixNano()
	last := i.timeBooked.Swap(now)
	if last == 0 {
		last = i.start.UnixNano()
	}
	return float64(now-last) / 1e9 * d.SecondPrice
}

// bookAfter books usd against the session's key at its end (estimated
// responses in flight, estimateFlights): the session is ending already, so
// nothing more is ended for it.
func (b *budgets) bookAfter(info *sessionInfo, usd float64) {
	if bud := b.budgetOf(info.key); info.key.Budget.Max > 0 && bud.Max > 0 && usd > 0 {
		b.ledger.Book(info.key.Name, bud, usd, time.Now())
	}
}

// liveWindow is the stretch of session time a GPT-Live session is admitted
// for at a time: as its seconds cross each window, the next window's cost
// must still fit the key's budget (as Bifrost meters Live).
const liveWindow = 30.0

// meterLive books a GPT-Live session's cost against its key as its usage
// events arrive (the growth of its seconds, each delegated response's
// tokens), and ends the session (end, in a goroutine of its own) once its
// key is over budget, or when the session's next liveWindow of seconds would
// take it over. end goes through GPT-Live's session.close, so that the
// final usage is booked too.
func (b *budgets) meterLive(info *sessionInfo, ls *liveState, end func(message string)) {
	bud := info.key.Budget
	if bud.Max <= 0 {
		return
	}
	ended := false // only the read path touches these
	window := 0.0  // the liveWindow the session's seconds are in
	book := func(usd float64) {
		bud := b.budgetOf(info.key) // a reload's lowered budget applies
		if bud.Max <= 0 {
			return
		}
		now := time.Now()
		total := b.ledger.Book(info.key.Name, bud, usd, now)
		next := 0.0
		if w := float64(int(ls.meter.Seconds / liveWindow)); w > window {
			window = w
			if d := info.currentDeployment(); d != nil {
				next = liveWindow * d.SecondPrice
			}
		}
		if ended || ls.meter.Closed || total+next < b.limit(info.key.Name, bud, now) {
			return // under budget, or the session already ended on its own
		}
		ended = true
		info.overBudget.Store(true)
		b.ended.WithLabelValues(info.key.Name).Inc()
		go end(fmt.Sprintf("This key has reached its budget of $%s; the session ends (its final usage is still booked).",
			strconv.FormatFloat(bud.Max, 'f', -1, 64)))
	}
	// A WebRTC session's floor is billed at creation: booked now, and of
	// the seconds read later only those beyond it (the floor is credited
	// against the duration, never counted twice).
	billed := ls.floor
	if billed > 0 {
		b.ledger.Book(info.key.Name, bud, billed*secondPrice(info.currentDeployment()), time.Now())
	}
	ls.meter.OnSeconds = func(float64) {
		add := max(ls.meter.Seconds-billed, 0)
		billed = max(billed, ls.meter.Seconds)
		book(add * secondPrice(info.currentDeployment())) // even 0: the check, and the next window's
	}
	onTokens := ls.meter.OnTokens
	ls.meter.OnTokens = func(model string, add usage.Usage) {
		before := ls.backendUSD
		onTokens(model, add)
		book(ls.backendUSD - before)
	}
}

// close saves or syncs the ledger a last time at shutdown, once run has
// stopped (Shutdown ends run's context first; the wait is for the save run
// may have in flight, no longer than the save here, and not bounded by ctx,
// which the drain may have used up: the last save is never skipped).
func (b *budgets) close(ctx context.Context) {
	if b == nil {
		return
	}
	<-b.stopped // at most one periodic save in flight: as long as the save below
	if err := b.persist(ctx); err != nil && !errors.Is(err, context.Canceled) {
		b.log.Warn("saving budget spend at shutdown failed", "err", err)
	}
}

// windowName writes a budget window as budget_duration would: 30d, 12h.
func windowName(d time.Duration) string {
	switch day := 24 * time.Hour; {
	case d%day == 0:
		return strconv.FormatInt(int64(d/day), 10) + "d"
	case d%time.Hour == 0:
		return strconv.FormatInt(int64(d/time.Hour), 10) + "h"
	}
	return d.String()
}
