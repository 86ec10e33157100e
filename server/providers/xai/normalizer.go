// Package xai repairs the events of xAI's Grok Voice realtime API
// (wss://api.x.ai/v1/realtime) so that clients of the official openai SDK
// (openai-node's OpenAIRealtimeWS, @openai/agents-realtime) get OpenAI
// Realtime GA events whose types hold.
//
// xAI's API is OpenAI-shaped but not OpenAI-exact. openai-node does not
// validate events at run time, so a deviation there is a TypeScript type
// that lies (an index that is undefined, a usage that is missing); the
// Agents SDK parses every server event with zod schemas
// (openaiRealtimeEvents.ts) and silently treats an event that fails as an
// unknown one, so a deviation there is an event the session never acts on:
// a response.done with a string status_details ends no turn, an audio delta
// without content_index plays no audio, an item with role "tool" never
// reaches the history.
//
// What Normalizer repairs, upstream (xAI → client) only; client events go to
// xAI as they are:
//
//   - conversation.created, xAI's first event, is preceded by a synthesised
//     session.created: OpenAI's first event, which clients wait for
//     (providers.md; docs.x.ai voice agent guide). xAI's docs have since been
//     said to name session.created the first event (BerriAI/litellm-docs
//     #362): a real session.created before conversation.created is passed on
//     and none is synthesised; one after a synthesised one is relabelled
//     session.updated, so the client sees one session.created and still
//     learns the real configuration. conversation.created itself passes on:
//     it is a GA event (ConversationCreatedEvent in openai-node's
//     RealtimeServerEvent, and in the Agents SDK's schemas).
//   - ping (xAI's keep-alive, {type, event_id, timestamp}) is dropped: no GA
//     client knows it (LiteLLM's XAIRealtimeNormalizer.should_drop; pipecat's
//     xAI PingEvent).
//   - Missing output_index and content_index on the response's item and
//     content events are filled (LiteLLM: "xAI omits both fields on every
//     streaming response event"). LiteLLM writes 0; this counts instead, per
//     response: an item's output_index is its place among the response's
//     items in the order they appeared (output_item.added, or the first event
//     naming its item_id), and content_index is the item's latest content
//     part (content_part.added). An index xAI does send is kept and
//     remembered for the item's later events. A missing response_id is
//     filled with the response in progress.
//   - role "tool" on items (LiteLLM: conversation.item.added function_call
//     items) becomes "assistant", on every event that carries an item and in
//     response.created/done's output: neither SDK's item types allow "tool",
//     and the Agents SDK's item schema rejects it.
//   - response.content_part.added/done without a part get one (LiteLLM:
//     part missing on content_part.done): for .done, built from the
//     transcript or text of the part's output_*_transcript.done or
//     output_text.done when one came; otherwise an empty audio part (a text
//     part when the response's modalities were text only).
//   - response.done whose response.usage is missing, null or {} gets one
//     (LiteLLM: usage {} on response.done): xAI's top-level usage when the
//     event has a non-empty one (pipecat: "also available at top level in
//     Grok"), else zero counts in the full GA shape. A response.done without
//     a response object gets a minimal one, which the Agents SDK requires.
//   - A string status_details (on response.created/done) becomes the
//     RealtimeResponseStatus object. No public source found shows xAI
//     sending one; it is repaired when seen, since the Agents SDK drops a
//     response.done that has one (its schema wants an object).
//   - session.created/updated whose session lacks type get type "realtime"
//     (SessionCreatedEvent.session is RealtimeSessionCreateRequest, where
//     type is required; xAI's session objects, as pipecat models them, have
//     none).
//   - input_audio_transcription.completed/failed without content_index get
//     0, which is right: an input audio item has one content part. The
//     Agents SDK's schemas require it.
//   - Beta event names (response.audio.delta, response.audio_transcript.*,
//     response.text.*) are renamed to the GA ones. The sources (pipecat's
//     and agentscope's xAI clients, checked against xAI's schema) say xAI
//     sends GA names; the mapping is a guard, not a known deviation.
//
// Everything else passes through byte for byte, and so does a recognised
// event that needs no repair: Translate finds an event's type with
// eventtype.Of, hands unrecognised types on at once, and only walks the
// recognised ones (see scan.go). A repair splices bytes into the message; it
// never re-encodes it.
//
// Costs: an audio delta needing nothing or only its indexes allocates
// nothing (the scratch buffer is pooled, not kept per session, since idle
// sessions are many); the rare events that are synthesised (session.created)
// use encoding/json. go.mod has no JSON library in direct use (gjson/sjson
// are not there), and these events come once a session, where
// encoding/json's cost does not matter.
package xai

