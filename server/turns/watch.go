package turns

import "rtgate/server/protocol"

// Watch is a session's Tracker as its inspector on the upstream's frames
// drives it: See with each event's type (from the frame's first bytes), and
// Inspect with the whole event when See asked for it.
type Watch struct {
	Tracker
	// Off skips the tracker (TURN_METRICS=0): See and Inspect still
	// say which events are whole, for the session's spans.
	Off   bool
	whole protocol.TurnMark // the mark whose event Inspect gets
}

// See moves the tracker on an event that is m to a turn (the protocol's
// Turn of its type); whole reports that the event must be passed to Inspect
// (its status or configuration is read). For an audio delta it reads no
// clock and allocates nothing.
func (w *Watch) See(m protocol.TurnMark) (ev Event, whole bool) {
	if Wants(m) {
		w.whole = m
		return ev, true
	}
	w.whole = protocol.NotTurn
	if w.Off {
		return ev, false
	}
	return w.Mark(m), false
}

// Pending is the mark of the event Inspect is to get.
func (w *Watch) Pending() protocol.TurnMark { return w.whole }

// Inspect reads the whole event See asked for.
func (w *Watch) Inspect(payload []byte) (ev Event) {
	m := w.whole
	w.whole = protocol.NotTurn
	if w.Off {
		return ev
	}
	switch m {
	case protocol.TurnEnd:
		return w.Done(payload)
	case protocol.TurnConfig:
		w.Config(payload)
	}
	return ev
}
