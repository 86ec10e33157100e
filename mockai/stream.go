package mockai

import (
	"encoding/base64"
	"errors"
	"fmt"
	"time"

	"github.com/gorilla/websocket"
)

// StreamConfig is mockai's sustained voice mode, for benchmarks of a relay
// carrying live calls: once a session's client sends its first message (so a
// relay's warm, unclaimed upstream sockets stay quiet), the session sends a
// response.output_audio.delta of Bytes of PCM16 every Interval, at a steady
// pace, until the connection ends. What the client sends is read, counted and
// dropped, not answered: no JSON is decoded per frame, so mockai's own cost
// per message stays small next to the relay's.
//
// OpenAI sends a response's deltas in bursts faster than real time; a steady
// real-time stream both ways is the sustained load of a call in progress, the
// one that decides how many calls a relay carries.
type StreamConfig struct {
	// Interval between deltas; 0 turns the mode off.
	Interval time.Duration
	// Bytes of PCM16 per delta (0: 24 kHz mono for one Interval, 960 bytes for
	// 20 ms, 1,280 base64 characters).
	Bytes int
}

// bytesPerMilli is 24 kHz PCM16 mono: 48 bytes of audio per millisecond.
const bytesPerMilli = 48

func (c StreamConfig) validate(echo bool) error {
	switch {
	case c.Interval < 0 || c.Bytes < 0:
		return errors.New("stream interval and bytes must not be negative")
	case c.Interval == 0 && c.Bytes != 0:
		return errors.New("stream bytes need a stream interval")
	case c.Interval > 0 && c.Interval < time.Millisecond:
		return fmt.Errorf("stream interval %v: at least 1ms", c.Interval)
	case c.Bytes%2 != 0 || c.Bytes > readLimit:
		return fmt.Errorf("stream bytes %d: an even number up to %d", c.Bytes, readLimit)
	case c.Interval > 0 && echo:
		return errors.New("stream and echo modes cannot be combined")
	}
	return nil
}

// deltaFrame is the one delta every tick sends: OpenAI's shape, type first.
func (c StreamConfig) deltaFrame() []byte {
	n := c.Bytes
	if n == 0 {
		n = int(c.Interval.Milliseconds()) * bytesPerMilli
	}
	return []byte(`{"type":"response.output_audio.delta","event_id":"event_mockai_stream","response_id":"resp_mockai_stream",` +
		`"item_id":"item_mockai_stream","output_index":0,"content_index":0,"delta":"` +
		base64.StdEncoding.EncodeToString(PCMPattern(n)) + `"}`)
}

// streamVoice runs a session in stream mode after session.created: it reads and
// drops client messages, and from the first one on sends a delta every
// Interval from a goroutine of its own (stopped by end, like a response's).
func (s *session) streamVoice() {
	frame := s.cfg.Stream.deltaFrame()
	started := false
	for {
		if _, _, err := s.ws.NextReader(); err != nil {
			s.srv.log.Debug("session closed", "session", s.id, "err", err)
			return
		}
		s.srv.framesIn.Add(1) // gorilla discards the unread message at the next NextReader
		if !started {
			started = true
			s.rwg.Add(1)
			go s.paceDeltas(frame)
		}
	}
}

// maxBehind bounds how far a stream's schedule may fall behind before the
// deltas it missed are given up: a second of audio.
const maxBehind = time.Second

// paceDeltas writes frame every Interval until the session ends. The k-th
// delta is due at start + k*Interval, as a real-time source's are: a delta that
// is late (this goroutine was not scheduled in time on a busy machine, or the
// write waited) is sent at once and the schedule goes on, so a short stall
// costs no audio and the stream keeps its rate. Only a stream more than
// maxBehind behind (a client that does not read) gives the missed deltas up and
// starts its schedule again from now, so what follows a long stall is at most
// one second's burst.
func (s *session) paceDeltas(frame []byte) {
	defer s.rwg.Done()
	interval := s.cfg.Stream.Interval
	timer := time.NewTimer(0)
	defer timer.Stop()
	next := time.Now()
	for {
		if s.write(websocket.TextMessage, frame) != nil {
			return
		}
		next = next.Add(interval)
		now := time.Now()
		if now.Sub(next) > maxBehind {
			next = now
		}
		if wait := next.Sub(now); wait > 0 {
			timer.Reset(wait)
			select {
			case <-s.ctx.Done():
				return
			case <-timer.C:
			}
		} else if s.ctx.Err() != nil {
			return
		}
	}
}
