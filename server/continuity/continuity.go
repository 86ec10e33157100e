// Package continuity keeps what the gateway needs to carry a Realtime
// conversation onto a fresh upstream session when the one serving it dies
// or reaches its cap: the session's effective configuration and its
// conversation as replayable items, with their original ids, bounded per
// session and across the gateway. A GPT-Live session's (its configuration
// and its transcripts as history messages) is a liveConv (Keeper.StartLive);
// keeping the user's audio itself, opt-in, is heardAudio's.
//
// It reads only a few event types, picked out by the relay's type scan
// (eventtype.Of) before anything is decoded: the client's session.update
// and conversation.item.truncate, and the upstream's item confirmations,
// deletions, truncations, transcripts and the events that say whether a
// response or a user's speech is in progress. Audio frames
// (input_audio_buffer.append, the output deltas) are never parsed.
//
// What becomes a replayable item (replayable), from the upstream's
// confirmations (conversation.item.done, or for the response's own items
// response.output_item.done or response.done's output, whichever comes
// first; later ones replace the kept body, so the final transcript wins), in
// the place the upstream's previous_item_id gives:
//
//	user message, input_text              kept as it is
//	user message, input_audio             its transcript as input_text, once
//	                                      transcription gave one (else left out);
//	                                      with Limits.KeepAudio its own audio,
//	                                      as input_audio (attachAudio)
//	assistant message, output_audio       output_text carrying its transcript
//	assistant message, output_text        kept as it is
//	system message                        kept as it is
//	function_call, function_call_output   kept as they are
//	anything else                         left out
//
// A truncated assistant item (the client's conversation.item.truncate, or
// the upstream's conversation.item.truncated) is left out of every later
// replay: its transcript holds words the user never heard. A truncate of an
// item that was replayed (it is text on the new upstream) reaches the
// upstream, whose error event the client gets; the item is left out of
// later replays all the same.
//
// A response asked for and not started yet makes the session busy, and an
// unanswered response.create is asked again of a fresh upstream (State.askAgain).
//
// A session's State is nil until it keeps something (Keeper): an idle
// session with an empty conversation costs one pointer and a lock.
package continuity

import (
	"bytes"
	"encoding/json"
	"slices"
	"sync"

	"rtgate/server/eventtype"
)

// DefaultMaxBytes is CONTINUITY_MAX_BYTES' default: what one session keeps.
const DefaultMaxBytes = 256 << 10

// itemOverhead is what a kept item costs beyond its body and id (the
// slice entry and the strings' headers), so that many tiny items count.
const itemOverhead = 64

// Limits are what a session may keep.
type Limits struct {
	MaxBytes int     // per session (0: DefaultMaxBytes)
	Global   *Budget // every session together (nil: no cap)
	// KeepAudio keeps the user's audio turns themselves (heardAudio).
	KeepAudio bool
}

// Keeper is a session's continuity state holder: a lock and a pointer, the
// State made on the first thing worth keeping. Both read paths (client and
// upstream) and the resume goroutine call it. The zero value is ready.
type Keeper struct {
	// mu is a leaf, taken under either of the relay's locks (the read
	// paths') and by the resume: nothing under it calls back into the
	// relay (the global Budget is atomic).
	mu sync.Mutex
	st *State
}

// ClientWants reports whether a client event of type typ is read.
func ClientWants(typ []byte) bool {
	switch string(typ) {
	case "session.update", "conversation.item.truncate", "response.create":
		return true
	}
	return false
}

// UpstreamWants reports whether an upstream event of type typ is read.
func UpstreamWants(typ []byte) bool {
	switch string(typ) {
	case "conversation.item.done", "conversation.item.created", "response.output_item.done", eventtype.ResponseDone,
		"response.created", "conversation.item.deleted", "conversation.item.truncated", "error",
		eventtype.TranscriptionComplete, "input_audio_buffer.speech_started", "input_audio_buffer.speech_stopped":
		return true
	}
	return false
}