import (
	"bytes"
	"encoding/json"
	"strconv"

	"github.com/gobwas/ws"
	"github.com/valyala/bytebufferpool"

	"rtgate/frames"
	"rtgate/server/eventtype"
)

// maxItems bounds the items a response's index counting tracks (a voice
// response has one or two: the audio message, a function call). Items past
// it still get an output_index, counted on, but are not remembered.
const maxItems = 64

// maxKeptFinal is the largest finished transcript kept for a part's
// content_part.done once it has been used; a longer one's buffer is let go
// rather than kept for the session's life.
const maxKeptFinal = 4 << 10

// Content kinds, for a part that has to be synthesised.
const (
	kindNone byte = iota
	kindAudio
	kindText
)

// zeroUsage is response.usage in the GA shape (RealtimeResponseUsage and its
// details, as openai-node declares them) with every count zero: what a
// response.done that reports no usage gets.
const zeroUsage = `{"total_tokens":0,"input_tokens":0,"output_tokens":0,` +
	`"input_token_details":{"text_tokens":0,"audio_tokens":0,"image_tokens":0,"cached_tokens":0,` +
	`"cached_tokens_details":{"text_tokens":0,"audio_tokens":0,"image_tokens":0}},` +
	`"output_token_details":{"text_tokens":0,"audio_tokens":0}}`

// Normalizer is a frames.Translator for the upstream side of one xAI
// session. It keeps per-session state (whether a session.created has gone
// out, the response in progress and its items), so each session needs its
// own; it is not safe for concurrent use, which the scanner that drives it
// never asks for.
type Normalizer struct {
	model       string
	sessionSent bool // a session.created has gone to the client

	resp response

	// Per message: the edits to make, and a pooled scratch buffer holding
	// their new bytes and then the repaired message. sc is nil between
	// messages.
	edits        []edit
	sc           *bytebufferpool.ByteBuffer
	pendingStart int // where the bytes of the member insertMember began start in sc
}

// edit replaces p[at:end] (at == end: inserts at at) with sc.B[vs:ve].
type edit struct{ at, end, vs, ve int }

// response is the response in progress, for counting its indexes.
type response struct {
	id       []byte // as written, without quotes; empty before the first
	textOnly bool   // its output modalities leave audio out
	items    []item // the first n are this response's
	n        int
	next     int // the output_index the next new item gets
}

// item is one output item of the response in progress.
type item struct {
	id        []byte
	index     int    // output_index
	part      int    // the latest content part's index; -1 before the first
	kind      byte   // what its content is, as far as seen
	final     []byte // the part's finished transcript or text, a JSON string as written
	finalKind byte
}

// NewNormalizer returns the translator for one session with the xAI model
// the client asked for (it goes into the synthesised session.created; ""
// leaves it out).
func NewNormalizer(model string) *Normalizer {
	return &Normalizer{model: model}
}

// class is what Translate does with a type of event.
type class uint8

const (
	passOn class = iota
	dropIt
	conversationCreated
	sessionCreated
	sessionUpdated
	responseCreated
	responseDone
	outputItemAdded
	outputItemDone
	contentPartAdded
	contentPartDone
	contentEvent   // an event on a content part: deltas and their .done
	functionCall   // function_call_arguments.delta/done: output_index only
	itemEvent      // conversation.item.*: the item's role
	transcriptions // input audio transcription: content_index
)

// spec says how an event type is repaired.
type spec struct {
	class class
	ga    string // the GA name, when the type is a beta name
	kind  byte   // the content kind the event shows its part to have
	final string // on a .done: the member holding the part's whole transcript or text
}

