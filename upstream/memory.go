package upstream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"time"
)

// Remembered demand. `auto` learns each key's peak connect rate and refill
// time while it runs; a restarted (or newly added) instance would otherwise
// meet its first burst at REALTIME_POOL_MIN warm sockets and serve it with
// fresh dials. So the pool writes what it learned to a DemandMemory every
// stateEvery and once more when it closes, and reads it back when it is
// made: a key it remembers starts sized for the remembered peak.
//
// History fades: a remembered rate halves every demandHalfLife from the time
// it was measured, and is forgotten below half a connect per rateWindow or
// after demandForget, so that a pool sized for yesterday's peak does not
// come back at that size. A seeded key uses its seed only until it has seen
// burstMemory of its own traffic; then `auto` sizes it from what it measures,
// as it always has.

const (
	// stateEvery is how often the pool writes its demand.
	stateEvery = 5 * time.Second
	// demandHalfLife is how fast remembered demand fades.
	demandHalfLife = 5 * time.Minute
	// demandForget drops remembered demand older than this whatever its size.
	demandForget = time.Hour
	// warmEnough is the share of a restored target the pool must hold
	// before it calls itself warm.
	warmEnough = 0.9
	// defaultWarmupBound is how long a pool with remembered demand may
	// report that it is warming.
	defaultWarmupBound = 10 * time.Second
	// memoryTimeout bounds one Load or Save.
	memoryTimeout = 2 * time.Second
)

// Remembered is what auto learned about one key. It names the key by its
// digest (Key) only: nothing in it is secret.
type Remembered struct {
	// Rate is the key's recent peak connect rate, per second.
	Rate float64 `json:"peak_rate_per_s"`
	// RefillMS is the smoothed time from dial start to session.created, in
	// milliseconds; 0 when none was measured.
	RefillMS float64 `json:"refill_ms"`
	// At is when Rate was measured.
	At time.Time `json:"at"`
}

// RateAt is the remembered rate faded to now: halved per demandHalfLife
// since At, 0 once below half a connect per rateWindow or past demandForget.
func (r Remembered) RateAt(now time.Time) float64 {
	age := max(now.Sub(r.At), 0)
	if age > demandForget || r.Rate <= 0 {
		return 0
	}
	v := r.Rate * math.Exp2(-age.Seconds()/demandHalfLife.Seconds())
	if v*rateWindow.Seconds() < 0.5 {
		return 0
	}
	return v
}

// refill is RefillMS as a duration.
func (r Remembered) refill() time.Duration {
	return time.Duration(r.RefillMS * float64(time.Millisecond))
}

// DemandMemory stores remembered demand across restarts, by key digest.
// Load returns nothing and no error when there is nothing to remember; an
// error means the memory could not be read (the pool starts cold).
type DemandMemory interface {
	// Load reads what is remembered, faded as of now (the pool's clock).
	Load(ctx context.Context, now time.Time) (map[string]Remembered, error)
	Save(ctx context.Context, demand map[string]Remembered) error
}

// Memories combines several memories: Load takes, per key, the highest
// rate any of them remembers; Save writes to all. A memory that fails to
// load is skipped if another loads.
type Memories []DemandMemory

func (ms Memories) Load(ctx context.Context, now time.Time) (map[string]Remembered, error) {
	out := map[string]Remembered{}
	var errs []error
	for _, m := range ms {
		got, err := m.Load(ctx, now)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for k, r := range got {
			if o, ok := out[k]; !ok || r.RateAt(now) > o.RateAt(now) {
				out[k] = r
			}
		}
	}
	if len(errs) == len(ms) && len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return out, nil
}

func (ms Memories) Save(ctx context.Context, demand map[string]Remembered) error {
	var errs []error
	for _, m := range ms {
		errs = append(errs, m.Save(ctx, demand))
	}
	return errors.Join(errs...)
}

// FileMemory keeps remembered demand in one JSON file (REALTIME_POOL_STATE).
// Each Save writes a temporary file beside it, fsyncs it, renames it over
// the old one and fsyncs the folder, so a crash leaves either the old state
// or the new one, never half a file.
type FileMemory struct{ Path string }

// stateFile is the file's format.
type stateFile struct {
	Version int                   `json:"version"`
	Keys    map[string]Remembered `json:"keys"`
}

// errNoState is a missing state file: a cold start, not a failure.
var errNoState = errors.New("no state file yet")

func (f FileMemory) Load(context.Context, time.Time) (map[string]Remembered, error) {
	b, err := os.ReadFile(f.Path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%s: %w", f.Path, errNoState)
	}
	if err != nil {
		return nil, fmt.Errorf("reading pool state: %w", err)
	}
	var s stateFile
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("pool state %s is not valid: %w", f.Path, err)
	}
	if s.Version != 1 {
		return nil, fmt.Errorf("pool state %s: unknown version %d", f.Path, s.Version)
	}
	return s.Keys, nil
}

func (f FileMemory) Save(_ context.Context, demand map[string]Remembered) error {
	b, err := json.Marshal(stateFile{Version: 1, Keys: demand})
	if err != nil {
		return fmt.Errorf("encoding pool state: %w", err)
	}
	dir := filepath.Dir(f.Path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(f.Path)+".tmp*")
	if err != nil {
		return fmt.Errorf("writing pool state: %w", err)
	}
	defer os.Remove(tmp.Name()) // gone after the rename; left over only on failure
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return fmt.Errorf("writing pool state: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("syncing pool state: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("writing pool state: %w", err)
	}
	if err := os.Rename(tmp.Name(), f.Path); err != nil {
		return fmt.Errorf("replacing pool state: %w", err)
	}
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync() // the rename itself survives a crash
		d.Close()
	}
	return nil
}
