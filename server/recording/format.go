package recording

import (
	"encoding/json"
	"strconv"
)

const (
	fmtPCM16 uint8 = iota
	fmtULaw
	fmtALaw
	fmtOther
)

// audioFormat is one direction's audio format; name is how meta.json says it.
type audioFormat struct {
	kind uint8
	name string
}

// formats reads the audio formats of a session.update, session.created or
// session.updated: GA audio.input.format / audio.output.format ({type,
// rate}), beta input_audio_format / output_audio_format.
func (r *Recorder) formats(p []byte) {
	type gaFormat struct {
		Format json.RawMessage `json:"format"`
	}
	var e struct {
		Session struct {
			Audio struct {
				Input  *gaFormat `json:"input"`
				Output *gaFormat `json:"output"`
			} `json:"audio"`
			InputAudioFormat  string `json:"input_audio_format"`
			OutputAudioFormat string `json:"output_audio_format"`
		} `json:"session"`
	}
	if json.Unmarshal(p, &e) != nil {
		return
	}
	s := e.Session
	if s.Audio.Input != nil && len(s.Audio.Input.Format) > 0 {
		r.in = gaAudioFormat(s.Audio.Input.Format)
	} else if s.InputAudioFormat != "" {
		r.in = betaAudioFormat(s.InputAudioFormat)
	}
	if s.Audio.Output != nil && len(s.Audio.Output.Format) > 0 {
		r.out = gaAudioFormat(s.Audio.Output.Format)
	} else if s.OutputAudioFormat != "" {
		r.out = betaAudioFormat(s.OutputAudioFormat)
	}
}

func gaAudioFormat(raw json.RawMessage) audioFormat {
	var f struct {
		Type string `json:"type"`
		Rate int    `json:"rate"`
	}
	if json.Unmarshal(raw, &f) != nil {
		var s string
		if json.Unmarshal(raw, &s) != nil {
			return audioFormat{kind: fmtOther, name: string(raw)}
		}
		return betaAudioFormat(s)
	}
	switch f.Type {
	case "audio/pcm":
		if f.Rate == 0 || f.Rate == SampleRate {
			return audioFormat{kind: fmtPCM16, name: "pcm16"}
		}
		return audioFormat{kind: fmtOther, name: "audio/pcm@" + strconv.Itoa(f.Rate)}
	case "audio/pcmu":
		return audioFormat{kind: fmtULaw, name: "g711_ulaw"}
	case "audio/pcma":
		return audioFormat{kind: fmtALaw, name: "g711_alaw"}
	}
	return audioFormat{kind: fmtOther, name: f.Type}
}

func betaAudioFormat(s string) audioFormat {
	switch s {
	case "pcm16":
		return audioFormat{kind: fmtPCM16, name: s}
	case "g711_ulaw":
		return audioFormat{kind: fmtULaw, name: s}
	case "g711_alaw":
		return audioFormat{kind: fmtALaw, name: s}
	}
	return audioFormat{kind: fmtOther, name: s}
}

// ulaw decodes one G.711 μ-law byte (ITU-T G.711, as in Sun's g711.c).
func ulaw(u byte) int16 {
	u = ^u
	t := (int32(u&0x0F) << 3) + 0x84
	t <<= (u & 0x70) >> 4
	if u&0x80 != 0 {
		return int16(0x84 - t)
	}
	return int16(t - 0x84)
}

// alaw decodes one G.711 A-law byte.
func alaw(a byte) int16 {
	a ^= 0x55
	t := int32(a&0x0F) << 4
	switch seg := (a & 0x70) >> 4; seg {
	case 0:
		t += 8
	case 1:
		t += 0x108
	default:
		t += 0x108
		t <<= seg - 1
	}
	if a&0x80 != 0 {
		return int16(t)
	}
	return int16(-t)
}
