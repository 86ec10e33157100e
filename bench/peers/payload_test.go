package peers

import (
	"encoding/base64"
	"encoding/json"
	"testing"
)

func TestPayloads(t *testing.T) {
	type event struct {
		Type  string `json:"type"`
		Audio string `json:"audio"`
		Delta string `json:"delta"`
	}
	tests := []struct {
		name     string
		msg      []byte
		size     int // 0: do not check
		typ      string
		audioLen int // decoded bytes; -1: do not check
	}{
		{"ping", pingEvent(), 0, "input_audio_buffer.append", 0},
		{"1 KiB append", appendEvent(1024), 1024, "input_audio_buffer.append", -1},
		{"odd-sized append", appendEvent(1031), 1031, "input_audio_buffer.append", -1},
		{"audio delta, 100 ms", audioDeltaEvent(0), audioDeltaSize, "response.output_audio.delta", 4800},
		{"audio delta, sized", audioDeltaEvent(7001), 7001, "response.output_audio.delta", -1},
	}
	for _, tt := range tests {
		if tt.size != 0 && len(tt.msg) != tt.size {
			t.Errorf("%s: %d bytes, want %d", tt.name, len(tt.msg), tt.size)
		}
		var ev event
		if err := json.Unmarshal(tt.msg, &ev); err != nil {
			t.Errorf("%s: not JSON: %v", tt.name, err)
			continue
		}
		if ev.Type != tt.typ {
			t.Errorf("%s: type %q, want %q", tt.name, ev.Type, tt.typ)
		}
		audio, err := base64.StdEncoding.DecodeString(ev.Audio + ev.Delta)
		if err != nil {
			t.Errorf("%s: audio is not base64: %v", tt.name, err)
		}
		if tt.audioLen >= 0 && len(audio) != tt.audioLen {
			t.Errorf("%s: %d bytes of audio, want %d", tt.name, len(audio), tt.audioLen)
		}
	}
	// The audio load is what mockai's default deltas look like: about 6.4 KB of base64.
	if audioDeltaSize < 6400 || audioDeltaSize > 6700 {
		t.Errorf("audio delta event is %d bytes, want 6.4-6.7 KB", audioDeltaSize)
	}
}
