package soak

import (
	"slices"
	"strings"
	"testing"
)

func TestExplains(t *testing.T) {
	closeDetail := "closed during first_audio: websocket: close 1011 (internal server error): mock: closing after 3 frames"
	lostDetail := "closed during first_audio: websocket: close 1011 (internal server error): upstream connection lost"
	tests := []struct {
		name   string
		plan   Plan
		cause  string
		detail string
		want   bool
	}{
		{"normal completed", Plan{Kind: Normal}, CauseCompleted, "", true},
		{"normal timed out", Plan{Kind: Normal}, "timeout_done", "i/o timeout", false},
		{"normal closed by the upstream", Plan{Kind: Normal}, "unexpected_close_1011", lostDetail, false},
		{"normal refused", Plan{Kind: Normal}, "handshake_503", "", false},
		{"drop seen as lost upstream", Plan{Kind: UpstreamDrop, After: 2}, "unexpected_close_1011", lostDetail, true},
		// With session continuity a drop is resumed, and the session may complete on the fresh upstream.
		{"drop resumed, then completed", Plan{Kind: UpstreamDrop, After: 2}, CauseCompleted, "", true},
		{"drop resumed, its response failed", Plan{Kind: UpstreamDrop, After: 2}, "response_failed", "response.done status failed", true},
		{"stall that completed", Plan{Kind: UpstreamStall}, CauseCompleted, "", false},
		{"drop seen as another close", Plan{Kind: UpstreamDrop, After: 3}, "unexpected_close_1011", closeDetail, false},
		{"close passed through", Plan{Kind: UpstreamClose, After: 3}, "unexpected_close_1011", closeDetail, true},
		// The reason names the frame count: a close from another socket
		// (a pool mix-up) is not this session's fault.
		{"close from another socket", Plan{Kind: UpstreamClose, After: 5}, "unexpected_close_1011", closeDetail, false},
		{"close replaced by the gateway", Plan{Kind: UpstreamClose, After: 3}, "unexpected_close_1011", lostDetail, false},
		{"malformed", Plan{Kind: UpstreamMalformed, After: 1}, "error_event_upstream_protocol_error", "server_error: ...", true},
		{"malformed as a plain drop", Plan{Kind: UpstreamMalformed, After: 1}, "unexpected_close_1006", "", false},
		{"stall cut off", Plan{Kind: UpstreamStall}, "unexpected_close_1011", lostDetail + " (after 3.1 MB in 612ms)", true},
		{"stall never cut off", Plan{Kind: UpstreamStall}, causeNotCutOff, "", false},
		{"stall resumed, then its queue full", Plan{Kind: UpstreamStall}, "unexpected_close_1009", "too much data before the upstream connected", true},
		{"401 reported", Plan{Kind: Upstream401}, "error_event_upstream_unavailable",
			"server_error: the upstream refused the connection with HTTP 401", true},
		{"401 reported as another status", Plan{Kind: Upstream401}, "error_event_upstream_unavailable",
			"server_error: the upstream refused the connection with HTTP 429", false},
		{"slow client dropped", Plan{Kind: SlowClient}, "unexpected_close_1006", "unexpected EOF", true},
		{"slow client never dropped", Plan{Kind: SlowClient}, causeNotDropped, "", false},
		{"slow client backlog under the limit", Plan{Kind: SlowClient}, causeUnderLimit, "", true},
		{"garbage refused", Plan{Kind: GarbageRequest}, "http_400", "HTTP/1.1 400 Bad Request", true},
		{"garbage too long", Plan{Kind: GarbageRequest}, "http_431", "", true},
		{"garbage timed out", Plan{Kind: GarbageRequest}, causeClosedNoResponse, "EOF", true},
		{"garbage upgraded", Plan{Kind: GarbageRequest}, "http_101", "", false},
		{"garbage never answered", Plan{Kind: GarbageRequest}, "no_answer", "", false},
		{"partial head closed", Plan{Kind: PartialRequest}, causeClosedNoResponse, "EOF", true},
		{"partial head answered 400", Plan{Kind: PartialRequest}, "http_400", "", false},
		{"unmasked frame", Plan{Kind: UnmaskedFrame}, "unexpected_close_1002", "", true},
		{"unmasked frame relayed", Plan{Kind: UnmaskedFrame}, "timeout", "", false},
		{"reserved bits", Plan{Kind: ReservedBits}, "unexpected_close_1002", "", true},
		{"oversized", Plan{Kind: OversizedMessage}, "unexpected_close_1009", "", true},
		{"oversized as a protocol error", Plan{Kind: OversizedMessage}, "unexpected_close_1002", "", false},
		{"hang-up", Plan{Kind: Hangup}, causeHungUp, "after 3 frames", true},
		{"hang-up that failed first", Plan{Kind: Hangup}, "unexpected_close_1011", lostDetail, false},
		{"interrupted", Plan{Kind: Normal}, CauseCancelled, "run interrupted", true},
		{"unknown kind", Plan{Kind: "nonsense"}, CauseCompleted, "", false},
	}
	for _, tt := range tests {
		if got := Explains(tt.plan, tt.cause, tt.detail); got != tt.want {
			t.Errorf("%s: Explains(%+v, %q, %q) = %v, want %v", tt.name, tt.plan, tt.cause, tt.detail, got, tt.want)
		}
	}
}

