package session

import "testing"

// TestAppendWithoutKeepAudio: with audio keeping off (the default) the
// continuity inspector passes over an append frame as before, allocating
// nothing; with it on, it asks for the frame.
func TestAppendWithoutKeepAudio(t *testing.T) {
	prefix := []byte(`{"type":"input_audio_buffer.append","audio":"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA`)
	off := clientWatch{info: &sessionInfo{}}
	if allocs := testing.AllocsPerRun(100, func() {
		if off.Wants(prefix) {
			t.Fatal("an append is wanted with audio keeping off")
		}
	}); allocs != 0 {
		t.Errorf("%v allocations per append with audio keeping off, want 0", allocs)
	}
	on := clientWatch{info: &sessionInfo{}, keep: true}
	on.lim.KeepAudio = true
	if !on.Wants(prefix) {
		t.Error("an append is not wanted with audio keeping on")
	}
}
