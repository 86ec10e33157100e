package frames

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"testing"
	"unicode/utf8"

	"github.com/gobwas/ws"
)

// The fuzz targets here check the scanner against gobwas/ws, an independent
// reading of RFC 6455: its header reader and checks decide where frames start
// and which ones are refused, and its writer builds the valid streams.
//
// Seeds live in testdata/fuzz/<target>/; `go test` runs them as regression
// tests. `make fuzz` runs the fuzzers for a bounded time.

// FuzzScanner feeds arbitrary bytes to a scanner, in arbitrary chunks and in
// both directions, and checks what it forwards against refScan. It then
// builds a stream of valid frames from the same bytes and checks that it
// passes byte for byte.
//
// chunks sets the sizes the input arrives in (cycled; empty means all at
// once); the low bit of flags picks the direction of the valid stream, the
// next one a message size limit for the arbitrary input.
func FuzzScanner(f *testing.F) {
	f.Fuzz(func(t *testing.T, data, chunks []byte, flags byte) {
		var maxMsg int64
		if flags&2 != 0 {
			maxMsg = 64
		}
		for _, dir := range []Side{ClientSide, UpstreamSide} {
			want := refScan(data, dir, maxMsg)
			got := fuzzFeed(t, dir, maxMsg, data, chunks, want.ends)
			if !bytes.Equal(got.out, data[:len(got.out)]) {
				t.Fatalf("%s: forwarded bytes that are not a prefix of the input", dir)
			}
			if len(got.out) != want.forwarded {
				t.Fatalf("%s: forwarded %d bytes, want %d (error %v, want code %d)", dir, len(got.out), want.forwarded, got.err, want.code)
			}
			if code := errCode(got.err); code != want.code && (want.alt == 0 || code != want.alt) {
				t.Fatalf("%s: got error %v (code %d), want code %d", dir, got.err, code, want.code)
			}
			if !equalCloses(got.closes, want.closes) {
				t.Fatalf("%s: closes %+v, want %+v", dir, got.closes, want.closes)
			}
		}

		dir := Side(flags & 1)
		stream, closes := validStream(data, dir)
		got := fuzzFeed(t, dir, 0, stream, chunks, refScan(stream, dir, 0).ends)
		if got.err != nil {
			t.Fatalf("%s: valid stream refused: %v", dir, got.err)
		}
		if !bytes.Equal(got.out, stream) {
			t.Fatalf("%s: forwarded %d bytes that differ from the %d valid bytes fed", dir, len(got.out), len(stream))
		}
		if !equalCloses(got.closes, closes) {
			t.Fatalf("%s: closes %+v, want %+v", dir, got.closes, closes)
		}
		if got.midFrame {
			t.Fatalf("%s: MidFrame after a stream of whole frames", dir)
		}
	})
}

// FuzzParseHeader checks ParseHeader against gobwas's ReadHeader: both must
// agree on whether the header is complete, whether it is valid, what it
// says and how long it is.
func FuzzParseHeader(f *testing.F) {
	f.Fuzz(func(t *testing.T, b []byte) {
		h, hlen, ok, err := ParseHeader(b)
		r := bytes.NewReader(b)
		wh, werr := ws.ReadHeader(r)
		switch {
		case errors.Is(werr, io.EOF), errors.Is(werr, io.ErrUnexpectedEOF):
			if ok || err != nil {
				t.Fatalf("gobwas needs more bytes, ParseHeader says ok=%v err=%v", ok, err)
			}
		case werr != nil:
			if ok || err == nil {
				t.Fatalf("gobwas refuses the header (%v), ParseHeader does not", werr)
			}
			var pe *ProtocolError
			if !errors.As(err, &pe) || pe.Code != ws.StatusProtocolError || pe.Reason == "" {
				t.Fatalf("ParseHeader error %v, want a 1002 ProtocolError with a reason", err)
			}
		default:
			if !ok || err != nil {
				t.Fatalf("gobwas reads a header, ParseHeader says ok=%v err=%v", ok, err)
			}
			if h != wh {
				t.Fatalf("ParseHeader %+v, gobwas %+v", h, wh)
			}
			if want := len(b) - r.Len(); hlen != want {
				t.Fatalf("header length %d, gobwas read %d", hlen, want)
			}
		}
	})
}

// fed is what a scanner did with a whole input.
type fed struct {
	out      []byte
	closes   []Close
	err      error // the first error
	midFrame bool  // MidFrame at the end
}

