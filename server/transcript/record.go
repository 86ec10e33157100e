// Package transcript keeps the conversation record of one voice session:
// what was said, in order, by whom. Teams that put a voice agent in front of
// customers must be able to say afterwards what the caller and the model
// said, which tools ran with which arguments and what they returned, and
// where the caller cut the model off; the usage record (tokens, seconds,
// cost) says none of it (issue 36).
//
// A Recorder reads the session's events as the relay passes them on, the
// upstream's and the client's, in the OpenAI Realtime protocol (Upstream,
// Client; GA and beta event names) or GPT-Live's (LiveUpstream,
// LiveClient). The relay first asks WantsUpstream, WantsClient,
// LiveWantsUpstream or LiveWantsClient with the event's type, which it has
// read already (eventtype.Of): they allocate nothing, so the audio frames,
// nearly all of a session's, cost a switch on a string and are never
// parsed. The few events wanted (transcripts, text, tool calls, their
// outputs, truncations, a response's end) are read with encoding/json, the
// transcript deltas by hand (internal/jsonscan).
//
// The record is bounded and redacted before anything is kept:
//
//   - A per-session byte cap (New's maxBytes) over the entries' text and ids
//     plus entryOverhead each, so that many tiny entries count too. The
//     record is the conversation from its start: from the first entry that
//     does not fit, later entries are cut whole and counted (Record.Cut,
//     Record.CutBytes), never shortened; an entry already open when the cap
//     was reached may still complete within what is left.
//   - Redaction rules (Rule: a pattern and a label) rewrite every text,
//     transcript, argument and output before it is stored; a Record never
//     holds the text a rule matched. Text assembled from deltas is held
//     unredacted inside the Recorder until it is whole (a number may span
//     two deltas), and is redacted whole.
//
// Entries are in the order their items began (the first event the Recorder
// read about them: a user's committed audio, an answer's first transcript
// delta), not the order they completed: a user's transcription often
// completes after the model has begun answering, and the record must still
// read user, then assistant. A transcript whose done never came is
// recorded, as far as its deltas went, as partial: at the end of its
// response, at Close, or when too many entries are open at once (maxOpen).
//
// Upstream and client events come from different goroutines: one mutex,
// held for a few map and slice operations, no callback under it. Whole texts
// are redacted before it is taken, text assembled from deltas under it when
// it completes (or for a Snapshot); the clock is read before it.
package transcript

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"
)

// DefaultMaxBytes is the per-session cap New takes for maxBytes <= 0: a
// record is never unbounded.
const DefaultMaxBytes = 256 << 10

// entryOverhead is what an entry counts against the cap beyond its strings,
// so that a flood of empty entries (interruptions, truncation marks) is
// bounded like text is.
const entryOverhead = 64

// maxOpen bounds the entries waiting for their done at once. Past it the
// oldest is closed as partial (or dropped when it holds nothing): a user's
// committed audio opens an entry for its transcript, which never comes
// when input transcription is off.
const maxOpen = 16

// recentCuts is how many cut item ids are remembered, so that the second
// event completing an item (output_item.done after the transcript's done)
// is not counted as a second cut.
const recentCuts = 16

// Kind says what an entry is.
type Kind string

// The kinds of entries.
const (
	// KindTranscript is speech: the user's input audio transcript, or the
	// assistant's output audio transcript.
	KindTranscript Kind = "transcript"
	// KindText is typed or generated text: a user's or system message item,
	// the assistant's text output (a Live backend's too).
	KindText Kind = "text"
	// KindToolCall is a function call the model made: Name, CallID,
	// Arguments.
	KindToolCall Kind = "tool_call"
	// KindToolOutput is a function call's result the client sent back:
	// CallID, Output.
	KindToolOutput Kind = "tool_output"
	// KindInterruption is a Realtime response that ended cancelled
	// (Status, and Reason: turn_detected when the user spoke over it,
	// client_cancelled when the client cancelled it).
	KindInterruption Kind = "interruption"
	// KindDelegation is GPT-Live handing work to the client, a Responses
	// backend or Decisions (session.delegation.created): DelegationID,
	// Target, ResponseID.
	KindDelegation Kind = "delegation"
	// KindContext is text a GPT-Live client appended to the session
	// (Name: instructions, thinking or commentary); with a DelegationID it
	// is that client delegation's result.
	KindContext Kind = "context"
	// KindGuardrail is a guardrail's action (Guardrail): Name is the
	// guardrail, Mode what it checked, Status blocked, error_open or
	// error_closed, Reason why; ItemID the item it checked, Text or
	// Arguments what it read.
	KindGuardrail Kind = "guardrail"
)

