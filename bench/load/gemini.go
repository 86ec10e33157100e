package load

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/gorilla/websocket"
)

// ProtocolGemini is Google's Gemini Live API (BidiGenerateContent on AI
// Studio) spoken directly, so that a Gemini upstream can be measured
// without the gateway and set against the gateway translating the
// Realtime API to it. A Gemini call:
//
//	dial        as for Realtime: start -> 101 (the key in x-goog-api-key,
//	            never in the URL)
//	session     setup sent (right after the 101) -> setupComplete
//	first_audio clientContent{turnComplete:true} sent -> the first
//	            serverContent.modelTurn part with audio (inlineData); with
//	            Config.Audio, AudioLength of real-time realtimeInput.audio
//	            chunks (silence) go first, and the clock starts after them
//	total       start -> the last turn's serverContent.turnComplete and a
//	            clean close (client close 1000, the server's close frame)
//
// Config.Turns turns run one after the other on the session, each started
// once the one before it reached turnComplete; later turns' first audio is
// Sample.LaterFirstAudio, as for Realtime manual turns. The setup is the
// one the gateway sends Gemini for a Realtime session with OpenAI's
// defaults (server/providers/gemini: audio out with voice Zephyr, output
// transcription, session resumption, automatic activity detection with a
// 200 ms silence), and each turn asks what the gateway asks for a
// response.create, so a direct call and a translated one cost Gemini (and
// mockai) the same work. A turn Gemini interrupts fails as interrupted, a
// turnComplete without audio as no_audio; Gemini refuses by closing the
// socket, which fails as unexpected_close_<code>.
const ProtocolGemini Protocol = "gemini"

// GeminiPath is the path of AI Studio's Live endpoint (v1beta, the version
// the gateway dials for a gemini/ deployment).
const GeminiPath = "/ws/google.ai.generativelanguage.v1beta.GenerativeService.BidiGenerateContent"

const (
	defaultGeminiModel = "gemini-3.8-live"
	// geminiKeyHeader carries the key: AI Studio also takes ?key=, but a
	// URL reaches logs.
	geminiKeyHeader = "x-goog-api-key"
)

var (
	// msgGeminiTurn ends the user's turn and asks for an answer: what the
	// gateway sends Gemini for a response.create.
	msgGeminiTurn = []byte(`{"clientContent":{"turnComplete":true}}`)
	// msgGeminiAudio carries 20 ms of 24 kHz PCM16 silence, as the gateway
	// forwards an input_audio_buffer.append (base64 unchanged, labelled
	// with OpenAI's rate; Gemini resamples).
	msgGeminiAudio = []byte(`{"realtimeInput":{"audio":{"data":"` +
		base64.StdEncoding.EncodeToString(make([]byte, audioChunkBytes)) + `","mimeType":"audio/pcm;rate=24000"}}}`)
)

// geminiSetup is the setup message of a Gemini call for model (a bare name
// gets AI Studio's "models/" prefix).
func geminiSetup(model string) ([]byte, error) {
	if model == "" {
		model = defaultGeminiModel
	}
	if !strings.HasPrefix(model, "models/") && !strings.Contains(model, "/models/") && !strings.HasPrefix(model, "tunedModels/") {
		model = "models/" + model
	}
	return json.Marshal(map[string]any{"setup": map[string]any{
		"model": model,
		"generationConfig": map[string]any{"responseModalities": []string{"AUDIO"},
			"speechConfig": map[string]any{"voiceConfig": map[string]any{"prebuiltVoiceConfig": map[string]any{"voiceName": "Zephyr"}}}},
		"sessionResumption":        map[string]any{},
		"outputAudioTranscription": map[string]any{},
		"realtimeInputConfig": map[string]any{"automaticActivityDetection": map[string]any{
			"silenceDurationMs": 200, "prefixPaddingMs": 300}},
	}})
}

// geminiMsg is what a Gemini server message means to a call; one message
// may carry several of these (a last audio part with turnComplete).
type geminiMsg struct {
	setupComplete, audio, turnComplete, interrupted bool
}

// An audio part alone, the bulk of a call's messages, as mockai (and
// protobuf JSON writers) lay it out: a message that starts with the prefix
// and ends with the suffix holds serverContent.modelTurn.parts and nothing
// else, so no turnComplete, interrupted or setupComplete, and base64 holds
// no quote, so the mime type's key cannot be inside the data.
var (
	geminiPartPrefix = []byte(`{"serverContent":{"modelTurn":{"parts":[{"inlineData":{`)
	geminiPartSuffix = []byte(`}}]}}}`)
	geminiAudioMime  = []byte(`"mimeType":"audio/`)
)

// parseGeminiMsg reads a server message (BidiGenerateContentServerMessage)
// by scanning, without decoding the audio: the model's audio parts are
// most of a call's bytes, so the common one is matched by its ends
// (geminiPartPrefix), and the rest is walked field by field.
func parseGeminiMsg(msg []byte) (geminiMsg, error) {
	var m geminiMsg
	if bytes.HasPrefix(msg, geminiPartPrefix) && bytes.HasSuffix(msg, geminiPartSuffix) && bytes.Contains(msg, geminiAudioMime) {
		m.audio = true
		return m, nil
	}
	if _, found, err := field(msg, "setupComplete"); err != nil {
		return m, fmt.Errorf("gemini message is not a JSON object: %w", err)
	} else if found {
		m.setupComplete = true
	}
	sc, found, err := field(msg, "serverContent")
	if err != nil || !found {
		return m, err
	}
	if m.turnComplete, err = boolField(sc, "turnComplete"); err != nil {
		return m, err
	}
	if m.interrupted, err = boolField(sc, "interrupted"); err != nil {
		return m, err
	}
	turn, found, err := field(sc, "modelTurn")
	if err != nil || !found {
		return m, err
	}
	parts, found, err := field(turn, "parts")
	if err != nil || !found {
		return m, err
	}
	m.audio, err = hasAudioPart(parts)
	return m, err
}

