package gemini

import (
	"encoding/json"
	"slices"
	"strings"
)

// config is the part of an OpenAI Realtime session that Gemini fixes at
// setup, in OpenAI's terms.
type config struct {
	Instructions  string            `json:"instructions"`
	Voice         string            `json:"voice"`
	Modalities    []string          `json:"output_modalities"`
	Tools         []json.RawMessage `json:"tools"`
	Transcription json.RawMessage   `json:"transcription"`  // audio.input.transcription; null: off
	TurnDetection json.RawMessage   `json:"turn_detection"` // audio.input.turn_detection; null: off
	InputFormat   audioFormat       `json:"input_format"`
	OutputFormat  audioFormat       `json:"output_format"`
}

type audioFormat struct {
	Type string `json:"type"`
	Rate int    `json:"rate,omitempty"`
}

// defaultConfig is OpenAI's default session, as a client that never sends
// session.update gets it: audio out, server VAD, no input transcription.
func defaultConfig() config {
	return config{Voice: "alloy", Modalities: []string{"audio"},
		TurnDetection: json.RawMessage(`{"type":"server_vad","threshold":0.5,"prefix_padding_ms":300,"silence_duration_ms":200,"create_response":true,"interrupt_response":true}`),
		Transcription: json.RawMessage(`null`),
		InputFormat:   audioFormat{"audio/pcm", 24000}, OutputFormat: audioFormat{"audio/pcm", 24000}}
}

// sessionUpdate is the part of session.update's session the translation
// reads.
type sessionUpdate struct {
	Instructions *string           `json:"instructions"`
	Modalities   []string          `json:"output_modalities"`
	Tools        []json.RawMessage `json:"tools"`
	Audio        *struct {
		Input *struct {
			Format        *audioFormat    `json:"format"`
			Transcription json.RawMessage `json:"transcription"`
			TurnDetection json.RawMessage `json:"turn_detection"`
		} `json:"input"`
		Output *struct {
			Format *audioFormat `json:"format"`
			Voice  *string      `json:"voice"`
		} `json:"output"`
	} `json:"audio"`
}

// apply returns c with u's fields set, and the problems that make u
// unusable with Gemini (param path, message).
func (c config) apply(u sessionUpdate) (config, [][2]string) {
	var bad [][2]string
	if u.Instructions != nil {
		c.Instructions = *u.Instructions
	}
	if u.Modalities != nil {
		c.Modalities = u.Modalities
	}
	if u.Tools != nil {
		c.Tools = u.Tools
	}
	if a := u.Audio; a != nil {
		if in := a.Input; in != nil {
			if in.Format != nil {
				c.InputFormat = *in.Format
			}
			if in.Transcription != nil {
				c.Transcription = in.Transcription
			}
			if in.TurnDetection != nil {
				c.TurnDetection = in.TurnDetection
			}
		}
		if o := a.Output; o != nil {
			if o.Format != nil {
				c.OutputFormat = *o.Format
			}
			if o.Voice != nil {
				c.Voice = *o.Voice
			}
		}
	}
	// Gemini takes and gives PCM16 only; G.711 would need the gateway to
	// transcode and resample, which it does not do.
	if c.InputFormat.Type != "audio/pcm" {
		bad = append(bad, [2]string{"session.audio.input.format", "Gemini Live takes PCM16 audio only (audio/pcm); " + c.InputFormat.Type + " is not converted by the gateway"})
	}
	if c.OutputFormat.Type != "audio/pcm" || c.OutputFormat.Rate != 0 && c.OutputFormat.Rate != 24000 {
		bad = append(bad, [2]string{"session.audio.output.format", "Gemini Live speaks PCM16 at 24 kHz only (audio/pcm, rate 24000)"})
	}
	for _, m := range c.Modalities {
		if m != "audio" && m != "text" {
			bad = append(bad, [2]string{"session.output_modalities", "unknown output modality " + m})
		}
	}
	if len(c.Modalities) != 1 {
		bad = append(bad, [2]string{"session.output_modalities", `Gemini Live answers in one modality: ["audio"] or ["text"]`})
	}
	if c.InputFormat.Rate == 0 {
		c.InputFormat.Rate = 24000
	}
	return c, bad
}

// changed names the fields that differ between c and d: what a session
// update would have to change in a setup already sent.
func (c config) changed(d config) []string {
	var out []string
	if c.Instructions != d.Instructions {
		out = append(out, "instructions")
	}
	if c.Voice != d.Voice {
		out = append(out, "audio.output.voice")
	}
	if !slices.Equal(c.Modalities, d.Modalities) {
		out = append(out, "output_modalities")
	}
	if string(marshal(c.Tools)) != string(marshal(d.Tools)) {
		out = append(out, "tools")
	}
	if !sameJSON(c.Transcription, d.Transcription) {
		out = append(out, "audio.input.transcription")
	}
	if !sameJSON(c.TurnDetection, d.TurnDetection) {
		out = append(out, "audio.input.turn_detection")
	}
	if c.InputFormat != d.InputFormat {
		out = append(out, "audio.input.format")
	}
	return out
}