func specOf(typ []byte) spec {
	switch string(typ) {
	case "response.output_audio.delta":
		return spec{class: contentEvent, kind: kindAudio}
	case "response.output_audio_transcript.delta":
		return spec{class: contentEvent, kind: kindAudio}
	case "response.output_text.delta":
		return spec{class: contentEvent, kind: kindText}
	case "response.output_audio.done":
		return spec{class: contentEvent, kind: kindAudio}
	case "response.output_audio_transcript.done":
		return spec{class: contentEvent, kind: kindAudio, final: "transcript"}
	case "response.output_text.done":
		return spec{class: contentEvent, kind: kindText, final: "text"}
	case "response.audio.delta":
		return spec{class: contentEvent, kind: kindAudio, ga: "response.output_audio.delta"}
	case "response.audio.done":
		return spec{class: contentEvent, kind: kindAudio, ga: "response.output_audio.done"}
	case "response.audio_transcript.delta":
		return spec{class: contentEvent, kind: kindAudio, ga: "response.output_audio_transcript.delta"}
	case "response.audio_transcript.done":
		return spec{class: contentEvent, kind: kindAudio, ga: "response.output_audio_transcript.done", final: "transcript"}
	case "response.text.delta":
		return spec{class: contentEvent, kind: kindText, ga: "response.output_text.delta"}
	case "response.text.done":
		return spec{class: contentEvent, kind: kindText, ga: "response.output_text.done", final: "text"}
	case "response.content_part.added":
		return spec{class: contentPartAdded}
	case "response.content_part.done":
		return spec{class: contentPartDone}
	case "response.output_item.added":
		return spec{class: outputItemAdded}
	case "response.output_item.done":
		return spec{class: outputItemDone}
	case "response.function_call_arguments.delta", "response.function_call_arguments.done":
		return spec{class: functionCall}
	case "conversation.item.added", "conversation.item.done", "conversation.item.created", "conversation.item.retrieved":
		return spec{class: itemEvent}
	case "conversation.item.input_audio_transcription.completed", "conversation.item.input_audio_transcription.failed":
		return spec{class: transcriptions}
	case "response.created":
		return spec{class: responseCreated}
	case "response.done":
		return spec{class: responseDone}
	case "session.created":
		return spec{class: sessionCreated}
	case "session.updated":
		return spec{class: sessionUpdated}
	case "conversation.created":
		return spec{class: conversationCreated}
	case "ping":
		return spec{class: dropIt}
	}
	return spec{}
}

// top holds the top-level members of an event that repairs look at.
type top struct {
	typ, responseID, itemID, outputIndex, contentIndex span
	part, item, response, session, usage, final        span
	close                                              int // the closing brace
}

// scanTop walks the event's top-level members once. finalKey names the
// member to take as top.final ("" for none).
func scanTop(p []byte, finalKey string) (top, bool) {
	t := top{typ: absent, responseID: absent, itemID: absent, outputIndex: absent, contentIndex: absent,
		part: absent, item: absent, response: absent, session: absent, usage: absent, final: absent}
	s := span{skipSpace(p, 0), len(p)}
	if s.start >= len(p) {
		return t, false
	}
	m, ok := objectAt(p, s)
	if !ok {
		return t, false
	}
	for {
		k, v, more := m.next()
		if !more {
			break
		}
		switch string(k) {
		case "type":
			t.typ = v
		case "response_id":
			t.responseID = v
		case "item_id":
			t.itemID = v
		case "output_index":
			t.outputIndex = v
		case "content_index":
			t.contentIndex = v
		case "part":
			t.part = v
		case "item":
			t.item = v
		case "response":
			t.response = v
		case "session":
			t.session = v
		case "usage":
			t.usage = v
		default:
			if finalKey != "" && string(k) == finalKey {
				t.final = v
			}
		}
	}
	if m.bad {
		return t, false
	}
	t.close = m.close
	return t, true
}

// Translate implements frames.Translator for xAI's events: see the package
// documentation for what it repairs.
func (n *Normalizer) Translate(op ws.OpCode, p []byte, out *frames.Output) {
	if op != ws.OpText {
		out.Binary(p) // not xAI's JSON: nothing here to repair
		return
	}
	typ, ok := eventtype.Of(p)
	if !ok {
		// The type is not within the first 256 bytes (or not plain): find
		// it the long way, once, for the few types that are repaired.
		t, ok := scanTop(p, "")
		if !ok || !t.typ.isString(p) {
			out.Text(p)
			return
		}
		typ = t.typ.str(p)
	}
	sp := specOf(typ)
	switch sp.class {
	case passOn:
		out.Text(p)
		return
	case dropIt:
		return
	case conversationCreated:
		n.conversationCreated(p, out)
		return
	}
	t, ok := scanTop(p, sp.final)
	if !ok {
		out.Text(p)
		return
	}
	n.edits = n.edits[:0]
	switch sp.class {
	case contentEvent, functionCall, contentPartAdded, contentPartDone:
		n.contentEvent(p, &t, sp)
	case outputItemAdded, outputItemDone:
		n.outputItem(p, &t, sp)
	case itemEvent:
		n.fixRole(p, t.item)
	case transcriptions:
		if !t.contentIndex.ok() {
			n.insertMember(t.close, false, "content_index")
			n.appendInt(0)
			n.commit(t.close, t.close)
		}
	case responseCreated:
		n.responseCreated(p, &t)
	case responseDone:
		n.responseDone(p, &t)
	case sessionCreated:
		if n.sessionSent {
			n.replace(t.typ, `"session.updated"`)
		}
		n.sessionSent = true
		n.fixSession(p, &t, true)
	case sessionUpdated:
		n.fixSession(p, &t, false)
	}
	n.emit(p, out)
}