// fuzzFeed runs stream through a fresh scanner in the chunk sizes given
// (cycled; each byte is a size of 1 to 256), as the reactor would see it
// arrive, checking the invariants every call must keep. ends holds the
// offsets in stream where frames end.
func fuzzFeed(t *testing.T, dir Side, maxMsg int64, stream, chunks []byte, ends map[int]bool) fed {
	t.Helper()
	s := NewScanner(dir, maxMsg)
	sink := &sliceSink{}
	var r fed
	for off, i := 0, 0; off < len(stream); i++ {
		n := len(stream)
		if len(chunks) > 0 {
			n = int(chunks[i%len(chunks)]) + 1
		}
		end := min(off+n, len(stream))
		src := NewByteSource(stream[off:end])
		off = end
		for src.Len() > 0 {
			before, wrote := src.Len(), len(sink.b)
			cl, err := s.Forward(src, sink)
			switch {
			case err != nil:
				var pe *ProtocolError
				if !errors.As(err, &pe) {
					t.Fatalf("%s: Forward returned %v, want only *ProtocolError from a byte source", dir, err)
				}
				if pe.Reason == "" || !s.Failed() {
					t.Fatalf("%s: refusal %+v: empty reason or scanner not marked failed", dir, pe)
				}
				if r.err == nil {
					r.err = err
				} else {
					t.Fatalf("%s: a second error %v after %v: a failed scanner must discard quietly", dir, err, r.err)
				}
			case cl != nil:
				if r.err != nil {
					t.Fatalf("%s: a close frame reported after the scanner failed", dir)
				}
				r.closes = append(r.closes, *cl)
			default:
				if src.Len() != 0 {
					t.Fatalf("%s: Forward left %d of %d bytes unread with no close and no error", dir, src.Len(), before)
				}
			}
			if r.err != nil && len(sink.b) != wrote && err == nil {
				t.Fatalf("%s: forwarded %d bytes after refusing a frame", dir, len(sink.b)-wrote)
			}
			// A relay injects frames of its own (a close, an error event)
			// only when MidFrame is false, so it must be exact: true
			// while part of a frame went out and the rest did not.
			if mid, want := s.MidFrame(), !ends[len(sink.b)]; mid != want {
				t.Fatalf("%s: MidFrame %v after forwarding %d bytes, want %v", dir, mid, len(sink.b), want)
			}
		}
	}
	r.out = sink.b
	r.midFrame = s.MidFrame()
	if r.err == nil && s.Bytes != uint64(len(r.out)) {
		t.Fatalf("%s: Bytes counts %d, forwarded %d", dir, s.Bytes, len(r.out))
	}
	s.Reset()
	return r
}

func errCode(err error) ws.StatusCode {
	var pe *ProtocolError
	if errors.As(err, &pe) {
		return pe.Code
	}
	return 0
}

func equalCloses(a, b []Close) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// refResult is what the scanner should do with an input fed completely.
type refResult struct {
	forwarded int           // bytes forwarded: whole accepted frames, then the available part of a data frame
	code      ws.StatusCode // close code of the refusal; 0 if none
	alt       ws.StatusCode // another code as good, for a frame wrong in two ways; 0 if none
	closes    []Close
	ends      map[int]bool // offsets where forwarded frames end, and 0
}

// refHeaderOK is the oracle's own header check, written from RFC 6455 5.2,
// 5.4 and 5.5 rather than with gobwas's ws.CheckHeader, which the scanner
// itself uses: no reserved bits (no extension is negotiated), a known opcode,
// control frames final and at most 125 bytes, client frames masked and server
// frames not, and continuation frames exactly inside a fragmented message.
func refHeaderOK(h ws.Header, fromClient, fragmented bool) bool {
	op := byte(h.OpCode)
	control := op >= 0x8
	switch {
	case h.Rsv != 0:
		return false
	case op != 0x0 && op != 0x1 && op != 0x2 && op != 0x8 && op != 0x9 && op != 0xA:
		return false
	case control && (!h.Fin || h.Length > 125):
		return false
	case h.Masked != fromClient:
		return false
	case op == 0x0 && !fragmented, (op == 0x1 || op == 0x2) && fragmented:
		return false
	}
	return true
}

// refScan walks the input frame by frame with gobwas's header reader and
// checks and says what the scanner must forward. Its rules, from the
// package's contract: a frame is forwarded only once its header passed (and,
// for a control frame, its whole payload arrived and passed); a data frame's
// payload streams as it arrives; nothing of a refused frame is forwarded, and
// nothing after it.
func refScan(in []byte, dir Side, maxMsg int64) refResult {
	r := refResult{ends: map[int]bool{0: true}}
	var message int64
	fragmented := false // a data message is open (RFC 6455 5.4)
	refuse := func(code ws.StatusCode) refResult { r.code = code; return r }
	for off := 0; off < len(in); {
		rest := in[off:]
		if len(rest) < 2 {
			return r // a partial header is held back
		}
		op := ws.OpCode(rest[0] & 0x0f)
		if op.IsControl() && rest[1]&0x7f > ws.MaxControlFramePayloadSize {
			// Refused on its first two bytes: no need to wait for the rest.
			return refuse(ws.StatusProtocolError)
		}
		rd := bytes.NewReader(rest)
		h, err := ws.ReadHeader(rd)
		switch {
		case errors.Is(err, ws.ErrHeaderLengthMSB):
			return refuse(ws.StatusProtocolError)
		case err != nil:
			return r // header not complete
		}
		hlen := len(rest) - rd.Len()
		if op.IsControl() && int64(len(rest)-hlen) < h.Length {
			return r // control frames are held until complete
		}
		if !refHeaderOK(h, dir == ClientSide, fragmented) {
			return refuse(ws.StatusProtocolError)
		}
		if h.OpCode == ws.OpClose {
			p := append([]byte(nil), rest[hlen:hlen+int(h.Length)]...)
			if h.Masked {
				ws.Cipher(p, h.Mask, 0)
			}
			switch {
			case len(p) == 0:
				r.closes = append(r.closes, Close{Code: ws.StatusNoStatusRcvd})
			case len(p) == 1:
				return refuse(ws.StatusProtocolError)
			default:
				code := ws.StatusCode(binary.BigEndian.Uint16(p))
				badCode, badReason := !sendableCloseCode(code), !utf8.Valid(p[2:])
				switch {
				case badCode && badReason:
					// RFC 6455 does not say which failure comes first.
					r.alt = ws.StatusInvalidFramePayloadData
					return refuse(ws.StatusProtocolError)
				case badCode:
					return refuse(ws.StatusProtocolError)
				case badReason:
					return refuse(ws.StatusInvalidFramePayloadData)
				}
				r.closes = append(r.closes, Close{Code: code, Reason: string(p[2:])})
			}
		}
		if !op.IsControl() {
			message += h.Length
			if maxMsg > 0 && message > maxMsg {
				return refuse(ws.StatusMessageTooBig)
			}
			if h.Fin {
				message = 0
			}
			fragmented = !h.Fin
		}
		if int64(len(rest)-hlen) < h.Length {
			r.forwarded = len(in) // a data frame streams: all that arrived goes
			return r
		}
		off += hlen + int(h.Length)
		r.forwarded = off
		r.ends[off] = true
	}
	return r
}