// sameJSON compares two JSON values for meaning (key order and spacing
// aside).
func sameJSON(a, b json.RawMessage) bool {
	var va, vb any
	_ = json.Unmarshal(a, &va)
	_ = json.Unmarshal(b, &vb)
	return string(marshal(va)) == string(marshal(vb))
}

// vad is the configuration's turn detection: whether Gemini's automatic
// activity detection is on, and its silence and padding settings.
func (c config) vad() (on bool, silenceMS, paddingMS int) {
	var td *struct {
		Type      string `json:"type"`
		SilenceMS int    `json:"silence_duration_ms"`
		PaddingMS int    `json:"prefix_padding_ms"`
	}
	_ = json.Unmarshal(c.TurnDetection, &td)
	if td == nil {
		return false, 0, 0
	}
	return true, td.SilenceMS, td.PaddingMS
}

// transcribes says whether the client asked for its input transcribed.
func (c config) transcribes() bool {
	t := strings.TrimSpace(string(c.Transcription))
	return t != "" && t != "null"
}

// openAIVoices maps OpenAI's voices to Gemini's prebuilt voices, following
// LiteLLM where it names one (alloy, marin) and the closest in register
// otherwise. A Gemini voice name passes as given.
var openAIVoices = map[string]string{
	"alloy": "Zephyr", "marin": "Aoede", "cedar": "Charon", "ash": "Puck", "ballad": "Orus",
	"coral": "Kore", "echo": "Fenrir", "sage": "Leda", "shimmer": "Aoede", "verse": "Puck",
}

// geminiVoice is the prebuilt voice for an OpenAI voice name.
func geminiVoice(v string) string {
	if g, ok := openAIVoices[v]; ok {
		return g
	}
	return v
}

// setup is Gemini's setup message for the configuration; handle, if not
// "", resumes the session it was issued to (Session.ResumeSetup).
func (c config) setup(model, handle string) []byte {
	modality := "AUDIO"
	if len(c.Modalities) == 1 && c.Modalities[0] == "text" {
		modality = "TEXT"
	}
	gen := map[string]any{"responseModalities": []string{modality}}
	if modality == "AUDIO" {
		gen["speechConfig"] = map[string]any{"voiceConfig": map[string]any{
			"prebuiltVoiceConfig": map[string]any{"voiceName": geminiVoice(c.Voice)}}}
	}
	resumption := map[string]any{}
	if handle != "" {
		resumption["handle"] = handle
	}
	setup := map[string]any{"model": model, "generationConfig": gen,
		// Handles let a new connection carry the conversation on (goAway,
		// the connection's time limit).
		"sessionResumption": resumption,
		// Without it Gemini ends an audio session after about 15 minutes
		// whatever the connections (ai.google.dev/gemini-api/docs/live-session):
		// a sliding window keeps the newest context instead, as a phone
		// call that runs for an hour needs.
		"contextWindowCompression": map[string]any{"slidingWindow": map[string]any{}}}
	if c.Instructions != "" {
		setup["systemInstruction"] = map[string]any{"parts": []any{map[string]any{"text": c.Instructions}}}
	}
	if len(c.Tools) > 0 {
		var decls []any
		for _, t := range c.Tools {
			var f struct {
				Type        string          `json:"type"`
				Name        string          `json:"name"`
				Description string          `json:"description"`
				Parameters  json.RawMessage `json:"parameters"`
			}
			if json.Unmarshal(t, &f) != nil || f.Type != "function" {
				continue // OpenAI's MCP tools have no Gemini counterpart
			}
			d := map[string]any{"name": f.Name}
			if f.Description != "" {
				d["description"] = f.Description
			}
			if len(f.Parameters) > 0 {
				d["parameters"] = f.Parameters
			}
			decls = append(decls, d)
		}
		if len(decls) > 0 {
			setup["tools"] = []any{map[string]any{"functionDeclarations": decls}}
		}
	}
	if modality == "AUDIO" {
		// OpenAI sends the assistant's transcript with its audio always.
		setup["outputAudioTranscription"] = map[string]any{}
	}
	if c.transcribes() {
		setup["inputAudioTranscription"] = map[string]any{}
	}
	aad := map[string]any{}
	if on, silence, padding := c.vad(); !on {
		aad["disabled"] = true
	} else {
		if silence > 0 {
			aad["silenceDurationMs"] = silence
		}
		if padding > 0 {
			aad["prefixPaddingMs"] = padding
		}
	}
	setup["realtimeInputConfig"] = map[string]any{"automaticActivityDetection": aad}
	return marshal(map[string]any{"setup": setup})
}

// openAI is the session object OpenAI's session.created and
// session.updated carry.
func (c config) openAI(id, model string) map[string]any {
	tools := c.Tools
	if tools == nil {
		tools = []json.RawMessage{}
	}
	return map[string]any{
		"type": "realtime", "object": "realtime.session", "id": id, "model": model,
		"output_modalities": c.Modalities, "instructions": c.Instructions,
		"tools": tools, "tool_choice": "auto", "max_output_tokens": "inf",
		"audio": map[string]any{
			"input": map[string]any{"format": c.InputFormat, "transcription": c.Transcription,
				"turn_detection": c.TurnDetection, "noise_reduction": nil},
			"output": map[string]any{"format": audioFormat{"audio/pcm", 24000}, "voice": c.Voice, "speed": 1},
		},
	}
}