// Client reads a client event chosen by ClientWants (its unmasked payload).
// queued says the relay queued it for an upstream still to come (a resume
// under way), which will get it after the replay: a response.create then
// makes the session busy but is not asked again by the replay.
func (k *Keeper) Client(p []byte, lim Limits, queued bool) {
	typ, ok := k.lock(p)
	if !ok {
		return
	}
	defer k.mu.Unlock()
	switch typ {
	case "session.update":
		var ev struct {
			Session json.RawMessage `json:"session"`
		}
		if json.Unmarshal(p, &ev) != nil || len(ev.Session) == 0 {
			return
		}
		if st := k.state(lim); st.live != nil {
			st.replaceConfig(ev.Session) // GPT-Live's
			return
		}
		k.state(lim).mergeConfig(ev.Session)
	case "conversation.item.truncate":
		var ev struct {
			ItemID string `json:"item_id"`
		}
		if json.Unmarshal(p, &ev) == nil && k.st != nil {
			k.st.truncate(ev.ItemID)
		}
	case "response.create":
		if st := k.state(lim); st.live == nil { // GPT-Live's is a delegation's, never asked again
			st.ask(p, queued)
		}
	case "input_audio_buffer.append", "input_audio_buffer.clear":
		if lim.KeepAudio {
			k.clientAudio(typ, p, lim)
		}
	}
}

// Upstream reads an upstream event chosen by UpstreamWants.
func (k *Keeper) Upstream(p []byte, lim Limits) {
	typ, ok := k.lock(p)
	if !ok {
		return
	}
	defer k.mu.Unlock()
	switch typ {
	case "input_audio_buffer.speech_started":
		k.state(lim).speaking = true
		return
	case "input_audio_buffer.speech_stopped":
		k.state(lim).speechStopped()
		return
	case "error":
		if k.st != nil {
			k.st.refused(p)
		}
		return
	}
	var ev upstreamEvent
	if json.Unmarshal(p, &ev) != nil {
		return
	}
	switch typ {
	case "response.created":
		st := k.state(lim)
		if !slices.Contains(st.responses, ev.Response.ID) {
			st.responses = append(st.responses, ev.Response.ID)
		}
		st.answered()
	case eventtype.ResponseDone:
		st := k.state(lim)
		st.responses = slices.DeleteFunc(st.responses, func(id string) bool { return id == ev.Response.ID })
		for _, it := range ev.Response.Output {
			st.confirm(it, false, nil)
		}
	case "conversation.item.done", "conversation.item.created", "response.output_item.done":
		k.state(lim).confirm(ev.Item, true, ev.PreviousItemID)
	case "conversation.item.deleted":
		if k.st != nil {
			k.st.remove(ev.ItemID)
		}
	case "conversation.item.truncated":
		if k.st != nil {
			k.st.truncate(ev.ItemID)
		}
	case eventtype.TranscriptionComplete:
		if k.st != nil {
			k.st.transcribed(ev.ItemID, ev.Transcript)
		}
	case "input_audio_buffer.committed":
		if k.st != nil && lim.KeepAudio {
			k.st.committedAudio(ev.ItemID)
		}
	case "input_audio_buffer.cleared":
		if k.st != nil {
			k.st.clearAudio()
		}
	}
}

// lock reads an event's type and, when it has one, takes the lock.
func (k *Keeper) lock(p []byte) (typ string, ok bool) {
	t, ok := eventtype.Of(p)
	if !ok {
		return "", false
	}
	k.mu.Lock()
	return string(t), true
}

// upstreamEvent holds the fields of the upstream events Upstream reads.
type upstreamEvent struct {
	Item json.RawMessage `json:"item"`
	// PreviousItemID places an item the client inserted
	// (conversation.item.create's previous_item_id): null at the start.
	PreviousItemID json.RawMessage `json:"previous_item_id"`
	ItemID         string          `json:"item_id"`
	Transcript     string          `json:"transcript"`
	Response       struct {
		ID     string            `json:"id"`
		Output []json.RawMessage `json:"output"`
	} `json:"response"`
}

