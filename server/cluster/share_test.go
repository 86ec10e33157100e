package cluster

import (
	"fmt"
	"testing"
)

// TestShare: the parts of a limit sum to it exactly over every rank, an
// instance may get 0, and a part never grows when more instances are
// counted (a view holding a dead instance, CLUSTER_INSTANCES above the
// live count) or at a later rank.
func TestShare(t *testing.T) {
	for _, tc := range []struct {
		limit, n int
		want     []int // by rank
	}{
		{30, 3, []int{10, 10, 10}},
		{31, 3, []int{11, 10, 10}},
		{2, 3, []int{1, 1, 0}},
		{1, 3, []int{1, 0, 0}},
		{0, 3, []int{0, 0, 0}},
		{5, 1, []int{5}},
		{7, 4, []int{2, 2, 2, 1}},
	} {
		t.Run(fmt.Sprintf("%d over %d", tc.limit, tc.n), func(t *testing.T) {
			sum := 0
			for rank, want := range tc.want {
				got := Share(tc.limit, tc.n, rank)
				if got != want {
					t.Errorf("rank %d: %d, want %d", rank, got, want)
				}
				sum += got
			}
			if sum != tc.limit {
				t.Errorf("the parts sum to %d, want the limit %d", sum, tc.limit)
			}
		})
	}
	if Share(30, 3, -1) != 0 || Share(30, 3, 3) != 0 || Share(30, 0, 0) != 0 {
		t.Error("an instance outside the set it counts, or an empty set, must get 0")
	}
	for limit := range 40 {
		for n := 1; n <= 6; n++ {
			for rank := range n {
				if Share(limit, n+1, rank) > Share(limit, n, rank) || (rank > 0 && Share(limit, n, rank) > Share(limit, n, rank-1)) {
					t.Fatalf("Share(%d, %d, %d) grows with n or rank", limit, n, rank)
				}
			}
		}
	}
}

// TestRateShare: a connect rate is split as its bucket's whole tokens are,
// so the parts sum to the rate and no instance holds a token the whole
// bucket would not.
func TestRateShare(t *testing.T) {
	for _, tc := range []struct {
		rate float64
		n    int
		want []float64
	}{
		{30, 3, []float64{10, 10, 10}},
		{2, 3, []float64{1, 1, 0}},
		{2.5, 3, []float64{1.25, 1.25, 0}},
		{0.5, 2, []float64{0.5, 0}},
		{10, 4, []float64{3, 3, 2, 2}},
		{0, 2, []float64{0, 0}},
	} {
		sum := 0.0
		for rank, want := range tc.want {
			got := RateShare(tc.rate, tc.n, rank)
			if got != want {
				t.Errorf("rate %v over %d, rank %d: %v, want %v", tc.rate, tc.n, rank, got, want)
			}
			sum += got
		}
		if sum != tc.rate {
			t.Errorf("rate %v over %d: parts sum to %v", tc.rate, tc.n, sum)
		}
	}
}

// TestSessionsCap: alone, an instance holds at most its share of the limit,
// and at most what it held at its last word with Redis plus its share of
// what was free then; with no view it holds nothing.
func TestSessionsCap(t *testing.T) {
	three := outageShare{n: 3, rank: 1, ok: true}
	for _, tc := range []struct {
		name       string
		sh         outageShare
		limit      int
		own, total int64
		known      bool
		want       int
	}{
		{"no view: nothing", outageShare{}, 30, 0, 0, false, 0},
		{"no word on the key: a third", three, 30, 0, 0, false, 10},
		{"empty key: a third", three, 30, 0, 0, true, 10},
		{"even load: its own and its third of the free", three, 30, 5, 15, true, 10},
		{"others held more: its own and its third of the few free", three, 30, 6, 24, true, 8},
		{"full: only its own", three, 30, 4, 30, true, 4},
		{"it held more than a third: never more than a third", three, 30, 20, 20, true, 10},
		{"limit 2 over 3, rank 2: nothing", outageShare{n: 3, rank: 2, ok: true}, 2, 0, 0, true, 0},
	} {
		if got := tc.sh.sessionsCap(tc.limit, tc.own, tc.total, tc.known); got != tc.want {
			t.Errorf("%s: %d, want %d", tc.name, got, tc.want)
		}
	}
	// Three instances' caps from one consistent last word sum to at most
	// the limit, however the sessions were spread.
	for _, own := range [][3]int64{{0, 0, 0}, {10, 10, 10}, {20, 5, 5}, {30, 0, 0}, {12, 9, 9}, {3, 1, 0}} {
		total := own[0] + own[1] + own[2]
		held := int64(0)
		for rank := range 3 {
			c := int64(outageShare{n: 3, rank: rank, ok: true}.sessionsCap(30, own[rank], total, true))
			held += max(c, own[rank]) // an instance above its cap keeps what it has
		}
		if held > 30 {
			t.Errorf("sessions %v: the instances may hold %d alone, over the limit 30", own, held)
		}
	}
}

// TestViewSeenAndBack: an instance counts as seen once every other live
// instance has synced since it joined; a recovery ends once every instance
// of the outage's view is back (synced since) or its lease has run out.
func TestViewSeenAndBack(t *testing.T) {
	v := newView("b", 1000, map[string]int64{"a": 5000, "b": 5000, "c": 5000}, map[string]int64{"a": 900, "b": 1000, "c": 950})
	if v.rank != 1 || len(v.members) != 3 {
		t.Fatalf("rank %d of %v", v.rank, v.members)
	}
	if v.seenSince("b", 920) || !v.seenSince("b", 900) {
		t.Fatal("seenSince: a synced at 900, before a join at 920")
	}
	before := newView("b", 500, map[string]int64{"a": 3000, "b": 3000, "c": 3000, "d": 1200}, nil)
	if v.backSince(before, "b", 900) {
		t.Fatal("d's lease (to 1200) has not run out at 1000 and d is not back: the recovery must go on")
	}
	later := newView("b", 1300, v.leaseEnd, v.synced)
	if !later.backSince(before, "b", 900) {
		t.Fatal("d's lease has run out and a, c synced since 900: the recovery is over")
	}
}