// emit writes the message, repaired if there are edits.
func (n *Normalizer) emit(p []byte, out *frames.Output) {
	if len(n.edits) == 0 {
		if n.sc != nil { // values written for nothing
			bytebufferpool.Put(n.sc)
			n.sc = nil
		}
		out.Text(p)
		return
	}
	// Edits are made in message order; insertions at one place keep the
	// order they were made in.
	e := n.edits
	for i := 1; i < len(e); i++ {
		for j := i; j > 0 && e[j].at < e[j-1].at; j-- {
			e[j], e[j-1] = e[j-1], e[j]
		}
	}
	b := n.sc.B
	start := len(b)
	prev := 0
	for _, ed := range e {
		b = append(b, p[prev:ed.at]...)
		b = append(b, b[ed.vs:ed.ve]...)
		prev = ed.end
	}
	b = append(b, p[prev:]...)
	n.sc.B = b
	out.Text(b[start:])
	bytebufferpool.Put(n.sc)
	n.sc = nil
	n.edits = n.edits[:0]
}

// scratch returns the message's scratch buffer, taking one from the pool
// for the message's first edit.
func (n *Normalizer) scratch() *bytebufferpool.ByteBuffer {
	if n.sc == nil {
		n.sc = bytebufferpool.Get()
		n.sc.B = n.sc.B[:0]
	}
	return n.sc
}

// mark is where the next edit's new bytes start.
func (n *Normalizer) mark() int { return len(n.scratch().B) }

// commitFrom records an edit replacing p[at:end] with what was written to
// the scratch buffer since vs.
func (n *Normalizer) commitFrom(at, end, vs int) {
	n.edits = append(n.edits, edit{at: at, end: end, vs: vs, ve: len(n.sc.B)})
}

// commit records the edit insertMember began, replacing p[at:end].
func (n *Normalizer) commit(at, end int) { n.commitFrom(at, end, n.pendingStart) }

// insertMember starts the new bytes of a member inserted before an object's
// closing brace (or, with first, after its opening brace): the separator
// and the key. The caller writes the value and calls commit.
func (n *Normalizer) insertMember(at int, first bool, key string) {
	b := n.scratch()
	n.pendingStart = len(b.B)
	if !first {
		b.B = append(b.B, ',')
	}
	b.B = append(b.B, '"')
	b.B = append(b.B, key...)
	b.B = append(b.B, '"', ':')
}

func (n *Normalizer) appendInt(v int) {
	n.sc.B = strconv.AppendInt(n.sc.B, int64(v), 10)
}

func (n *Normalizer) appendRaw(v []byte) { n.sc.B = append(n.sc.B, v...) }

func (n *Normalizer) appendString(v string) { n.sc.B = append(n.sc.B, v...) }

// addMember inserts "key":raw into the object shaped sh, at its end.
func (n *Normalizer) addMember(sh shape, key string, raw []byte) {
	n.insertMember(sh.close, sh.empty, key)
	n.appendRaw(raw)
	n.commit(sh.close, sh.close)
}

// replace replaces the value s with lit.
func (n *Normalizer) replace(s span, lit string) {
	vs := n.mark()
	n.appendString(lit)
	n.commitFrom(s.start, s.end, vs)
}

