package load

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/gorilla/websocket"
)

// Protocol is what a call speaks: OpenAI's Realtime API, GPT-Live or Gemini
// Live (ProtocolGemini).
type Protocol string

const (
	ProtocolRealtime Protocol = "realtime"
	// ProtocolLive is GPT-Live (/v1/live/sessions): no model in the URL, the
	// client's first event session.start names it. A Live call's phases:
	//
	//	dial        as for Realtime: start -> 101
	//	session     session.start sent -> session.started
	//	first_audio the first session.input_audio.append sent -> the first
	//	            session.output_audio.delta (with Config.Audio, the first of
	//	            AudioLength of real-time appends)
	//	total       start -> session.close answered by session.closed and the
	//	            server's close 1000 (the session's final usage confirmed)
	//
	// A session.close answered by a close without session.closed fails the
	// call as no_session_closed: its usage would be unconfirmed.
	ProtocolLive Protocol = "live"
)

// ParseProtocol reads a -protocol flag value.
func ParseProtocol(s string) (Protocol, error) {
	switch p := Protocol(strings.TrimSpace(s)); p {
	case ProtocolRealtime, ProtocolLive, ProtocolGemini:
		return p, nil
	}
	return "", fmt.Errorf("protocol %q: want realtime, live or gemini", s)
}

// LivePath is the default path of a Live target.
const LivePath = "/v1/live/sessions"

// Live event types the client reacts to.
const (
	evLiveStarted     = "session.started"
	evLiveAudioDelta  = "session.output_audio.delta"
	evLiveClosed      = "session.closed"
	defaultLiveModel  = "gpt-live-1"
	liveSessionClosed = "no_session_closed"
)

var (
	msgLiveClose = []byte(`{"type":"session.close"}`)
	// msgLiveAppend carries 20 ms of 24 kHz PCM16 silence, as msgAudioAppend.
	msgLiveAppend = []byte(`{"type":"session.input_audio.append","audio":"` +
		base64.StdEncoding.EncodeToString(make([]byte, audioChunkBytes)) + `"}`)
)

// liveStart is the session.start a Live call sends: model, PCM16 at 24 kHz.
func liveStart(model string) ([]byte, error) {
	if model == "" {
		model = defaultLiveModel
	}
	return json.Marshal(map[string]any{"type": "session.start", "session": map[string]any{
		"model": model, "audio": map[string]any{"format": map[string]any{"type": "audio/pcm", "rate": 24000}},
	}})
}

// callLive runs one Live call (see ProtocolLive for its phases).
func (c *Client) callLive(ctx context.Context, start time.Time, length time.Duration) Sample {
	sess, s := c.dial(ctx, start, callReadBuffer)
	if sess == nil {
		return s
	}
	defer sess.close()
	fail := func(class, detail string) Sample {
		s.Failure, s.Detail = class, detail
		return s
	}
	readErr := func(err error) Sample { return fail(classifyRead(ctx, err, s.Reached)) }

	sent := time.Now()
	if err := sess.conn.WriteMessage(websocket.TextMessage, c.liveStart); err != nil {
		return readErr(err)
	}
	if err := sess.until(evLiveStarted, c.cfg.Key); err != nil {
		return fail(liveFailure(ctx, err, s.Reached))
	}
	s.Session = time.Since(sent)
	s.Reached = PhaseSession

	appended := time.Now()
	if c.cfg.Audio {
		sess.streamAudio(c.cfg.AudioLength, msgLiveAppend, nil)
	} else if err := sess.conn.WriteMessage(websocket.TextMessage, msgLiveAppend); err != nil {
		return readErr(err)
	}
	if err := sess.until(evLiveAudioDelta, c.cfg.Key); err != nil {
		return fail(liveFailure(ctx, err, s.Reached))
	}
	s.FirstAudio = time.Since(appended)
	s.Reached = PhaseFirstAudio

	if err := sess.waitAudio(); err != nil {
		return readErr(err)
	}
	if err := sess.hold(ctx, start.Add(length), &s.Held); err != nil {
		return readErr(err)
	}
	if err := sess.conn.WriteMessage(websocket.TextMessage, msgLiveClose); err != nil {
		return readErr(err)
	}
	if err := sess.until(evLiveClosed, c.cfg.Key); err != nil {
		var ce *websocket.CloseError
		if errors.As(err, &ce) && ce.Code == websocket.CloseNormalClosure {
			return fail(liveSessionClosed, "the server closed without session.closed: usage unconfirmed")
		}
		return fail(liveFailure(ctx, err, s.Reached))
	}
	if err := sess.awaitClose(); err != nil {
		return readErr(err)
	}
	s.Total = time.Since(s.Start)
	s.Reached = PhaseDone
	return s
}

// eventError is an "error" event met while waiting, already classified.
type eventError struct{ class, detail string }

func (e *eventError) Error() string { return e.class + ": " + e.detail }

// until reads events until one of type typ; an error event or a frame that
// is not an event ends the wait with an error.
func (sess *session) until(typ, key string) error {
	for {
		msg, err := sess.read()
		if err != nil {
			return err
		}
		got, err := EventType(msg)
		if err != nil {
			return &eventError{"protocol", err.Error()}
		}
		switch got {
		case typ:
			return nil
		case evError:
			class, detail := errorEvent(msg, key)
			return &eventError{class, detail}
		}
	}
}

// liveFailure classifies what ended a wait of callLive.
func liveFailure(ctx context.Context, err error, reached Phase) (class, detail string) {
	if ee, ok := errors.AsType[*eventError](err); ok {
		return ee.class, ee.detail
	}
	return classifyRead(ctx, err, reached)
}

// awaitClose reads (and drops) what follows session.closed until the
// server's close frame, which gorilla answers; 1000 or no status is clean.
func (sess *session) awaitClose() error {
	for {
		if _, _, err := sess.conn.NextReader(); err != nil {
			var ce *websocket.CloseError
			if errors.As(err, &ce) && (ce.Code == websocket.CloseNormalClosure || ce.Code == websocket.CloseNoStatusReceived) {
				return nil
			}
			return err
		}
	}
}
