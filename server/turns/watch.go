package turns

import "rtgate/server/protocol"

// Watch is a session's Tracker as the session's inspectors drive it: on the
// upstream's frames, See with each event's type mark (and the frame's first
// bytes), and Inspect with the whole event when See asked for it; on the
// client's frames the gateway forwarded, ClientWants with each event's type
// and Client with the whole event when it asked.
type Watch struct {
	Tracker
	// Off skips the tracker (TURN_METRICS=0): See and Inspect still
	// say which events are whole, for the session's spans.
	Off    bool
	whole  protocol.TurnMark // the mark whose event Inspect gets
	client clientMark        // what the client event Client gets is
}

// wants are the marks whose whole event the tracker reads.
func wants(m protocol.TurnMark) bool {
	switch m {
	case protocol.TurnStart, protocol.TurnEnd, protocol.TurnConfig, protocol.SpeechEnd, protocol.TurnError:
		return true
	}
	return false
}

// See moves the tracker on an upstream event that is m to a turn (the
// protocol's Turn of its type; prefix is the frame's first bytes); whole
// reports that the event must be passed to Inspect. For an audio delta
// after its response's first it costs an atomic load: no lock, no clock
// read, no allocation.
func (w *Watch) See(m protocol.TurnMark, prefix []byte) (whole bool) {
	if wants(m) {
		w.whole = m
		return true
	}
	w.whole = protocol.NotTurn
	if w.Off {
		return false
	}
	switch m {
	case protocol.FirstOutput:
		w.output(prefix)
	case protocol.InputSpeech:
		w.liveSpeech()
	}
	return false
}

// Pending is the mark of the event Inspect is to get.
func (w *Watch) Pending() protocol.TurnMark { return w.whole }

// Inspect reads the whole upstream event See asked for.
func (w *Watch) Inspect(payload []byte) {
	m := w.whole
	w.whole = protocol.NotTurn
	if w.Off {
		return
	}
	switch m {
	case protocol.TurnStart:
		w.created(payload)
	case protocol.TurnEnd:
		w.done(payload)
	case protocol.TurnConfig:
		w.config(payload)
	case protocol.SpeechEnd:
		w.speechEnd(payload)
	case protocol.TurnError:
		w.failed(payload)
	}
}

// Close ends the session's turns (Tracker.Close), unless they are off.
func (w *Watch) Close() {
	if !w.Off {
		w.Tracker.Close()
	}
}
