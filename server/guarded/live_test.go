package guarded

import (
	"encoding/base64"
	"fmt"
	"slices"
	"strings"
	"testing"

	"rtgate/server/guardrail"
)

// liveAudio is an output audio delta of ms milliseconds of PCM16 at 24 kHz.
func liveAudio(ms int) string {
	return fmt.Sprintf(`{"type":"session.output_audio.delta","delta":%q}`, base64.StdEncoding.EncodeToString(make([]byte, ms*48)))
}

func liveOutText(delta string, start, end int) string {
	return fmt.Sprintf(`{"type":"session.output_transcript.delta","delta":%q,"start_ms":%d,"end_ms":%d}`, delta, start, end)
}

func liveInText(delta string) string {
	return fmt.Sprintf(`{"type":"session.input_transcript.delta","delta":%q,"start_ms":0,"end_ms":0}`, delta)
}

// liveRun sends events through l's upstream translator and returns what
// the client got so far, once the checks settle.
func liveRun(t *testing.T, l *Live, r *relay, events ...string) []string {
	t.Helper()
	for _, e := range events {
		// Under the relay's lock, as the relay translates under the
		// client's: what is released and what is relayed keep their order.
		r.mu.Lock()
		out, _ := translate(l.FromUpstream(), e)
		r.client = append(r.client, out...)
		r.mu.Unlock()
	}
	waitUntil(t, func() bool {
		l.s.mu.Lock()
		defer l.s.mu.Unlock()
		return !l.st.in.checking && !l.st.out.checking && (len(l.s.input) == 0 || l.st.in.checked == l.st.in.total()) &&
			!slices.ContainsFunc(l.st.queue, func(h *liveHeld) bool { return h.deleg != nil && !h.deleg.done })
	})
	_, got := r.snapshot()
	return got
}

// summary is each event's type, with a transcript's delta.
func summary(t *testing.T, events []string) []string {
	var out []string
	for _, e := range events {
		m := decode(t, e)
		s, _ := m["type"].(string)
		if d, ok := m["delta"].(string); ok && strings.Contains(s, "transcript") {
			s += ":" + d
		}
		if s == "error" {
			s += ":" + dig(m, "error", "type").(string)
		}
		out = append(out, s)
	}
	return out
}

// TestLiveUsersSpeech: the model's output after the user's words waits for
// their check; a blocked turn's output never reaches the client, which
// gets the error, and the model is asked to say the violation message;
// the acknowledgement of that ends the drop and never reaches the client.
func TestLiveUsersSpeech(t *testing.T) {
	for _, tc := range []struct {
		name      string
		said      []string
		want      []string
		instructs bool
	}{
		{"clean turn", []string{"what is the ", "weather"},
			[]string{"session.input_transcript.delta:what is the ", "session.input_transcript.delta:weather",
				"session.output_audio.delta", "session.output_transcript.delta:Sunny."}, false},
		{"banned phrase split across deltas", []string{"my pass", "word is hunter2"},
			[]string{"session.input_transcript.delta:my pass", "session.input_transcript.delta:word is hunter2",
				"error:guardrail_violation"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &relay{}
			l := NewLive(Config{Relay: r, Guardrails: guardrail.Set{filter(t, "g", guardrail.InputTranscription, "password")}})
			var evs []string
			for _, s := range tc.said {
				evs = append(evs, liveInText(s))
			}
			evs = append(evs, liveAudio(100), liveOutText("Sunny.", 0, 100))
			got := summary(t, liveRun(t, l, r, evs...))
			if !slices.Equal(got, tc.want) {
				t.Fatalf("the client got %v, want %v", got, tc.want)
			}
			up, _ := r.snapshot()
			if tc.instructs != (len(up) == 1 && strings.Contains(up[0], "session.instructions.append") &&
				strings.Contains(up[0], guardrail.DefaultViolationMessage)) {
				t.Fatalf("upstream got %v", up)
			}
			if !tc.instructs {
				return
			}
			// More of the blocked answer: dropped. The acknowledgement of
			// the instructions: not the client's, and what follows (the
			// spoken warning) goes on.
			id := decode(t, up[0])["event_id"].(string)
			late, _ := translate(l.FromUpstream(), liveAudio(100))
			ack, _ := translate(l.FromUpstream(), `{"type":"session.instructions.appended","client_event_id":"`+id+`","start_ms":200,"end_ms":200}`)
			warn, _ := translate(l.FromUpstream(), liveAudio(100))
			if len(late) != 0 || len(ack) != 0 || len(warn) != 1 {
				t.Fatalf("after the block: late %d, ack %d, warning %d events, want 0, 0, 1", len(late), len(ack), len(warn))
			}
		})
	}
}

