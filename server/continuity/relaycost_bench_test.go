package continuity_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/gobwas/ws"

	"rtgate/frames"
	"rtgate/server/continuity"
	"rtgate/server/eventtype"
	"rtgate/server/usage"
)

// BenchmarkRelayCost measures what continuity adds to the relay's work on
// the frames of a call, per frame and in user space: continuity adds no
// system call (perf stat of the gateway on the voice row counts the same
// reads and writes per frame with it on and off), and unlike the whole
// gateway's CPU on a shared box this is measured to a few nanoseconds. It is
// a lower bound: one scanner, hot in the cache. Each case runs one frame
// through a scanner set up as the relay sets it up without continuity
// ("off") and with it ("on"), in one read or split over two:
//
//   - append: a client's 20 ms input_audio_buffer.append (24 kHz PCM16,
//     masked), with on adding the client inspector (an unmasked copy of the
//     first bytes and the type scan, server.clientWatch) and cut keeping
//     (Scanner.KeepCut: a frame split over two reads is copied until whole).
//     The same inspector runs with continuity off for the turn clock, and
//     while server VAD makes responses it takes appends whole to time them:
//     server/turns' BenchmarkClientAppend measures that part;
//   - delta: a 20 ms response.output_audio.delta, through the inspector usage
//     and turns install anyway, with on adding continuity's types to its
//     check and the Holder (server/session's setupWatch), which lets this frame (over
//     frames.MaxHold) pass;
//   - transcript: a small response.output_audio_transcript.delta, which the
//     Holder takes whole (held until whole when split) and reads
//     (HoldText: is it session_expired?).
//
// Events continuity keeps (items, response.done, session.update) cost a
// whole-payload copy and a JSON parse each, a few per turn: not here.
// docs/continuity.md relates on minus off to the gateway's CPU per frame on the
// voice row of make bench-peers.
func BenchmarkRelayCost(b *testing.B) {
	audio := strings.Repeat("A", 1280) // 20 ms of 24 kHz PCM16, base64
	frameOf := map[string][]byte{
		"append": frames.AppendFrame(nil, ws.OpText,
			[]byte(`{"type":"input_audio_buffer.append","event_id":"event_1","audio":"`+audio+`"}`), true),
		"delta": frames.AppendFrame(nil, ws.OpText,
			[]byte(`{"type":"response.output_audio.delta","event_id":"event_2","response_id":"resp_1","item_id":"item_1",`+
				`"output_index":0,"content_index":0,"delta":"`+audio+`"}`), false),
		"transcript": frames.AppendFrame(nil, ws.OpText,
			[]byte(`{"type":"response.output_audio_transcript.delta","event_id":"event_3","response_id":"resp_1",`+
				`"item_id":"item_1","output_index":0,"content_index":0,"delta":" there"}`), false),
	}
	setups := map[string]func(s *frames.Scanner, on bool){
		"append": func(s *frames.Scanner, on bool) {
			if on {
				s.SetInspector(clientTypes{})
				s.KeepCut(64 << 10)
			}
		},
		"upstream": func(s *frames.Scanner, on bool) {
			s.SetInspector(&upstreamTypes{keep: on})
			if on {
				s.SetHolder(expiredHolder{})
			}
		},
	}
	for _, name := range []string{"append", "delta", "transcript"} {
		frame, dir, setup := frameOf[name], frames.UpstreamSide, setups["upstream"]
		if name == "append" {
			dir, setup = frames.ClientSide, setups["append"]
		}
		for _, reads := range []int{1, 2} {
			for _, on := range []bool{false, true} {
				b.Run(fmt.Sprintf("%s/reads=%d/%s", name, reads, map[bool]string{false: "off", true: "on"}[on]), func(b *testing.B) {
					s := frames.NewScanner(dir, 0)
					setup(s, on)
					src := frames.NewByteSource(nil)
					cut := len(frame) / 2
					b.ReportAllocs()
					for b.Loop() {
						pieces := [][]byte{frame}
						if reads == 2 {
							pieces = [][]byte{frame[:cut], frame[cut:]}
						}
						for _, p := range pieces {
							src.Reset(p)
							if _, err := s.Forward(src, discard{}); err != nil {
								b.Fatal(err)
							}
						}
					}
					if s.Frames != uint64(b.N) {
						b.Fatalf("scanned %d frames, want %d", s.Frames, b.N)
					}
				})
			}
		}
	}
}

type discard struct{}

func (discard) WriteBinary(p []byte) (int, error) { return len(p), nil }

// clientTypes is server.clientWatch's choice: the configuration events.
type clientTypes struct{}

func (clientTypes) Wants(prefix []byte) bool {
	t, ok := eventtype.Of(prefix)
	return ok && continuity.ClientWants(t)
}
func (clientTypes) Inspect([]byte) {}

// upstreamTypes is server/session's setupWatch's choice: usage's types always,
// continuity's too when keep is set.
type upstreamTypes struct{ keep bool }

func (u *upstreamTypes) Wants(prefix []byte) bool {
	t, ok := eventtype.Of(prefix)
	if !ok {
		return false
	}
	m := usage.Meter{}
	return m.WantsType(t) || (u.keep && continuity.UpstreamWants(t))
}
func (u *upstreamTypes) Inspect([]byte) {}

// expiredHolder is server/session's setupWatch's Holder for a Realtime session.
type expiredHolder struct{}

func (expiredHolder) HoldText(p []byte) bool { return continuity.IsSessionExpired(p) }
func (expiredHolder) HoldClose(c frames.Close) bool {
	switch c.Code {
	case ws.StatusInternalServerError, 1012, 1013:
		return true
	}
	return false
}
