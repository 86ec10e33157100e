package continuity_test

import (
	"strings"
	"testing"

	"github.com/gobwas/ws"

	"rtgate/frames"
	"rtgate/server/continuity"
	"rtgate/server/usage"
)

// BenchmarkRelayCost measures what continuity adds to the relay's work on
// the frames of a voice call, per frame and in user space: continuity adds
// no system call (perf stat of the gateway on the voice row counts the same
// reads and writes per frame with it on and off), so this is all it can
// add, and unlike the whole gateway's CPU on a shared box it is measured to
// a few nanoseconds. Each pair runs one frame through a scanner as the
// relay sets it up without continuity ("off") and with it ("on"):
//
//   - client: a 20 ms input_audio_buffer.append (24 kHz PCM16, masked), with
//     on adding the client inspector (an unmasked copy of the first bytes and
//     the type scan, server.clientWatch) and cut keeping (Scanner.KeepCut);
//   - upstream: a 20 ms response.output_audio.delta, through the inspector
//     usage and turns install anyway, with on adding continuity's types to
//     its check and the Holder (server.setupWatch's HoldText and HoldClose).
//
// The README relates on minus off to the gateway's CPU per frame on the
// voice row of make bench-peers.
func BenchmarkRelayCost(b *testing.B) {
	audio := strings.Repeat("A", 1280) // 20 ms of 24 kHz PCM16, base64
	appendFrame := frames.AppendFrame(nil, ws.OpText,
		[]byte(`{"type":"input_audio_buffer.append","event_id":"event_1","audio":"`+audio+`"}`), true)
	deltaFrame := frames.AppendFrame(nil, ws.OpText,
		[]byte(`{"type":"response.output_audio.delta","event_id":"event_2","response_id":"resp_1","item_id":"item_1",`+
			`"output_index":0,"content_index":0,"delta":"`+audio+`"}`), false)

	for _, tc := range []struct {
		name  string
		dir   frames.Direction
		frame []byte
		setup func(s *frames.Scanner)
	}{
		{"client/off", frames.FromClient, appendFrame, func(*frames.Scanner) {}},
		{"client/on", frames.FromClient, appendFrame, func(s *frames.Scanner) {
			s.SetInspector(clientTypes{})
			s.KeepCut(64 << 10)
		}},
		{"upstream/off", frames.FromServer, deltaFrame, func(s *frames.Scanner) { s.SetInspector(&upstreamTypes{}) }},
		{"upstream/on", frames.FromServer, deltaFrame, func(s *frames.Scanner) {
			s.SetInspector(&upstreamTypes{keep: true})
			s.SetHolder(expiredHolder{})
		}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			s := frames.NewScanner(tc.dir, 0)
			tc.setup(s)
			src := frames.NewByteSource(nil)
			b.ReportAllocs()
			for b.Loop() {
				src.Reset(tc.frame)
				if _, err := s.Forward(src, discard{}); err != nil {
					b.Fatal(err)
				}
			}
			if s.Frames != uint64(b.N) {
				b.Fatalf("scanned %d frames, want %d", s.Frames, b.N)
			}
		})
	}
}

type discard struct{}

func (discard) WriteBinary(p []byte) (int, error) { return len(p), nil }

// clientTypes is server.clientWatch's choice: the configuration events.
type clientTypes struct{}

func (clientTypes) Wants(prefix []byte) bool {
	t, ok := usage.EventType(prefix)
	return ok && continuity.ClientWants(t)
}
func (clientTypes) Inspect([]byte) {}

// upstreamTypes is server.setupWatch's choice: usage's types always,
// continuity's too when keep is set.
type upstreamTypes struct{ keep bool }

func (u *upstreamTypes) Wants(prefix []byte) bool {
	t, ok := usage.EventType(prefix)
	if !ok {
		return false
	}
	m := usage.Meter{}
	return m.WantsType(t) || (u.keep && continuity.UpstreamWants(t))
}
func (u *upstreamTypes) Inspect([]byte) {}

// expiredHolder is server.setupWatch's Holder for a Realtime session.
type expiredHolder struct{}

func (expiredHolder) HoldText(p []byte) bool { return continuity.IsSessionExpired(p) }
func (expiredHolder) HoldClose(c frames.Close) bool {
	switch c.Code {
	case ws.StatusInternalServerError, 1012, 1013:
		return true
	}
	return false
}
