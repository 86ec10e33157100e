package limit

import (
	"testing"
	"time"
)

// TestUseReserve drives one holder through a table of reservations at given
// times: the cap is checked before the bucket, the bucket holds a second's
// worth (at least one) and refills at the rate, and a release frees a slot.
func TestUseReserve(t *testing.T) {
	type step struct {
		at      float64 // seconds
		release bool
		want    Verdict
		wait    time.Duration // for Throttled
	}
	for _, tc := range []struct {
		name        string
		maxSessions int
		rate        float64
		steps       []step
	}{
		{"no limits", 0, 0, []step{{at: 0}, {at: 0}, {at: 0}}},
		{"cap", 2, 0, []step{{at: 0}, {at: 0}, {at: 0, want: Full}, {at: 1, release: true}, {at: 1, want: Full}}},
		{"rate 2: two at once, then one each half second", 0, 2, []step{
			{at: 0}, {at: 0}, {at: 0, want: Throttled, wait: 500 * time.Millisecond},
			{at: 0.25, want: Throttled, wait: 250 * time.Millisecond}, {at: 0.5}}},
		{"rate below one: a bucket of one", 0, 0.5, []step{
			{at: 0}, {at: 1, want: Throttled, wait: time.Second}, {at: 2}}},
		{"a full holder spends no token", 1, 1, []step{
			{at: 0}, {at: 1, want: Full}, {at: 1, release: true}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Unix(1_000_000, 0)
			u := NewUse(tc.rate, start)
			for i, st := range tc.steps {
				now := start.Add(time.Duration(st.at * float64(time.Second)))
				if st.release {
					u.Release()
				}
				got, wait := u.Reserve(tc.maxSessions, tc.rate, now)
				if got != st.want || (got == Throttled && wait != st.wait) {
					t.Fatalf("step %d (t=%.2fs): %v wait %v, want %v wait %v", i, st.at, got, wait, st.want, st.wait)
				}
			}
		})
	}
}

func TestRetryAfter(t *testing.T) {
	for wait, want := range map[time.Duration]int{0: 1, 999 * time.Millisecond: 1, time.Second: 2, 2500 * time.Millisecond: 3} {
		if got := RetryAfter(wait); got != want {
			t.Errorf("RetryAfter(%v) = %d, want %d", wait, got, want)
		}
	}
}
