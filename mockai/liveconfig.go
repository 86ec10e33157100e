package mockai

import (
	"encoding/base64"
	"fmt"
	"slices"
)

// A Live session configuration is strict: OpenAI refuses any field it does
// not know with unknown_parameter and names it in param ("session.voice").
// mockai checks the same, so a relay that adds or renames a field (a model
// alias left unmapped, a Realtime-shaped "voice") is caught offline. The
// field lists follow the SDK 7.59 types (SessionConfig, MediaSessionConfig,
// SessionAcceptParams.Session, ForkSessionConfig); nested objects are checked
// where mockai acts on them (audio, delegation); the contents of input,
// triggers and client are passed on unchecked.

// configError is a refused configuration: an error event's code, message and param.
type configError struct{ code, msg, param string }

// Where a configuration arrives; each allows a different set of fields.
type configKind int

const (
	configWebSocket configKind = iota // session.start on the primary socket
	configWebRTC                      // POST /v1/live/sessions: no audio.format (WebRTC negotiates it)
	configAccept                      // POST …/accept: plus type "live", no audio.format
	configFork                        // session.start on a fork socket, POST …/fork: no model
)

var (
	sessionFields = []string{"model", "instructions", "audio", "delegation", "input", "store", "safety_identifier", "triggers", "client"}
	forkFields    = []string{"audio", "client", "delegation", "store"}
	acceptFields  = []string{"type", "model", "instructions", "audio", "delegation", "input", "store", "safety_identifier", "triggers"}
)

// checkConfig validates a configuration of kind; nil means it is accepted.
func checkConfig(kind configKind, cfg map[string]any) *configError {
	allowed := sessionFields
	switch kind {
	case configFork:
		allowed = forkFields
	case configAccept:
		allowed = acceptFields
	}
	for _, k := range sortedKeys(cfg) {
		if !slices.Contains(allowed, k) {
			return unknownParam("session." + k)
		}
	}
	if kind != configFork {
		m, ok := cfg["model"].(string)
		if !ok || m == "" {
			return &configError{"missing_required_parameter", "Missing required parameter: 'session.model'.", "session.model"}
		}
	}
	if kind == configAccept && cfg["type"] != "live" {
		return &configError{"invalid_value", "Invalid value for 'session.type': expected 'live'.", "session.type"}
	}
	if a, present := cfg["audio"]; present {
		if e := checkAudio(kind, a); e != nil {
			return e
		}
	}
	if d, present := cfg["delegation"]; present && d != nil {
		if e := checkDelegation(d); e != nil {
			return e
		}
	}
	if s, present := cfg["store"]; present {
		if _, ok := s.(bool); !ok {
			return &configError{"invalid_type", "Invalid type for 'session.store': expected a boolean.", "session.store"}
		}
	}
	return nil
}

func checkAudio(kind configKind, a any) *configError {
	audio, ok := a.(map[string]any)
	if !ok {
		return &configError{"invalid_type", "Invalid type for 'session.audio': expected an object.", "session.audio"}
	}
	for _, k := range sortedKeys(audio) {
		switch {
		case k == "output" && kind != configFork:
			out, ok := audio[k].(map[string]any)
			if !ok {
				return &configError{"invalid_type", "Invalid type for 'session.audio.output': expected an object.", "session.audio.output"}
			}
			for _, ok := range sortedKeys(out) {
				if ok != "voice" {
					return unknownParam("session.audio.output." + ok)
				}
			}
		case k == "format" && (kind == configWebSocket || kind == configFork):
			if e := checkFormat(audio[k]); e != nil {
				return e
			}
		default:
			return unknownParam("session.audio." + k)
		}
	}
	return nil
}

// checkFormat accepts audio/pcm at 16 or 24 kHz, audio/pcmu and audio/pcma.
func checkFormat(f any) *configError {
	format, ok := f.(map[string]any)
	if !ok {
		return &configError{"invalid_type", "Invalid type for 'session.audio.format': expected an object.", "session.audio.format"}
	}
	for _, k := range sortedKeys(format) {
		if k != "type" && k != "rate" {
			return unknownParam("session.audio.format." + k)
		}
	}
	switch format["type"] {
	case "audio/pcm":
		if r, present := format["rate"]; present && r != 16000.0 && r != 24000.0 {
			return &configError{"invalid_value", "Invalid value for 'session.audio.format.rate': expected 16000 or 24000.", "session.audio.format.rate"}
		}
	case "audio/pcmu", "audio/pcma":
	default:
		return &configError{"invalid_value", "Invalid value for 'session.audio.format.type': expected 'audio/pcm', 'audio/pcmu' or 'audio/pcma'.", "session.audio.format.type"}
	}
	return nil
}

func checkDelegation(d any) *configError {
	del, ok := d.(map[string]any)
	if !ok {
		return &configError{"invalid_type", "Invalid type for 'session.delegation': expected an object.", "session.delegation"}
	}
	typ, _ := del["type"].(string)
	allowed := map[string][]string{
		"client":    {"type", "acknowledgement_delay_ms"},
		"responses": {"type", "acknowledgement_delay_ms", "responses"},
		"decisions": {"type", "acknowledgement_delay_ms", "decisions"},
	}[typ]
	if allowed == nil {
		return &configError{"invalid_value", "Invalid value for 'session.delegation.type': expected 'client', 'responses' or 'decisions'.", "session.delegation.type"}
	}
	for _, k := range sortedKeys(del) {
		if !slices.Contains(allowed, k) {
			return unknownParam("session.delegation." + k)
		}
	}
	if typ == "responses" {
		r, _ := del["responses"].(map[string]any)
		if m, _ := r["model"].(string); m == "" {
			return &configError{"missing_required_parameter", "Missing required parameter: 'session.delegation.responses.model'.", "session.delegation.responses.model"}
		}
	}
	return nil
}

func unknownParam(param string) *configError {
	return &configError{"unknown_parameter", fmt.Sprintf("Unknown parameter: '%s'.", param), param}
}

// inputBytesPerSec is the input audio's byte rate under a configuration:
// PCM16 at its rate, G.711 (pcmu, pcma) at 8 kHz one byte a sample.
func inputBytesPerSec(cfg map[string]any) float64 {
	audio, _ := cfg["audio"].(map[string]any)
	format, _ := audio["format"].(map[string]any)
	switch format["type"] {
	case "audio/pcmu", "audio/pcma":
		return 8000
	case "audio/pcm":
		if r, ok := format["rate"].(float64); ok && r == 16000 {
			return 32000
		}
	}
	return reflectedBytesPerSec
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func encodeAudio(b []byte) string { return base64.StdEncoding.EncodeToString(b) }
