// Package usage reads token usage out of the upstream's events and keeps the
// account of each session: the Usage sums, the Meter that reads them off the
// relay, the Record written when a session ends, and the JSON-lines Log.
//
// The upstream reports a response's usage in its response.done event, which
// ends every response whatever its status, so summing those events gives a
// session's usage. Transcription sessions (intent=transcription) have no
// responses: their usage comes on each
// conversation.item.input_audio_transcription.completed event instead. Audio
// tokens cost several times text tokens and cached input a fraction of
// uncached, so usage is kept by kind, in OpenAI's own names and nesting.
package usage

import (
	"encoding/json"
	"errors"
	"fmt"

	"rtgate/server/eventtype"
)

// Usage is token usage summed over a session's events, in the shape of
// OpenAI's response.usage plus the counts of events summed. It is not safe
// for concurrent use: each session owns one.
type Usage struct {
	// Responses counts response.done events; Transcriptions counts
	// input audio transcription events with usage.
	Responses      int64 `json:"responses"`
	Transcriptions int64 `json:"transcriptions,omitempty"`
	// TranscriptionSeconds is input audio billed by duration (the
	// whisper-1 transcription model reports seconds, not tokens).
	TranscriptionSeconds float64 `json:"transcription_seconds,omitempty"`

	InputTokens        int64              `json:"input_tokens"`
	OutputTokens       int64              `json:"output_tokens"`
	TotalTokens        int64              `json:"total_tokens"`
	InputTokenDetails  InputTokenDetails  `json:"input_token_details"`
	OutputTokenDetails OutputTokenDetails `json:"output_token_details"`
}

// InputTokenDetails splits the input tokens by kind. CachedTokens is the
// part served from the prompt cache; it is counted inside TextTokens,
// AudioTokens and ImageTokens too, and CachedTokensDetails splits it by kind.
type InputTokenDetails struct {
	TextTokens          int64               `json:"text_tokens"`
	AudioTokens         int64               `json:"audio_tokens"`
	ImageTokens         int64               `json:"image_tokens"`
	CachedTokens        int64               `json:"cached_tokens"`
	CachedTokensDetails CachedTokensDetails `json:"cached_tokens_details"`
}

// CachedTokensDetails splits the cached input tokens by kind.
type CachedTokensDetails struct {
	TextTokens  int64 `json:"text_tokens"`
	AudioTokens int64 `json:"audio_tokens"`
	ImageTokens int64 `json:"image_tokens"`
}

// OutputTokenDetails splits the output tokens by kind (reasoning tokens,
// which newer models report, are inside TextTokens).
type OutputTokenDetails struct {
	TextTokens  int64 `json:"text_tokens"`
	AudioTokens int64 `json:"audio_tokens"`
}

// Add adds o's counts to u.
func (u *Usage) Add(o Usage) {
	u.Responses += o.Responses
	u.Transcriptions += o.Transcriptions
	u.TranscriptionSeconds += o.TranscriptionSeconds
	u.InputTokens += o.InputTokens
	u.OutputTokens += o.OutputTokens
	u.TotalTokens += o.TotalTokens
	in, oi := &u.InputTokenDetails, o.InputTokenDetails
	in.TextTokens += oi.TextTokens
	in.AudioTokens += oi.AudioTokens
	in.ImageTokens += oi.ImageTokens
	in.CachedTokens += oi.CachedTokens
	in.CachedTokensDetails.TextTokens += oi.CachedTokensDetails.TextTokens
	in.CachedTokensDetails.AudioTokens += oi.CachedTokensDetails.AudioTokens
	in.CachedTokensDetails.ImageTokens += oi.CachedTokensDetails.ImageTokens
	u.OutputTokenDetails.TextTokens += o.OutputTokenDetails.TextTokens
	u.OutputTokenDetails.AudioTokens += o.OutputTokenDetails.AudioTokens
}

// counts lists every token count, for the sign check.
func (u *Usage) counts() []int64 {
	in, c := u.InputTokenDetails, u.InputTokenDetails.CachedTokensDetails
	return []int64{u.InputTokens, u.OutputTokens, u.TotalTokens, in.TextTokens, in.AudioTokens, in.ImageTokens,
		in.CachedTokens, c.TextTokens, c.AudioTokens, c.ImageTokens,
		u.OutputTokenDetails.TextTokens, u.OutputTokenDetails.AudioTokens}
}

// tokenUsage is the usage object of either event. Transcription events add
// a type: "tokens" (counts as in response.done) or "duration" (seconds).
type tokenUsage struct {
	Usage
	Type    string  `json:"type"`
	Seconds float64 `json:"seconds"`
}

// usageEvent is the part of a usage-bearing event that Usage needs.
type usageEvent struct {
	Type     string `json:"type"`
	Response *struct {
		Usage *tokenUsage `json:"usage"`
	} `json:"response"`
	Usage *tokenUsage `json:"usage"` // transcription events
}

// Parse reads the usage of one response.done or transcription-completed
// event (the frame's JSON payload). Missing fields count as zero; a
// response without usage still counts as a response, a transcription event
// without usage counts as nothing. A payload that is neither event, is not
// JSON, or reports negative counts is an error.
func Parse(payload []byte) (Usage, error) {
	var ev usageEvent
	if err := json.Unmarshal(payload, &ev); err != nil {
		return Usage{}, fmt.Errorf("reading event usage: %w", err)
	}
	var add Usage
	var tu *tokenUsage
	switch ev.Type {
	case eventtype.ResponseDone:
		add.Responses = 1
		if ev.Response != nil {
			tu = ev.Response.Usage
		}
	case eventtype.TranscriptionComplete:
		if ev.Usage == nil {
			return Usage{}, nil
		}
		tu = ev.Usage
		add.Transcriptions = 1
		if tu.Type == "duration" {
			if tu.Seconds < 0 {
				return Usage{}, errors.New("reading event usage: negative duration")
			}
			add.TranscriptionSeconds = tu.Seconds
			return add, nil
		}
	default:
		return Usage{}, fmt.Errorf("reading event usage: the event's type is %.40q", ev.Type)
	}
	if tu != nil {
		for _, n := range tu.counts() {
			if n < 0 {
				return Usage{}, errors.New("reading event usage: negative token count")
			}
		}
		// Only token counts come from the event: the event counts are ours.
		tu.Responses, tu.Transcriptions, tu.TranscriptionSeconds = 0, 0, 0
		if ev.Type == eventtype.TranscriptionComplete {
			tu.Usage.fillTranscriptionKinds()
		}
		add.Add(tu.Usage)
	}
	return add, nil
}

// fillTranscriptionKinds gives a transcription's totals reported without
// their split their kind: OpenAI's transcription usage has output_tokens
// without output_token_details (the output is the transcript, text), and
// its input is the audio (input_token_details may be left out too). A
// count left without a kind would be priced at nothing.
func (u *Usage) fillTranscriptionKinds() {
	out := &u.OutputTokenDetails
	if out.TextTokens+out.AudioTokens == 0 {
		out.TextTokens = u.OutputTokens
	}
	in := &u.InputTokenDetails
	if in.TextTokens+in.AudioTokens+in.ImageTokens == 0 {
		in.AudioTokens = u.InputTokens
	}
}

// AddEvent adds the usage of one usage-bearing event (see Parse); an event
// that is refused adds nothing.
func (u *Usage) AddEvent(payload []byte) error {
	add, err := Parse(payload)
	if err != nil {
		return err
	}
	u.Add(add)
	return nil
}
