package soak

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
)

// Kind is what one soak session does: a normal call, or a call with one
// injected fault.
type Kind string

// The kinds of session. Upstream faults are asked of mockai in the query;
// client faults are the soak client misbehaving.
const (
	Normal Kind = "normal"

	UpstreamDrop      Kind = "upstream_drop"
	UpstreamClose     Kind = "upstream_close"
	UpstreamMalformed Kind = "upstream_malformed"
	UpstreamStall     Kind = "upstream_stall"
	Upstream401       Kind = "upstream_401"

	SlowClient       Kind = "slow_client"
	GarbageRequest   Kind = "garbage_request"
	PartialRequest   Kind = "partial_request"
	UnmaskedFrame    Kind = "unmasked_frame"
	ReservedBits     Kind = "reserved_bits"
	OversizedMessage Kind = "oversized_message"
	Hangup           Kind = "hangup"
)

// CauseCompleted is the cause of a session that ran to its end: a normal
// call that got response.done and closed cleanly. CauseCancelled is a
// session cut short by Ctrl-C.
const (
	CauseCompleted = "completed"
	CauseCancelled = "cancelled"
)

// faultInfo describes one fault: what is injected, and how often relative
// to the other faults.
type faultInfo struct {
	kind   Kind
	what   string
	weight int
}

// Faults lists every fault kind, in report order.
var faults = []faultInfo{
	{UpstreamDrop, "mockai drops TCP after k frames", 3},
	{UpstreamClose, "mockai closes 1011 after k frames", 3},
	{UpstreamMalformed, "mockai sends a reserved-opcode frame after k frames", 2},
	{UpstreamStall, "mockai stops reading and sending; the client keeps sending audio", 2},
	{Upstream401, "mockai answers the upstream upgrade with HTTP 401", 2},
	{SlowClient, "client stops reading and keeps asking for responses", 2},
	{GarbageRequest, "random bytes instead of an HTTP request", 2},
	{PartialRequest, "half a request head, then silence", 1},
	{UnmaskedFrame, "an unmasked client frame after the upgrade", 2},
	{ReservedBits, "a frame with reserved bits set, then random bytes", 2},
	{OversizedMessage, "a message over MAX_MESSAGE_BYTES", 1},
	{Hangup, "client drops TCP mid-response (half of them with RST)", 3},
}

// Kinds returns every kind, normal first, in report order.
func Kinds() []Kind {
	out := []Kind{Normal}
	for _, f := range faults {
		out = append(out, f.kind)
	}
	return out
}

// Describe says what a kind injects.
func Describe(k Kind) string {
	if k == Normal {
		return "none"
	}
	for _, f := range faults {
		if f.kind == k {
			return f.what
		}
	}
	return "unknown"
}

// Plan is one session, decided before it starts.
type Plan struct {
	Kind Kind `json:"kind"`
	// After is k, the frames mockai sends before an upstream drop, close or
	// malformed frame.
	After int `json:"after,omitempty"`
	// Rand seeds the session's own random choices (garbage bytes, when to
	// hang up), so a plan is reproducible.
	Rand uint64 `json:"rand"`
}

// faultAfterChoices are the k values tried. k = 1 fires right after
// session.created, which a warm pool socket meets while still in the pool.
var faultAfterChoices = []int{1, 2, 3, 5, 8, 13}

// afterChoices keeps the k values that fire before response.done, so the
// fault always does: a call without input audio receives session.created,
// response.created, rate_limits.updated, the deltas, the transcript delta,
// then response.done.
func afterChoices(deltas int) []int {
	var out []int
	for _, k := range faultAfterChoices {
		if k <= 4+deltas {
			out = append(out, k)
		}
	}
	return out
}

// faultMix returns the faults named in kinds (all of them when kinds is
// empty), in report order, or an error naming one that is not a fault.
func faultMix(kinds []Kind) ([]faultInfo, error) {
	if len(kinds) == 0 {
		return faults, nil
	}
	var mix []faultInfo
	for _, f := range faults {
		if slices.Contains(kinds, f.kind) {
			mix = append(mix, f)
		}
	}
	for _, k := range kinds {
		if !slices.ContainsFunc(faults, func(f faultInfo) bool { return f.kind == k }) {
			var names []string
			for _, f := range faults {
				names = append(names, string(f.kind))
			}
			return nil, fmt.Errorf("unknown fault %q (want %s)", k, strings.Join(names, ", "))
		}
	}
	return mix, nil
}

