package poller

import "testing"

// TestCloseTable drives every (state, event) pair through the close state
// table: the listed transitions, and the pairs that must change nothing.
func TestCloseTable(t *testing.T) {
	tests := []struct {
		from closeState
		on   closeEvent
		to   closeState
		act  closeAction
	}{
		{closeOpen, evSend, closeSent, actStartTimer},
		{closeOpen, evRecv, closeRecv, actNone},
		{closeOpen, evHangup, closeGone, actTellOther},
		{closeOpen, evTimeout, closeOpen, actNone},
		{closeSent, evSend, closeSent, actNone},
		{closeSent, evRecv, closeDone, actFinish},
		{closeSent, evTimeout, closeSent, actDrop},
		{closeSent, evHangup, closeGone, actTellOther},
		{closeRecv, evRecv, closeRecv, actNone},
		{closeRecv, evSend, closeDone, actFinish},
		{closeRecv, evHangup, closeGone, actAnswer},
		{closeRecv, evTimeout, closeRecv, actNone},
		{closeDone, evSend, closeDone, actNone},
		{closeDone, evRecv, closeDone, actNone},
		{closeDone, evTimeout, closeDone, actDrop},
		{closeDone, evHangup, closeGone, actTellOther},
		{closeGone, evSend, closeGone, actNone},
		{closeGone, evRecv, closeGone, actNone},
		{closeGone, evHangup, closeGone, actNone},
		{closeGone, evTimeout, closeGone, actNone},
	}
	if len(tests) != int(closeGone+1)*int(evTimeout+1) {
		t.Fatalf("the test covers %d pairs, want every one", len(tests))
	}
	for _, tt := range tests {
		t.Run(tt.from.String()+"/"+tt.on.String(), func(t *testing.T) {
			to, act := transition(tt.from, tt.on)
			if to != tt.to || act != tt.act {
				t.Fatalf("got (%v, %d), want (%v, %d)", to, act, tt.to, tt.act)
			}
		})
	}
}

// TestTableHasNoDuplicates: a pair listed twice would make the first win
// silently.
func TestTableHasNoDuplicates(t *testing.T) {
	seen := map[[2]uint8]bool{}
	for _, tr := range closeTable {
		k := [2]uint8{uint8(tr.from), uint8(tr.on)}
		if seen[k] {
			t.Fatalf("(%v, %v) listed twice", tr.from, tr.on)
		}
		seen[k] = true
	}
}

// TestFrameSkipper feeds a frame in one-byte pieces and whole.
func TestFrameSkipper(t *testing.T) {
	frame := []byte{0x81, 0x05, 'h', 'e', 'l', 'l', 'o'}
	for _, piece := range []int{1, 3, len(frame)} {
		var f frameSkipper
		var done bool
		for off := 0; off < len(frame); off += piece {
			src := &byteSrc{b: frame[off:min(len(frame), off+piece)]}
			var err error
			done, err = f.collect(src)
			if err != nil {
				t.Fatal(err)
			}
			if src.Len() != 0 && !done {
				t.Fatalf("piece %d: left %d bytes unconsumed", piece, src.Len())
			}
		}
		if !done || !f.complete || string(f.buf.B[f.hlen:]) != "hello" {
			t.Fatalf("piece %d: done %v complete %v payload %q", piece, done, f.complete, f.buf.B)
		}
	}
}

type byteSrc struct{ b []byte }

func (s *byteSrc) Len() int { return len(s.b) }
func (s *byteSrc) Peek(n int) ([]byte, error) {
	return s.b[:n], nil
}
func (s *byteSrc) Next(n int) ([]byte, error) {
	p := s.b[:n]
	s.b = s.b[n:]
	return p, nil
}
func (s *byteSrc) Skip(n int) error { s.b = s.b[n:]; return nil }