// contentEvent fills the indexes (and response_id) of an event on a
// response's item, and keeps what later events of the item need.
func (n *Normalizer) contentEvent(p []byte, t *top, sp spec) {
	if sp.ga != "" {
		vs := n.mark()
		n.sc.B = append(n.sc.B, '"')
		n.appendString(sp.ga)
		n.sc.B = append(n.sc.B, '"')
		n.commitFrom(t.typ.start, t.typ.end, vs)
	}
	n.fillResponseID(p, t)
	it := n.resp.lookup(t.itemID.str(p), t.outputIndex, p)
	if !t.outputIndex.ok() {
		n.insertMember(t.close, false, "output_index")
		if it != nil {
			n.appendInt(it.index)
		} else {
			n.appendInt(n.resp.unknownIndex())
		}
		n.commit(t.close, t.close)
	}
	if sp.class == functionCall {
		return
	}
	part := 0
	given, hasIndex := smallInt(p, t.contentIndex)
	switch {
	case hasIndex:
		part = given
		if it != nil && (sp.class == contentPartAdded || given > it.part) {
			it.part = given
		}
	case it != nil && sp.class == contentPartAdded:
		it.part++
		part = it.part
	case it != nil:
		part = max(it.part, 0)
	}
	if !t.contentIndex.ok() {
		n.insertMember(t.close, false, "content_index")
		n.appendInt(part)
		n.commit(t.close, t.close)
	}
	if it != nil && sp.kind != kindNone {
		it.kind = sp.kind
	}
	switch sp.class {
	case contentEvent:
		if it != nil && sp.final != "" && t.final.isString(p) {
			it.final = append(it.final[:0], p[t.final.start:t.final.end]...)
			it.finalKind = sp.kind
		}
	case contentPartAdded, contentPartDone:
		if t.part.ok() && !t.part.is(p, "null") {
			return
		}
		if t.part.ok() { // null
			vs := n.mark()
			n.appendPart(it, sp.class == contentPartDone)
			n.commitFrom(t.part.start, t.part.end, vs)
			return
		}
		n.insertMember(t.close, false, "part")
		n.appendPart(it, sp.class == contentPartDone)
		n.commit(t.close, t.close)
	}
}

// appendPart writes a content part for an event that has none: the part's
// finished transcript or text when its .done came (done only), else an
// empty one of the part's kind.
func (n *Normalizer) appendPart(it *item, done bool) {
	kind := kindAudio
	if it != nil && it.kind != kindNone {
		kind = it.kind
	} else if n.resp.textOnly {
		kind = kindText
	}
	text := []byte(nil)
	if done && it != nil && len(it.final) > 0 {
		kind, text = it.finalKind, it.final
	}
	if kind == kindText {
		n.appendString(`{"type":"text","text":`)
	} else {
		n.appendString(`{"type":"audio","transcript":`)
	}
	if text != nil {
		n.appendRaw(text)
	} else {
		n.appendString(`""`)
	}
	n.sc.B = append(n.sc.B, '}')
	if done && it != nil {
		it.final = keep(it.final)
	}
}

// keep empties a buffer, letting go of it when it has grown large.
func keep(b []byte) []byte {
	if cap(b) > maxKeptFinal {
		return nil
	}
	return b[:0]
}

// fillResponseID fills a missing response_id with the response in progress,
// and makes a response_id never seen before the response in progress (its
// response.created may have been lost to nobody; counting starts afresh).
func (n *Normalizer) fillResponseID(p []byte, t *top) {
	if id := t.responseID.str(p); id != nil {
		if !bytes.Equal(id, n.resp.id) {
			n.resp.reset(id)
		}
		return
	}
	if t.responseID.ok() || len(n.resp.id) == 0 {
		return // present but not a string, or no response to name
	}
	n.insertMember(t.close, false, "response_id")
	n.sc.B = append(n.sc.B, '"')
	n.appendRaw(n.resp.id)
	n.sc.B = append(n.sc.B, '"')
	n.commit(t.close, t.close)
}

// outputItem registers an item of the response (added) or finds it (done),
// fills its output_index, and fixes its role.
func (n *Normalizer) outputItem(p []byte, t *top, sp spec) {
	n.fillResponseID(p, t)
	id, _ := member(p, t.item, "id")
	var it *item
	if sp.class == outputItemAdded {
		it = n.resp.add(id.str(p), t.outputIndex, p)
	} else {
		it = n.resp.lookup(id.str(p), t.outputIndex, p)
	}
	if !t.outputIndex.ok() {
		n.insertMember(t.close, false, "output_index")
		if it != nil {
			n.appendInt(it.index)
		} else {
			n.appendInt(n.resp.unknownIndex())
		}
		n.commit(t.close, t.close)
	}
	n.fixRole(p, t.item)
}