// Entry is one thing said or done in the conversation. Fields that do not
// apply to its kind are empty (and left out of its JSON).
type Entry struct {
	// At is when the entry began: the Recorder's reading of its clock at
	// the first event it read about it. Entries are in At order.
	At   time.Time `json:"at"`
	Kind Kind      `json:"kind"`
	// Role is who said it: user, assistant, system, developer, or tool
	// (a tool's output).
	Role         string `json:"role,omitempty"`
	ItemID       string `json:"item_id,omitempty"`
	ResponseID   string `json:"response_id,omitempty"`
	CallID       string `json:"call_id,omitempty"`
	DelegationID string `json:"delegation_id,omitempty"`
	// Target is where a GPT-Live delegation went: client, responses or
	// decisions.
	Target string `json:"target,omitempty"`
	// Name is a tool call's function, or which Live context a context
	// entry appended (instructions, thinking, commentary).
	Name string `json:"name,omitempty"`
	// Text, Arguments and Output are redacted (Rule) before they are kept.
	Text      string `json:"text,omitempty"`
	Arguments string `json:"arguments,omitempty"`
	Output    string `json:"output,omitempty"`
	// Partial says the text stops short: its done never came (the
	// session, its response or the transcription ended first), or its
	// deltas reached the byte cap.
	Partial bool `json:"partial,omitempty"`
	// Truncated says the caller heard the assistant's audio only up to
	// AudioEndMs: the client (or, on a WebRTC call, the upstream)
	// truncated the item when the user spoke over it. Text is what the
	// model generated, more than was heard.
	Truncated  bool `json:"truncated,omitempty"`
	AudioEndMs *int `json:"audio_end_ms,omitempty"`
	// Status and Reason: an interruption's (cancelled, turn_detected), a
	// failed transcription's (failed), a Live backend response's that did
	// not complete (incomplete, failed).
	Status string `json:"status,omitempty"`
	Reason string `json:"reason,omitempty"`
	// Mode is a guardrail entry's mode (realtime_input_transcription, ...).
	Mode string `json:"mode,omitempty"`
}

// size is what the entry counts against the cap.
func (e *Entry) size() int {
	return entryOverhead + len(e.Kind) + len(e.Role) + len(e.ItemID) + len(e.ResponseID) + len(e.CallID) +
		len(e.DelegationID) + len(e.Target) + len(e.Name) + len(e.Text) + len(e.Arguments) + len(e.Output) +
		len(e.Status) + len(e.Reason) + len(e.Mode)
}

// Record is a session's conversation record as of Snapshot or Close.
type Record struct {
	Entries []Entry `json:"entries"`
	// Bytes is what the entries count against MaxBytes (their strings and
	// entryOverhead each, and the text of open entries so far).
	Bytes    int `json:"bytes"`
	MaxBytes int `json:"max_bytes"`
	// Cut is how many entries were left out for the cap, CutBytes what
	// they would have counted, and the deltas a Partial entry could not
	// take. A Realtime item that had no room to open and never completed
	// (the session ended first) is in neither.
	Cut      int `json:"cut,omitempty"`
	CutBytes int `json:"cut_bytes,omitempty"`
	// Redactions is how many matches of the rules were replaced in the
	// record's text.
	Redactions int `json:"redactions,omitempty"`
}

