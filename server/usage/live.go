package usage

import (
	"encoding/json"
	"math"

	"rtgate/server/eventtype"
)

// maxLiveResponseIDs bounds the response ids a LiveMeter remembers to book
// each once (a terminal event repeated later than that many responses
// would count twice; the upstream sends one per response).
const maxLiveResponseIDs = 256

// LiveMeter is a GPT-Live session's frames.Inspector on the upstream's
// frames, as Meter is a Realtime session's: it picks the usage events out
// with eventtype.Of and eventtype.Inner, allocating nothing for the frames
// it passes over (audio and transcript deltas, the wrapped Responses
// deltas), and keeps the session's seconds and backend tokens. Written only from the
// upstream's read path, read once the session has ended (or from the
// callbacks, on that path).
type LiveMeter struct {
	// Seconds is the session's seconds: the last cumulative usage.seconds
	// reported, added up over its upstream sessions (NextSession).
	Seconds float64
	// Closed says session.closed came: Seconds is final. Reason is its
	// reason (close_requested, expired, content, remote_hangup,
	// connection_lost).
	Closed bool
	Reason string
	// Usage is the backend tokens of delegated responses, in Realtime's
	// shape: input and output tokens as text, cached input apart
	// (reasoning tokens are inside the output tokens, as the Responses
	// API counts them); Responses counts the responses.
	Usage Usage

	// OnSeconds, if set, gets each growth of Seconds; OnTokens each
	// response's backend usage and model; OnClosed session.closed. They
	// run on the read path, after the event went to the client, and must
	// not block.
	OnSeconds func(add float64)
	OnTokens  func(model string, add Usage)
	OnClosed  func()
	// OnStarted, if set, gets the session's id from the first
	// session.started (the gateway remembers who owns it).
	OnStarted func(id string)
	// OnDelegation, if set, gets the Responses model each session.updated
	// delegates to (session.delegation.responses.model; "" without
	// Responses delegation): the gateway checks it against the key's
	// models before a response spends on it. Rare events (one a
	// session.update), so reading them costs the relay nothing per frame.
	OnDelegation func(model string)

	started bool // session.started was read
	// cur is the current upstream session's last cumulative
	// usage.seconds; Seconds holds the earlier upstream sessions' too.
	cur float64

	booked []string // response ids already booked
}

// Wants picks the usage events out of the upstream's text frames. A
// response.event whose wrapped type is not within the prefix is looked at
// whole rather than missed.
func (m *LiveMeter) Wants(prefix []byte) bool {
	t, ok := eventtype.Of(prefix)
	return ok && m.WantsType(t, prefix)
}

// WantsType is Wants for a caller that read the event's type t already
// (a Live session's inspector reads it once for the turns and the meter).
func (m *LiveMeter) WantsType(t, prefix []byte) bool {
	switch string(t) {
	case eventtype.LiveUsage, eventtype.LiveClosed:
		return true
	case eventtype.LiveStarted:
		return m.OnStarted != nil && !m.started
	case eventtype.LiveUpdated:
		return m.OnDelegation != nil
	case eventtype.LiveResponse:
		inner, ok := eventtype.Inner(prefix, "event")
		return !ok || terminalResponse(string(inner))
	}
	return false
}

func terminalResponse(t string) bool {
	return t == "response.completed" || t == "response.incomplete" || t == "response.failed"
}

// liveEvent is the part of a Live usage event the meter reads.
type liveEvent struct {
	Type    string `json:"type"`
	Reason  string `json:"reason"`
	Session *struct {
		ID         string `json:"id"`
		Delegation *struct {
			Type      string `json:"type"`
			Responses struct {
				Model string `json:"model"`
			} `json:"responses"`
		} `json:"delegation"`
	} `json:"session"`
	Usage *struct {
		Seconds *float64 `json:"seconds"`
	} `json:"usage"`
	Event *struct {
		Type     string `json:"type"`
		Response *struct {
			ID    string          `json:"id"`
			Model string          `json:"model"`
			Usage *responsesUsage `json:"usage"`
		} `json:"response"`
	} `json:"event"`
}

