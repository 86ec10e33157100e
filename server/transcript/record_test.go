package transcript

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"rtgate/server/eventtype"
)

// t0 is the test clock's first reading.
var t0 = time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)

// clock returns a clock that moves one second per reading, safe for
// concurrent use (both read paths read it).
func clock() func() time.Time {
	var n atomic.Int64
	return func() time.Time { return t0.Add(time.Duration(n.Add(1)-1) * time.Second) }
}

// side says which read path an event goes through.
type side int

const (
	up  side = iota // upstream, Realtime
	cl              // client, Realtime
	lup             // upstream, GPT-Live
	lcl             // client, GPT-Live
)

// step is one event of a session as the relay would pass it.
type step struct {
	side side
	ev   string
}

// newRecorder is a Recorder with the test clock.
func newRecorder(t testing.TB, maxBytes int, rules ...Rule) *Recorder {
	t.Helper()
	r, err := New(maxBytes, rules, clock())
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// feed passes the steps through the relay's filter and, wanted, to the
// Recorder, as the relay does; an event the Recorder cannot read fails the
// test.
func feed(t testing.TB, r *Recorder, steps ...step) {
	t.Helper()
	for _, s := range steps {
		if err := pass(r, s); err != nil {
			t.Fatal(err)
		}
	}
}

// pass is feed's work for one step, safe on any goroutine.
func pass(r *Recorder, s step) error {
	p := []byte(s.ev)
	typ, ok := eventtype.Of(p)
	if !ok {
		return fmt.Errorf("no type in %s", s.ev)
	}
	var wanted bool
	var read func([]byte) error
	switch s.side {
	case up:
		wanted, read = WantsUpstream(typ), r.Upstream
	case cl:
		wanted, read = WantsClient(typ), r.Client
	case lup:
		wanted, read = LiveWantsUpstream(typ, p[:min(len(p), 256)]), r.LiveUpstream
	case lcl:
		wanted, read = LiveWantsClient(typ), r.LiveClient
	}
	if !wanted {
		return nil // as the relay: passed on, never parsed
	}
	if err := read(p); err != nil {
		return fmt.Errorf("%s: %w", s.ev, err)
	}
	return nil
}

// line is an entry in one line, for comparing records.
func line(e Entry) string {
	s := string(e.Kind)
	if e.Role != "" {
		s += " " + e.Role
	}
	if e.ItemID != "" {
		s += " " + e.ItemID
	}
	switch e.Kind {
	case KindToolCall:
		s += fmt.Sprintf(" %s %s(%s)", e.CallID, e.Name, e.Arguments)
	case KindToolOutput:
		s += fmt.Sprintf(" %s=%s", e.CallID, e.Output)
	case KindDelegation:
		s += fmt.Sprintf(" %s->%s", e.DelegationID, e.Target)
	case KindInterruption:
		s += " " + e.ResponseID
	default:
		if e.Name != "" {
			s += " (" + e.Name + ")"
		}
		s += ": " + e.Text
	}
	if e.DelegationID != "" && e.Kind != KindDelegation {
		s += " del=" + e.DelegationID
	}
	if e.Partial {
		s += " [partial]"
	}
	if e.Truncated {
		s += fmt.Sprintf(" [truncated@%d]", *e.AudioEndMs)
	}
	if e.Status != "" {
		s += " [" + strings.TrimSpace(e.Status+" "+e.Reason) + "]"
	}
	return s
}

func lines(rec Record) []string {
	out := []string{}
	for _, e := range rec.Entries {
		out = append(out, line(e))
	}
	return out
}

// q quotes s as a JSON string.
func q(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// Realtime events (GA names unless beta says otherwise).
func committed(item string) step {
	return step{up, `{"type":"input_audio_buffer.committed","event_id":"e","previous_item_id":null,"item_id":` + q(item) + `}`}
}
func heardDelta(item, d string) step {
	return step{up, `{"type":"conversation.item.input_audio_transcription.delta","event_id":"e","item_id":` + q(item) + `,"content_index":0,"delta":` + q(d) + `}`}
}
func heard(item, text string) step {
	return step{up, `{"type":"conversation.item.input_audio_transcription.completed","event_id":"e","item_id":` + q(item) +
		`,"content_index":0,"transcript":` + q(text) + `,"usage":{"type":"duration","seconds":1}}`}
}
func saidDelta(resp, item, d string) step {
	return step{up, `{"type":"response.output_audio_transcript.delta","event_id":"e","response_id":` + q(resp) + `,"item_id":` + q(item) +
		`,"output_index":0,"content_index":0,"delta":` + q(d) + `}`}
}
func said(resp, item, text string) step {
	return step{up, `{"type":"response.output_audio_transcript.done","event_id":"e","response_id":` + q(resp) + `,"item_id":` + q(item) +
		`,"output_index":0,"content_index":0,"transcript":` + q(text) + `}`}
}
func audioDelta(resp, item string) step {
	return step{up, `{"type":"response.output_audio.delta","event_id":"e","response_id":` + q(resp) + `,"item_id":` + q(item) +
		`,"output_index":0,"content_index":0,"delta":"AAAA"}`}
}
func responseDone(resp, status, reason string) step {
	details := "null"
	if reason != "" {
		details = `{"type":` + q(status) + `,"reason":` + q(reason) + `}`
	}
	return step{up, `{"type":"response.done","event_id":"e","response":{"object":"realtime.response","id":` + q(resp) +
		`,"status":` + q(status) + `,"status_details":` + details + `,"output":[],"usage":{"total_tokens":1}}}`}
}
func userText(item, role, text string) step {
	return step{cl, `{"type":"conversation.item.create","item":{"id":` + q(item) + `,"type":"message","role":` + q(role) +
		`,"content":[{"type":"input_text","text":` + q(text) + `}]}}`}
}
func toolOutput(call, out string) step {
	return step{cl, `{"type":"conversation.item.create","item":{"type":"function_call_output","call_id":` + q(call) + `,"output":` + q(out) + `}}`}
}
func truncate(item string, ms int) step {
	return step{cl, fmt.Sprintf(`{"type":"conversation.item.truncate","item_id":%s,"content_index":0,"audio_end_ms":%d}`, q(item), ms)}
}

func TestRecordOrderAcrossSides(t *testing.T) {
	r := newRecorder(t, 0)
	feed(t, r,
		userText("item_t", "system", "be brief"),
		committed("item_u1"),
		saidDelta("resp_1", "item_a1", "It is "), // the answer begins before the user's transcript completes
		heard("item_u1", "what time is it"),
		said("resp_1", "item_a1", "It is noon."),
		responseDone("resp_1", "completed", ""),
		userText("item_u2", "user", "thanks"),
		toolOutput("call_9", `{"ok":true}`),
	)
	rec := r.Close()
	want := []string{
		"text system item_t: be brief",
		"transcript user item_u1: what time is it",
		"transcript assistant item_a1: It is noon.",
		"text user item_u2: thanks",
		"tool_output tool call_9={\"ok\":true}",
	}
	if got := lines(rec); !slices.Equal(got, want) {
		t.Fatalf("record:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	// At: when each entry began, in the record's order.
	for i := 1; i < len(rec.Entries); i++ {
		if rec.Entries[i].At.Before(rec.Entries[i-1].At) {
			t.Fatalf("entry %d at %v, before entry %d at %v", i, rec.Entries[i].At, i-1, rec.Entries[i-1].At)
		}
	}
	if got := rec.Entries[1].At; !got.Equal(t0.Add(1 * time.Second)) {
		t.Fatalf("the user's transcript at %v, want the second reading (when its audio was committed)", got)
	}
}

func TestByteCap(t *testing.T) {
	long := strings.Repeat("x", 200)
	tests := []struct {
		name     string
		max      int
		steps    []step
		want     []string
		cut      int
		cutBytes int
	}{
		{
			name:  "later entries cut whole and counted",
			max:   200,
			steps: []step{userText("u1", "user", "one"), userText("u2", "user", long), userText("u3", "user", "three")},
			// u2 does not fit; u3 would, but the record stops where the cap was reached
			want:     []string{"text user u1: one"},
			cut:      2,
			cutBytes: (entryOverhead + len("text") + len("user") + 2 + 200) + (entryOverhead + len("text") + len("user") + 2 + 5),
		},
		{
			name: "an item's second completing event is not cut twice",
			max:  150,
			steps: []step{
				userText("u1", "user", "hi"),
				said("r1", "a1", long),
				{up, `{"type":"response.output_item.done","response_id":"r1","item":{"id":"a1","type":"message","role":"assistant","content":[{"type":"output_audio","transcript":` + q(long) + `}]}}`},
			},
			want:     []string{"text user u1: hi"},
			cut:      1,
			cutBytes: entryOverhead + len("transcript") + len("assistant") + 2 + 2 + 200,
		},
		{
			name:     "deltas past the cap clip an open answer: partial, the rest counted",
			max:      entryOverhead + 100,
			steps:    []step{saidDelta("r1", "a1", "0123456789"), saidDelta("r1", "a1", long), saidDelta("r1", "a1", "z")},
			want:     []string{"transcript assistant a1: 0123456789 [partial]"},
			cutBytes: 201,
		},
		{
			name:     "an open answer whose done does not fit is cut whole",
			max:      entryOverhead + 100,
			steps:    []step{saidDelta("r1", "a1", "0123456789"), said("r1", "a1", long)},
			want:     []string{},
			cut:      1,
			cutBytes: entryOverhead + len("transcript") + len("assistant") + 2 + 2 + 200,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newRecorder(t, tt.max)
			feed(t, r, tt.steps...)
			rec := r.Close()
			if got := lines(rec); !slices.Equal(got, tt.want) {
				t.Fatalf("record %q, want %q", got, tt.want)
			}
			if rec.Cut != tt.cut || rec.CutBytes != tt.cutBytes {
				t.Fatalf("cut %d (%d bytes), want %d (%d bytes)", rec.Cut, rec.CutBytes, tt.cut, tt.cutBytes)
			}
			if rec.Bytes > rec.MaxBytes || rec.MaxBytes != tt.max {
				t.Fatalf("bytes %d of %d, cap %d", rec.Bytes, rec.MaxBytes, tt.max)
			}
		})
	}
}

// TestByteCapHoldsWhateverTheInput floods a small record with every kind of
// event: what it holds stays within the cap, and what it left out is counted.
func TestByteCapHoldsWhateverTheInput(t *testing.T) {
	const max = 4 << 10
	r := newRecorder(t, max)
	for i := range 3000 {
		item, resp := fmt.Sprintf("item_%d", i), fmt.Sprintf("resp_%d", i)
		feed(t, r,
			committed("u"+item),
			heardDelta("u"+item, "some words "),
			saidDelta(resp, item, strings.Repeat("w", 50)),
			truncate(item, i),
			responseDone(resp, "cancelled", "turn_detected"),
			step{lup, `{"type":"session.output_transcript.delta","delta":"live words","start_ms":0,"end_ms":1}`},
			step{lup, `{"type":"session.input_transcript.delta","delta":"live words","start_ms":0,"end_ms":1}`},
		)
		if i%500 == 0 {
			if rec := r.Snapshot(); rec.Bytes > max {
				t.Fatalf("after %d turns: %d bytes, cap %d", i, rec.Bytes, max)
			}
		}
	}
	rec := r.Close()
	size := 0
	for _, e := range rec.Entries {
		size += e.size()
	}
	if rec.Bytes > max || size > max {
		t.Fatalf("record holds %d bytes (counted %d), cap %d", size, rec.Bytes, max)
	}
	if rec.Cut < 3000 || rec.CutBytes == 0 {
		t.Fatalf("cut %d entries (%d bytes): the flood was not counted", rec.Cut, rec.CutBytes)
	}
	if len(r.opens) != 0 || len(r.byItem) > max/entryOverhead {
		t.Fatalf("%d entries open, %d items indexed after Close", len(r.opens), len(r.byItem))
	}
}

// TestOpenEntriesBounded: with input transcription off, each committed
// audio opens an entry that no transcript fills. They neither show nor
// fill the record.
func TestOpenEntriesBounded(t *testing.T) {
	r := newRecorder(t, 2000)
	for i := range 200 {
		feed(t, r, committed(fmt.Sprintf("item_%d", i)))
	}
	feed(t, r, userText("u", "user", "typed"), heard("item_199", "late but recorded"))
	if len(r.opens) > maxOpen {
		t.Fatalf("%d entries open, at most %d", len(r.opens), maxOpen)
	}
	rec := r.Close()
	want := []string{"transcript user item_199: late but recorded", "text user u: typed"}
	if got := lines(rec); !slices.Equal(got, want) {
		t.Fatalf("record %q, want %q", got, want)
	}
	if rec.Cut != 0 {
		t.Fatalf("cut %d: empty entries filled the record", rec.Cut)
	}
}

func TestSnapshotThenClose(t *testing.T) {
	r := newRecorder(t, 0)
	feed(t, r, saidDelta("r1", "a1", "Hel"), saidDelta("r1", "a1", "lo"))
	snap := r.Snapshot()
	if got, want := lines(snap), []string{"transcript assistant a1: Hello [partial]"}; !slices.Equal(got, want) {
		t.Fatalf("snapshot %q, want %q", got, want)
	}
	feed(t, r, said("r1", "a1", "Hello there."))
	rec := r.Close()
	if got, want := lines(rec), []string{"transcript assistant a1: Hello there."}; !slices.Equal(got, want) {
		t.Fatalf("record %q, want %q", got, want)
	}
	if got := lines(snap); got[0] != "transcript assistant a1: Hello [partial]" {
		t.Fatalf("the snapshot changed after it was taken: %q", got)
	}
	feed(t, r, userText("u", "user", "after the end"))
	if again := r.Close(); !slices.Equal(lines(again), lines(rec)) {
		t.Fatalf("events after Close changed the record: %q", lines(again))
	}
}

// TestDiscard: a discarded record throws away what it held, keeps nothing
// after, and says it is not kept.
func TestDiscard(t *testing.T) {
	r := newRecorder(t, 0)
	feed(t, r, saidDelta("r1", "a1", "Hel"), said("r1", "a1", "Hello."))
	if !r.Kept() || len(r.Snapshot().Entries) != 1 {
		t.Fatalf("before: kept %v, %q", r.Kept(), lines(r.Snapshot()))
	}
	r.Discard()
	feed(t, r, userText("u", "user", "after the discard"), said("r2", "a2", "More."))
	r.Guardrail(time.Now(), Entry{Name: "g", Status: "blocked"})
	if r.Kept() || len(r.Snapshot().Entries) != 0 || len(r.Close().Entries) != 0 {
		t.Fatalf("after: kept %v, %q", r.Kept(), lines(r.Snapshot()))
	}
}

func TestRecordJSON(t *testing.T) {
	r := newRecorder(t, 0)
	feed(t, r,
		said("resp_1", "item_1", "Hi."),
		truncate("item_1", 0),
		responseDone("resp_1", "cancelled", "turn_detected"),
		step{up, `{"type":"response.function_call_arguments.done","response_id":"resp_2","item_id":"item_2","call_id":"call_1","name":"lookup","arguments":"{}"}`},
	)
	b, err := json.Marshal(r.Close())
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Entries []map[string]any `json:"entries"`
		Bytes   int              `json:"bytes"`
	}
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	keys := func(m map[string]any) []string {
		var ks []string
		for k := range m {
			ks = append(ks, k)
		}
		slices.Sort(ks)
		return ks
	}
	want := [][]string{
		{"at", "audio_end_ms", "item_id", "kind", "response_id", "role", "text", "truncated"},
		{"at", "kind", "reason", "response_id", "status"},
		{"arguments", "at", "call_id", "item_id", "kind", "name", "response_id", "role"},
	}
	if len(got.Entries) != len(want) {
		t.Fatalf("%d entries in %s", len(got.Entries), b)
	}
	for i, e := range got.Entries {
		if !slices.Equal(keys(e), want[i]) {
			t.Fatalf("entry %d has keys %q, want %q (%s)", i, keys(e), want[i], b)
		}
	}
	if got.Entries[0]["audio_end_ms"] != 0.0 || got.Entries[0]["at"] != "2026-12-01T10:00:00Z" || got.Bytes == 0 {
		t.Fatalf("record JSON %s", b)
	}
}

// TestConcurrentSides reads client and upstream events on two goroutines
// while a third takes snapshots (go test -race).
func TestConcurrentSides(t *testing.T) {
	r := newRecorder(t, 0)
	const n = 200
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := range n {
			if err := pass(r, userText(fmt.Sprintf("u%d", i), "user", "typed")); err != nil {
				t.Error(err)
				return
			}
		}
	})
	wg.Go(func() {
		for i := range n {
			item := fmt.Sprintf("a%d", i)
			for _, s := range []step{saidDelta("r", item, "x"), said("r", item, "said")} {
				if err := pass(r, s); err != nil {
					t.Error(err)
					return
				}
			}
		}
	})
	wg.Go(func() {
		for range n {
			if rec := r.Snapshot(); len(rec.Entries) > 2*n {
				t.Errorf("snapshot with %d entries", len(rec.Entries))
			}
		}
	})
	wg.Wait()
	rec := r.Close()
	typed, spoken := 0, 0
	for i, e := range rec.Entries {
		switch line(e) {
		case "text user " + e.ItemID + ": typed":
			typed++
		case "transcript assistant " + e.ItemID + ": said":
			spoken++
		default:
			t.Fatalf("entry %q", line(e))
		}
		if i > 0 && e.At.Before(rec.Entries[i-1].At) {
			t.Fatalf("entry %d at %v before its predecessor's %v", i, e.At, rec.Entries[i-1].At)
		}
	}
	if typed != n || spoken != n {
		t.Fatalf("%d typed, %d spoken entries; want %d each", typed, spoken, n)
	}
}
