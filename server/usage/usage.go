// Package usage reads token usage out of the upstream's events and keeps the
// account of each session: the Usage sums, the Meter that reads them off the
// relay, the Record written when a session ends, and the JSON-lines Log.
//
// The upstream reports a response's usage in its response.done event, which
// ends every response whatever its status, so summing those events gives a
// session's usage. Audio tokens cost several times text tokens, so usage is
// kept by kind.
package usage

import (
	"encoding/json"
	"errors"
	"fmt"
)

// Usage is token usage summed over response.done events. It is not safe
// for concurrent use: each session owns one.
type Usage struct {
	Responses int64 // response.done events counted

	InputTokens, OutputTokens, TotalTokens int64

	// By kind; InputCached is the part of the input tokens served from
	// the prompt cache (counted inside InputText/InputAudio/InputImage too).
	InputText, InputAudio, InputImage, InputCached int64
	OutputText, OutputAudio                        int64
}

// responseDone is the part of a response.done event that usage needs.
type responseDone struct {
	Type     string `json:"type"`
	Response *struct {
		Usage *struct {
			TotalTokens       int64 `json:"total_tokens"`
			InputTokens       int64 `json:"input_tokens"`
			OutputTokens      int64 `json:"output_tokens"`
			InputTokenDetails struct {
				TextTokens   int64 `json:"text_tokens"`
				AudioTokens  int64 `json:"audio_tokens"`
				ImageTokens  int64 `json:"image_tokens"`
				CachedTokens int64 `json:"cached_tokens"`
			} `json:"input_token_details"`
			OutputTokenDetails struct {
				TextTokens  int64 `json:"text_tokens"`
				AudioTokens int64 `json:"audio_tokens"`
			} `json:"output_token_details"`
		} `json:"usage"`
	} `json:"response"`
}

// AddResponseDone adds the usage of one response.done event (the frame's
// JSON payload). Missing fields count as zero; a response without usage
// still counts as a response. A payload that is not a response.done event,
// is not JSON, or reports negative counts is an error and adds nothing.
func (u *Usage) AddResponseDone(payload []byte) error {
	var ev responseDone
	if err := json.Unmarshal(payload, &ev); err != nil {
		return fmt.Errorf("reading response.done usage: %w", err)
	}
	if ev.Type != "response.done" {
		return fmt.Errorf("reading response.done usage: the event's type is %.40q", ev.Type)
	}
	var add Usage
	add.Responses = 1
	if ev.Response != nil && ev.Response.Usage != nil {
		us := ev.Response.Usage
		in, out := us.InputTokenDetails, us.OutputTokenDetails
		add.InputTokens, add.OutputTokens, add.TotalTokens = us.InputTokens, us.OutputTokens, us.TotalTokens
		add.InputText, add.InputAudio, add.InputImage, add.InputCached = in.TextTokens, in.AudioTokens, in.ImageTokens, in.CachedTokens
		add.OutputText, add.OutputAudio = out.TextTokens, out.AudioTokens
		for _, n := range []int64{add.InputTokens, add.OutputTokens, add.TotalTokens, add.InputText, add.InputAudio,
			add.InputImage, add.InputCached, add.OutputText, add.OutputAudio} {
			if n < 0 {
				return errors.New("reading response.done usage: negative token count")
			}
		}
	}
	u.Responses += add.Responses
	u.InputTokens += add.InputTokens
	u.OutputTokens += add.OutputTokens
	u.TotalTokens += add.TotalTokens
	u.InputText += add.InputText
	u.InputAudio += add.InputAudio
	u.InputImage += add.InputImage
	u.InputCached += add.InputCached
	u.OutputText += add.OutputText
	u.OutputAudio += add.OutputAudio
	return nil
}
