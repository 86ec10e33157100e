package continuity

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// heard and said are the upstream's Live transcript deltas.
func heard(s string) string {
	return fmt.Sprintf(`{"type":"session.input_transcript.delta","delta":%q,"start_ms":0,"end_ms":10}`, s)
}
func said(s string) string {
	return fmt.Sprintf(`{"type":"session.output_transcript.delta","delta":%q,"start_ms":0,"end_ms":10}`, s)
}

// liveTurns is n turns: the user says "u<i>" (in two deltas), the assistant
// answers "a<i>".
func liveTurns(n int) []string {
	var evs []string
	for i := range n {
		evs = append(evs, heard(fmt.Sprintf("u%d", i)), heard("."), said(fmt.Sprintf("a%d", i)))
	}
	return evs
}

// texts is a snapshot's items as "role:text".
func texts(t *testing.T, items [][]byte) []string {
	t.Helper()
	var out []string
	for _, b := range items {
		var it struct {
			Type    string `json:"type"`
			Role    string `json:"role"`
			Content []struct {
				Type string `json:"type"`
				Text string `json:"text"`
			} `json:"content"`
		}
		if err := json.Unmarshal(b, &it); err != nil || it.Type != "message" || len(it.Content) != 1 {
			t.Fatalf("item %s: not one message with one text part (%v)", b, err)
		}
		want := map[string]string{"user": "input_text", "developer": "input_text", "assistant": "output_text"}[it.Role]
		if it.Content[0].Type != want {
			t.Fatalf("item %s: part %s, want %s", b, it.Content[0].Type, want)
		}
		out = append(out, it.Role+":"+it.Content[0].Text)
	}
	return out
}

func TestLiveKeep(t *testing.T) {
	long := strings.Repeat("x", 300) // LiveTokens(300) = 104
	tests := []struct {
		name    string
		input   string // session.start's input
		evs     []string
		caps    LiveCaps
		maxB    int
		want    []string
		dropped int
	}{
		{
			name: "turns as alternating messages, deltas joined",
			evs:  liveTurns(2),
			want: []string{"user:u0.", "assistant:a0", "user:u1.", "assistant:a1"},
		},
		{
			name:  "the client's input first",
			input: `[{"type":"message","role":"developer","content":[{"type":"input_text","text":"dev"}]},{"role":"user","content":[{"text":"hi"}]}]`,
			evs:   liveTurns(1),
			want:  []string{"developer:dev", "user:hi", "user:u0.", "assistant:a0"},
		},
		{
			name:    "the message cap keeps the most recent",
			evs:     liveTurns(4),
			caps:    LiveCaps{Messages: 3},
			want:    []string{"assistant:a2", "user:u3.", "assistant:a3"},
			dropped: 5,
		},
		{
			name: "the default message cap is 128",
			evs:  liveTurns(70),
			want: func() []string {
				var w []string
				for i := 6; i < 70; i++ {
					w = append(w, fmt.Sprintf("user:u%d.", i), fmt.Sprintf("assistant:a%d", i))
				}
				return w
			}(),
			dropped: 12,
		},
		{
			name:    "the token cap keeps the most recent",
			evs:     []string{heard(long), said(long), heard(long), said("ok")},
			caps:    LiveCaps{Tokens: 2*LiveTokens(300) + LiveTokens(2)},
			want:    []string{"assistant:" + long, "user:" + long, "assistant:ok"},
			dropped: 1,
		},
		{
			name:    "the byte cap drops the oldest",
			evs:     []string{heard(long), said(long), heard("q")},
			maxB:    2*(300+itemOverhead) + 1 + itemOverhead,
			want:    []string{"assistant:" + long, "user:q"},
			dropped: 1,
		},
		{
			name: "one message over the token cap keeps its end",
			evs:  []string{heard("abcdefghijklmnopqrstuvwxyz")},
			caps: LiveCaps{Tokens: LiveTokens(6)},
			want: []string{"user:uvwxyz"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var k Keeper
			lim := Limits{MaxBytes: tc.maxB, Global: NewBudget(1 << 20)}
			var input []json.RawMessage
			if tc.input != "" {
				if err := json.Unmarshal([]byte(tc.input), &input); err != nil {
					t.Fatal(err)
				}
			}
			k.StartLive([]byte(`{"model":"gpt-live-1","instructions":"be brief"}`), input, lim, tc.caps)
			for _, e := range tc.evs {
				typ := []byte(e[len(`{"type":"`) : strings.IndexByte(e[len(`{"type":"`):], '"')+len(`{"type":"`)])
				if !LiveUpstreamWants(typ, []byte(e)) {
					t.Fatalf("%s not wanted", e)
				}
				k.LiveUpstream([]byte(e), lim)
			}
			snap := k.Snapshot()
			if got := texts(t, snap.Items); strings.Join(got, "|") != strings.Join(tc.want, "|") {
				t.Errorf("kept\n%v\nwant\n%v", got, tc.want)
			}
			if snap.Dropped != tc.dropped {
				t.Errorf("dropped %d, want %d", snap.Dropped, tc.dropped)
			}
			if lim.Global.Used() != int64(k.Bytes()) {
				t.Errorf("global budget %d, session keeps %d", lim.Global.Used(), k.Bytes())
			}
			k.Release()
			if lim.Global.Used() != 0 {
				t.Errorf("global budget %d after release", lim.Global.Used())
			}
		})
	}
}

