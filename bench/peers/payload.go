package peers

import (
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"strings"
)

// audioDeltaSize is a response.output_audio.delta carrying 100 ms of 24 kHz PCM16
// (4,800 bytes, 6,400 base64 characters), mockai's default delta, with its envelope.
var audioDeltaSize = len(audioDeltaEvent(0))

// minPayload is the smallest throughput payload: room for the JSON envelope.
const minPayload = 128

// pingEvent is the small message of the latency phase: an empty audio append.
func pingEvent() []byte {
	return []byte(`{"type":"input_audio_buffer.append","event_id":"event_bench_ping_0001","audio":""}`)
}

// appendEvent is an input_audio_buffer.append of exactly size bytes (size >=
// minPayload): valid JSON with valid base64 audio, the event id padding the rest.
func appendEvent(size int) []byte {
	const head, mid, tail = `{"type":"input_audio_buffer.append","event_id":"event_`, `","audio":"`, `"}`
	room := size - len(head) - len(mid) - len(tail) - 1 // at least one id character
	audio := room / 4 * 4
	id := size - len(head) - len(mid) - len(tail) - audio
	return []byte(head + strings.Repeat("x", id) + mid + base64.StdEncoding.EncodeToString(make([]byte, audio/4*3)) + tail)
}

// audioDeltaEvent is a response.output_audio.delta shaped like OpenAI's. size 0 means
// 100 ms of audio (4,800 bytes, mockai's default delta); otherwise the audio is sized
// so the event is exactly size bytes (trailing JSON whitespace makes up the last
// 0-3), or is empty if even the envelope is larger than size.
func audioDeltaEvent(size int) []byte {
	build := func(pcm int) []byte {
		return fmt.Appendf(nil, `{"type":"response.output_audio.delta","event_id":"event_%s","response_id":"resp_%s",`+
			`"item_id":"item_%s","output_index":0,"content_index":0,"delta":"%s"}`,
			strings.Repeat("E", 20), strings.Repeat("R", 20), strings.Repeat("I", 20),
			base64.StdEncoding.EncodeToString(sawtooth(pcm)))
	}
	if size <= 0 {
		return build(4800)
	}
	pcm := max(0, (size-len(build(0)))/4*3)
	ev := build(pcm)
	if pad := size - len(ev); pad > 0 {
		ev = append(ev, strings.Repeat(" ", pad)...)
	}
	return ev
}

// sawtooth is n bytes of quiet PCM16, so the base64 looks like audio, not zeros.
func sawtooth(n int) []byte {
	b := make([]byte, n)
	for k := range n / 2 {
		binary.LittleEndian.PutUint16(b[2*k:], uint16(int16(k%200*50-5000)))
	}
	return b
}
