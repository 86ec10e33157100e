package mockai

import (
	"bytes"
	"fmt"
	"net/http"
	"time"

	"github.com/gorilla/websocket"
)

// What a test of session continuity needs from the upstream (the gateway
// carrying a conversation onto a fresh upstream session): an upstream
// session that dies at a chosen point of the conversation (Cut), OpenAI's
// cap on a session's length (SessionCap: error session_expired, then close
// 1001), and a record of what each upstream session received (Received).

// Cut kinds.
const (
	CutDrop     = "drop"     // the TCP connection ends without a close frame
	CutClose    = "close"    // a close frame with Cut.Code (default 1011)
	CutMidFrame = "midframe" // the header and a few bytes of a text frame, then the TCP connection ends
)

// Cut ends upstream sessions at a point of their conversation, the way a
// deployment restarting or a reset connection does. It counts responses,
// not frames, so a test says "after the first answer" whatever the
// response streams. The zero value is off.
type Cut struct {
	Kind string // CutDrop, CutClose or CutMidFrame; "" is off
	// Code is the close code of CutClose (0: 1011).
	Code int
	// AfterResponses: the session is cut right after its Nth response.done
	// (N >= 1), so between turns.
	AfterResponses int
	// During: instead, the session is cut during its Nth response, right
	// after that response's first output delta.
	During bool
	// Times is how many sessions of the server are cut (0: every one), so
	// that the session a relay opens to replace a cut one lives.
	Times int
}

func (c Cut) validate() error {
	switch {
	case c.Kind == "":
		return nil
	case c.Kind != CutDrop && c.Kind != CutClose && c.Kind != CutMidFrame:
		return fmt.Errorf("cut kind %q: want %s, %s or %s", c.Kind, CutDrop, CutClose, CutMidFrame)
	case c.AfterResponses < 1:
		return fmt.Errorf("cut after %d responses: want 1 or more", c.AfterResponses)
	case c.Code != 0 && (c.Code < 1000 || c.Code > 4999):
		return fmt.Errorf("cut close code %d: want 1000-4999", c.Code)
	case c.Times < 0:
		return fmt.Errorf("cut times %d: must not be negative", c.Times)
	}
	return nil
}

// Frame prefixes the cut watches for: mockai writes "type" first (encodeEvent).
// A GPT-Live session has no response events: there an answer starts at the
// input transcript delta that each append is heard with, its output is
// the output audio delta, and it is done at the output transcript delta
// that follows (session.liveAppend); a delegated response (wrapped in
// response.event) counts as a response too.
var (
	prefixResponseCreated = [][]byte{
		[]byte(`{"type":"response.created"`),
		[]byte(`{"type":"session.input_transcript.delta"`),
	}
	prefixResponseDone = [][]byte{
		[]byte(`{"type":"response.done"`),
		[]byte(`{"type":"session.output_transcript.delta"`),
	}
	prefixOutputDelta = [][]byte{
		[]byte(`{"type":"response.output_audio.delta"`),
		[]byte(`{"type":"response.output_text.delta"`),
		[]byte(`{"type":"response.function_call_arguments.delta"`),
		[]byte(`{"type":"session.output_audio.delta"`),
	}
	prefixLiveResponse = []byte(`{"type":"response.event"`)
)

// liveWrapped is the Responses event type a response.event wraps, when it
// is one of those a cut counts ("" otherwise).
func liveWrapped(data []byte) string {
	if !bytes.HasPrefix(data, prefixLiveResponse) {
		return ""
	}
	for _, t := range []string{"response.created", "response.output_text.delta", "response.completed"} {
		if bytes.Contains(data, []byte(`"type":"`+t+`"`)) {
			return t
		}
	}
	return ""
}

