package continuity

import (
	"encoding/json"
	"strings"
	"testing"
)

// ev is a side (c: client, u: upstream) and an event.
type ev struct {
	side byte
	json string
}

func play(k *Keeper, lim Limits, evs []ev) {
	for _, e := range evs {
		if e.side == 'c' || e.side == 'q' { // q: a client event queued during a resume
			k.Client([]byte(e.json), lim, e.side == 'q')
		} else {
			k.Upstream([]byte(e.json), lim)
		}
	}
}

func TestReplay(t *testing.T) {
	userText := `{"type":"conversation.item.done","item":{"id":"item_u1","object":"realtime.item","type":"message","role":"user","status":"completed","content":[{"type":"input_text","text":"hello"}]}}`
	assistant := `{"type":"response.done","response":{"id":"resp_1","status":"completed","output":[{"id":"item_a1","type":"message","role":"assistant","status":"completed","content":[{"type":"output_audio","transcript":"Hi there."}]}]}}`
	tests := []struct {
		name     string
		evs      []ev
		config   string // "" for none
		items    []string
		response string
	}{
		{name: "nothing kept", evs: []ev{{'u', `{"type":"response.output_audio.delta","delta":"AAAA"}`}}},
		{
			name: "session.update merged field by field",
			evs: []ev{
				{'c', `{"type":"session.update","session":{"type":"realtime","instructions":"a","audio":{"output":{"voice":"marin"}}}}`},
				{'c', `{"type":"session.update","session":{"instructions":"b","audio":{"input":{"turn_detection":null}}}}`},
			},
			config: `{"audio":{"input":{"turn_detection":null},"output":{"voice":"marin"}},"instructions":"b","type":"realtime"}`,
		},
		{
			name:  "user text and assistant audio as output_text",
			evs:   []ev{{'u', userText}, {'u', `{"type":"response.created","response":{"id":"resp_1"}}`}, {'u', assistant}},
			items: []string{`{"id":"item_u1","type":"message","role":"user","content":[{"text":"hello","type":"input_text"}]}`, `{"id":"item_a1","type":"message","role":"assistant","content":[{"text":"Hi there.","type":"output_text"}]}`},
		},
		{
			name:     "a response in flight is reported, its item not kept",
			evs:      []ev{{'u', userText}, {'u', `{"type":"response.created","response":{"id":"resp_2"}}`}},
			items:    []string{`{"id":"item_u1","type":"message","role":"user","content":[{"text":"hello","type":"input_text"}]}`},
			response: "resp_2",
		},
		{
			name: "user audio by its transcript, in its place",
			evs: []ev{
				{'u', `{"type":"conversation.item.done","item":{"id":"item_v","type":"message","role":"user","content":[{"type":"input_audio","transcript":null}]}}`},
				{'u', userText},
				{'u', `{"type":"conversation.item.input_audio_transcription.completed","item_id":"item_v","transcript":"spoken words"}`},
			},
			items: []string{`{"id":"item_v","type":"message","role":"user","content":[{"text":"spoken words","type":"input_text"}]}`, `{"id":"item_u1","type":"message","role":"user","content":[{"text":"hello","type":"input_text"}]}`},
		},
		{
			name:  "user audio without transcription is left out",
			evs:   []ev{{'u', `{"type":"conversation.item.done","item":{"id":"item_v","type":"message","role":"user","content":[{"type":"input_audio"}]}}`}},
			items: nil,
		},
		{
			name: "function call and output as they were",
			evs: []ev{
				{'u', `{"type":"response.output_item.done","item":{"id":"item_f","type":"function_call","status":"completed","call_id":"call_1","name":"lookup","arguments":"{\"q\":1}"}}`},
				{'u', `{"type":"conversation.item.done","item":{"id":"item_o","type":"function_call_output","call_id":"call_1","output":"42"}}`},
			},
			items: []string{`{"id":"item_f","type":"function_call","call_id":"call_1","name":"lookup","arguments":"{\"q\":1}"}`, `{"id":"item_o","type":"function_call_output","call_id":"call_1","output":"42"}`},
		},
		{
			name:  "deleted",
			evs:   []ev{{'u', userText}, {'u', `{"type":"conversation.item.deleted","item_id":"item_u1"}`}},
			items: nil,
		},
		{
			name:  "truncated by the client: left out",
			evs:   []ev{{'u', userText}, {'u', assistant}, {'c', `{"type":"conversation.item.truncate","item_id":"item_a1","content_index":0,"audio_end_ms":300}`}},
			items: []string{`{"id":"item_u1","type":"message","role":"user","content":[{"text":"hello","type":"input_text"}]}`},
		},
		{
			name:  "truncated by the upstream, then confirmed again: still left out",
			evs:   []ev{{'u', assistant}, {'u', `{"type":"conversation.item.truncated","item_id":"item_a1","audio_end_ms":300}`}, {'u', assistant}},
			items: nil,
		},
		{
			name: "the fuller confirmation wins, response.done does not undo it",
			evs: []ev{
				{'u', `{"type":"response.output_item.done","item":{"id":"item_a1","type":"message","role":"assistant","content":[{"type":"output_audio","transcript":"Hi there, friend."}]}}`},
				{'u', assistant},
			},
			items: []string{`{"id":"item_a1","type":"message","role":"assistant","content":[{"text":"Hi there, friend.","type":"output_text"}]}`},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var k Keeper
			play(&k, Limits{}, tt.evs)
			snap := k.Snapshot()
			if string(snap.Config) != tt.config {
				t.Errorf("config %s, want %s", snap.Config, tt.config)
			}
			var got []string
			for _, it := range snap.Items {
				got = append(got, string(it))
			}
			if strings.Join(got, "\n") != strings.Join(tt.items, "\n") {
				t.Errorf("items\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(tt.items, "\n"))
			}
			if snap.Response != tt.response {
				t.Errorf("response %q, want %q", snap.Response, tt.response)
			}
			for i, it := range snap.Items {
				var m map[string]any
				if json.Unmarshal(it, &m) != nil || m["id"] != snap.IDs[i] {
					t.Errorf("item %d %s does not carry id %s", i, it, snap.IDs[i])
				}
			}
		})
	}
}

