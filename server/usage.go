package server

// Token accounting. The upstream reports a response's usage in its
// response.done event, which ends every response whatever its status, so
// summing those events gives a session's usage. Audio tokens cost several
// times text tokens, so usage is kept by kind.

import (
	"encoding/json"
	"errors"
	"fmt"
	"unicode/utf8"
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

// eventTypeScan bounds EventType's look at an event.
const eventTypeScan = 256

// EventType returns the top-level "type" of a JSON event, looking at no more
// than its first 256 bytes and allocating nothing, so the relay can pick out
// the few events it acts on (response.done) without decoding every frame.
// typ is a subslice of p.
//
// The scan walks the top-level object's keys in order, skipping over each
// value (nested objects and arrays whole, so a "type" inside "session" is
// never taken for the event's). The realtime protocol puts type first, so
// the bound is ample in practice. ok is false, never a wrong value, when:
//   - the top-level type does not end within the first 256 bytes (after a
//     long value before it, say);
//   - a key before it, or the type value itself, holds a backslash escape
//     (decoding it would need a copy), or the value is not valid UTF-8 or
//     not a string;
//   - the start of p is not a JSON object.
//
// The bytes after the type are not looked at, so invalid JSON there goes
// unnoticed, and of duplicate top-level "type" keys the first one wins
// (encoding/json keeps the last; RFC 8259 leaves duplicates undefined).
func EventType(p []byte) (typ []byte, ok bool) {
	if len(p) > eventTypeScan {
		p = p[:eventTypeScan]
	}
	i := skipSpace(p, 0)
	if i >= len(p) || p[i] != '{' {
		return nil, false
	}
	i++
	for {
		i = skipSpace(p, i)
		if i >= len(p) || p[i] != '"' {
			return nil, false // the end of the object, or not JSON
		}
		end, escaped := scanString(p, i)
		if end < 0 || escaped {
			return nil, false
		}
		key := p[i+1 : end]
		i = skipSpace(p, end+1)
		if i >= len(p) || p[i] != ':' {
			return nil, false
		}
		i = skipSpace(p, i+1)
		if string(key) == "type" {
			if i >= len(p) || p[i] != '"' {
				return nil, false
			}
			end, escaped := scanString(p, i)
			if end < 0 || escaped || !utf8.Valid(p[i+1:end]) {
				return nil, false
			}
			return p[i+1 : end], true
		}
		if i = skipValue(p, i); i < 0 {
			return nil, false
		}
		i = skipSpace(p, i)
		if i >= len(p) || p[i] != ',' {
			return nil, false
		}
		i++
	}
}

func skipSpace(p []byte, i int) int {
	for i < len(p) && (p[i] == ' ' || p[i] == '\t' || p[i] == '\n' || p[i] == '\r') {
		i++
	}
	return i
}

// scanString returns the index of the closing quote of the string opening
// at p[i], and whether it holds escapes; end is -1 if the string does not
// end within p or holds a control character (invalid JSON).
func scanString(p []byte, i int) (end int, escaped bool) {
	for j := i + 1; j < len(p); j++ {
		switch c := p[j]; {
		case c == '\\':
			escaped = true
			j++ // the escaped byte; \uXXXX's digits are plain bytes
		case c == '"':
			return j, escaped
		case c < 0x20:
			return -1, escaped
		}
	}
	return -1, escaped
}

// skipValue returns the index just past the JSON value starting at p[i], or
// -1 if it does not end within p. It does not validate the value: for valid
// JSON it finds the right end, which is all EventType needs.
func skipValue(p []byte, i int) int {
	if i >= len(p) {
		return -1
	}
	switch p[i] {
	case '"':
		end, _ := scanString(p, i)
		if end < 0 {
			return -1
		}
		return end + 1
	case '{', '[':
		depth := 0
		for j := i; j < len(p); j++ {
			switch p[j] {
			case '"':
				end, _ := scanString(p, j)
				if end < 0 {
					return -1
				}
				j = end
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return j + 1
				}
			}
		}
		return -1
	}
	// A number, true, false or null: it runs to the next delimiter, which
	// must be within p (else the scan cannot tell it has ended).
	j := i
	for j < len(p) {
		switch p[j] {
		case ',', '}', ']', ' ', '\t', '\n', '\r':
			if j == i {
				return -1
			}
			return j
		}
		j++
	}
	return -1
}
