package poller

import "testing"

// TestRecordCursor: whatever pieces the TLS byte stream arrives in, the
// cursor says "inside a record" exactly when the bytes so far end before a
// record's last byte (the read-ahead then reads the rest from the socket).
func TestRecordCursor(t *testing.T) {
	// Two records: a 3-byte body and a 300-byte body (length bytes 0x01 0x2c).
	stream := append([]byte{23, 3, 3, 0, 3, 'a', 'b', 'c', 23, 3, 3, 1, 44}, make([]byte, 300)...)
	boundaries := map[int]bool{0: true, 8: true, len(stream): true}
	for _, tc := range []struct {
		name   string
		pieces []int // lengths the stream is fed in; the rest in one piece
	}{
		{"whole", nil},
		{"byte by byte", repeat(1, len(stream))},
		{"split headers", []int{2, 4, 5, 1, 1}},
		{"at the boundary", []int{8, 5}},
		{"header and body apart", []int{5, 3, 5, 150, 150}},
		{"across records", []int{10, 200}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var c recordCursor
			off := 0
			check := func() {
				if got, want := c.midRecord(), !boundaries[off]; got != want {
					t.Fatalf("after %d bytes: midRecord %v, want %v", off, got, want)
				}
			}
			check()
			for _, n := range tc.pieces {
				c.feed(stream[off : off+n])
				off += n
				check()
			}
			c.feed(stream[off:])
			off = len(stream)
			check()
		})
	}
}

func repeat(v, n int) []int {
	s := make([]int, n)
	for i := range s {
		s[i] = v
	}
	return s
}