// SetBase seeds the configuration (a client secret's session config) under
// what session.update adds.
func (k *Keeper) SetBase(config []byte, lim Limits) {
	if len(config) == 0 {
		return
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	k.state(lim).mergeConfig(config)
}

// Snapshot is what a resume replays, and what it must tell the client.
type Snapshot struct {
	Config   []byte   // the merged session configuration (nil: none)
	Items    [][]byte // the replayable items, oldest first, each a JSON object with its id
	IDs      []string // their ids, in the same order
	Response string   // the newest response in progress, "" when none
	// Responses are every Realtime response in progress, oldest first
	// (Response is the last): each ends for the client as failed.
	Responses []string
	Dropped   int // items left out for the caps since the session started
	// Asked is the client's response.create (its payload) that no
	// response.created or error answered yet: the fresh upstream is asked
	// again, after the replay. Nil when none.
	Asked []byte
	// Delegation is a GPT-Live delegated response's delegation id.
	Delegation string
}

// Snapshot returns what to replay now. The in-flight response is forgotten:
// it is lost with the upstream that was producing it. A response.create
// still unanswered (Asked) is kept: it is now asked of the fresh upstream,
// which answers it or is lost in turn. A wait with nothing to ask again
// (server VAD's, whose audio is lost) ends.
func (k *Keeper) Snapshot() Snapshot {
	k.mu.Lock()
	defer k.mu.Unlock()
	st := k.st
	if st == nil {
		return Snapshot{}
	}
	if st.live != nil {
		return st.liveSnapshot()
	}
	snap := Snapshot{Config: st.config, Dropped: st.dropped, Responses: slices.Clone(st.responses)}
	if n := len(st.responses); n > 0 {
		snap.Response = st.responses[n-1]
	}
	snap.Asked = st.askAgain()
	for _, it := range st.items {
		if (it.body == nil && it.audio == nil) || it.truncated {
			continue
		}
		body := it.body
		if it.audio != nil {
			body = audioBody(it.id, it.audio) // the user's own audio, kept by opt-in
		}
		snap.Items = append(snap.Items, body)
		snap.IDs = append(snap.IDs, it.id)
	}
	st.responses, st.speaking = st.responses[:0], false
	return snap
}

// Quiet reports a quiet moment to roll a session over: no response in
// progress, none asked for and not started, and no speech started without
// its stop. The relay asks it with the client's and the upstream's reads
// held off (poller.Session.Rollover), so that no request can slip past it
// to the upstream being let go of.
func (k *Keeper) Quiet() bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.st == nil || (len(k.st.responses) == 0 && !k.st.speaking && !k.st.waiting)
}

// Bytes is what the session keeps now.
func (k *Keeper) Bytes() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.st == nil {
		return 0
	}
	return k.st.bytes
}

// Release gives everything the session kept back to the global budget; the
// session has ended.
func (k *Keeper) Release() {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.st != nil {
		k.st.global.give(k.st.bytes)
		k.st = nil
	}
}

// state is the State, made now if need be. Callers hold mu.
func (k *Keeper) state(lim Limits) *State {
	if k.st == nil {
		maxBytes := lim.MaxBytes
		if maxBytes <= 0 {
			maxBytes = DefaultMaxBytes
		}
		k.st = &State{max: maxBytes, global: lim.Global}
	}
	return k.st
}

// State is what the gateway keeps of one session.
type State struct {
	max    int
	global *Budget
	bytes  int // config plus items, as counted against max and global

	config []byte // the merged session configuration, JSON
	items  []item // in conversation order
	// dropped counts items left out for the caps.
	dropped int

	// responses are those in progress, oldest first: an out-of-band
	// response (conversation "none") may run beside the conversation's.
	responses []string
	speaking  bool // speech_started without its speech_stopped
	waiting   bool // a response asked for and not started (State.ask)
	// askedEvent is the kept response.create's event_id ("" when it had
	// none): an error naming another event answers that one (State.refused).
	askedEvent string
	asked      []byte // the client's response.create while waiting; nil when too large or none

	live  *liveConv   // a GPT-Live session's conversation; nil for Realtime
	heard *heardAudio // the user's audio, when kept; nil otherwise
}

// item is one conversation item.
type item struct {
	id        string
	body      []byte // replayable JSON; nil while a user's audio awaits its transcript
	audio     []byte // a user's audio turn itself, kept by opt-in (heardAudio)
	truncated bool
}

func (it *item) size() int { return len(it.id) + len(it.body) + len(it.audio) + itemOverhead }

// resize accounts for a change of n bytes, dropping the oldest items while
// the caps are passed. A change that could not fit even with every item
// dropped drops none and is refused (false): the caller undoes or skips
// it. An index into st.items taken before a resize may point elsewhere
// after it: find the item again.
func (st *State) resize(n int) bool {
	if n > 0 && !st.fits(n) {
		return false
	}
	for n > 0 && (st.bytes+n > st.max || !st.global.take(n)) {
		if len(st.items) == 0 {
			return false
		}
		old := st.items[0]
		st.items[0] = item{}
		st.items = st.items[1:]
		st.bytes -= old.size()
		st.global.give(old.size())
		st.dropped++
	}
	if n < 0 {
		st.global.give(-n)
	}
	st.bytes += n
	return true
}