// fixRole makes an item's role "tool" "assistant".
func (n *Normalizer) fixRole(p []byte, itemSpan span) {
	role, ok := member(p, itemSpan, "role")
	if ok && role.is(p, `"tool"`) {
		n.replace(role, `"assistant"`)
	}
}

// fixRoles fixes the roles of the items in an output array.
func (n *Normalizer) fixRoles(p []byte, output span) {
	a, ok := arrayAt(p, output)
	if !ok {
		return
	}
	for {
		v, more := a.next()
		if !more {
			return
		}
		n.fixRole(p, v)
	}
}

// resp holds the members of a response object that repairs look at.
type resp struct {
	id, status, statusDetails, usage, output, modalities span
	shape                                                shape
}

// scanResponse walks a response object once; ok is false when s is not a
// well-formed object.
func scanResponse(p []byte, s span) (resp, bool) {
	r := resp{id: absent, status: absent, statusDetails: absent, usage: absent, output: absent, modalities: absent}
	m, ok := objectAt(p, s)
	if !ok {
		return r, false
	}
	for {
		k, v, more := m.next()
		if !more {
			break
		}
		switch string(k) {
		case "id":
			r.id = v
		case "status":
			r.status = v
		case "status_details":
			r.statusDetails = v
		case "usage":
			r.usage = v
		case "output":
			r.output = v
		case "output_modalities":
			r.modalities = v
		case "modalities": // beta's name
			if !r.modalities.ok() {
				r.modalities = v
			}
		}
	}
	if m.bad {
		return r, false
	}
	r.shape = shape{open: s.start, close: m.close, empty: m.n == 0}
	return r, true
}

// responseCreated starts a response: its id, whether it is text only, and
// the repairs response.done also gets.
func (n *Normalizer) responseCreated(p []byte, t *top) {
	r, ok := scanResponse(p, t.response)
	if !ok {
		n.resp.reset(nil)
		return
	}
	n.resp.reset(r.id.str(p))
	mods := r.modalities
	n.resp.textOnly = mods.ok() && p[mods.start] == '[' && !bytes.Contains(p[mods.start:mods.end], []byte(`"audio"`))
	n.fixResponse(p, &r)
}

// fixResponse repairs a response object's status_details and output roles.
func (n *Normalizer) fixResponse(p []byte, r *resp) {
	if sd := r.statusDetails; sd.isString(p) {
		vs := n.mark()
		appendStatus(n.sc, sd.str(p), r.status.str(p), p[sd.start:sd.end])
		n.commitFrom(sd.start, sd.end, vs)
	}
	n.fixRoles(p, r.output)
}

// responseDone repairs a response.done: a missing response, a missing or
// empty usage, and what fixResponse repairs.
func (n *Normalizer) responseDone(p []byte, t *top) {
	r, ok := scanResponse(p, t.response)
	if !ok {
		if t.response.ok() {
			return // there, but not an object: not ours to guess at
		}
		n.insertMember(t.close, false, "response")
		n.appendString(`{"object":"realtime.response",`)
		if len(n.resp.id) > 0 {
			n.appendString(`"id":"`)
			n.appendRaw(n.resp.id)
			n.appendString(`",`)
		}
		n.appendString(`"output":[],"usage":`)
		n.appendUsage(p, t.usage)
		n.sc.B = append(n.sc.B, '}')
		n.commit(t.close, t.close)
		return
	}
	switch u := r.usage; {
	case !u.ok():
		n.insertMember(r.shape.close, r.shape.empty, "usage")
		n.appendUsage(p, t.usage)
		n.commit(r.shape.close, r.shape.close)
	case u.is(p, "null") || isEmptyObject(p, u):
		vs := n.mark()
		n.appendUsage(p, t.usage)
		n.commitFrom(u.start, u.end, vs)
	}
	n.fixResponse(p, &r)
}

// appendUsage writes the usage for a response.done that has none: the
// event's top-level usage when it is a non-empty object, else zero counts.
func (n *Normalizer) appendUsage(p []byte, topUsage span) {
	if topUsage.ok() && p[topUsage.start] == '{' && !isEmptyObject(p, topUsage) {
		if _, ok := shapeOf(p, topUsage); ok {
			n.appendRaw(p[topUsage.start:topUsage.end])
			return
		}
	}
	n.appendString(zeroUsage)
}

func isEmptyObject(p []byte, s span) bool {
	sh, ok := shapeOf(p, s)
	return ok && sh.empty
}

