package continuity

import "sync/atomic"

// Budget is the gateway-wide cap on what every session keeps together
// (CONTINUITY_GLOBAL_MAX_BYTES). A nil Budget caps nothing.
type Budget struct {
	max  int64
	used atomic.Int64
}

// NewBudget caps all sessions together at max bytes (0 or less: no cap).
func NewBudget(max int64) *Budget {
	if max <= 0 {
		return nil
	}
	return &Budget{max: max}
}

// take reserves n bytes; false when the cap would be passed.
func (b *Budget) take(n int) bool {
	if b == nil {
		return true
	}
	if b.used.Add(int64(n)) > b.max {
		b.used.Add(-int64(n))
		return false
	}
	return true
}

// room says whether n more bytes would fit once freeing bytes are given
// back; other sessions may take it first (take decides).
func (b *Budget) room(n, freeing int) bool {
	return b == nil || b.used.Load()-int64(freeing)+int64(n) <= b.max
}

func (b *Budget) give(n int) {
	if b != nil && n != 0 {
		b.used.Add(-int64(n))
	}
}

// Used is what every session keeps now, in bytes.
func (b *Budget) Used() int64 {
	if b == nil {
		return 0
	}
	return b.used.Load()
}
