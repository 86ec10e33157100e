package transcript

import (
	"encoding/json"
	"slices"
	"strings"
	"time"

	"rtgate/internal/jsonscan"
	"rtgate/server/eventtype"
)

// What the Recorder reads of a GPT-Live session (../../shared/live-protocol.md
// and the official SDK's types, openai 7.59.0 resources/live):
//
//	upstream
//	session.input_transcript.delta     the user's speech; deltas of one side join
//	session.output_transcript.delta    into one entry until the other side speaks
//	                                   (Live has no done events: a turn ends when
//	                                   the next begins, as continuity reads it)
//	session.delegation.created         a delegation: its id, target, response id
//	response.event wrapping, from a Responses delegation's backend:
//	  response.output_text.delta/.done    the backend's text
//	  response.function_call_arguments.done,
//	  response.output_item.done           a tool call (function_call item)
//	  response.completed/.incomplete/.failed  ends the backend's open text
//
//	client
//	session.start                      its input: the history the session starts with
//	response.item.create               a message, or a tool call's output
//	                                   (function_call_output) for the backend
//	session.instructions.append,       context the app adds; with a delegation_id,
//	session.thinking.append,           a client delegation's result
//	session.commentary.append
//
// Audio (session.input_audio.append, session.output_audio.delta) and the
// backend's other deltas are never parsed.

// LiveWantsUpstream reports whether the Recorder reads an upstream GPT-Live
// event of type typ; prefix is the payload's first bytes, where a
// response.event's wrapped type is looked for (eventtype.Inner). A
// response.event whose wrapped type is not within the prefix is wanted, to
// be looked at whole. It allocates nothing.
func LiveWantsUpstream(typ, prefix []byte) bool {
	switch string(typ) {
	case "session.input_transcript.delta", "session.output_transcript.delta", "session.delegation.created":
		return true
	case eventtype.LiveResponse:
		inner, ok := eventtype.Inner(prefix, "event")
		if !ok {
			return true
		}
		switch string(inner) {
		case "response.output_text.delta", "response.output_text.done",
			"response.function_call_arguments.done", "response.output_item.done",
			"response.completed", "response.incomplete", "response.failed":
			return true
		}
	}
	return false
}

// LiveWantsClient reports whether the Recorder reads a client GPT-Live event
// of type typ. It allocates nothing.
func LiveWantsClient(typ []byte) bool {
	switch string(typ) {
	case "session.start", "response.item.create",
		"session.instructions.append", "session.thinking.append", "session.commentary.append":
		return true
	}
	return false
}

// LiveUpstream reads an upstream GPT-Live event chosen by LiveWantsUpstream.
// A transcript delta, the most frequent, is read by hand. p is not
// retained.
func (r *Recorder) LiveUpstream(p []byte) error {
	typ, ok := eventtype.Of(p)
	if !ok {
		return ErrNoType
	}
	switch string(typ) {
	case "session.input_transcript.delta":
		return r.liveDelta(typ, p, "user")
	case "session.output_transcript.delta":
		return r.liveDelta(typ, p, "assistant")
	}
	var ev event
	if err := json.Unmarshal(p, &ev); err != nil {
		return errEvent(string(typ), err)
	}
	t := r.now()
	switch string(typ) {
	case "session.delegation.created":
		if d := ev.Delegation; d != nil && d.ID != "" {
			r.whole(t, Entry{Kind: KindDelegation, Role: "assistant", DelegationID: d.ID, Target: d.Target, ResponseID: d.ResponseID})
		}
	case eventtype.LiveResponse:
		if ev.Event != nil {
			r.backend(t, ev.DelegationID, ev.Event)
		}
	}
	return nil
}

