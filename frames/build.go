package frames

import (
	"crypto/rand"
	"encoding/binary"
	"unicode/utf8"

	"github.com/gobwas/ws"
)

// The gateway writes few frames of its own: a close frame when one side goes
// away, an error event when the upstream cannot be reached. These helpers build
// them; they allocate, which is fine off the forwarding path.

// AppendFrame appends one final frame with the given opcode and payload to dst.
// Frames the gateway sends upstream must be masked (it is the client there);
// frames it sends to a client must not be.
func AppendFrame(dst []byte, op ws.OpCode, payload []byte, mask bool) []byte {
	h := ws.Header{Fin: true, OpCode: op, Length: int64(len(payload)), Masked: mask}
	if mask {
		_, _ = rand.Read(h.Mask[:])
	}
	dst = appendHeader(dst, h)
	start := len(dst)
	dst = append(dst, payload...)
	if mask {
		ws.Cipher(dst[start:], h.Mask, 0)
	}
	return dst
}

// AppendClose appends a close frame with code and reason. The reason is cut to
// fit the 125-byte control payload, at a UTF-8 boundary.
func AppendClose(dst []byte, code ws.StatusCode, reason string, mask bool) []byte {
	const maxReason = ws.MaxControlFramePayloadSize - 2
	if len(reason) > maxReason {
		cut := maxReason
		for cut > 0 && !utf8.RuneStart(reason[cut]) {
			cut--
		}
		reason = reason[:cut]
	}
	var payload [ws.MaxControlFramePayloadSize]byte
	binary.BigEndian.PutUint16(payload[:2], uint16(code))
	n := 2 + copy(payload[2:], reason)
	return AppendFrame(dst, ws.OpClose, payload[:n], mask)
}

func appendHeader(dst []byte, h ws.Header) []byte {
	b0 := byte(h.OpCode) | h.Rsv<<4
	if h.Fin {
		b0 |= 0x80
	}
	var b1 byte
	if h.Masked {
		b1 = 0x80
	}
	switch {
	case h.Length < 126:
		dst = append(dst, b0, b1|byte(h.Length))
	case h.Length <= 0xffff:
		dst = append(dst, b0, b1|126)
		dst = binary.BigEndian.AppendUint16(dst, uint16(h.Length))
	default:
		dst = append(dst, b0, b1|127)
		dst = binary.BigEndian.AppendUint64(dst, uint64(h.Length))
	}
	if h.Masked {
		dst = append(dst, h.Mask[:]...)
	}
	return dst
}
