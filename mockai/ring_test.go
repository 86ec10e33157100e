package mockai

import "testing"

func TestRecordRingKeepsNewest(t *testing.T) {
	for _, tt := range []struct {
		max, added int
		wantFirst  int // Query of the oldest kept record
	}{
		{max: 3, added: 0},
		{max: 3, added: 2, wantFirst: 0},
		{max: 3, added: 3, wantFirst: 0},
		{max: 3, added: 4, wantFirst: 1},
		{max: 3, added: 10, wantFirst: 7},
	} {
		rr := recordRing{max: tt.max}
		for i := 0; i < tt.added; i++ {
			rr.add(&Record{Query: string(rune('0' + i))})
		}
		got := rr.list()
		wantLen := min(tt.added, tt.max)
		if len(got) != wantLen {
			t.Fatalf("max %d added %d: %d records, want %d", tt.max, tt.added, len(got), wantLen)
		}
		for i, r := range got {
			if want := string(rune('0' + tt.wantFirst + i)); r.Query != want {
				t.Errorf("max %d added %d: record %d is %q, want %q", tt.max, tt.added, i, r.Query, want)
			}
		}
	}
}