// cutDue reports whether the frame data just written makes the cut fire.
// s.wmu is held.
func (s *session) cutDue(data []byte) bool {
	c := &s.cfg.Cut
	if c.Kind == "" || s.cutChecked {
		return false
	}
	wrapped := liveWrapped(data)
	switch {
	case hasPrefix(data, prefixResponseCreated) || wrapped == "response.created":
		s.responsesCreated++
		s.deltaSeen = false
		return false
	case hasPrefix(data, prefixResponseDone) || wrapped == "response.completed":
		s.responsesDone++
		if c.During || s.responsesDone != c.AfterResponses {
			return false
		}
	case c.During && s.responsesCreated == c.AfterResponses && !s.deltaSeen && (isOutputDelta(data) || wrapped == "response.output_text.delta"):
		s.deltaSeen = true
	default:
		return false
	}
	s.cutChecked = true // one decision per session: a later response is never cut
	if c.Times > 0 && s.srv.cuts.Add(1) > int64(c.Times) {
		return false
	}
	return true
}

func isOutputDelta(data []byte) bool { return hasPrefix(data, prefixOutputDelta) }

func hasPrefix(data []byte, prefixes [][]byte) bool {
	for _, p := range prefixes {
		if bytes.HasPrefix(data, p) {
			return true
		}
	}
	return false
}

// cut ends the connection as Config.Cut says. s.wmu is held.
func (s *session) cut() {
	c := &s.cfg.Cut
	s.srv.log.Debug("cutting the session", "session", s.id, "kind", c.Kind)
	switch c.Kind {
	case CutClose:
		code := c.Code
		if code == 0 {
			code = websocket.CloseInternalServerErr
		}
		s.writeClose(code, fmt.Sprintf("mock: cut after %d responses", c.AfterResponses))
	case CutMidFrame:
		s.stopped = true
		// A text frame announcing 65,535 bytes (more than a relay holds
		// back whole), 10 of them, then the end: a relay that forwards
		// frames as they arrive has passed on half a frame it can never
		// complete.
		_, _ = s.ws.UnderlyingConn().Write([]byte{0x81, 126, 0xff, 0xff, '{', '"', 't', 'y', 'p', 'e', '"', ':', '"', 'r'})
		_ = s.ws.UnderlyingConn().Close()
	default:
		s.stopped = true
		_ = s.ws.UnderlyingConn().Close() // FIN without a close frame
	}
	s.faultOnce.Do(func() { close(s.faulted) })
}

// expiredReason is the close reason OpenAI gives at its cap.
func expiredReason(d time.Duration) string {
	return fmt.Sprintf("Your session hit the maximum duration of %s.", d)
}

// expire is what OpenAI does when a session reaches its cap: an error
// event session_expired, then close 1001, whatever is in progress.
func (s *session) expire() {
	d := s.cfg.SessionCap
	_ = s.send(map[string]any{"type": "error", "event_id": newID("event_"), "error": map[string]any{
		"type": "invalid_request_error", "code": "session_expired", "message": expiredReason(d),
		"param": nil, "event_id": nil,
	}})
	s.wmu.Lock()
	s.writeClose(websocket.CloseGoingAway, expiredReason(d))
	s.wmu.Unlock()
	s.faultOnce.Do(func() { close(s.faulted) })
}

// startCap arms the session's cap (Config.SessionCap); the returned func
// disarms it.
func (s *session) startCap() (stop func() bool) {
	if s.cfg.SessionCap <= 0 {
		return func() bool { return false }
	}
	t := time.AfterFunc(time.Until(s.createdAt.Add(s.cfg.SessionCap)), s.expire)
	return t.Stop
}

// Received returns the client events the upstream session id (sess_...)
// received, in order (input_audio_buffer.append excluded; events over 4 KiB
// cut, see EventRecord). Tests assert with it that a relay carried a
// conversation onto this session: its configuration and every item, with
// their ids.
func (s *Server) Received(id string) []EventRecord {
	s.apps.mu.Lock()
	defer s.apps.mu.Unlock()
	var out []EventRecord
	for _, e := range s.apps.events {
		if e.SessionID == id {
			out = append(out, e)
		}
	}
	return out
}

// handleReceived is GET /mock/sessions/{id}/received.
func (s *Server) handleReceived(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, s.Received(r.PathValue("id")))
}
