package load

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/gorilla/websocket"
)

// Turns: with Config.Turns > 1 a call holds its session for that many
// exchanges, so the first turn (which a warm pool or a slow dial changes)
// and the later ones (which only the relay and the upstream's answer time
// change) are reported apart: Sample.FirstAudio is the first turn's,
// Sample.LaterFirstAudio the others'.
//
// Manual turns (the default) are what a one-turn call does, each time: with
// Config.Audio, AudioLength of real-time appends and input_audio_buffer.commit
// (the first turn's stream starts with the upgrade, as a call's does), then
// response.create; without it, response.create alone. A turn's first audio is
// measured from response.create sent to the first audio delta. The next turn
// starts when response.done (status completed, with audio) has arrived.
//
// VAD turns (Config.VAD) are a voice client's under server VAD: after
// session.created the call sends a session.update turning on server_vad with
// silence_duration_ms = VADSilence and create_response; each turn then
// streams AudioLength of a tone in real time (20 ms chunks, loud enough for
// any energy VAD; mockai takes it for speech) followed by real-time silence
// until the server sends input_audio_buffer.speech_stopped, and the server's
// own response is followed to response.done. A VAD turn's first audio is
// measured from the end of speech (the moment the first silence chunk is
// sent) to the first audio delta: what the user waits, so it includes the
// server's silence window (VADSilence); subtract it to compare with manual
// turns.

// DefaultVADSilence is OpenAI's default silence_duration_ms.
const DefaultVADSilence = 500 * time.Millisecond

// maxTurns bounds Config.Turns: every turn is at least one response.
const maxTurns = 1000

// VAD event types.
const (
	evSessionUpdated = "session.updated"
	evSpeechStopped  = "input_audio_buffer.speech_stopped"
)

// msgAudioSpeech carries 20 ms of a 24 kHz PCM16 tone that any energy-based
// server VAD (and mockai's) hears as speech.
var msgAudioSpeech = []byte(`{"type":"input_audio_buffer.append","audio":"` +
	base64.StdEncoding.EncodeToString(tone(audioChunkBytes)) + `"}`)

// tone is n bytes of a 500 Hz square wave at a quarter of full scale
// (about -12 dBFS): 24 samples up, 24 down.
func tone(n int) []byte {
	const amplitude, halfPeriod = 8192, 24
	b := make([]byte, n)
	for i := 0; i+1 < n; i += 2 {
		v := int16(amplitude)
		if (i/2/halfPeriod)%2 == 1 {
			v = -amplitude
		}
		b[i], b[i+1] = byte(v), byte(uint16(v)>>8)
	}
	return b
}

// vadUpdate is the session.update of a VAD call.
func vadUpdate(silence time.Duration) ([]byte, error) {
	return json.Marshal(map[string]any{"type": "session.update", "session": map[string]any{
		"type": "realtime",
		"audio": map[string]any{"input": map[string]any{"turn_detection": map[string]any{
			"type": "server_vad", "silence_duration_ms": silence.Milliseconds(),
			"create_response": true, "interrupt_response": true,
		}}},
	}})
}

// checkTurns validates the turn settings of cfg and fills their defaults.
func checkTurns(cfg *Config) error {
	switch {
	case cfg.Turns < 0 || cfg.Turns > maxTurns:
		return fmt.Errorf("load: turns %d: want 0 to %d", cfg.Turns, maxTurns)
	case cfg.VAD && (cfg.Protocol == ProtocolLive || cfg.Protocol == ProtocolGemini):
		return fmt.Errorf("load: VAD turns speak the Realtime protocol only")
	case cfg.Turns > 1 && cfg.Protocol == ProtocolLive:
		return fmt.Errorf("load: turns speak the Realtime protocol only")
	case cfg.VADSilence < 0:
		return fmt.Errorf("load: VAD silence %v must not be negative", cfg.VADSilence)
	}
	if cfg.Turns == 0 {
		cfg.Turns = 1
	}
	if cfg.VAD {
		cfg.Audio = true
		if cfg.AudioLength <= 0 {
			cfg.AudioLength = DefaultAudioLength
		}
		if cfg.VADSilence == 0 {
			cfg.VADSilence = DefaultVADSilence
		}
		msg, err := vadUpdate(cfg.VADSilence)
		if err != nil {
			return fmt.Errorf("load: session.update: %w", err)
		}
		cfg.vadUpdate = msg
	}
	return nil
}

// turnFailure is a failed turn, already classified.
type turnFailure struct{ class, detail string }