// planSession decides session i of a run. The first sessions go through
// every fault of the mix once (when faultRate > 0), so even a short run
// exercises each; after that a session is faulty with probability
// faultRate, its fault drawn by weight. The same seed, i and settings
// always give the same plan.
func planSession(seed uint64, i int, faultRate float64, deltas int, mix []faultInfo) Plan {
	r := rand.New(rand.NewPCG(seed, uint64(i)))
	p := Plan{Kind: Normal, Rand: r.Uint64()}
	switch {
	case faultRate > 0 && i < len(mix):
		p.Kind = mix[i].kind
	case r.Float64() < faultRate:
		p.Kind = pickFault(r, mix)
	}
	switch p.Kind {
	case UpstreamDrop, UpstreamClose, UpstreamMalformed:
		ks := afterChoices(deltas)
		p.After = ks[r.IntN(len(ks))]
	}
	return p
}

func pickFault(r *rand.Rand, mix []faultInfo) Kind {
	total := 0
	for _, f := range mix {
		total += f.weight
	}
	n := r.IntN(total)
	for _, f := range mix {
		if n < f.weight {
			return f.kind
		}
		n -= f.weight
	}
	return mix[len(mix)-1].kind
}

// Expect is one way a session of some kind may end: its cause, and a text
// its detail must contain ("" for any).
type Expect struct {
	Cause     string
	DetailHas string
}

// Expectations is the attribution table: the endings the plan's fault
// explains. A normal session must complete. An upstream fault must reach
// the client the way the gateway documents (docs/what-a-client-sees.md):
// an upstream drop or stall as close 1011 "upstream connection lost", the
// upstream's own close code and reason passed through, an invalid upstream
// frame as an upstream_protocol_error event, a refused upstream upgrade as
// an upstream_unavailable event carrying the status. A client fault must be
// answered as documented too: protocol errors close with 1002, an oversized
// message with 1009, a client that stops reading is dropped (no close frame
// can get through to it) once the kernel has taken nothing from the gateway
// for WRITE_TIMEOUT_SECS (when the upstream was too slow for anything to
// wait in the gateway, the client reads it all afterwards, and the soak
// checks it fits the kernel's buffers), a broken request gets an HTTP 4xx or is closed at
// the handshake timeout.
//
// With session continuity (on by default) an upstream drop or 1011 close is
// resumed on a fresh upstream session, which mockai faults the same way (the
// fault is in the query the gateway passes on): the session may complete
// there, or its response in flight fail (a failed response.done), or after
// the gateway's limit of resumes end as before, or end with
// upstream_unavailable when a fresh upstream faulted before the replay was
// answered.
func Expectations(p Plan) []Expect {
	switch p.Kind {
	case Normal:
		return []Expect{{CauseCompleted, ""}}
	case UpstreamStall:
		// The gateway drops an upstream that took nothing for
		// WRITE_TIMEOUT_SECS: the session ends 1011. When mockai drops the
		// stalled socket first (StallFor, no close frame), that is a loss
		// continuity resumes; the fresh upstream stalls too (the fault is
		// in the query) and never answers the replay, while the client
		// goes on sending: its frames fill the resume's pending queue
		// (MAX_PENDING_BYTES) and it is closed 1009.
		return []Expect{{"unexpected_close_1011", "upstream connection lost"},
			{"unexpected_close_1009", "too much data before the upstream connected"}}
	case UpstreamDrop:
		return []Expect{{"unexpected_close_1011", "upstream connection lost"}, {CauseCompleted, ""}, {"response_failed", ""},
			{"error_event_upstream_unavailable", ""}}
	case UpstreamClose:
		return []Expect{{"unexpected_close_1011", fmt.Sprintf("mock: closing after %d frames", p.After)}, {CauseCompleted, ""}, {"response_failed", ""},
			{"error_event_upstream_unavailable", ""}}
	case UpstreamMalformed:
		return []Expect{{"error_event_upstream_protocol_error", ""}}
	case Upstream401:
		return []Expect{{"error_event_upstream_unavailable", "HTTP 401"}}
	case SlowClient:
		return []Expect{{"unexpected_close_1006", ""}, {causeUnderLimit, ""}}
	case GarbageRequest:
		return []Expect{{"http_400", ""}, {"http_431", ""}, {causeClosedNoResponse, ""}}
	case PartialRequest:
		return []Expect{{causeClosedNoResponse, ""}}
	case UnmaskedFrame, ReservedBits:
		return []Expect{{"unexpected_close_1002", ""}}
	case OversizedMessage:
		return []Expect{{"unexpected_close_1009", ""}}
	case Hangup:
		return []Expect{{causeHungUp, ""}}
	}
	return nil
}

// Explains reports whether the plan's fault (or its absence) explains a
// session that ended with cause and detail.
func Explains(p Plan, cause, detail string) bool {
	if cause == CauseCancelled {
		return true // the run was interrupted; the report says so
	}
	for _, e := range Expectations(p) {
		if cause == e.Cause && strings.Contains(detail, e.DetailHas) {
			return true
		}
	}
	return false
}