// LiveClient reads a client GPT-Live event chosen by LiveWantsClient. p is
// not retained.
func (r *Recorder) LiveClient(p []byte) error {
	typ, ok := eventtype.Of(p)
	if !ok {
		return ErrNoType
	}
	var ev event
	if err := json.Unmarshal(p, &ev); err != nil {
		return errEvent(string(typ), err)
	}
	t := r.now()
	switch string(typ) {
	case "session.start":
		if ev.Session == nil {
			return nil
		}
		for i := range ev.Session.Input {
			if e, ok := inputEntry(&ev.Session.Input[i]); ok {
				r.whole(t, e)
			}
		}
	case "response.item.create":
		if ev.Item != nil {
			if e, ok := inputEntry(ev.Item); ok {
				r.whole(t, e)
			}
		}
	case "session.instructions.append", "session.thinking.append", "session.commentary.append":
		text := contentText(ev.Content)
		if text == "" {
			return nil
		}
		name := strings.TrimSuffix(strings.TrimPrefix(string(typ), "session."), ".append")
		r.whole(t, Entry{Kind: KindContext, Role: "developer", Name: name, DelegationID: ev.DelegationID, Text: text})
	}
	return nil
}

// liveDelta reads a Live transcript delta of role's: it joins role's open
// entry, or ends the other side's and opens role's.
func (r *Recorder) liveDelta(typ, p []byte, role string) error {
	raw, ok := jsonscan.String(p, `"delta"`)
	if !ok {
		var ev event
		if err := json.Unmarshal(p, &ev); err != nil {
			return errEvent(string(typ), err)
		}
		raw = appendEscaped(nil, ev.Delta)
	}
	if len(raw) == 0 {
		return nil
	}
	t := r.now()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil
	}
	x := r.liveCur
	if x == nil || x.Role != role {
		if x != nil {
			r.finishOpen(x) // the other side's turn is whole
		}
		if x = r.open(t, Entry{Kind: KindTranscript, Role: role}); x == nil {
			r.liveCut(role, len(raw))
			return nil
		}
		x.live = true
		r.liveCur = x
	}
	r.growRaw(x, raw)
	return nil
}

// liveCut counts a Live transcript delta the cap left no entry for: the
// first of each turn counts a cut entry.
func (r *Recorder) liveCut(role string, n int) {
	if r.liveCutRole != role {
		r.liveCutRole = role
		r.cut++
		r.cutBytes += entryOverhead
	}
	r.cutBytes += n
}

// backend reads an event of a Responses delegation's backend (in, wrapped
// in response.event with delegation id del).
func (r *Recorder) backend(t time.Time, del string, in *event) {
	switch in.Type {
	case "response.output_text.delta":
		if in.ItemID == "" || in.Delta == "" {
			return
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		x := r.byItem[in.ItemID]
		if x == nil {
			if r.wasCut(in.ItemID) {
				return
			}
			if x = r.open(t, Entry{Kind: KindText, Role: "assistant", ItemID: in.ItemID, DelegationID: del}); x == nil {
				return
			}
			x.backend = true
		}
		r.grow(x, []byte(in.Delta))
	case "response.output_text.done":
		r.whole(t, Entry{Kind: KindText, Role: "assistant", ItemID: in.ItemID, DelegationID: del, Text: in.Text})
	case "response.function_call_arguments.done":
		r.whole(t, Entry{Kind: KindToolCall, Role: "assistant", ItemID: in.ItemID, DelegationID: del,
			CallID: in.CallID, Name: in.Name, Arguments: in.Arguments})
	case "response.output_item.done":
		if in.Item == nil {
			return
		}
		if e, ok := outputEntry(in.Item); ok {
			e.DelegationID = del
			r.whole(t, e)
		}
	case "response.completed", "response.incomplete", "response.failed":
		r.backendDone(del, strings.TrimPrefix(in.Type, "response."))
	}
}

// backendDone ends the open text of delegation del's response (every
// backend's when del is unknown): whole when it completed, else partial
// with the response's status.
func (r *Recorder) backendDone(del, status string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, x := range slices.Clone(r.opens) {
		if !x.backend || (del != "" && x.DelegationID != del) {
			continue
		}
		e, n, keep := r.asFinished(x)
		if !keep {
			r.finishOpen(x)
			continue
		}
		if status == "completed" {
			e.Partial = x.clipped
		} else {
			e.Status = status
		}
		r.finish(x, e, n)
	}
}