// Recorder builds one session's Record from its events. It is safe for
// concurrent use: the client's and the upstream's events are read on
// different goroutines.
type Recorder struct {
	max   int
	rules []rule
	now   func() time.Time

	mu      sync.Mutex
	entries []*entry
	byItem  map[string]*entry // entries with an item id, by it
	opens   []*entry          // the open entries, oldest first (at most maxOpen)
	bytes   int
	// full says the cap was reached: no entry is added or opened since.
	full       bool
	closed     bool
	discarded  bool // Discard: the session turned out not to keep its record
	cut        int
	cutBytes   int
	redactions int
	last       time.Time // the newest entry's At
	recent     [recentCuts]string
	recentNext int
	// liveCur is the GPT-Live transcript entry taking deltas (nil: none);
	// liveCutRole the side whose turn the cap left no entry for.
	liveCur     *entry
	liveCutRole string
}

// entry is a kept Entry and what the Recorder needs while it is open.
type entry struct {
	Entry
	size int // what it counts in Recorder.bytes
	open bool
	// pending is the text from deltas while open, unredacted: the Entry's
	// Text stays empty until the entry is finished.
	pending []byte
	// live marks a GPT-Live transcript, which has no done event: it is
	// whole when the other side speaks.
	live bool
	// backend marks a Live backend's (Responses delegation's) text, ended
	// by its response's completed, incomplete or failed.
	backend bool
	clipped bool // a delta did not fit: pending stops short
	// whole: its response completed, so its deltas are all there is, even
	// without the done event that would have said so.
	whole bool
}

// ErrRule is the error New and NewRule wrap for an unusable redaction rule.
var ErrRule = errors.New("transcript: bad redaction rule")

// New returns a session's Recorder: maxBytes caps the record
// (DefaultMaxBytes when <= 0), rules redact what it keeps, in order, and
// now is its clock (time.Now when nil; called from both read paths, so it
// must be safe for concurrent use). An error wraps ErrRule for a rule
// without a pattern or a label.
func New(maxBytes int, rules []Rule, now func() time.Time) (*Recorder, error) {
	if maxBytes <= 0 {
		maxBytes = DefaultMaxBytes
	}
	if now == nil {
		now = time.Now
	}
	compiled, err := compile(rules)
	if err != nil {
		return nil, err
	}
	return &Recorder{max: maxBytes, rules: compiled, now: now, byItem: map[string]*entry{}}, nil
}

// Snapshot returns the record so far. Open entries are in it as they stand
// (their text from deltas, redacted now, marked partial); the Recorder goes
// on reading.
func (r *Recorder) Snapshot() Record {
	r.mu.Lock()
	defer r.mu.Unlock()
	rec := Record{Bytes: r.bytes, MaxBytes: r.max, Cut: r.cut, CutBytes: r.cutBytes, Redactions: r.redactions,
		Entries: make([]Entry, 0, len(r.entries))}
	for _, x := range r.entries {
		if !x.open {
			rec.Entries = append(rec.Entries, x.Entry)
			continue
		}
		e, n, keep := r.asFinished(x)
		if keep {
			rec.Entries = append(rec.Entries, e)
			rec.Redactions += n
		}
	}
	return rec
}

// Discard stops the record for good and throws away what it holds: for a
// session whose record was started before it was known whether it keeps
// one (a GPT-Live session, whose deployment its session.start decides).
func (r *Recorder) Discard() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.closed, r.discarded = true, true
	r.entries, r.byItem, r.opens = nil, map[string]*entry{}, nil
}

// Kept reports whether the record is kept (not discarded).
func (r *Recorder) Kept() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return !r.discarded
}

// Close ends the record: entries still open are finished as they stand
// (partial, but for a GPT-Live transcript, whose turns have no done
// event), and later events are ignored. It returns the final record; a
// second Close returns it again.
func (r *Recorder) Close() Record {
	r.mu.Lock()
	if !r.closed {
		for len(r.opens) > 0 {
			r.finishOpen(r.opens[0])
		}
		r.closed = true
	}
	r.mu.Unlock()
	return r.Snapshot()
}