// An idle session keeps no State at all.
func TestIdleKeepsNothing(t *testing.T) {
	var k Keeper
	k.Upstream([]byte(`{"type":"response.output_audio.delta","delta":"AAAA"}`), Limits{})
	k.Client([]byte(`{"type":"conversation.item.truncate","item_id":"x"}`), Limits{}, false)
	if k.st != nil {
		t.Fatal("a State was made for nothing worth keeping")
	}
}

// The caps drop the oldest items first; the global budget is given back.
func TestCaps(t *testing.T) {
	item := func(i int) string {
		return `{"type":"conversation.item.done","item":{"id":"item_` + string(rune('a'+i)) + `","type":"message","role":"user","content":[{"type":"input_text","text":"` + strings.Repeat("x", 200) + `"}]}}`
	}
	tests := []struct {
		name      string
		lim       Limits
		wantFirst string
		wantN     int
	}{
		{"per session", Limits{MaxBytes: 2000}, "item_f", 5},
		{"global", Limits{Global: NewBudget(1100)}, "item_h", 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var k Keeper
			for i := range 10 {
				k.Upstream([]byte(item(i)), tt.lim)
			}
			snap := k.Snapshot()
			if len(snap.IDs) != tt.wantN || snap.IDs[0] != tt.wantFirst || snap.Dropped != 10-tt.wantN {
				t.Errorf("kept %v (dropped %d), want %d from %s", snap.IDs, snap.Dropped, tt.wantN, tt.wantFirst)
			}
			if max := tt.lim.MaxBytes; max > 0 && k.Bytes() > max {
				t.Errorf("keeps %d bytes over the cap %d", k.Bytes(), max)
			}
			if g := tt.lim.Global; g != nil {
				if g.Used() != int64(k.Bytes()) {
					t.Errorf("global budget %d, session %d", g.Used(), k.Bytes())
				}
				k.Release()
				if g.Used() != 0 {
					t.Errorf("global budget %d after release", g.Used())
				}
			}
		})
	}
}