// Values of RealtimeResponseStatus's enums (openai-node).
func isStatusType(s []byte) bool {
	switch string(s) {
	case "completed", "cancelled", "incomplete", "failed":
		return true
	}
	return false
}

func isStatusReason(s []byte) bool {
	switch string(s) {
	case "turn_detected", "client_cancelled", "max_output_tokens", "content_filter":
		return true
	}
	return false
}

// appendStatus writes the RealtimeResponseStatus object for a string
// status_details s (lit as written, quotes included) of a response with
// status status. A string that is one of the enum's reasons becomes reason;
// one that is a status type becomes type; any other is kept as
// error.message when the response failed (the Error object is free text
// there) and dropped otherwise, where the object has no place for it.
func appendStatus(b *bytebufferpool.ByteBuffer, s, status, lit []byte) {
	b.B = append(b.B, '{')
	sep := false
	typ := status
	if isStatusType(s) {
		typ = s
	}
	if isStatusType(typ) {
		b.B = append(b.B, `"type":"`...)
		b.B = append(b.B, typ...)
		b.B = append(b.B, '"')
		sep = true
	}
	switch {
	case isStatusReason(s):
		if sep {
			b.B = append(b.B, ',')
		}
		b.B = append(b.B, `"reason":`...)
		b.B = append(b.B, lit...)
	case !isStatusType(s) && len(s) > 0 && string(typ) == "failed":
		if sep {
			b.B = append(b.B, ',')
		}
		b.B = append(b.B, `"error":{"message":`...)
		b.B = append(b.B, lit...)
		b.B = append(b.B, '}')
	}
	b.B = append(b.B, '}')
}

// fixSession gives a session.created/updated's session the type GA
// requires. An event without a session gets one: a session.created the
// defaults a synthesised one states (it is the session's first state), a
// session.updated only the type, since the defaults may no longer hold.
func (n *Normalizer) fixSession(p []byte, t *top, created bool) {
	sh, ok := shapeOf(p, t.session)
	if !ok {
		if t.session.ok() {
			return // there, but not an object: not ours to guess at
		}
		raw := []byte(`{"type":"realtime"}`)
		if created {
			var err error
			if raw, err = json.Marshal(n.defaultSession("")); err != nil {
				return // plain strings and slices: cannot fail
			}
		}
		n.insertMember(t.close, false, "session")
		n.appendRaw(raw)
		n.commit(t.close, t.close)
		return
	}
	typ, _ := member(p, t.session, "type")
	if typ.ok() {
		return
	}
	// First, as OpenAI writes it.
	vs := n.mark()
	n.appendString(`"type":"realtime"`)
	if !sh.empty {
		n.sc.B = append(n.sc.B, ',')
	}
	n.commitFrom(sh.open+1, sh.open+1, vs)
}

// lookup finds the response's item with id, registering it (as added does)
// when it is new: an event may be the first to name its item. given is the
// event's output_index, if it has one. nil when id is nil.
func (r *response) lookup(id []byte, given span, p []byte) *item {
	if id == nil {
		return nil
	}
	for i := range r.items[:r.n] {
		if bytes.Equal(r.items[i].id, id) {
			return &r.items[i]
		}
	}
	return r.add(id, given, p)
}

// add registers an item (an output_item.added), or finds it if already
// known. Its output_index is the event's when it has one, else the next.
func (r *response) add(id []byte, given span, p []byte) *item {
	if id == nil {
		return nil
	}
	for i := range r.items[:r.n] {
		if bytes.Equal(r.items[i].id, id) {
			return &r.items[i]
		}
	}
	index, ok := smallInt(p, given)
	if !ok {
		index = r.next
	}
	r.next = max(r.next, index+1)
	if r.n == maxItems {
		return &item{index: index, part: -1} // counted, not remembered
	}
	if r.n == len(r.items) {
		r.items = append(r.items, item{})
	}
	it := &r.items[r.n]
	r.n++
	it.id = append(it.id[:0], id...)
	it.index, it.part, it.kind, it.finalKind = index, -1, kindNone, kindNone
	it.final = keep(it.final)
	return it
}

// unknownIndex is the output_index of an event that names no item: the
// latest item's, or 0.
func (r *response) unknownIndex() int { return max(r.next-1, 0) }

// reset starts counting for the response id.
func (r *response) reset(id []byte) {
	r.id = append(r.id[:0], id...)
	r.textOnly = false
	r.n, r.next = 0, 0
}