// boolField reports whether key is true in the object obj.
func boolField(obj []byte, key string) (bool, error) {
	raw, found, err := field(obj, key)
	if err != nil {
		return false, fmt.Errorf("gemini message: %w", err)
	}
	return found && string(raw) == "true", nil
}

// hasAudioPart reports whether the parts array holds an inlineData part
// of audio.
func hasAudioPart(parts []byte) (bool, error) {
	i := skipSpace(parts, 0)
	if i >= len(parts) || parts[i] != '[' {
		return false, errors.New("gemini message: modelTurn.parts is not an array")
	}
	i = skipSpace(parts, i+1)
	audio := false
	for i < len(parts) && parts[i] != ']' {
		end, err := skipValue(parts, i)
		if err != nil {
			return false, fmt.Errorf("gemini message: %w", err)
		}
		if inline, found, err := field(parts[i:end], "inlineData"); err == nil && found {
			mime, _, _ := stringField(inline, "mimeType")
			audio = audio || strings.HasPrefix(mime, "audio/")
		}
		i = skipSpace(parts, end)
		if i < len(parts) && parts[i] == ',' {
			i = skipSpace(parts, i+1)
		}
	}
	return audio, nil
}

// callGemini runs one Gemini Live call (see ProtocolGemini).
func (c *Client) callGemini(ctx context.Context, start time.Time, length time.Duration) Sample {
	sess, s := c.dial(ctx, start, callReadBuffer)
	if c.cfg.Turns > 1 { // not nil: the report shows the later turns even if none got far
		s.LaterFirstAudio = make([]time.Duration, 0, c.cfg.Turns-1)
	}
	if sess == nil {
		return s
	}
	defer sess.close()
	fail := func(turn int, f *turnFailure) Sample {
		s.Failure, s.Detail = f.class, f.detail
		if c.cfg.Turns > 1 {
			s.Detail = fmt.Sprintf("turn %d: %s", turn+1, f.detail)
		}
		return s
	}

	sent := time.Now()
	if err := sess.conn.WriteMessage(websocket.TextMessage, c.geminiSetup); err != nil {
		return fail(0, c.readFailure(ctx, err, s.Reached))
	}
	for {
		m, f := c.nextGemini(ctx, sess, s.Reached)
		if f != nil {
			return fail(0, f)
		}
		if m.setupComplete {
			break
		}
	}
	s.Session = time.Since(sent)
	s.Reached = PhaseSession

	for turn := range c.cfg.Turns {
		first, f := c.geminiTurn(ctx, sess, s.Reached)
		if f != nil {
			return fail(turn, f)
		}
		if turn == 0 {
			s.FirstAudio, s.Reached = first, PhaseFirstAudio
		} else {
			s.LaterFirstAudio = append(s.LaterFirstAudio, first)
		}
	}
	if err := sess.hold(ctx, start.Add(length), &s.Held); err != nil {
		return fail(c.cfg.Turns-1, c.readFailure(ctx, err, s.Reached))
	}
	// What follows turnComplete (usageMetadata, a resumption handle) is
	// drained by the close handshake.
	if err := sess.closeHandshake(); err != nil {
		return fail(c.cfg.Turns-1, c.readFailure(ctx, err, s.Reached))
	}
	s.Total = time.Since(s.Start)
	s.Reached = PhaseDone
	return s
}

// geminiTurn is one turn: the input audio (with Config.Audio), the
// clientContent that asks for the answer, and the model's turn to its
// turnComplete; it returns the time from the ask to the first audio part.
func (c *Client) geminiTurn(ctx context.Context, sess *session, reached Phase) (time.Duration, *turnFailure) {
	if c.cfg.Audio {
		if err := streamAudio(sess.conn, c.cfg.AudioLength, msgGeminiAudio, nil); err != nil {
			return 0, c.readFailure(ctx, err, reached)
		}
	}
	if err := sess.conn.WriteMessage(websocket.TextMessage, msgGeminiTurn); err != nil {
		return 0, c.readFailure(ctx, err, reached)
	}
	asked := time.Now()
	var first time.Duration
	seen := false
	for {
		m, f := c.nextGemini(ctx, sess, reached)
		switch {
		case f != nil:
			return 0, f
		case m.audio && !seen:
			first, seen = time.Since(asked), true
		}
		switch {
		case m.interrupted:
			return 0, &turnFailure{"interrupted", "serverContent.interrupted: Gemini stopped the model's turn"}
		case m.turnComplete && !seen:
			return 0, &turnFailure{"no_audio", "turnComplete without an audio part"}
		case m.turnComplete:
			return first, nil
		}
	}
}

// nextGemini reads and parses the next server message (Gemini sends
// binary frames of JSON; text is taken too).
func (c *Client) nextGemini(ctx context.Context, sess *session, reached Phase) (geminiMsg, *turnFailure) {
	msg, err := sess.readMessage(true)
	if err != nil {
		return geminiMsg{}, c.readFailure(ctx, err, reached)
	}
	m, err := parseGeminiMsg(msg)
	if err != nil {
		return m, &turnFailure{"protocol", err.Error()}
	}
	return m, nil
}