func TestQuiet(t *testing.T) {
	tests := []struct {
		evs  []ev
		want bool
	}{
		{nil, true},
		{[]ev{{'u', `{"type":"response.created","response":{"id":"r"}}`}}, false},
		{[]ev{{'u', `{"type":"response.created","response":{"id":"r"}}`}, {'u', `{"type":"response.done","response":{"id":"r","output":[]}}`}}, true},
		{[]ev{{'u', `{"type":"input_audio_buffer.speech_started"}`}}, false},
		// Server VAD answers speech_stopped with a response: busy until it starts.
		{[]ev{{'u', `{"type":"input_audio_buffer.speech_started"}`}, {'u', `{"type":"input_audio_buffer.speech_stopped"}`}}, false},
		{[]ev{{'u', `{"type":"input_audio_buffer.speech_started"}`}, {'u', `{"type":"input_audio_buffer.speech_stopped"}`},
			{'u', `{"type":"response.created","response":{"id":"r"}}`}, {'u', `{"type":"response.done","response":{"id":"r","output":[]}}`}}, true},
		// A response asked for: busy until it starts and ends, or is refused.
		{[]ev{{'c', `{"type":"response.create"}`}}, false},
		{[]ev{{'c', `{"type":"response.create"}`}, {'u', `{"type":"response.created","response":{"id":"r"}}`}}, false},
		{[]ev{{'c', `{"type":"response.create"}`}, {'u', `{"type":"response.created","response":{"id":"r"}}`},
			{'u', `{"type":"response.done","response":{"id":"r","output":[]}}`}}, true},
		{[]ev{{'c', `{"type":"response.create"}`}, {'u', `{"type":"error","error":{"code":"conversation_already_has_active_response"}}`}}, true},
		{[]ev{{'c', `{"type":"response.create"}`}, {'u', `{"type":"error","error":{"code":"session_expired"}}`}}, false},
	}
	for i, tt := range tests {
		var k Keeper
		play(&k, Limits{}, tt.evs)
		if got := k.Quiet(); got != tt.want {
			t.Errorf("case %d: quiet %v, want %v", i, got, tt.want)
		}
	}
}

// A response.create no response.created or error answered is asked again
// of the fresh upstream (Snapshot.Asked), and stays asked until answered
// there; one queued during the resume goes with the queue, not the replay.
func TestAsked(t *testing.T) {
	const ask = `{"type":"response.create","response":{"instructions":"short"}}`
	const askID = `{"type":"response.create","event_id":"evt_ask"}`
	tests := []struct {
		name  string
		evs   []ev
		asked string // Snapshot.Asked
		quiet bool   // after the Snapshot
	}{
		{"answered (its response is lost with the upstream)", []ev{{'c', ask}, {'u', `{"type":"response.created","response":{"id":"r"}}`}}, "", true},
		{"not answered yet", []ev{{'c', ask}}, ask, false},
		{"refused", []ev{{'c', ask}, {'u', `{"type":"error","error":{"code":"x"}}`}}, "", true},
		{"another request's error", []ev{{'c', askID}, {'u', `{"type":"error","error":{"code":"x","event_id":"evt_commit"}}`}}, askID, false},
		{"its own error", []ev{{'c', askID}, {'u', `{"type":"error","error":{"code":"x","event_id":"evt_ask"}}`}}, "", true},
		// A forced rollover's response.cancel that reached the upstream after
		// its response ended: the error answers the gateway's cancel, not the
		// client's id-less request sent meanwhile (which the rollover would
		// otherwise leave unasked on the abandoned upstream).
		{"the gateway's own event's error", []ev{{'c', ask}, {'u', `{"type":"error","error":{"type":"invalid_request_error","code":"response_cancel_not_active","event_id":"event_gw_own_1"}}`}}, ask, false},
		{"queued", []ev{{'q', ask}}, "", true},
		{"the unanswered one first, the queued one with the queue", []ev{{'c', ask}, {'q', `{"type":"response.create"}`}}, ask, false},
		{"server VAD's wait ends: its audio is lost", []ev{{'u', `{"type":"input_audio_buffer.speech_stopped"}`}}, "", true},
		{"too long to ask again", []ev{{'c', `{"type":"response.create","x":"` + strings.Repeat("a", MaxAsked) + `"}`}}, "", true},
	}
	for _, tt := range tests {
		var k Keeper
		play(&k, Limits{}, tt.evs)
		snap := k.Snapshot()
		if string(snap.Asked) != tt.asked {
			t.Errorf("%s: asked %.80s, want %.80s", tt.name, snap.Asked, tt.asked)
		}
		if k.Quiet() != tt.quiet {
			t.Errorf("%s: quiet %v after the snapshot, want %v", tt.name, k.Quiet(), tt.quiet)
		}
	}
}

