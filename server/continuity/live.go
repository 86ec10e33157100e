package continuity

import (
	"encoding/json"
	"time"
	"unicode/utf8"

	"rtgate/internal/jsonscan"
	"rtgate/server/eventtype"
)

// GPT-Live's kept conversation. A Live session has no conversation items:
// the upstream sends transcript deltas (session.input_transcript.delta for
// the user, session.output_transcript.delta for the assistant, no "done"
// events), and a new session takes its history only at its start, as
// session.start's input: up to LiveMessages text messages and LiveTokens
// tokens by default (OpenAI's documented limits). So what is kept is:
//
//	session.start's session (without input)    the configuration
//	the client's session.update                 its fields replace the kept ones, whole
//	                                            (only delegation and triggers may change;
//	                                            Live does not merge inside them)
//	session.start's input                       the first messages, as the client sent them
//	input transcript deltas                     appended to the last message if it is the
//	                                            user's, else a new user message (input_text)
//	output transcript deltas                    likewise for the assistant (output_text)
//	response.event wrapping response.created    a delegated response in progress, until its
//	                                            response.completed/incomplete/failed
//
// The caps: the most recent messages are kept (the oldest dropped first),
// at most LiveMessages of them and LiveTokens tokens, within the session's
// and the gateway's byte caps (Limits) like a Realtime conversation. Tokens
// are counted approximately, without a tokenizer: a message's text costs
// ⌈UTF-8 bytes / 3⌉ tokens plus liveMessageTokens for the message. English
// runs about four bytes a token, so the count is on the safe side (the
// history kept is about 3/4 of what the upstream would take); CJK text,
// three bytes a character and about a token each, is counted about right.

// OpenAI's documented limits on session.start's input.
const (
	DefaultLiveMessages = 128
	DefaultLiveTokens   = 8192
)

// liveMessageTokens is what a message costs beyond its text (role, framing).
const liveMessageTokens = 4

// LiveCaps bound the history a Live session keeps.
type LiveCaps struct {
	Messages int // 0: DefaultLiveMessages
	Tokens   int // 0: DefaultLiveTokens
}

// liveConv is a Live session's kept conversation.
type liveConv struct {
	caps   LiveCaps
	msgs   []liveMsg
	tokens int  // the messages' tokens together
	open   bool // the last message is made of deltas (more may follow)
	// A delegated (Responses) response in progress, and its delegation.
	response, delegation string
	// deltas counts the transcript deltas read: the rollover's sign of
	// speech (LiveQuiet).
	deltas uint64
	// scratch is where a delta's text is unescaped (liveDelta), reused.
	scratch []byte
}

// liveMsg is one history message.
type liveMsg struct {
	role string // user, assistant, developer
	text []byte
}

func (m *liveMsg) size() int { return len(m.text) + itemOverhead }

// LiveTokens is the approximate token count of a message with text of n
// bytes (see the package's Live notes).
func LiveTokens(n int) int { return (n+2)/3 + liveMessageTokens }

