package frames_test

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/cloudwego/netpoll"
	"github.com/gobwas/ws"

	"rtgate/frames"
)

// discardSink accepts and drops everything, so that a benchmark measures the
// scanner alone.
type discardSink struct{}

func (discardSink) WriteBinary(p []byte) (int, error) { return len(p), nil }

// BenchmarkScannerForward measures the scanner on the relay's hot path with
// no sockets: each iteration one masked client frame arrives in a
// netpoll.LinkBuffer (as the poller would leave it in a connection's input
// buffer), Forward moves it to the sink, and both buffers are released, as
// Session does. The forwarding path is meant not to allocate: allocs/op
// should be 0.
func BenchmarkScannerForward(b *testing.B) {
	for _, size := range []int{1 << 10, 64 << 10} {
		frame := frames.AppendFrame(nil, ws.OpBinary, bytes.Repeat([]byte{0xa5}, size), true)
		for _, sink := range []string{"linkbuffer", "discard"} {
			b.Run(fmt.Sprintf("%dKiB/%s", size>>10, sink), func(b *testing.B) {
				src := netpoll.NewLinkBuffer()
				out := netpoll.NewLinkBuffer()
				defer src.Close()
				defer out.Close()
				var dst frames.Sink = discardSink{}
				if sink == "linkbuffer" {
					dst = out
				}
				s := frames.NewScanner(frames.ClientSide, 0)

				b.ReportAllocs()
				b.SetBytes(int64(len(frame)))
				b.ResetTimer()
				for range b.N {
					buf, err := src.Malloc(len(frame))
					if err != nil {
						b.Fatal(err)
					}
					copy(buf, frame)
					if err := src.Flush(); err != nil {
						b.Fatal(err)
					}
					if _, err := s.Forward(src, dst); err != nil {
						b.Fatal(err)
					}
					// The sink may reference the source's memory (netpoll
					// does not copy writes over 4 KiB): consume the sink
					// before the source is released.
					if sink == "linkbuffer" {
						if err := out.Flush(); err != nil {
							b.Fatal(err)
						}
						if out.Len() != len(frame) {
							b.Fatalf("sink holds %d bytes, want the %d-byte frame", out.Len(), len(frame))
						}
						if err := out.Skip(out.Len()); err != nil {
							b.Fatal(err)
						}
						if err := out.Release(); err != nil {
							b.Fatal(err)
						}
					}
					if err := src.Release(); err != nil {
						b.Fatal(err)
					}
				}
				b.StopTimer()
				if s.Frames != uint64(b.N) || s.Bytes != uint64(b.N)*uint64(len(frame)) {
					b.Fatalf("scanner counted %d frames and %d bytes, want %d and %d", s.Frames, s.Bytes, b.N, b.N*len(frame))
				}
			})
		}
	}
}

// passThrough emits every message as it came: the least a Translator can
// do, so that BenchmarkTranslate measures what translation itself costs.
type passThrough struct{}

func (passThrough) Translate(op ws.OpCode, p []byte, out *frames.Output) {
	if op == ws.OpBinary {
		out.Binary(p)
		return
	}
	out.Text(p)
}

// BenchmarkTranslate is the translating scanner's cost per message against
// the verbatim path, in the same run: an upstream audio-delta-sized text
// frame (unmasked) and a client append-sized one (masked, so collected
// unmasked and framed again with a fresh mask), each Forwarded whole to a
// discarding sink. Compare with verbatim/* for the ratio; allocs/op should
// be 0 on both.
func BenchmarkTranslate(b *testing.B) {
	for _, c := range []struct {
		name string
		from frames.Side
		size int
	}{{"upstream-4KiB", frames.UpstreamSide, 4 << 10}, {"client-8KiB", frames.ClientSide, 8 << 10}} {
		frame := frames.AppendFrame(nil, ws.OpText, bytes.Repeat([]byte{'a'}, c.size), c.from == frames.ClientSide)
		for _, mode := range []string{"verbatim", "translated"} {
			b.Run(mode+"/"+c.name, func(b *testing.B) {
				s := frames.NewScanner(c.from, 0)
				if mode == "translated" {
					s.SetTranslator(passThrough{})
				}
				src := frames.NewByteSource(nil)
				b.ReportAllocs()
				b.SetBytes(int64(len(frame)))
				for range b.N {
					src.Reset(frame)
					if _, err := s.Forward(src, discardSink{}); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