func TestEveryKindHasExpectations(t *testing.T) {
	for _, k := range Kinds() {
		if len(Expectations(Plan{Kind: k, After: 1})) == 0 {
			t.Errorf("kind %s has no expected endings", k)
		}
		if Describe(k) == "unknown" {
			t.Errorf("kind %s has no description", k)
		}
	}
}

func TestPlanSession(t *testing.T) {
	const seed, deltas = 42, 10
	// Reproducible.
	for i := range 50 {
		if a, b := planSession(seed, i, 0.3, deltas, faults), planSession(seed, i, 0.3, deltas, faults); a != b {
			t.Fatalf("session %d: plans %+v and %+v differ", i, a, b)
		}
	}
	// The first sessions go through every fault once.
	var first []Kind
	for i := range faults {
		first = append(first, planSession(seed, i, 0.3, deltas, faults).Kind)
	}
	if want := Kinds()[1:]; !slices.Equal(first, want) {
		t.Errorf("first sessions %v, want every fault once: %v", first, want)
	}
	// Then faults come at the rate asked for, by weight; k always fires
	// before response.done.
	count := func(rate float64) (normal int, kinds map[Kind]int) {
		kinds = map[Kind]int{}
		for i := range 20000 {
			p := planSession(seed, i, rate, deltas, faults)
			kinds[p.Kind]++
			if p.Kind == Normal {
				normal++
			}
			switch p.Kind {
			case UpstreamDrop, UpstreamClose, UpstreamMalformed:
				if !slices.Contains(afterChoices(deltas), p.After) {
					t.Fatalf("session %d: k = %d, not one of %v", i, p.After, afterChoices(deltas))
				}
			default:
				if p.After != 0 {
					t.Fatalf("session %d (%s): k = %d, want 0", i, p.Kind, p.After)
				}
			}
		}
		return normal, kinds
	}
	if normal, _ := count(0); normal != 20000 {
		t.Errorf("fault rate 0: %d of 20000 normal, want all", normal)
	}
	if normal, _ := count(1); normal != 0 {
		t.Errorf("fault rate 1: %d normal, want none", normal)
	}
	normal, kinds := count(0.3)
	if faulty := 1 - float64(normal)/20000; faulty < 0.28 || faulty > 0.32 {
		t.Errorf("fault rate 0.3: %.3f of sessions faulty", faulty)
	}
	// Weight 3 faults come about three times as often as weight 1 ones.
	if r := float64(kinds[Hangup]) / float64(kinds[PartialRequest]); r < 2.4 || r > 3.6 {
		t.Errorf("hangup (weight 3) / partial_request (weight 1) = %.2f, want about 3", r)
	}
}

func TestFaultMix(t *testing.T) {
	mix, err := faultMix([]Kind{Hangup, UpstreamStall})
	if err != nil || len(mix) != 2 || mix[0].kind != UpstreamStall || mix[1].kind != Hangup {
		t.Fatalf("faultMix = %+v, %v; want stall then hangup", mix, err)
	}
	for i := range 200 {
		if k := planSession(1, i, 1, 10, mix).Kind; k != UpstreamStall && k != Hangup {
			t.Fatalf("session %d: %s, not in the mix", i, k)
		}
	}
	if all, err := faultMix(nil); err != nil || len(all) != len(faults) {
		t.Errorf("faultMix(nil) = %d faults, %v; want all", len(all), err)
	}
	if _, err := faultMix([]Kind{Hangup, "meteor"}); err == nil || !strings.Contains(err.Error(), `unknown fault "meteor"`) {
		t.Errorf("unknown fault: %v", err)
	}
	if _, err := faultMix([]Kind{Normal}); err == nil {
		t.Error("normal accepted as a fault")
	}
}

func TestAfterChoices(t *testing.T) {
	for _, tt := range []struct {
		deltas int
		want   []int
	}{
		{1, []int{1, 2, 3, 5}},
		{4, []int{1, 2, 3, 5, 8}},
		{10, []int{1, 2, 3, 5, 8, 13}},
	} {
		if got := afterChoices(tt.deltas); !slices.Equal(got, tt.want) {
			t.Errorf("afterChoices(%d) = %v, want %v", tt.deltas, got, tt.want)
		}
	}
}
