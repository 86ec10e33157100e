package gemini

import (
	"encoding/base64"
	"encoding/binary"
	"math"
	"testing"
)

// The choice this measures: the client's 24 kHz PCM16 goes to Gemini as it
// came, labelled audio/pcm;rate=24000, and Gemini resamples it to its
// native 16 kHz; the gateway could instead resample it itself and send a
// third fewer bytes. What that would cost the gateway per 20 ms append is
// BenchmarkResample below against BenchmarkTranslate/client-append-20ms
// (what the append costs as it is sent now). How Gemini's own resampler
// sounds cannot be measured here (there is no Gemini endpoint): the
// gateway leaves it to Gemini, whose documented input takes any rate it is
// told (ai.google.dev/gemini-api/docs/live-guide, "Audio formats").

// resample24to16 decimates 24 kHz PCM16 to 16 kHz (3 samples to 2)
// through a polyphase windowed-sinc low-pass: output sample j sits at input
// position 1.5j, so even outputs take phase 0 of the filter and odd ones
// phase 1 (offset half a sample). A resampler good enough to put in the
// gateway: the cost that choice would carry.
func resample24to16(dst, src []int16, phases [2][]float32) []int16 {
	half := len(phases[0]) / 2
	for j := 0; ; j++ {
		center := j * 3 / 2
		if center >= len(src) {
			return dst
		}
		taps := phases[j&1]
		var acc float32
		for k, w := range taps {
			if i := center + k - half; i >= 0 && i < len(src) {
				acc += w * float32(src[i])
			}
		}
		dst = append(dst, int16(max(min(acc, math.MaxInt16), math.MinInt16)))
	}
}

// polyphase is a Hann-windowed sinc low-pass of n taps cut at fc (a
// fraction of the input rate), sampled at offsets 0 and 0.5 (the two
// phases of 3:2), each normalised to unit gain.
func polyphase(n int, fc float64) [2][]float32 {
	var out [2][]float32
	for ph := range 2 {
		off := 0.5 * float64(ph)
		taps := make([]float64, n)
		var sum float64
		for i := range taps {
			x := float64(i-n/2) - off
			sinc := 2 * fc
			if x != 0 {
				sinc = math.Sin(2*math.Pi*fc*x) / (math.Pi * x)
			}
			taps[i] = sinc * (0.5 - 0.5*math.Cos(2*math.Pi*(float64(i)-off+0.5)/float64(n)))
			sum += taps[i]
		}
		out[ph] = make([]float32, n)
		for i, t := range taps {
			out[ph][i] = float32(t / sum)
		}
	}
	return out
}

// BenchmarkResample is what resampling one client append in the gateway
// would cost: decode its base64 (20 ms at 24 kHz, 960 bytes), resample to
// 16 kHz, encode again (640 bytes), with every buffer reused.
func BenchmarkResample(b *testing.B) {
	pcm := make([]byte, 960)
	for i := range 480 {
		binary.LittleEndian.PutUint16(pcm[2*i:], uint16(int16(8000*math.Sin(2*math.Pi*440*float64(i)/24000))))
	}
	in := []byte(base64.StdEncoding.EncodeToString(pcm))
	phases := polyphase(31, 7200.0/24000)
	raw := make([]byte, 960)
	samples := make([]int16, 480)
	out := make([]int16, 0, 330)
	outBytes := make([]byte, 0, 660)
	enc := make([]byte, base64.StdEncoding.EncodedLen(660))
	b.ReportAllocs()
	b.SetBytes(int64(len(in)))
	for range b.N {
		n, err := base64.StdEncoding.Decode(raw, in)
		if err != nil {
			b.Fatal(err)
		}
		for i := range n / 2 {
			samples[i] = int16(binary.LittleEndian.Uint16(raw[2*i:]))
		}
		out = resample24to16(out[:0], samples[:n/2], phases)
		outBytes = outBytes[:0]
		for _, s := range out {
			outBytes = binary.LittleEndian.AppendUint16(outBytes, uint16(s))
		}
		base64.StdEncoding.Encode(enc, outBytes)
	}
	if len(out) != 320 {
		b.Fatalf("%d samples out of 480, want 320", len(out))
	}
}