// stamp is the At of an entry read at t: never before the newest entry's,
// so that At follows the record's order though the two read paths read
// the clock before taking the lock.
func (r *Recorder) stamp(t time.Time) time.Time {
	if t.Before(r.last) {
		t = r.last
	}
	r.last = t
	return t
}

func (r *Recorder) fits(n int) bool { return r.bytes+n <= r.max }

// add keeps a whole entry read at t (its text redacted with n matches),
// or cuts it. An entry of an item already kept completes or fills in that
// one instead (complete). Callers hold mu.
func (r *Recorder) add(t time.Time, e Entry, n int) {
	if r.closed {
		return
	}
	size := e.size()
	if r.full || !r.fits(size) {
		item := e.ItemID
		if e.Kind == KindGuardrail {
			item = "" // the item it checked is not cut with it
		}
		r.cutEntry(item, size)
		return
	}
	e.At = r.stamp(t)
	x := &entry{Entry: e, size: size}
	r.entries = append(r.entries, x)
	if e.ItemID != "" && e.Kind != KindGuardrail { // a guardrail's entry names the item it checked, but is not it
		r.byItem[e.ItemID] = x
	}
	r.bytes += size
	r.redactions += n
}

// complete records an item's final entry e (read at t, redacted with n
// matches): it finishes the item's open entry, fills in what a finished
// one lacks (a tool call's name from the later output_item.done), or adds
// it. Callers hold mu.
func (r *Recorder) complete(t time.Time, e Entry, n int) {
	if r.closed {
		return
	}
	if e.ItemID == "" {
		r.add(t, e, n)
		return
	}
	x := r.byItem[e.ItemID]
	switch {
	case x == nil && r.wasCut(e.ItemID):
	case x == nil:
		r.add(t, e, n)
	case x.open:
		r.finish(x, e, n)
	default:
		r.fillIn(x, e)
	}
}

// fillIn gives a finished entry the ids and name a later event of its item
// knows and the first did not (beta's function_call_arguments.done has no
// name), within the cap.
func (r *Recorder) fillIn(x *entry, e Entry) {
	add := 0
	if x.Name == "" {
		add += len(e.Name)
	}
	if x.CallID == "" {
		add += len(e.CallID)
	}
	if x.ResponseID == "" {
		add += len(e.ResponseID)
	}
	if add == 0 || !r.fits(add) {
		return
	}
	x.Name = orElse(x.Name, e.Name)
	x.CallID = orElse(x.CallID, e.CallID)
	x.ResponseID = orElse(x.ResponseID, e.ResponseID)
	x.size += add
	r.bytes += add
}

