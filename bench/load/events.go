package load

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
)

// Event type names the client reacts to; everything else is read and ignored.
const (
	evSessionCreated = "session.created"
	evAudioDeltaGA   = "response.output_audio.delta"
	evAudioDeltaBeta = "response.audio.delta"
	evResponseDone   = "response.done"
	evError          = "error"
)

var (
	msgResponseCreate = []byte(`{"type":"response.create"}`)
	msgAudioCommit    = []byte(`{"type":"input_audio_buffer.commit"}`)
	// msgAudioAppend carries 20 ms of silence: 480 samples of 24 kHz PCM16
	// mono are 960 bytes, 1280 base64 characters.
	msgAudioAppend = []byte(`{"type":"input_audio_buffer.append","audio":"` +
		base64.StdEncoding.EncodeToString(make([]byte, audioChunkBytes)) + `"}`)
)

const typePrefix = `{"type":"`

// EventType returns an event's type. Audio deltas (most of the traffic)
// put "type" first, so the common case is a prefix match that does not look
// at the rest of the message; anything else is scanned for its top-level
// "type" (see stringField).
func EventType(msg []byte) (string, error) {
	trimmed := bytes.TrimLeft(msg, " \t\r\n")
	if rest, ok := bytes.CutPrefix(trimmed, []byte(typePrefix)); ok {
		if end := bytes.IndexByte(rest, '"'); end >= 0 && bytes.IndexByte(rest[:end], '\\') < 0 {
			return string(rest[:end]), nil
		}
	}
	typ, found, err := stringField(msg, "type")
	switch {
	case err != nil:
		return "", fmt.Errorf("event is not JSON: %w", err)
	case !found:
		return "", fmt.Errorf("event has no type")
	}
	return typ, nil
}

// errorEvent extracts the class and a redacted detail from an "error" event.
func errorEvent(msg []byte, key string) (class, detail string) {
	var ev struct {
		Error struct {
			Type    string `json:"type"`
			Code    any    `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if err := json.Unmarshal(msg, &ev); err != nil {
		return "protocol", "error event is not JSON"
	}
	code := ""
	if ev.Error.Code != nil {
		code = fmt.Sprint(ev.Error.Code)
	}
	if code == "" {
		code = ev.Error.Type
	}
	class = "error_event"
	if code != "" {
		class += "_" + sanitizeClass(code)
	}
	detail = strings.TrimSpace(ev.Error.Type + ": " + redact(ev.Error.Message, key))
	return class, truncate(detail, 200)
}

// responseStatus returns response.done's response.status ("" if absent).
func responseStatus(msg []byte) (string, error) {
	resp, found, err := field(msg, "response")
	if err != nil || !found {
		return "", err
	}
	status, _, err := stringField(resp, "status")
	if err != nil {
		return "", fmt.Errorf("response.done: %w", err)
	}
	return status, nil
}

// keyLike matches API keys the way OpenAI prints them in error messages
// (sk-..., ek_..., possibly partly masked), so they never reach a report.
var keyLike = regexp.MustCompile(`\b(sk|ek)[-_][A-Za-z0-9_\-*.]+`)

func redact(s, key string) string {
	if key != "" {
		s = strings.ReplaceAll(s, key, "[redacted]")
	}
	return keyLike.ReplaceAllString(s, "[redacted]")
}

// sanitizeClass keeps failure classes short and shell/Markdown friendly,
// whatever a server puts in its error codes.
func sanitizeClass(s string) string {
	s = truncate(strings.ToLower(s), 64)
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '_', r == '.':
			return r
		}
		return '_'
	}, s)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