func TestLiveConfigAndResponse(t *testing.T) {
	var k Keeper
	lim := Limits{}
	k.StartLive([]byte(`{"model":"gpt-live-1","instructions":"be brief","delegation":{"type":"client"},"input":[]}`), nil, lim, LiveCaps{})
	k.Client([]byte(`{"type":"session.update","session":{"delegation":{"type":"responses","model":"gpt-5"}}}`), lim, false)
	created := `{"type":"response.event","delegation_id":"del_1","event":{"type":"response.created","response":{"id":"resp_1"}}}`
	if !LiveUpstreamWants([]byte("response.event"), []byte(created)) {
		t.Fatal("response.created not wanted")
	}
	if LiveUpstreamWants([]byte("response.event"), []byte(`{"type":"response.event","event":{"type":"response.output_text.delta"}}`)) {
		t.Fatal("a wrapped delta is wanted")
	}
	if LiveUpstreamWants([]byte("session.output_audio.delta"), []byte(`{"type":"session.output_audio.delta"}`)) {
		t.Fatal("audio is wanted")
	}
	k.LiveUpstream([]byte(created), lim)
	snap := k.Snapshot()
	if want := `{"delegation":{"type":"responses","model":"gpt-5"},"instructions":"be brief","model":"gpt-live-1"}`; string(snap.Config) != want {
		t.Errorf("config %s, want %s (a field replaced whole, input never kept)", snap.Config, want)
	}
	if snap.Response != "resp_1" || snap.Delegation != "del_1" {
		t.Errorf("in flight %q %q", snap.Response, snap.Delegation)
	}
	if again := k.Snapshot(); again.Response != "" {
		t.Errorf("the lost response reported twice")
	}
	k.LiveUpstream([]byte(created), lim)
	k.LiveUpstream([]byte(`{"type":"response.event","event":{"type":"response.completed","response":{"id":"resp_1"}}}`), lim)
	if snap := k.Snapshot(); snap.Response != "" {
		t.Errorf("a completed response in flight: %q", snap.Response)
	}
}

// liveDeltaFrames are a conversation's transcript deltas, one with escapes.
var liveDeltaFrames = [][]byte{
	[]byte(`{"type":"session.input_transcript.delta","event_id":"event_1","delta":" what is","start_ms":0,"end_ms":240}`),
	[]byte(`{"type":"session.input_transcript.delta","event_id":"event_2","delta":" the \"weather\"\n","start_ms":240,"end_ms":480}`),
	[]byte(`{"type":"session.output_transcript.delta","event_id":"event_3","delta":" It is sunny, caf\u00e9 weather.","start_ms":0,"end_ms":900}`),
}

// TestLiveDeltaByHand: the deltas read by hand keep what encoding/json
// would have decoded, and a delta that adds to the message being spoken
// allocates nothing (a turn's first delta makes its message, once).
func TestLiveDeltaByHand(t *testing.T) {
	var k Keeper
	lim := Limits{MaxBytes: 1 << 20, Global: NewBudget(1 << 30)}
	k.StartLive([]byte(`{"model":"gpt-live-1"}`), nil, lim, LiveCaps{})
	for _, f := range liveDeltaFrames {
		k.LiveUpstream(f, lim)
	}
	var input []map[string]any
	for _, it := range k.Snapshot().Items {
		var m map[string]any
		_ = json.Unmarshal(it, &m)
		input = append(input, m)
	}
	got, _ := json.Marshal(input)
	if want := `"text":" what is the \"weather\"\n"`; !strings.Contains(string(got), want) || !strings.Contains(string(got), "café weather") {
		t.Fatalf("kept %s, want the user's deltas joined and unescaped, and the answer", got)
	}
	allocs := testing.AllocsPerRun(2000, func() { k.LiveUpstream(liveDeltaFrames[2], lim) })
	if allocs != 0 {
		t.Fatalf("%v allocations per transcript delta, want 0", allocs)
	}
}

// BenchmarkLiveTranscriptDelta is continuity's work on a GPT-Live transcript
// delta: read by hand, unescaped into a reused buffer, appended to the
// kept message under the keeper's lock (0 allocs/op; decoded with
// encoding/json, it took 7).
func BenchmarkLiveTranscriptDelta(b *testing.B) {
	var k Keeper
	lim := Limits{MaxBytes: 1 << 20, Global: NewBudget(1 << 30)}
	k.StartLive([]byte(`{"model":"gpt-live-1"}`), nil, lim, LiveCaps{})
	b.ReportAllocs()
	for b.Loop() {
		k.LiveUpstream(liveDeltaFrames[1], lim)
	}
}