// TestLiveOutputCut: output audio waits for the transcript whose end_ms
// reaches it; the banned words' transcript and audio never reach the
// client, what came before does; the upstream is told.
func TestLiveOutputCut(t *testing.T) {
	r := &relay{}
	l := NewLive(Config{Relay: r, Guardrails: guardrail.Set{filter(t, "g", guardrail.OutputTranscription, "launch code")}})
	// One word's audio and text at a time, each checked before the next
	// comes (a check takes the newest text: together, the whole would be
	// checked at once).
	liveRun(t, l, r, liveAudio(100), liveOutText("Sure, the ", 0, 100))
	liveRun(t, l, r, liveAudio(100), liveOutText("launch ", 100, 200))
	got := summary(t, liveRun(t, l, r, liveAudio(100), liveOutText("code is 0000.", 200, 300), liveAudio(100)))
	want := []string{"session.output_audio.delta", "session.output_transcript.delta:Sure, the ",
		"session.output_audio.delta", "session.output_transcript.delta:launch ", "error:guardrail_violation"}
	if !slices.Equal(got, want) {
		t.Fatalf("the client got %v, want %v", got, want)
	}
	up, _ := r.snapshot()
	if len(up) != 1 || !strings.Contains(up[0], "session.instructions.append") || !strings.Contains(up[0], "Do not repeat") {
		t.Fatalf("upstream got %v", up)
	}
}

// TestLiveOutputCoverage: an audio delta goes once a checked transcript's
// end_ms reaches its end at the session's format, not before: a 16 kHz
// session's 100 ms is 3200 bytes.
func TestLiveOutputCoverage(t *testing.T) {
	r := &relay{}
	l := NewLive(Config{Relay: r, Guardrails: guardrail.Set{filter(t, "g", guardrail.OutputTranscription, "never said")}})
	translate(l.FromClient(), `{"type":"session.start","session":{"model":"m","audio":{"format":{"type":"audio/pcm","rate":16000}}}}`)
	audio := fmt.Sprintf(`{"type":"session.output_audio.delta","delta":%q}`, base64.StdEncoding.EncodeToString(make([]byte, 3200)))
	got := summary(t, liveRun(t, l, r, liveOutText("one ", 1000, 1050), audio))
	if !slices.Equal(got, []string{"session.output_transcript.delta:one "}) {
		t.Fatalf("audio past the checked transcript went: %v", got)
	}
	got = summary(t, liveRun(t, l, r, liveOutText("two", 1050, 1100)))
	if !slices.Contains(got, "session.output_audio.delta") {
		t.Fatalf("audio covered by checked text held: %v", got)
	}
}

// TestLiveDelegation: a delegation is checked with the user's turn that
// led to it; blocked, the client never gets it and the model gets a
// refusal as the delegation's result.
func TestLiveDelegation(t *testing.T) {
	for _, tc := range []struct {
		name, said, target string
		pass               bool
		refusal            string
	}{
		{"passed", "book a table", "client", true, ""},
		{"blocked client delegation", "wire the money to 666", "client", false, `"session.commentary.append"`},
		{"blocked responses delegation", "wire the money to 666", "responses", false, `"session.instructions.append"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &relay{}
			l := NewLive(Config{Relay: r, Guardrails: guardrail.Set{filter(t, "g", guardrail.ToolCall, "wire the money")}})
			deleg := `{"type":"session.delegation.created","offset_ms":10,"delegation":{"id":"del_1","target":"` + tc.target + `","type":"delegation"}}`
			got := summary(t, liveRun(t, l, r, liveInText(tc.said), deleg,
				`{"type":"response.event","delegation_id":"del_1","event":{"type":"response.created"}}`))
			has := slices.Contains(got, "session.delegation.created")
			if has != tc.pass {
				t.Fatalf("the client got %v", got)
			}
			up, _ := r.snapshot()
			if tc.pass {
				if len(up) != 0 {
					t.Fatalf("upstream got %v for a passed delegation", up)
				}
				return
			}
			if slices.Contains(got, "response.event") || !slices.Contains(got, "error:guardrail_violation") {
				t.Fatalf("the client got %v", got)
			}
			if len(up) != 1 || !strings.Contains(up[0], tc.refusal) || tc.target == "client" && !strings.Contains(up[0], `"delegation_id":"del_1"`) {
				t.Fatalf("upstream got %v, want %s", up, tc.refusal)
			}
		})
	}
}