// sendableCloseCode is RFC 6455 section 7.4 with the IANA registry: the
// codes a close frame may carry. 1004 is reserved, 1005, 1006 and 1015 are
// for local use only, 1012-1014 are registered (service restart, try again
// later, bad gateway), 3000-4999 belong to libraries and applications, and
// nothing else is defined. (gobwas's CheckCloseFrameData disagrees on
// 1012-1014 and on codes from 5000 up, so it is not the reference here.)
func sendableCloseCode(code ws.StatusCode) bool {
	switch {
	case code >= 1000 && code <= 1003, code >= 1007 && code <= 1014, code >= 3000 && code <= 4999:
		return true
	}
	return false
}

// validStream builds a stream of valid frames for direction dir from the
// fuzz input: each frame takes a selector byte and up to 31 payload bytes.
// It returns the stream and the close frames in it.
func validStream(data []byte, dir Side) ([]byte, []Close) {
	var (
		out        bytes.Buffer
		closes     []Close
		fragmented bool
		big        bool
	)
	take := func(n int) []byte {
		n = min(n, len(data))
		p := data[:n]
		data = data[n:]
		return p
	}
	put := func(h ws.Header, payload []byte) {
		h.Length = int64(len(payload))
		if dir == ClientSide {
			h.Masked = true
			copy(h.Mask[:], take(4))
		}
		_ = ws.WriteHeader(&out, h)
		p := append([]byte(nil), payload...)
		if h.Masked {
			ws.Cipher(p, h.Mask, 0)
		}
		out.Write(p)
	}
	for frames := 0; len(data) > 0 && frames < 64; frames++ {
		sel := take(1)[0]
		payload := take(int(sel >> 3))
		switch sel & 7 {
		case 0, 1, 2: // a data frame: final (0, 2) or not (1)
			op := ws.OpText
			if sel&1 != 0 {
				op = ws.OpBinary
			}
			if fragmented {
				op = ws.OpContinuation
			}
			if sel&7 == 2 && !big && len(payload) > 0 {
				// Once per stream, a frame with a 64-bit length.
				big = true
				payload = bytes.Repeat(payload, 0xffff/len(payload)+1)
			}
			fin := sel&7 != 1
			put(ws.Header{Fin: fin, OpCode: op}, payload)
			fragmented = !fin
		case 3:
			put(ws.Header{Fin: true, OpCode: ws.OpPing}, payload)
		case 4:
			put(ws.Header{Fin: true, OpCode: ws.OpPong}, payload)
		case 5: // a close with a valid code and a valid UTF-8 reason
			codes := []ws.StatusCode{1000, 1001, 1002, 1003, 1007, 1008, 1009, 1010, 1011, 1012, 1013, 1014, 3000, 4000, 4999}
			code := codes[int(sel>>3)%len(codes)]
			reason := []byte(string(bytes.ToValidUTF8(payload, []byte("?"))))
			p := binary.BigEndian.AppendUint16(nil, uint16(code))
			put(ws.Header{Fin: true, OpCode: ws.OpClose}, append(p, reason...))
			closes = append(closes, Close{Code: code, Reason: string(reason)})
		case 6:
			put(ws.Header{Fin: true, OpCode: ws.OpClose}, nil)
			closes = append(closes, Close{Code: ws.StatusNoStatusRcvd})
		case 7: // an empty final frame ends any fragmented message
			op := ws.OpText
			if fragmented {
				op = ws.OpContinuation
			}
			put(ws.Header{Fin: true, OpCode: op}, nil)
			fragmented = false
		}
	}
	return out.Bytes(), closes
}