func TestWantsAndExpired(t *testing.T) {
	for typ, want := range map[string]bool{"session.update": true, "input_audio_buffer.append": false, "conversation.item.truncate": true, "response.create": true} {
		if ClientWants([]byte(typ)) != want {
			t.Errorf("ClientWants(%s) != %v", typ, want)
		}
	}
	for typ, want := range map[string]bool{"response.output_audio.delta": false, "response.done": true, "conversation.item.done": true, "session.created": false, "error": true} {
		if UpstreamWants([]byte(typ)) != want {
			t.Errorf("UpstreamWants(%s) != %v", typ, want)
		}
	}
	if !IsSessionExpired([]byte(`{"type":"error","error":{"type":"invalid_request_error","code":"session_expired"}}`)) ||
		IsSessionExpired([]byte(`{"type":"error","error":{"code":"invalid_value"}}`)) ||
		IsSessionExpired([]byte(`{"type":"response.done","x":"session_expired"}`)) {
		t.Error("IsSessionExpired")
	}
	if n := testing.AllocsPerRun(100, func() {
		_ = IsSessionExpired([]byte(`{"type":"response.output_audio.delta","delta":"AAAA"}`))
	}); n != 0 {
		t.Errorf("IsSessionExpired allocates %v times on a delta", n)
	}
}

// TestDropsKeepTheTarget: an item updated at the cap (a late transcript,
// a fuller confirmation) may need older items dropped first; the update
// must still land on that item, and a change that cannot fit however much
// is dropped must drop nothing.
func TestDropsKeepTheTarget(t *testing.T) {
	text := func(id, role, kind string, n int) string {
		return `{"type":"conversation.item.done","item":{"id":"` + id + `","type":"message","role":"` + role +
			`","content":[{"type":"` + kind + `","text":"` + strings.Repeat("x", n) + `"}]}}`
	}
	heard := `{"type":"conversation.item.done","item":{"id":"item_heard","type":"message","role":"user","content":[{"type":"input_audio","transcript":null}]}}`
	transcript := `{"type":"conversation.item.input_audio_transcription.completed","item_id":"item_heard","transcript":"` + strings.Repeat("y", 300) + `"}`
	tests := []struct {
		name     string
		evs      []ev
		wantIDs  string
		wantText map[string]string // id -> a text its replayed body must hold
	}{
		{"transcript after the answer", []ev{
			{'u', text("item_old", "user", "input_text", 300)},
			{'u', heard},
			{'u', text("item_answer", "assistant", "output_text", 20)},
			{'u', transcript}, // needs item_old's room
		}, "item_heard item_answer", map[string]string{"item_heard": "yyy", "item_answer": "xxx"}},
		{"transcript of the last item", []ev{
			{'u', text("item_old", "user", "input_text", 300)},
			{'u', heard},
			{'u', transcript}, // the old index would be past the end
		}, "item_heard", map[string]string{"item_heard": "yyy"}},
		{"too large to fit at all", []ev{
			{'u', text("item_old", "user", "input_text", 100)},
			{'u', heard},
			{'u', `{"type":"conversation.item.input_audio_transcription.completed","item_id":"item_heard","transcript":"` + strings.Repeat("z", 900) + `"}`},
		}, "item_old", map[string]string{"item_old": "xxx"}}, // item_heard still awaits a transcript that fits
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var k Keeper
			lim := Limits{MaxBytes: 800, Global: NewBudget(1 << 20)}
			play(&k, lim, tt.evs)
			snap := k.Snapshot()
			if got := strings.Join(snap.IDs, " "); got != tt.wantIDs {
				t.Fatalf("kept %q, want %q", got, tt.wantIDs)
			}
			for i, id := range snap.IDs {
				want, ok := tt.wantText[id]
				if ok && !strings.Contains(string(snap.Items[i]), want) {
					t.Errorf("%s replays as %s, want it to hold %q", id, snap.Items[i], want)
				}
				if !strings.Contains(string(snap.Items[i]), `"id":"`+id+`"`) {
					t.Errorf("item %d replays as %s, not as %s", i, snap.Items[i], id)
				}
			}
			if k.Bytes() > lim.MaxBytes || lim.Global.Used() != int64(k.Bytes()) {
				t.Errorf("keeps %d bytes (cap %d), the global budget counts %d", k.Bytes(), lim.MaxBytes, lim.Global.Used())
			}
		})
	}
}