// fits says whether n more bytes can be kept once items are dropped: beside
// what is not an item (the configuration, audio awaiting its turn) within
// the session's cap, and within what the global budget has left plus what
// this session's items hold there.
func (st *State) fits(n int) bool {
	if st.bytes+n <= st.max && st.global.room(n, 0) {
		return true // nothing to drop
	}
	items := 0
	for i := range st.items {
		items += st.items[i].size()
	}
	return st.bytes-items+n <= st.max && st.global.room(n, items)
}

// mergeConfig merges a session object into the kept configuration as the
// upstream merges session.update: objects field by field, everything else
// replaced.
func (st *State) mergeConfig(upd []byte) {
	var base, add map[string]any
	if json.Unmarshal(upd, &add) != nil || add == nil {
		return
	}
	if st.config != nil {
		_ = json.Unmarshal(st.config, &base)
	}
	if base == nil {
		base = map[string]any{}
	}
	mergeObject(base, add)
	st.setConfig(base)
}

// setConfig keeps config (marshalled) as the configuration, within the
// caps (unchanged when it does not fit).
func (st *State) setConfig(config any) {
	merged, err := json.Marshal(config)
	if err != nil {
		return
	}
	if !st.resize(len(merged) - len(st.config)) {
		return
	}
	st.config = merged
}

func mergeObject(dst, src map[string]any) {
	for k, v := range src {
		sub, ok := v.(map[string]any)
		cur, ok2 := dst[k].(map[string]any)
		if ok && ok2 {
			mergeObject(cur, sub)
			continue
		}
		dst[k] = v
	}
}

// find returns the index of the kept item id, -1 if none.
func (st *State) find(id string) int {
	for i := len(st.items) - 1; i >= 0; i-- {
		if st.items[i].id == id {
			return i
		}
	}
	return -1
}

// confirm keeps (or updates) an item the upstream confirmed. replace says
// an existing item's body is replaced (a later, fuller confirmation);
// response.done's output only fills items not seen yet. A new item goes
// after prev (the event's previous_item_id; first when null), or last
// when prev is absent or not kept.
func (st *State) confirm(raw json.RawMessage, replace bool, prev json.RawMessage) {
	id, body, pending, ok := replayable(raw)
	if !ok {
		return
	}
	i := st.find(id)
	if i >= 0 {
		it := &st.items[i]
		if (!replace && it.body != nil) || it.truncated || (pending && it.body != nil) {
			return
		}
		st.setBody(i, body)
		return
	}
	it := item{id: id, body: body}
	if !st.resize(it.size()) {
		st.dropped++
		return
	}
	at := st.placeAfter(prev)
	st.items = slices.Insert(st.items, at, it)
	st.attachAudio(&st.items[at])
}

// placeAfter is where an item whose previous_item_id is prev goes.
func (st *State) placeAfter(prev json.RawMessage) int {
	var id *string
	if len(prev) == 0 || json.Unmarshal(prev, &id) != nil {
		return len(st.items)
	}
	if id == nil {
		return 0 // null: the start of the conversation
	}
	if i := st.find(*id); i >= 0 {
		return i + 1
	}
	return len(st.items)
}

func (st *State) remove(id string) {
	if i := st.find(id); i >= 0 {
		st.resize(-st.items[i].size())
		st.items = append(st.items[:i], st.items[i+1:]...)
	}
}

func (st *State) truncate(id string) {
	if i := st.find(id); i >= 0 && !st.items[i].truncated {
		it := &st.items[i]
		st.resize(-len(it.body) - len(it.audio))
		it.body, it.audio, it.truncated = nil, nil, true
	}
}

// transcribed gives a user's audio item its transcript.
func (st *State) transcribed(id, transcript string) {
	i := st.find(id)
	if i < 0 || st.items[i].body != nil || transcript == "" {
		return
	}
	st.setBody(i, messageBody(id, "user", []map[string]string{{"type": "input_text", "text": transcript}}))
}

// setBody gives the kept item at i a new body, within the caps: room is
// made first (older items may be dropped, so i is looked up again after),
// and if the item itself had to go, what was made room for is given back.
func (st *State) setBody(i int, body []byte) {
	id, grow := st.items[i].id, len(body)-len(st.items[i].body)
	if !st.resize(grow) {
		return
	}
	if i = st.find(id); i < 0 { // dropped to make room for itself
		st.resize(-grow)
		return
	}
	st.items[i].body = body
}

// IsSessionExpired reports whether an upstream event (its payload) is the
// error OpenAI sends at its cap; it allocates nothing.
func IsSessionExpired(p []byte) bool {
	typ, ok := eventtype.Of(p)
	return ok && string(typ) == "error" && bytes.Contains(p, []byte(`"session_expired"`))
}
