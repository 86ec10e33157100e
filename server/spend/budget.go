package spend

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"sync"
	"time"
)

// Budget is a key's spending limit: Max USD per window of Every, where the
// first window starts at the key's first spend and a new one every Every
// after (LiteLLM's budget_duration); Every 0 is one window for the key's
// lifetime. Max 0 is no budget.
type Budget struct {
	Max   float64
	Every time.Duration
}

var durationRE = regexp.MustCompile(`^(\d+)(s|m|h|d|w|mo)$`)

// ParseDuration reads a budget_duration as LiteLLM writes them: a whole
// number and a unit, s, m, h, d, w or mo (30 days): "30d", "1h", "1mo".
// Empty is 0 (lifetime).
func ParseDuration(s string) (time.Duration, error) {
	if s == "" {
		return 0, nil
	}
	m := durationRE.FindStringSubmatch(s)
	if m == nil {
		return 0, fmt.Errorf("%q is not a duration like 30d, 12h, 30m, 1w or 1mo", s)
	}
	n, err := strconv.Atoi(m[1])
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("%q is not a duration of at least 1 unit", s)
	}
	unit := map[string]time.Duration{"s": time.Second, "m": time.Minute, "h": time.Hour, "d": 24 * time.Hour,
		"w": 7 * 24 * time.Hour, "mo": 30 * 24 * time.Hour}[m[2]]
	if time.Duration(n) > math.MaxInt64/unit {
		return 0, fmt.Errorf("%q is too long", s)
	}
	return time.Duration(n) * unit, nil
}

// windowStart is the start of the window holding now, for a key whose
// first spend was at anchor.
func (b Budget) windowStart(anchor, now time.Time) time.Time {
	if b.Every <= 0 || now.Before(anchor) {
		return anchor
	}
	return anchor.Add(now.Sub(anchor) / b.Every * b.Every)
}

// ResetsIn is how long until the window holding now ends (0 for a
// lifetime budget).
func (b Budget) ResetsIn(anchor, now time.Time) time.Duration {
	if b.Every <= 0 {
		return 0
	}
	return b.windowStart(anchor, now).Add(b.Every).Sub(now)
}

// account is one key's spend. pending is booked here but not yet added to
// the shared store (Redis), which owns the cluster's total; base is that
// total at the last good sync.
type account struct {
	Anchor  time.Time `json:"anchor"`       // first spend
	Window  time.Time `json:"window_start"` // start of the window Spent is for
	Spent   float64   `json:"spent_usd"`    // in Window, cluster-wide as far as known
	pending float64
	base    float64
	every   time.Duration
}

// Ledger books spend per key as responses end and answers how much a key
// has spent in its current window. It is safe for concurrent use; Book and
// Spent take one short lock and never wait on a disk or a network, so they
// may run on the relay's read path.
//
// Without a shared store the ledger is this instance's, saved to a state
// file (Save) so that a restart does not reset a budget. With one (Redis),
// Sync pushes what was booked here and takes back the cluster's totals.
//
// While the shared store cannot be reached (the last Sync failed), Cap is
// what this instance may let a key spend: its part of what remained of the
// budget at the last good sync, so that the instances together stay
// within the budget.
type Ledger struct {
	mu    sync.Mutex
	keys  map[string]*account
	dirty bool
	// shared: Sync has been called (the ledger is the cluster's); synced:
	// a Sync has succeeded; cut: the last one failed.
	shared, synced, cut bool
}

// NewLedger returns an empty ledger.
func NewLedger() *Ledger { return &Ledger{keys: map[string]*account{}} }

// current returns key's account with its window moved on to the one
// holding now (the spend of a past window no longer counts).
func (l *Ledger) current(key string, b Budget, now time.Time) *account {
	a := l.keys[key]
	if a == nil {
		return nil
	}
	a.every = b.Every
	if w := b.windowStart(a.Anchor, now); !w.Equal(a.Window) {
		a.Window, a.Spent, a.pending, a.base = w, 0, 0, 0
		l.dirty = true
	}
	return a
}

// Spent is key's spend in its current window.
func (l *Ledger) Spent(key string, b Budget, now time.Time) float64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	if a := l.current(key, b, now); a != nil {
		return a.Spent
	}
	return 0
}

// Cap is the spend key may reach in its current window on this instance:
// the budget, except while the shared store is cut off (the last Sync
// failed): then what was spent cluster-wide at the last good sync plus part
// (this instance's fraction of the instances) of what remained then; and
// nothing at all when no Sync has succeeded yet or part is unknown (ok
// false), since what the others spent is not known.
func (l *Ledger) Cap(key string, b Budget, part float64, ok bool, now time.Time) float64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.shared || !l.cut {
		return b.Max
	}
	if !l.synced || !ok {
		return 0
	}
	base := 0.0
	if a := l.current(key, b, now); a != nil {
		base = a.base
	}
	return base + part*max(b.Max-base, 0)
}

// Cut reports whether the ledger is shared and its last Sync failed.
func (l *Ledger) Cut() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.shared && l.cut
}

// Book adds usd to key's spend and returns its spend in the current window.
// The first booking starts the key's first window.
func (l *Ledger) Book(key string, b Budget, usd float64, now time.Time) float64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	a := l.current(key, b, now)
	if a == nil {
		a = &account{Anchor: now, Window: now, every: b.Every}
		l.keys[key] = a
	}
	a.Spent += usd
	a.pending += usd
	l.dirty = true
	return a.Spent
}

// Anchor is the start of key's first window, and whether it has spent.
func (l *Ledger) Anchor(key string) (time.Time, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if a := l.keys[key]; a != nil {
		return a.Anchor, true
	}
	return time.Time{}, false
}

// Save writes the ledger to path (a temporary file renamed over it, so a
// crash leaves the old or the new state, never half) if it changed.
func (l *Ledger) Save(path string) error {
	l.mu.Lock()
	if !l.dirty {
		l.mu.Unlock()
		return nil
	}
	b, err := json.Marshal(l.keys)
	l.dirty = false
	l.mu.Unlock()
	if err != nil {
		return fmt.Errorf("encoding the budget state: %w", err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".tmp*")
	if err != nil {
		return fmt.Errorf("saving the budget state: %w", err)
	}
	_, err = tmp.Write(b)
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		_ = os.Remove(tmp.Name())
		l.mu.Lock()
		l.dirty = true
		l.mu.Unlock()
		return fmt.Errorf("saving the budget state: %w", err)
	}
	return nil
}

// LoadLedger reads a ledger saved by Save; a missing file is an empty
// ledger.
func LoadLedger(path string) (*Ledger, error) {
	l := NewLedger()
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return l, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading the budget state: %w", err)
	}
	if err := json.Unmarshal(b, &l.keys); err != nil {
		return nil, fmt.Errorf("reading the budget state %s: %w", path, err)
	}
	return l, nil
}