// responsesUsage is a Responses API response's usage.
type responsesUsage struct {
	InputTokens        int64 `json:"input_tokens"`
	InputTokensDetails struct {
		CachedTokens int64 `json:"cached_tokens"`
	} `json:"input_tokens_details"`
	OutputTokens int64 `json:"output_tokens"`
	TotalTokens  int64 `json:"total_tokens"`
}

// Inspect implements frames.Inspector. An event that does not parse, or
// reports negative or shrinking figures, adds nothing.
func (m *LiveMeter) Inspect(p []byte) {
	var ev liveEvent
	if json.Unmarshal(p, &ev) != nil {
		return
	}
	switch ev.Type {
	case eventtype.LiveStarted:
		if !m.started && m.OnStarted != nil && ev.Session != nil && ev.Session.ID != "" {
			m.started = true
			m.OnStarted(ev.Session.ID)
		}
	case eventtype.LiveUpdated:
		if m.OnDelegation == nil || ev.Session == nil {
			return
		}
		model := ""
		if d := ev.Session.Delegation; d != nil && d.Type == "responses" {
			model = d.Responses.Model
		}
		m.OnDelegation(model)
	case eventtype.LiveUsage, eventtype.LiveClosed:
		if ev.Usage != nil && ev.Usage.Seconds != nil {
			m.seconds(*ev.Usage.Seconds)
		}
		if ev.Type == eventtype.LiveClosed && !m.Closed {
			m.Closed, m.Reason = true, ev.Reason
			if m.OnClosed != nil {
				m.OnClosed()
			}
		}
	case eventtype.LiveResponse:
		if ev.Event == nil || !terminalResponse(ev.Event.Type) || ev.Event.Response == nil {
			return
		}
		m.tokens(ev.Event.Response.ID, ev.Event.Response.Model, ev.Event.Response.Usage)
	}
}

// seconds takes a cumulative figure: its growth, never the sum.
func (m *LiveMeter) seconds(s float64) {
	if math.IsNaN(s) || math.IsInf(s, 0) || s <= m.cur {
		return
	}
	add := s - m.cur
	m.cur = s
	m.Seconds += add
	if m.OnSeconds != nil {
		m.OnSeconds(add)
	}
}

// NextSession is the session continuing on a fresh upstream session (a
// resume): that session's usage.seconds count from zero again, so its
// growth is added to the seconds so far, never put in their place; its
// session.closed is yet to come. Call it on the read path, or while no
// upstream is read (between two upstreams).
func (m *LiveMeter) NextSession() {
	m.cur = 0
	m.Closed, m.Reason = false, ""
}

// tokens books a response's backend usage once per response id.
func (m *LiveMeter) tokens(id, model string, u *responsesUsage) {
	for _, seen := range m.booked {
		if seen == id && id != "" {
			return
		}
	}
	if len(m.booked) == maxLiveResponseIDs {
		m.booked = append(m.booked[:0], m.booked[1:]...)
	}
	m.booked = append(m.booked, id)
	add := Usage{Responses: 1}
	if u != nil && u.InputTokens >= 0 && u.OutputTokens >= 0 && u.TotalTokens >= 0 &&
		u.InputTokensDetails.CachedTokens >= 0 && u.InputTokensDetails.CachedTokens <= u.InputTokens {
		add.InputTokens, add.OutputTokens, add.TotalTokens = u.InputTokens, u.OutputTokens, u.TotalTokens
		add.InputTokenDetails.TextTokens = u.InputTokens
		add.InputTokenDetails.CachedTokens = u.InputTokensDetails.CachedTokens
		add.InputTokenDetails.CachedTokensDetails.TextTokens = u.InputTokensDetails.CachedTokens
		add.OutputTokenDetails.TextTokens = u.OutputTokens
	}
	m.Usage.Add(add)
	if m.OnTokens != nil {
		m.OnTokens(model, add)
	}
}