// TestInsertedItemsKeepTheirPlace: an item the client inserted with
// previous_item_id is replayed where the upstream put it (the upstream
// says where in conversation.item.done: null at the start), not last.
func TestInsertedItemsKeepTheirPlace(t *testing.T) {
	done := func(id, prev string) string {
		p := ""
		if prev != "" {
			p = `,"previous_item_id":` + prev
		}
		return `{"type":"conversation.item.done"` + p + `,"item":{"id":"` + id +
			`","type":"message","role":"user","content":[{"type":"input_text","text":"t"}]}}`
	}
	tests := []struct {
		name string
		evs  []ev
		want string
	}{
		{"in order", []ev{{'u', done("item_a", "")}, {'u', done("item_b", `"item_a"`)}}, "item_a item_b"},
		{"at the start", []ev{{'u', done("item_a", "")}, {'u', done("item_b", `"item_a"`)}, {'u', done("item_ctx", "null")}},
			"item_ctx item_a item_b"},
		{"in the middle", []ev{{'u', done("item_a", "")}, {'u', done("item_b", `"item_a"`)}, {'u', done("item_mid", `"item_a"`)}},
			"item_a item_mid item_b"},
		{"after an item not kept", []ev{{'u', done("item_a", "")}, {'u', done("item_b", `"item_gone"`)}}, "item_a item_b"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var k Keeper
			play(&k, Limits{}, tt.evs)
			if got := strings.Join(k.Snapshot().IDs, " "); got != tt.want {
				t.Errorf("replays %q, want %q", got, tt.want)
			}
		})
	}
}

// TestOverlappingResponses: an out-of-band response (conversation "none")
// may run beside the conversation's; the end of one leaves the other in
// progress: not a quiet moment, and lost with the upstream (it ends for
// the client as failed).
func TestOverlappingResponses(t *testing.T) {
	created := func(id string) ev { return ev{'u', `{"type":"response.created","response":{"id":"` + id + `"}}`} }
	done := func(id string) ev {
		return ev{'u', `{"type":"response.done","response":{"id":"` + id + `","output":[]}}`}
	}
	var k Keeper
	play(&k, Limits{}, []ev{created("resp_main"), created("resp_oob"), done("resp_oob")})
	if k.Quiet() {
		t.Fatal("quiet while resp_main is in progress")
	}
	snap := k.Snapshot()
	if strings.Join(snap.Responses, " ") != "resp_main" || snap.Response != "resp_main" {
		t.Errorf("lost responses %v (newest %q), want resp_main", snap.Responses, snap.Response)
	}
	play(&k, Limits{}, []ev{created("resp_a"), created("resp_b")})
	if snap := k.Snapshot(); strings.Join(snap.Responses, " ") != "resp_a resp_b" || snap.Response != "resp_b" {
		t.Errorf("lost responses %v (newest %q), want resp_a resp_b", snap.Responses, snap.Response)
	}
	if !k.Quiet() {
		t.Error("not quiet after the snapshot let go of the lost responses")
	}
}