// StartLive keeps a Live session's start: its configuration (session.start's
// session, input removed) and the history the client gave in input.
func (k *Keeper) StartLive(config []byte, input []json.RawMessage, lim Limits, caps LiveCaps) {
	if caps.Messages <= 0 {
		caps.Messages = DefaultLiveMessages
	}
	if caps.Tokens <= 0 {
		caps.Tokens = DefaultLiveTokens
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	st := k.state(lim)
	st.live = &liveConv{caps: caps}
	st.replaceConfig(config)
	for _, raw := range input {
		var it struct {
			Role    string `json:"role"`
			Content []struct {
				Text string `json:"text"`
			} `json:"content"`
		}
		if json.Unmarshal(raw, &it) != nil || len(it.Content) == 0 || it.Role == "" {
			continue
		}
		st.liveAppend(it.Role, []byte(it.Content[0].Text), true)
	}
}

// LiveUpstreamWants reports whether an upstream Live event of type typ
// (prefix: the first bytes of its payload) changes the kept conversation.
func LiveUpstreamWants(typ, prefix []byte) bool {
	switch string(typ) {
	case "session.input_transcript.delta", "session.output_transcript.delta":
		return true
	case eventtype.LiveResponse:
		inner, ok := eventtype.Inner(prefix, "event")
		if !ok {
			return true // not within the prefix: looked at whole
		}
		switch string(inner) {
		case "response.created", "response.completed", "response.incomplete", "response.failed":
			return true
		}
	}
	return false
}

// LiveUpstream reads an upstream Live event chosen by LiveUpstreamWants. A
// transcript delta, the most frequent, is read by hand (liveDelta): it
// allocates nothing.
func (k *Keeper) LiveUpstream(p []byte, lim Limits) {
	if typ, ok := eventtype.Of(p); ok && k.liveDelta(typ, p) {
		return
	}
	var ev struct {
		Type         string `json:"type"`
		Delta        string `json:"delta"`
		DelegationID string `json:"delegation_id"`
		Event        *struct {
			Type     string `json:"type"`
			Response *struct {
				ID string `json:"id"`
			} `json:"response"`
		} `json:"event"`
	}
	if json.Unmarshal(p, &ev) != nil {
		return
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	st := k.st
	if st == nil || st.live == nil {
		return
	}
	lv := st.live
	switch ev.Type {
	case "session.input_transcript.delta":
		lv.deltas++
		st.liveAppend("user", []byte(ev.Delta), false)
	case "session.output_transcript.delta":
		lv.deltas++
		st.liveAppend("assistant", []byte(ev.Delta), false)
	case eventtype.LiveResponse:
		if ev.Event == nil || ev.Event.Response == nil {
			return
		}
		switch ev.Event.Type {
		case "response.created":
			lv.response, lv.delegation = ev.Event.Response.ID, ev.DelegationID
		case "response.completed", "response.incomplete", "response.failed":
			if lv.response == ev.Event.Response.ID {
				lv.response, lv.delegation = "", ""
			}
		}
	}
}

// liveDelta reads a transcript delta (type typ, payload p) by hand: its
// delta's text, unescaped into the state's scratch buffer, is added to the
// conversation. false: not a transcript delta, or not read plainly (the
// caller decodes it).
func (k *Keeper) liveDelta(typ, p []byte) bool {
	role := ""
	switch string(typ) {
	case "session.input_transcript.delta":
		role = "user"
	case "session.output_transcript.delta":
		role = "assistant"
	default:
		return false
	}
	raw, ok := jsonscan.String(p, `"delta"`)
	if !ok {
		return false
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	st := k.st
	if st == nil || st.live == nil {
		return true
	}
	lv := st.live
	text, ok := jsonscan.AppendUnescaped(lv.scratch[:0], raw)
	if !ok {
		return false
	}
	lv.scratch = text
	lv.deltas++
	st.liveAppend(role, text, false)
	return true
}

// liveAppend adds text to the last message when it is role's (and whole
// is false: a delta), else as a new message, then applies the caps.
func (st *State) liveAppend(role string, text []byte, whole bool) {
	if len(text) == 0 {
		return
	}
	lv := st.live
	n := len(lv.msgs)
	if whole || n == 0 || lv.msgs[n-1].role != role || !lv.open {
		if n == lv.caps.Messages {
			st.liveDropOldest()
		}
		m := liveMsg{role: role}
		if !st.liveResize(m.size()) {
			st.dropped++
			return
		}
		lv.msgs = append(lv.msgs, m)
		lv.tokens += LiveTokens(0)
		n = len(lv.msgs)
	}
	lv.open = !whole
	last := &lv.msgs[n-1]
	if !st.liveResize(len(text)) {
		return // the newest message alone passes the byte caps: its start is kept
	}
	before := LiveTokens(len(last.text))
	last.text = append(last.text, text...)
	lv.tokens += LiveTokens(len(last.text)) - before
	for lv.tokens > lv.caps.Tokens && len(lv.msgs) > 1 {
		st.liveDropOldest()
	}
}

// liveResize accounts for n more bytes, dropping the oldest messages (never
// the newest) while the byte caps are passed; false when it cannot fit.
func (st *State) liveResize(n int) bool {
	for st.bytes+n > st.max || !st.global.take(n) {
		if len(st.live.msgs) <= 1 {
			return false
		}
		st.liveDropOldest()
	}
	st.bytes += n
	return true
}

// liveDropOldest drops the oldest message.
func (st *State) liveDropOldest() {
	lv := st.live
	old := lv.msgs[0]
	lv.msgs[0] = liveMsg{}
	lv.msgs = lv.msgs[1:]
	lv.tokens -= LiveTokens(len(old.text))
	st.bytes -= old.size()
	st.global.give(old.size())
	st.dropped++
}

// replaceConfig replaces the kept configuration's top-level fields with
// upd's, whole (GPT-Live's session.update); input is never kept there.
func (st *State) replaceConfig(upd []byte) {
	var base, add map[string]json.RawMessage
	if json.Unmarshal(upd, &add) != nil || add == nil {
		return
	}
	if st.config != nil {
		_ = json.Unmarshal(st.config, &base)
	}
	if base == nil {
		base = map[string]json.RawMessage{}
	}
	for k, v := range add {
		base[k] = v
	}
	delete(base, "input")
	st.setConfig(base)
}

// liveSnapshot is Snapshot for a Live session: the configuration, and the
// messages as session.start input items (InitialItem: one text part,
// input_text for the user and developer, output_text for the assistant).
// The in-flight delegated response is forgotten, as Snapshot forgets a
// Realtime one. Callers hold the Keeper's lock.
func (st *State) liveSnapshot() Snapshot {
	lv := st.live
	snap := Snapshot{Config: st.config, Response: lv.response, Delegation: lv.delegation, Dropped: st.dropped}
	budget := lv.caps.Tokens
	first := len(lv.msgs)
	for first > 0 && len(lv.msgs)-first < lv.caps.Messages {
		t := LiveTokens(len(lv.msgs[first-1].text))
		if t > budget && first < len(lv.msgs) {
			break
		}
		budget -= t
		first--
	}
	for i := first; i < len(lv.msgs); i++ {
		m := lv.msgs[i]
		text := m.text
		if i == len(lv.msgs)-1 && first == i && LiveTokens(len(text)) > lv.caps.Tokens {
			text = tail(text, (lv.caps.Tokens-liveMessageTokens)*3) // one message alone over the cap: its end
		}
		part := "input_text"
		if m.role == "assistant" {
			part = "output_text"
		}
		body, _ := json.Marshal(struct {
			Type    string              `json:"type"`
			Role    string              `json:"role"`
			Content []map[string]string `json:"content"`
		}{"message", m.role, []map[string]string{{"type": part, "text": string(text)}}})
		snap.Items = append(snap.Items, body)
	}
	snap.Dropped += first
	lv.response, lv.delegation = "", ""
	return snap
}

// tail is the last n bytes of b or fewer, starting at a UTF-8 character.
func tail(b []byte, n int) []byte {
	if n <= 0 {
		return nil
	}
	if len(b) <= n {
		return b
	}
	b = b[len(b)-n:]
	for len(b) > 0 && !utf8.RuneStart(b[0]) {
		b = b[1:]
	}
	return b
}

// LiveQuiet returns the quiet test of a GPT-Live session's rollover: no
// delegated response in progress and no transcript delta for quietFor. Its
// voice turns have no done events (a turn ends when the next begins), so
// silence on both transcripts is the sign that nobody is speaking. The time
// is read by the test's calls (the rollover asks every 50 ms), not per
// delta, so the relay reads no clock for it. Calls must not overlap.
func (k *Keeper) LiveQuiet(now func() time.Time, quietFor time.Duration) func() bool {
	var seen uint64
	var since time.Time
	return func() bool {
		k.mu.Lock()
		var n uint64
		busy := false
		if k.st != nil && k.st.live != nil {
			n, busy = k.st.live.deltas, k.st.live.response != ""
		}
		k.mu.Unlock()
		t := now()
		if since.IsZero() || n != seen {
			seen, since = n, t
		}
		return !busy && t.Sub(since) >= quietFor
	}
}
