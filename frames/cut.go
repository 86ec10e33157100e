package frames

import "github.com/valyala/bytebufferpool"

// A client frame cut by the loss of its destination: a relay that loses the
// socket it forwards to in the middle of a frame (the reads of the frame's
// source ended in its middle) can send the frame whole to another socket
// only if it kept what it already forwarded. Keeping every frame would mean
// copying every audio frame, so the scanner keeps a frame only from the
// moment a read ends in its middle, and only up to a bound (KeepCut); a
// frame forwarded within one read, the common case, costs nothing. What
// cannot be kept is dropped instead (DropRest): its rest must not reach the
// new destination as if it were a frame.

// KeepCut makes the scanner keep a copy of what it forwarded of a frame
// that does not end within the read that started it (the rest of it is
// still to come), for frames of at most max bytes, header included: a
// relay that loses its destination then can send that frame whole
// elsewhere (TakeCut). A frame forwarded within one read (the common case)
// costs nothing. Call it before the first Forward.
func (s *Scanner) KeepCut(max int) { s.keepMax = uint32(min(max, 1<<31)) }

// TakeCut hands over what was forwarded so far of the frame in progress
// (MidFrame), the scanner no longer keeping it; its rest passes through
// Forward as usual. Nil when nothing is in progress, or the frame is too
// long to have been kept. The caller owns the buffer (bytebufferpool).
func (s *Scanner) TakeCut() *bytebufferpool.ByteBuffer {
	cut := s.cut
	s.cut = nil
	if s.remaining == 0 {
		if cut != nil {
			bytebufferpool.Put(cut)
		}
		return nil
	}
	return cut
}

// DropRest makes the rest of the frame in progress (MidFrame) pass
// unwritten, whatever the sink: its start went where the rest cannot follow
// (a relay lost that destination and could not keep the frame, TakeCut).
// It is still scanned and counted.
func (s *Scanner) DropRest() {
	s.endCut()
	s.dropRest = s.remaining > 0
}

// startCut begins keeping a frame of total bytes whose start p was just
// forwarded to dst, when KeepCut asked for it and its rest is still to come
// (s.remaining); a frame written nowhere is not kept.
func (s *Scanner) startCut(total uint64, p []byte, dst Sink) {
	if s.remaining == 0 || s.keepMax == 0 || dst == nil {
		return
	}
	s.endCut()
	if total > uint64(s.keepMax) {
		return
	}
	s.cut = bytebufferpool.Get()
	s.cut.B = append(s.cut.B[:0], p...)
}

func (s *Scanner) endCut() {
	if s.cut != nil {
		bytebufferpool.Put(s.cut)
		s.cut = nil
	}
}
