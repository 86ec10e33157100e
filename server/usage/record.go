package usage

import (
	"crypto/rand"
	"encoding/hex"
	"time"

	"rtgate/server/transcript"
)

// Record is the account of one ended session: one structured log line, one
// JSON line in USAGE_LOG and one row in Postgres's session_usage, all with
// the same snake_case names so that a log line and a row read alike.
type Record struct {
	// SessionID is the gateway's own id for the session (NewSessionID),
	// the idempotency key of the durable spend log.
	SessionID   string    `json:"session_id"`
	KeyName     string    `json:"key_name"`
	ModelGroup  string    `json:"model_group"`
	Deployment  string    `json:"deployment,omitempty"`
	StartedAt   time.Time `json:"started_at"`
	EndedAt     time.Time `json:"ended_at"`
	DurationMS  int64     `json:"duration_ms"`
	PoolHit     bool      `json:"pool_hit"`
	Outcome     string    `json:"outcome"`
	CloseCode   int       `json:"close_code,omitempty"`
	CloseReason string    `json:"close_reason,omitempty"`
	CloseSide   string    `json:"close_side,omitempty"`
	FramesIn    uint64    `json:"frames_in"`
	BytesIn     uint64    `json:"bytes_in"`
	FramesOut   uint64    `json:"frames_out"`
	BytesOut    uint64    `json:"bytes_out"`
	Usage       Usage     `json:"usage"`
	CostUSD     float64   `json:"cost_usd"`

	// Protocol is the voice protocol the session spoke: "realtime" (also
	// transcription sessions and calls), "live" (GPT-Live) or
	// "translation".
	Protocol string `json:"protocol,omitempty"`
	// Seconds is session time billed by duration: GPT-Live's cumulative
	// usage.seconds, a translation session's wall clock.
	Seconds float64 `json:"seconds,omitempty"`
	// Unconfirmed marks usage the upstream never confirmed (a GPT-Live
	// session that ended without session.closed is billed its last
	// reported seconds; a Realtime response in flight at the end whose
	// cancelled response.done never came is billed an estimate: Estimated).
	Unconfirmed bool `json:"unconfirmed,omitempty"`
	// Estimated is the part of Usage the upstream never reported: the
	// responses a session ended (or a resume let go of) while they were in
	// flight, whose cancelled response.done did not come in time, billed
	// by Flights.Estimate. Unconfirmed is set with it.
	Estimated *Usage `json:"estimated,omitempty"`
	// Transcription is a Realtime session's input transcription usage, by
	// transcription model, priced at that model's prices (in CostUSD).
	Transcription []ModelUsage `json:"transcription_usage,omitempty"`
	// Unpriced names the models of usage the gateway has no price for (no
	// built-in price, no model_info): that usage is in the record but not
	// in CostUSD, and rtgate_unpriced_usage_total counts it.
	Unpriced []string `json:"unpriced,omitempty"`
	// Conversation is what was said, when the session's key or deployment
	// keeps it (log_transcripts): redacted and bounded (transcript.Record).
	// Not in the log line; in USAGE_LOG and Postgres's session_conversation.
	Conversation *transcript.Record `json:"conversation,omitempty"`
	// Unmetered marks a session whose events the gateway could not read (a
	// WebRTC session with no sideband through it): billed a floor.
	Unmetered bool `json:"unmetered,omitempty"`
	// UpstreamSessions counts the upstream sessions the client's session
	// ran on (more than one after a resume: session continuity); Resumes
	// says when and why each new one was started.
	UpstreamSessions int      `json:"upstream_sessions,omitempty"`
	Resumes          []Resume `json:"resumes,omitempty"`
	// Turns counts the session's turns; FirstAudioP50MS and
	// FirstAudioP95MS are the percentiles of their time to first audio.
	Turns           int     `json:"turns,omitempty"`
	FirstAudioP50MS float64 `json:"first_audio_p50_ms,omitempty"`
	FirstAudioP95MS float64 `json:"first_audio_p95_ms,omitempty"`
}

// Resume is one move of a client's session onto a fresh upstream session.
type Resume struct {
	// Cause is why: "upstream_lost", "upstream_closed", "session_expired",
	// "rollover".
	Cause string    `json:"cause"`
	At    time.Time `json:"at"`
	// DurationMS is how long the client waited: from the loss to the
	// replayed session taking the client's frames again.
	DurationMS int64 `json:"duration_ms"`
	// Outcome is "ok" or "failed".
	Outcome string `json:"outcome"`
}

// LogAttrs are the record as slog attributes, for the session's log line:
// the same names as the JSON line, with the token counts flattened.
func (r Record) LogAttrs() []any {
	u := r.Usage
	in, out := u.InputTokenDetails, u.OutputTokenDetails
	attrs := []any{
		"session_id", r.SessionID, "key_name", r.KeyName, "model_group", r.ModelGroup, "deployment", r.Deployment,
		"started_at", r.StartedAt.Format(time.RFC3339Nano), "duration_ms", r.DurationMS,
		"pool_hit", r.PoolHit, "outcome", r.Outcome,
		"frames_in", r.FramesIn, "bytes_in", r.BytesIn, "frames_out", r.FramesOut, "bytes_out", r.BytesOut,
		"responses", u.Responses, "input_tokens", u.InputTokens, "output_tokens", u.OutputTokens,
		"input_text_tokens", in.TextTokens, "input_audio_tokens", in.AudioTokens, "input_image_tokens", in.ImageTokens,
		"cached_tokens", in.CachedTokens, "output_text_tokens", out.TextTokens, "output_audio_tokens", out.AudioTokens,
		"cost_usd", r.CostUSD,
	}
	if u.Transcriptions > 0 {
		attrs = append(attrs, "transcriptions", u.Transcriptions, "transcription_seconds", u.TranscriptionSeconds)
	}
	if r.CloseSide != "" {
		attrs = append(attrs, "close_code", r.CloseCode, "close_reason", r.CloseReason, "close_side", r.CloseSide)
	}
	if r.Protocol != "" && r.Protocol != "realtime" {
		attrs = append(attrs, "protocol", r.Protocol)
	}
	if r.Seconds > 0 {
		attrs = append(attrs, "seconds", r.Seconds)
	}
	if r.Unconfirmed {
		attrs = append(attrs, "unconfirmed", true)
	}
	if r.Unmetered {
		attrs = append(attrs, "unmetered", true)
	}
	if r.Estimated != nil {
		attrs = append(attrs, "estimated_responses", r.Estimated.Responses)
	}
	for _, t := range r.Transcription {
		attrs = append(attrs, "transcription_model", t.Model, "transcription_input_tokens", t.Usage.InputTokens,
			"transcription_output_tokens", t.Usage.OutputTokens)
	}
	if len(r.Unpriced) > 0 {
		attrs = append(attrs, "unpriced", r.Unpriced)
	}
	if r.UpstreamSessions > 1 {
		attrs = append(attrs, "upstream_sessions", r.UpstreamSessions)
	}
	if r.Turns > 0 {
		attrs = append(attrs, "turns", r.Turns, "first_audio_p50_ms", r.FirstAudioP50MS, "first_audio_p95_ms", r.FirstAudioP95MS)
	}
	return attrs
}

// NewSessionID returns a new gateway session id: "gws_" and 24 hex digits
// (96 random bits, so ids from many instances do not collide).
func NewSessionID() string {
	var b [12]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	return "gws_" + hex.EncodeToString(b[:])
}