// orElse is a unless it is empty, else b.
func orElse(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// open starts an entry that deltas will fill, read at t; nil when the cap
// leaves no room (its item is then cut when it completes). Callers hold mu.
func (r *Recorder) open(t time.Time, e Entry) *entry {
	if r.closed || r.full {
		return nil
	}
	size := e.size()
	if !r.fits(size) {
		r.full = true
		return nil
	}
	e.At = r.stamp(t)
	x := &entry{Entry: e, size: size, open: true}
	r.entries = append(r.entries, x)
	r.opens = append(r.opens, x)
	if e.ItemID != "" {
		r.byItem[e.ItemID] = x
	}
	r.bytes += size
	if len(r.opens) > maxOpen {
		r.finishOpen(r.opens[0])
	}
	return x
}

// grow adds a delta's text to an open entry, within the cap: a delta that
// does not fit clips the entry (it ends partial) and is counted cut.
// Callers hold mu.
func (r *Recorder) grow(x *entry, text []byte) {
	if !x.open || len(text) == 0 {
		return
	}
	if x.clipped || !r.fits(len(text)) {
		x.clipped, r.full = true, true
		r.cutBytes += len(text)
		return
	}
	x.pending = append(x.pending, text...)
	x.size += len(text)
	r.bytes += len(text)
}

// finish replaces the open entry x by its final form e (redacted with n
// matches), keeping where and when it began and its truncation; it is cut
// whole when e does not fit. Callers hold mu.
func (r *Recorder) finish(x *entry, e Entry, n int) {
	e.At = x.At
	if x.Truncated {
		e.Truncated, e.AudioEndMs = true, x.AudioEndMs
	}
	e.ResponseID = orElse(e.ResponseID, x.ResponseID)
	e.DelegationID = orElse(e.DelegationID, x.DelegationID)
	size := e.size()
	r.unopen(x)
	if r.bytes-x.size+size > r.max {
		r.remove(x)
		r.bytes -= x.size
		r.cutEntry(x.ItemID, size)
		return
	}
	r.bytes += size - x.size
	x.Entry, x.size, x.pending = e, size, nil
	r.redactions += n
}

// finishOpen finishes an open entry as it stands, from its deltas: partial
// (but for a whole Live transcript); dropped when it holds nothing worth
// a line. Callers hold mu.
func (r *Recorder) finishOpen(x *entry) {
	e, n, keep := r.asFinished(x)
	if !keep {
		r.unopen(x)
		r.remove(x)
		r.bytes -= x.size
		return
	}
	r.finish(x, e, n)
}

// asFinished is the open entry x as it stands: its deltas' text redacted,
// partial unless it is a Live transcript that took all its deltas; keep is
// false when it has neither text nor a truncation to show.
func (r *Recorder) asFinished(x *entry) (e Entry, n int, keep bool) {
	e = x.Entry
	if len(x.pending) == 0 && !x.Truncated {
		return e, 0, false
	}
	e.Text, n = redact(r.rules, string(x.pending))
	e.Partial = x.clipped || !x.live && !x.whole
	return e, n, true
}

// unopen takes x off the open list.
func (r *Recorder) unopen(x *entry) {
	x.open = false
	if i := slices.Index(r.opens, x); i >= 0 {
		r.opens = slices.Delete(r.opens, i, i+1)
	}
	if r.liveCur == x {
		r.liveCur = nil
	}
}

// remove takes x out of the record (its bytes are the caller's to give back).
func (r *Recorder) remove(x *entry) {
	for i := len(r.entries) - 1; i >= 0; i-- {
		if r.entries[i] == x {
			r.entries = slices.Delete(r.entries, i, i+1)
			break
		}
	}
	if x.ItemID != "" && r.byItem[x.ItemID] == x {
		delete(r.byItem, x.ItemID)
	}
}

// cutEntry counts an entry of size bytes left out, and remembers its item.
func (r *Recorder) cutEntry(itemID string, size int) {
	r.full = true
	r.cut++
	r.cutBytes += size
	if itemID != "" {
		r.recent[r.recentNext] = itemID
		r.recentNext = (r.recentNext + 1) % recentCuts
	}
}

// wasCut says the item was cut lately: later events about it are not cut
// again.
func (r *Recorder) wasCut(itemID string) bool {
	return slices.Contains(r.recent[:], itemID)
}

// truncate marks the item's entry truncated at audioEndMs (the first mark
// stands: the upstream's conversation.item.truncated confirms the
// client's truncate). An item not seen yet gets an open assistant entry
// for its transcript to finish. Callers hold mu.
func (r *Recorder) truncate(t time.Time, itemID string, audioEndMs int) {
	if r.closed || itemID == "" || r.wasCut(itemID) {
		return
	}
	x := r.byItem[itemID]
	if x == nil {
		if x = r.open(t, Entry{Kind: KindTranscript, Role: "assistant", ItemID: itemID}); x == nil {
			return
		}
	}
	if x.Truncated {
		return
	}
	ms := max(audioEndMs, 0)
	x.Truncated, x.AudioEndMs = true, &ms
}

// errEvent wraps a parse error with the event's type.
func errEvent(typ string, err error) error {
	return fmt.Errorf("transcript: reading %s: %w", typ, err)
}

// ErrNoType is returned for an event whose type eventtype.Of cannot read.
var ErrNoType = errors.New("transcript: event type not readable")