// callTurns runs a call of several manual or VAD turns (see above), or
// of a flow's turns (flows.go).
func (c *Client) callTurns(ctx context.Context, start time.Time, length time.Duration) Sample {
	manualAudio := c.cfg.Audio && !c.cfg.VAD
	sess, s := c.open(ctx, start, manualAudio, callReadBuffer)
	if c.cfg.Turns > 1 { // not nil: the report shows the later turns even if none got far
		s.LaterFirstAudio = make([]time.Duration, 0, c.cfg.Turns-1)
	}
	if sess == nil {
		return s
	}
	defer sess.close()
	fail := func(turn int, f *turnFailure) Sample {
		s.Failure, s.Detail = f.class, fmt.Sprintf("turn %d: %s", turn+1, f.detail)
		return s
	}
	if c.cfg.VAD {
		if err := sess.conn.WriteMessage(websocket.TextMessage, c.cfg.vadUpdate); err != nil {
			return fail(0, c.readFailure(ctx, err, s.Reached))
		}
		if err := sess.until(evSessionUpdated, c.cfg.Key); err != nil {
			return fail(0, c.waitFailure(ctx, err, s.Reached))
		}
	}
	if c.cfg.Flow == FlowTool {
		if err := sess.conn.WriteMessage(websocket.TextMessage, msgToolSession); err != nil {
			return fail(0, c.readFailure(ctx, err, s.Reached))
		}
		if err := sess.until(evSessionUpdated, c.cfg.Key); err != nil {
			return fail(0, c.waitFailure(ctx, err, s.Reached))
		}
	}
	for turn := range c.cfg.Turns {
		var first time.Duration
		var f *turnFailure
		switch {
		case c.cfg.Flow != FlowTurns:
			first, f = c.flowTurn(ctx, sess, s.Reached)
		case c.cfg.VAD:
			first, f = c.vadTurn(ctx, sess, s.Reached)
		default:
			first, f = c.manualTurn(ctx, sess, turn, s.Reached)
		}
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
	if err := sess.closeHandshake(); err != nil {
		return fail(c.cfg.Turns-1, c.readFailure(ctx, err, s.Reached))
	}
	s.Total = time.Since(s.Start)
	s.Reached = PhaseDone
	return s
}

// manualTurn is one manual turn: its audio (the first turn's is already
// streaming), response.create, the response to its end.
func (c *Client) manualTurn(ctx context.Context, sess *session, turn int, reached Phase) (time.Duration, *turnFailure) {
	if turn > 0 && c.cfg.Audio {
		if err := streamAudio(sess.conn, c.cfg.AudioLength, msgAudioAppend, msgAudioCommit); err != nil {
			return 0, c.readFailure(ctx, err, reached)
		}
	} else if err := sess.waitAudio(); err != nil {
		return 0, c.readFailure(ctx, err, reached)
	}
	if err := sess.conn.WriteMessage(websocket.TextMessage, msgResponseCreate); err != nil {
		return 0, c.readFailure(ctx, err, reached)
	}
	return c.followResponse(ctx, sess, time.Now(), reached)
}

// vadTurn is one VAD turn: speech, then silence until speech_stopped, and
// the response the server starts by itself.
func (c *Client) vadTurn(ctx context.Context, sess *session, reached Phase) (time.Duration, *turnFailure) {
	stop := make(chan struct{})
	var endOfSpeech time.Time
	var wg sync.WaitGroup
	var werr error
	wg.Go(func() { endOfSpeech, werr = speak(sess.conn, c.cfg.AudioLength, stop) })
	stopWriter := sync.OnceFunc(func() { close(stop); wg.Wait() })
	defer stopWriter()

	err := sess.until(evSpeechStopped, c.cfg.Key)
	stopWriter()
	if err != nil {
		return 0, c.waitFailure(ctx, err, reached)
	}
	if werr != nil {
		return 0, c.readFailure(ctx, werr, reached)
	}
	if endOfSpeech.IsZero() {
		return 0, &turnFailure{"vad_early_stop", "speech_stopped arrived before the speech ended"}
	}
	return c.followResponse(ctx, sess, endOfSpeech, reached)
}

// maxSilence bounds the silence a VAD turn sends while waiting for
// speech_stopped; the call's deadline bounds it as well.
const maxSilence = time.Minute

// speak sends length of the tone in real-time 20 ms chunks, then silence
// chunks on the same pace until stop is closed (or maxSilence passes). It
// returns when the first silence chunk went out: the end of speech.
func speak(conn *websocket.Conn, length time.Duration, stop <-chan struct{}) (time.Time, error) {
	chunks := int((length + audioChunk - 1) / audioChunk)
	tick := time.NewTicker(audioChunk)
	defer tick.Stop()
	var end time.Time
	for i := 0; i < chunks+int(maxSilence/audioChunk); i++ {
		if i > 0 {
			select {
			case <-stop:
				return end, nil
			case <-tick.C:
			}
		}
		msg := msgAudioSpeech
		if i >= chunks {
			msg = msgAudioAppend
			if end.IsZero() {
				end = time.Now()
			}
		}
		if err := conn.WriteMessage(websocket.TextMessage, msg); err != nil {
			select {
			case <-stop: // the reader is done with this turn: not the writer's failure
				return end, nil
			default:
				return end, err
			}
		}
	}
	<-stop
	return end, nil
}

// followResponse reads one response to its response.done and returns the
// time from since to its first audio delta.
func (c *Client) followResponse(ctx context.Context, sess *session, since time.Time, reached Phase) (time.Duration, *turnFailure) {
	var first time.Duration
	seen := false
	for {
		msg, err := sess.read()
		if err != nil {
			return 0, c.readFailure(ctx, err, reached)
		}
		typ, err := EventType(msg)
		if err != nil {
			return 0, &turnFailure{"protocol", err.Error()}
		}
		switch typ {
		case evAudioDeltaGA, evAudioDeltaBeta:
			if !seen {
				first, seen = time.Since(since), true
			}
		case evError:
			class, detail := errorEvent(msg, c.cfg.Key)
			return 0, &turnFailure{class, detail}
		case evResponseDone:
			status, err := responseStatus(msg)
			switch {
			case err != nil:
				return 0, &turnFailure{"protocol", err.Error()}
			case status != "" && status != "completed":
				return 0, &turnFailure{"response_" + sanitizeClass(status), "response.done status " + status}
			case !seen:
				return 0, &turnFailure{"no_audio", "response.done without an audio delta"}
			}
			return first, nil
		}
	}
}

func (c *Client) readFailure(ctx context.Context, err error, reached Phase) *turnFailure {
	class, detail := classifyRead(ctx, err, reached)
	return &turnFailure{class, detail}
}

func (c *Client) waitFailure(ctx context.Context, err error, reached Phase) *turnFailure {
	class, detail := liveFailure(ctx, err, reached)
	return &turnFailure{class, detail}
}
