package continuity

import (
	"encoding/base64"
	"encoding/json"
)

// Keeping the user's audio itself (opt-in, Limits.KeepAudio:
// CONTINUITY_KEEP_AUDIO, a key's continuity_keep_audio). By default a
// user's audio turn is replayed by its transcript; with the opt-in the
// gateway also reads the client's input_audio_buffer.append frames (each
// one unmasked and decoded: the cost of the opt-in) and keeps the audio
// appended since the last commit or clear. When the upstream commits the
// buffer (input_audio_buffer.committed, the client's commit or server VAD's)
// that audio belongs to the committed item, and a replay creates the item
// with an input_audio part carrying it (base64, in the session's input
// format), the transcript then unused. With server VAD, the kept audio is
// everything appended since the previous commit, the silence around the
// speech included (the upstream's cut points are not told).
//
// Audio counts against the same caps as everything kept (the decoded bytes
// against CONTINUITY_MAX_BYTES and the global cap); the oldest items are
// dropped first to make room. A turn whose audio alone does not fit keeps
// none of it (it is replayed by its transcript), and nothing of it is kept
// until the next commit or clear.

// AudioClientWants reports whether a client event of type typ is read when
// audio is kept.
func AudioClientWants(typ []byte) bool {
	return string(typ) == "input_audio_buffer.append" || string(typ) == "input_audio_buffer.clear"
}

// AudioUpstreamWants reports whether an upstream event of type typ is read
// when audio is kept.
func AudioUpstreamWants(typ []byte) bool {
	return string(typ) == "input_audio_buffer.committed" || string(typ) == "input_audio_buffer.cleared"
}

// heardAudio is the audio of the user's turn in progress, and of the last
// committed turn until its item is confirmed.
type heardAudio struct {
	pending []byte // appended since the last commit or clear (decoded)
	over    bool   // this turn's audio did not fit: none is kept until the next commit
	// committed is the audio of item id, committed before the upstream
	// confirmed the item.
	id        string
	committed []byte
}

// clientAudio reads an append or a clear. Callers hold the Keeper's lock.
func (k *Keeper) clientAudio(typ string, p []byte, lim Limits) {
	if typ == "input_audio_buffer.clear" {
		if k.st != nil {
			k.st.clearAudio()
		}
		return
	}
	var ev struct {
		Audio string `json:"audio"`
	}
	if json.Unmarshal(p, &ev) != nil || ev.Audio == "" {
		return
	}
	raw, err := base64.StdEncoding.DecodeString(ev.Audio)
	if err != nil {
		return // the upstream refuses it too
	}
	st := k.state(lim)
	if st.heard == nil {
		st.heard = &heardAudio{}
	}
	h := st.heard
	if h.over {
		return
	}
	if len(h.pending)+len(raw) > st.max || !st.resize(len(raw)) { // the turn alone cannot fit: nothing is dropped for it
		st.resize(-len(h.pending))
		h.pending, h.over = nil, true
		return
	}
	h.pending = append(h.pending, raw...)
}

// clearAudio forgets the turn in progress.
func (st *State) clearAudio() {
	if h := st.heard; h != nil {
		st.resize(-len(h.pending))
		h.pending, h.over = nil, false
	}
}

// committedAudio gives the turn's audio to item id: now if the item is
// kept, else when it is confirmed (attachAudio).
func (st *State) committedAudio(id string) {
	h := st.heard
	if h == nil {
		return
	}
	audio := h.pending
	h.pending, h.over = nil, false
	if h.committed != nil { // an earlier turn's item never came
		st.resize(-len(h.committed))
		h.id, h.committed = "", nil
	}
	if len(audio) == 0 {
		return
	}
	if i := st.find(id); i >= 0 {
		st.items[i].audio = audio // counted already, as pending
		return
	}
	h.id, h.committed = id, audio
}

// attachAudio gives a newly kept item its committed audio.
func (st *State) attachAudio(it *item) {
	if h := st.heard; h != nil && h.id == it.id && h.committed != nil {
		it.audio = h.committed
		h.id, h.committed = "", nil
	}
}

// audioBody is a user item replayed with its audio.
func audioBody(id string, audio []byte) []byte {
	body, _ := json.Marshal(struct {
		ID      string              `json:"id"`
		Type    string              `json:"type"`
		Role    string              `json:"role"`
		Content []map[string]string `json:"content"`
	}{id, "message", "user", []map[string]string{{"type": "input_audio", "audio": base64.StdEncoding.EncodeToString(audio)}}})
	return body
}
